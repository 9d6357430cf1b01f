"""The teaching page: each invariant with the picture of the counterexample leasecheck finds.

``python -m leasecheck.report.teach docs`` checks, for each invariant of the lease
worker (lease exclusion, fencing token, deadline cap, atomic finish, single winner,
idempotent receive), the public mutant that breaks it, exactly as ``leasecheck
mutants`` does (its expected property first, stop at the first violation, an empty
example database), and writes ``docs/invariants.md`` with the counterexample as text
and ``docs/img/<invariant>.svg`` with its timeline. Nothing in those files is drawn
by hand: rerun the command to regenerate them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from leasecheck.mutants import Mutant, by_name
from leasecheck.report.picture import draw
from leasecheck.runner import PropertyResult
from leasecheck.selfcheck import run_mutant, violations

__all__ = ["INVARIANTS", "Invariant", "main", "write_docs"]

COMMAND = "python -m leasecheck.report.teach docs"


@dataclass(frozen=True)
class Invariant:
    slug: str
    title: str
    mutant: str
    rule: str
    """The sentence of lease-worker.md the invariant comes from."""
    lesson: str
    """What the picture shows, in two or three sentences."""


INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "lease-exclusion", "Lease exclusion", "claim-select-before-begin",
        "claim, in one write transaction: quarantine, then lease the lowest-seq claimable "
        "job (`pending` and available, or `leased` with `lease_until <= now_ms`).",
        "While a lease is live, nobody else may hold the job. This mutant picks its job "
        "before taking the write lock, so two processes read the same pending row and both "
        "lease it. The picture shows each process's calls as spans in real time (wall ms); "
        "the two claims overlap, and the ringed one is the claim no order explains: both "
        "got a ticket, where the model gives the second one `None`.",
    ),
    Invariant(
        "fencing-token", "Fencing token", "stale-finish-accepted",
        "finish returns `False` with no change if [...] any of qty/owner/token/attempt/"
        "lease_until differs from the row.",
        "The token is the fence: a ticket whose token is not the job's current one must be "
        "refused. This mutant does not compare the token, so the finish with the changed "
        "ticket (`Shift('token', 1)`) completes the job: on w1's lane the finish carries "
        "token 2, beside the bar of the live lease with token 1. The model refuses it; the "
        "red line is where the target said `'done'` instead.",
    ),
    Invariant(
        "deadline-cap", "Deadline cap", "lease-not-capped-at-deadline",
        "claim sets `lease_until = min(now_ms + lease_ms, deadline)`.",
        "A lease never outlives its job's deadline. This mutant forgets the `min`, so the "
        "lease runs to `now + lease_ms`. The solid bar is the lease the target stored: it "
        "runs far past the dashed deadline. The outlined bar under it is the model's, which "
        "ends at the deadline.",
    ),
    Invariant(
        "atomic-finish", "Atomic finish", "finish-two-transactions",
        "finish: [...] `fault('after-finish')`; COMMIT — a kill before COMMIT leaves the "
        "state exactly as it was before the operation.",
        "A SIGKILL before COMMIT must roll the whole finish back. This mutant commits the "
        "new status first and clears owner and lease in a second transaction; the child "
        "is killed in between (✕). The target's stored lease (solid) ends at the kill; the "
        "model's (outlined: rolled back) goes on: the reopened file holds half a finish.",
    ),
    Invariant(
        "single-winner", "Single winner", "claim-selects-outside-lock",
        "claim runs in one write transaction, so two processes claiming at once lease each "
        "job and generation to exactly one of them.",
        "Two real processes claim at the same instant, paused at chosen points. This mutant "
        "commits its SELECT before it leases, so B, held at its second BEGIN, goes on and "
        "leases the job that A has just leased: two winners, one lease bar on each lane, "
        "shaded red where both are live.",
    ),
    Invariant(
        "idempotent-receive", "Idempotent receive", "run-once-sends-twice",
        "two HTTP requests arrive, one inbox row and one effect exist, the job ends `done` "
        "with token 2. Nothing claims exactly-once delivery; the receiver deduplicates.",
        "Dispatcher A sends, the receiver commits the effect, and A is killed before it "
        "finishes; B re-claims and resends. The receiver must see exactly two requests. "
        "This mutant sends every job twice, so three arrive (the receiver's lane, ringed).",
    ),
)  # fmt: skip


def check_planted(mutant: Mutant, profile: str, seed: int) -> PropertyResult:
    """Check ``mutant`` as ``leasecheck mutants`` does; the property that caught it (the
    scratch path of the mutant's file is replaced by its name in the report text)."""
    result, path = run_mutant(mutant, profile, seed)
    failed = violations(result)
    if not failed:
        raise RuntimeError(
            f"mutant {mutant.name!r} survived profile {profile} seed {seed}; the teaching page "
            f"needs its counterexample (try --profile ci)"
        )
    caught = failed[0]
    caught.details = [text.replace(str(path), path.name) for text in caught.details]
    caught.failures = [
        replace(
            failure, message=tuple(line.replace(str(path), path.name) for line in failure.message)
        )
        for failure in caught.failures
    ]
    return caught


def _renamed(text: str, names: dict[str, str]) -> str:
    for old, new in names.items():
        text = text.replace(old, new)
    return text


def _section(invariant: Invariant, caught: PropertyResult, mutant: Mutant, image: str) -> str:
    example = caught.counterexample
    text = example.text(limit=200) if example is not None else ""
    return "\n".join(
        [
            f"## {invariant.title}",
            "",
            f"**The rule** (lease-worker.md): {invariant.rule}",
            "",
            f"**The planted bug** (`{mutant.name}`, caught by `{caught.name}`): "
            f"{mutant.bug_class}. In the wild: {mutant.real_world}.",
            "",
            invariant.lesson,
            "",
            f"![{invariant.title}: the counterexample as a timeline]({image})",
            "",
            "The counterexample as leasecheck prints it:",
            "",
            "```",
            text,
            "```",
            "",
            f"Check this mutant yourself: `leasecheck mutants --only {mutant.name}`.",
            "",
        ]
    )


HEADER = f"""# The invariants, one counterexample each

Each section below takes one invariant of the lease worker contract
([lease-worker.md](lease-worker.md)), plants the bug from the public mutant catalogue
that breaks it, and shows the counterexample leasecheck finds: as a timeline drawn from
the evidence the harness recorded (a time axis, one lane per process or worker, leases
as bars with their token: solid as the target stored them, outlined as the model
expects them where the two differ; each job's deadline dashed orange, two live leases
of one job shaded red, the red line where target and model part, and a legend of the
glyphs under each picture) and as the text the command line prints. Everything here is
generated, not drawn by hand:

```sh
{COMMAND}
```

(`--profile quick`, seed 0; the same command rewrites this page and `img/`.)

"""


def write_docs(directory: Path, profile: str = "quick", seed: int = 0) -> list[Path]:
    """Write ``invariants.md`` and ``img/<invariant>.svg`` under ``directory``."""
    images = directory / "img"
    images.mkdir(parents=True, exist_ok=True)
    sections, written = [HEADER], []
    for invariant in INVARIANTS:
        mutant = by_name(invariant.mutant)
        caught = check_planted(mutant, profile, seed)
        example = caught.counterexample
        if example is None or example.evidence is None:
            raise RuntimeError(f"{mutant.name}: {caught.name} recorded no evidence to draw")
        svg = draw(example.evidence, standalone=True)
        path = images / f"{invariant.slug}.svg"
        path.write_text(svg + "\n", encoding="utf-8")
        written.append(path)
        sections.append(_section(invariant, caught, mutant, f"img/{invariant.slug}.svg"))
        print(f"  {invariant.slug}: {mutant.name} caught by {caught.name}", flush=True)
    page = directory / "invariants.md"
    page.write_text("\n".join(sections).rstrip() + "\n", encoding="utf-8")
    return [page, *written]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leasecheck.report.teach", description=__doc__)
    parser.add_argument("directory", type=Path, help="the docs directory (docs)")
    parser.add_argument("--profile", choices=("quick", "ci", "deep"), default="quick")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for path in write_docs(args.directory, args.profile, args.seed):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
