"""The gate's wall time, this checkout against an older commit, side by side.

Not a test: run ``python benchmarks/bench_gate.py [--base 0aa91dc] [--rounds 3]
[-n auto] [--profile ci] [--property NAME ...]``. Each side runs ``python -m leasecheck
check --profile P -n N --json FILE`` in a fresh process, alternating old and new in
every round:

- *old* is ``--base REV`` (default: the merge-base with ``main``), exported with
  ``git archive`` into a temporary directory (the repository is not touched) and put
  first on ``PYTHONPATH``, so the command, its pytest and every worker import that
  tree's leasecheck with this environment's packages; the bench checks which tree was
  imported before it times anything;
- *new* is this checkout (or ``--new REV``, exported the same way).

Both trees are byte-compiled first (``_trees.byte_compile``), as ``pip install`` does
for an installed leasecheck, so every process of every run reads its modules' bytecode
whatever ``PYTHONDONTWRITEBYTECODE`` says; ``--no-compile`` leaves them as they are (in
an environment with that variable set, as the runs before 6 Dec 2026's fifth session
were: each process compiled the tree's modules from source). Each run gets its own
empty working directory (no example database carried over) and the same seed.

``--json FILE`` also writes the figures as data (each round's wall and CPU seconds, the
medians, their ratio and each round's own, the verdicts, and each property's median
seconds): ``bench_speed.py`` reads it.

Reported per round: wall seconds from start to exit, the CPU of the run's whole
process tree (``resource.RUSAGE_CHILDREN``, every worker and child reaped), the exit
code and the verdict of every property; then the median wall time of each side and
their ratio (old / new: 1.5 means the new gate takes two thirds of the old one's
time), and each property's median seconds on each side (from the ``--json`` records:
where the time moved). The bench fails if a side's verdicts differ
between its rounds or from the other side's on a property both run. Timings on a
shared machine are noisy: read the medians and the load average printed at the start
and the end.

Older trees: ``--old-env NAME=VALUE`` (repeatable) adds to the old side's environment
only (a tree from before the ``--leasecheck-`` option prefix registers a ``--profile``
option that clashes with an installed ``pytest-profiling``: pass
``--old-env PYTEST_ADDOPTS="-p no:profiling"``). An old CLI without ``--json``
(1c300b1, where the work on issue 25 began) is timed by its exit code alone: no verdicts
or property seconds on that side. ``--new-property NAME`` (repeatable) limits only the
new side, so that an old gate with fewer properties is compared with the same work
on the new side::

    python benchmarks/bench_gate.py --base 1c300b1 \\
        --old-env PYTEST_ADDOPTS="-p no:profiling" \\
        --new-property jobs.agreement --new-property lease.agreement ...

The same work: ``--same-work`` first runs each side's whole gate once (not timed) and
reads what every property says it checked (the ``checked`` text of its ``--json``
record: "1000 programs of up to 15 steps", "9055 states, 22603 replayed; ..."). The
timed rounds then run only the properties whose text is the same on both sides, so the
ratio compares the two gates doing the same checks; the properties left out are
printed with both texts (a larger model-check scope, a thread hammer counted in rounds
instead of seconds). Equal text means equal budgets (programs, steps, states, kills),
not equal programs: a machine whose rules changed runs other programs of the same
number. Both sides must write ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _trees import byte_compile, export, merge_base, save_json

REPO = Path(__file__).resolve().parents[1]


def _env(tree: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(extra or {})
    env["PYTHONPATH"] = str(tree)
    return env


def knows_json(tree: Path, extra: dict[str, str]) -> bool:
    """Whether ``tree``'s ``leasecheck check`` has ``--json`` (older CLIs do not)."""
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "check", "--help"], capture_output=True,
        text=True, env=_env(tree, extra), cwd=tempfile.gettempdir(), timeout=120, check=True,
    )  # fmt: skip
    return "--json" in done.stdout


def imported_from(tree: Path, extra: dict[str, str] | None = None) -> Path:
    """Where ``import leasecheck`` lands with ``tree`` first on the path."""
    done = subprocess.run(
        [sys.executable, "-c", "import leasecheck, sys; sys.stdout.write(leasecheck.__file__)"],
        capture_output=True, text=True, env=_env(tree, extra), cwd=tempfile.gettempdir(),
        check=True, timeout=120,
    )  # fmt: skip
    return Path(done.stdout).resolve().parent


