"""Regenerate the report samples: each public mutant of FAMILIES run through the product path.

    python tests/data/report/regenerate.py

Each ``<mutant>.json`` holds the property that caught the mutant and the structured
counterexample the test process sent (``Counterexample.record()``, with the evidence the
harness attached), exactly what ``leasecheck check --report`` draws from.
``queue-<bug>.json`` is the planted-bug adapter ``planted:<bug>`` checked with
``--adapter``; it also keeps the adapter's name. ``LIBRARIES`` are real libraries' own
findings (a family no public mutant is caught by): ``lib-<name>.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from leasecheck.mutants import by_name
from leasecheck.runner import CheckOptions, run_check
from leasecheck.scratch import scratch_dir
from leasecheck.selfcheck import run_mutant

HERE = Path(__file__).parent
QUEUE_PREFIX = "queue-"
LIBRARIES = {
    # litequeue's recover() re-readies the jobs it read as stale by id, while another
    # process acks one of them in between (docs/findings.md): queue.interleavings' sweep-ack
    "lib-litequeue-sweep-ack": ("litequeue", "queue.interleavings"),
}


def regenerate_adapter(name: str, adapter: str, prop: str) -> None:
    """``name``.json: ``prop``'s first failure when ``adapter`` is checked (ci profile)."""
    with scratch_dir("leasecheck-sample-") as directory:
        options = CheckOptions(
            profile="ci", workers="0", first=prop, adapter=adapter,
            examples=directory / "examples",
        )  # fmt: skip
        result = run_check(options).properties[prop]
    assert result.failures, f"{adapter}: {prop} recorded no failure"
    record = result.failures[0].record()
    sample = {"property": result.name, "adapter": adapter, "record": record}
    (HERE / f"{name}.json").write_text(json.dumps(sample, indent=1) + "\n")


def regenerate_planted(name: str) -> None:
    from leasecheck.adapters.planted import PLANTED

    bug = next(bug for bug in PLANTED if bug.name == name.removeprefix(QUEUE_PREFIX))
    regenerate_adapter(name, f"planted:{bug.name}", bug.caught_by)


def regenerate(name: str) -> None:
    if name in LIBRARIES:
        regenerate_adapter(name, *LIBRARIES[name])
        return
    if name.startswith(QUEUE_PREFIX):
        regenerate_planted(name)
        return
    mutant = by_name(name)
    result = run_mutant(mutant, "ci")[0].properties[mutant.caught_by]
    assert result.failures, f"{name}: {mutant.caught_by} recorded no failure"
    sample = {"property": result.name, "record": result.failures[0].record()}
    (HERE / f"{name}.json").write_text(json.dumps(sample, indent=1) + "\n")


if __name__ == "__main__":
    for path in sorted(HERE.glob("*.json")) if len(sys.argv) < 2 else []:
        regenerate(path.stem)
    for name in sys.argv[1:]:
        regenerate(name)