def run_gate(
    tree: Path,
    args: argparse.Namespace,
    properties: list[str],
    extra: dict[str, str] | None = None,
    with_json: bool = True,
) -> dict[str, Any]:
    """One ``leasecheck check`` of ``tree``: wall and CPU seconds, exit code, verdicts
    (none without ``with_json``: an old CLI that cannot write them)."""
    work = Path(tempfile.mkdtemp(prefix="bench-gate-run-"))
    try:
        record = work / "gate.json"
        command = [
            sys.executable, "-m", "leasecheck", "check", "--profile", args.profile,
            "-n", args.n, "--seed", str(args.seed),
            *(["--json", str(record)] if with_json else []),
            *(word for name in properties for word in ("--property", name)),
        ]  # fmt: skip
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(
            command, cwd=work, env=_env(tree, extra), capture_output=True, text=True,
            timeout=3600,
        )  # fmt: skip
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if done.returncode not in (0, 1):
            raise RuntimeError(f"{tree}: exit {done.returncode}\n{done.stdout[-3000:]}")
        rows = json.loads(record.read_text())["properties"] if with_json else []
        verdicts = {row["property"]: row["verdict"] for row in rows}
        seconds = {row["property"]: row["seconds"] for row in rows}
        checked = {row["property"]: " ".join(row.get("checked") or []) for row in rows}
        return {"wall": wall, "cpu": cpu, "exit": done.returncode, "verdicts": verdicts,
                "seconds": seconds, "checked": checked}  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)


def same_work(
    old: dict[str, str], new: dict[str, str]
) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """Of two gates' ``checked`` texts (property -> text): the properties both sides
    check alike, sorted, and the others as property -> (old text, new text), "" where a
    side does not have the property or did not say what it checked (an empty text on
    both sides proves nothing alike)."""
    alike = sorted(name for name in set(old) & set(new) if old[name] and old[name] == new[name])
    differ = {
        name: (old.get(name, ""), new.get(name, ""))
        for name in sorted(set(old) | set(new))
        if name not in alike
    }
    return alike, differ


def calibrate(
    sides: dict[str, tuple[Path, list[str], dict[str, str] | None, bool]],
    args: argparse.Namespace,
) -> list[str]:
    """``--same-work``: run each side's gate once and return the properties whose
    ``checked`` text is the same on both; print the others."""
    texts: dict[str, dict[str, str]] = {}
    for side, (tree, properties, extra, with_json) in sides.items():
        if not with_json:
            raise SystemExit(f"--same-work: the {side} side's CLI has no --json")
        texts[side] = run_gate(tree, args, properties, extra, with_json)["checked"]
    alike, differ = same_work(texts["old"], texts["new"])
    if not alike:
        raise SystemExit("--same-work: no property checks the same on both sides")
    print(f"the same work on both sides: {len(alike)} properties: {', '.join(alike)}")
    print(f"left out ({len(differ)}), what each side checks:")
    for name, (before, after) in differ.items():
        print(f"  {name}: old {before or '(none)'!r}; new {after or '(none)'!r}")
    return alike


def summary(
    base: str, args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """The figures ``--json`` writes: each side's rounds (wall, CPU), medians, the ratio of
    the medians and each round's own ratio, and the new side's verdicts (the bench has
    checked they are the same in every round and on both sides)."""
    sides = {
        side: {"wall": [r["wall"] for r in rs], "cpu": [r["cpu"] for r in rs],
               "median_wall": statistics.median(r["wall"] for r in rs),
               "median_cpu": statistics.median(r["cpu"] for r in rs)}
        for side, rs in runs.items()
    }  # fmt: skip
    pairs = zip(runs["old"], runs["new"], strict=True)
    return {
        "bench": "gate", "base": base, "new": args.new, "profile": args.profile, "n": args.n,
        "rounds": args.rounds, "properties": args.property, **sides,
        "ratio": sides["old"]["median_wall"] / sides["new"]["median_wall"],
        "round_ratios": [old["wall"] / new["wall"] for old, new in pairs],
        "verdicts": runs["new"][0]["verdicts"], "old_verdicts": runs["old"][0]["verdicts"],
        "property_seconds": {
            side: {name: statistics.median(r["seconds"][name] for r in rs)
                   for name in rs[0]["seconds"]}
            for side, rs in runs.items()
        },
        "cores": os.cpu_count(),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="older commit (default: merge-base with main)")
    parser.add_argument("--new", help="newer commit (default: this checkout's files)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", default="ci")
    parser.add_argument("-n", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--property", action="append", default=[], help="time only this property (repeatable)"
    )
    parser.add_argument(
        "--new-property", action="append", default=[], metavar="NAME",
        help="limit only the new side to this property (repeatable): the old gate's work",
    )  # fmt: skip
    parser.add_argument(
        "--old-env", action="append", default=[], metavar="NAME=VALUE",
        help="add to the old side's environment (repeatable), e.g. PYTEST_ADDOPTS=...",
    )  # fmt: skip
    parser.add_argument(
        "--same-work", action="store_true",
        help="time only the properties whose checked figures are the same on both sides",
    )  # fmt: skip
    parser.add_argument(
        "--no-compile", action="store_true",
        help="do not byte-compile the two trees first (see the docstring)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.same_work and args.new_property:
        parser.error("--same-work chooses the properties itself: drop --new-property")
    if any("=" not in pair for pair in args.old_env):
        parser.error("--old-env takes NAME=VALUE, e.g. PYTEST_ADDOPTS='-p no:profiling'")
    old_extra = dict(pair.split("=", 1) for pair in args.old_env)
    base = args.base or merge_base()
    old_tree = export(base, "bench-gate-old-")
    new_tree = REPO if args.new is None else export(args.new, "bench-gate-new-")
    try:
        for tree in (old_tree, new_tree):
            landed = imported_from(tree, old_extra if tree == old_tree else None)
            if landed != (tree / "leasecheck").resolve():
                raise SystemExit(f"with {tree} first on PYTHONPATH, leasecheck came from {landed}")
        if not args.no_compile:
            for tree in (old_tree, new_tree):
                byte_compile(tree)
        newer = args.new or f"this checkout {REPO}"
        print(f"old = {base} ({old_tree}), new = {newer}")
        compiled = "not byte-compiled first" if args.no_compile else "both byte-compiled first"
        print(
            f"the trees: {compiled}; PYTHONDONTWRITEBYTECODE="
            f"{os.environ.get('PYTHONDONTWRITEBYTECODE', '(unset)')}"
        )
        print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at the start")
        old_json = knows_json(old_tree, old_extra)
        if not old_json:
            print("the old CLI has no --json: its side is timed and its exit code compared")
        sides = {
            "old": (old_tree, args.property, old_extra, old_json),
            "new": (new_tree, args.property + args.new_property, None, True),
        }
        if args.same_work:
            alike = calibrate(sides, args)
            sides = {side: (tree, alike, extra, with_json)
                     for side, (tree, _, extra, with_json) in sides.items()}  # fmt: skip
        runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
        for round_no in range(1, args.rounds + 1):
            for side, (tree, properties, extra, with_json) in sides.items():
                run = run_gate(tree, args, properties, extra, with_json)
                runs[side].append(run)
                others = sorted(p for p in run["verdicts"].items() if p[1] != "holds")
                shown = ", ".join(f"{name} {verdict}" for name, verdict in others)
                holds = sum(v == "holds" for v in run["verdicts"].values())
                said = (f"{holds} hold; {shown or 'nothing else'}" if with_json
                        else "no verdicts (no --json)")  # fmt: skip
                print(f"  round {round_no} {side}: {run['wall']:.1f} s wall, {run['cpu']:.1f} s"
                      f" CPU, exit {run['exit']}; {said}", flush=True)  # fmt: skip
        for side, side_runs in runs.items():
            first = side_runs[0]
            for run in side_runs[1:]:
                if (run["verdicts"], run["exit"]) != (first["verdicts"], first["exit"]):
                    raise SystemExit(f"{side}: the verdicts or exit code changed between rounds")
        old_v, new_v = runs["old"][0]["verdicts"], runs["new"][0]["verdicts"]
        differ = {p for p in set(old_v) & set(new_v) if old_v[p] != new_v[p]}
        if differ:
            raise SystemExit(f"verdicts differ between the sides on {sorted(differ)}")
        if not old_json and runs["old"][0]["exit"] != runs["new"][0]["exit"]:
            raise SystemExit("the exit codes differ between the sides")
        figures = summary(base, args, runs)
        old, new = figures["old"], figures["new"]
        print(f"median wall: old {old['median_wall']:.1f} s, new {new['median_wall']:.1f} s,"
              f" ratio {figures['ratio']:.2f}x; median CPU: old {old['median_cpu']:.1f} s,"
              f" new {new['median_cpu']:.1f} s")  # fmt: skip
        if old_json:
            print(f"only old: {sorted(set(old_v) - set(new_v))},"
                  f" only new: {sorted(set(new_v) - set(old_v))}")  # fmt: skip
        print("median seconds of each property (its own wall time in the run), old -> new:")
        seconds = figures["property_seconds"]
        for name in sorted(set(old_v) | set(new_v)):
            cell = {side: f"{seconds[side][name]:.1f}" if name in seconds[side] else "-"
                    for side in ("old", "new")}  # fmt: skip
            print(f"  {name:22} {cell['old']:>7} -> {cell['new']:>7}")
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
        save_json(args.json, figures)
        return 0
    finally:
        shutil.rmtree(old_tree, ignore_errors=True)
        if new_tree != REPO:
            shutil.rmtree(new_tree, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
