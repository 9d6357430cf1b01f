"""Regenerate the report samples: each public mutant of FAMILIES run through the product path.

    python tests/data/report/regenerate.py

Each ``<mutant>.json`` holds the property that caught the mutant and the structured
counterexample the test process sent (``Counterexample.record()``), exactly what
``leasecheck check --report`` draws from.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from leasecheck.mutants import by_name, materialize
from leasecheck.runner import CheckOptions, run_check

HERE = Path(__file__).parent


def regenerate(name: str) -> None:
    mutant = by_name(name)
    with tempfile.TemporaryDirectory() as scratch:
        target = materialize(mutant, Path(scratch))
        option = {"impl": target} if mutant.target == "worker" else {"jobs_impl": target}
        options = CheckOptions(
            profile="ci", seed=0, workers="0", first=mutant.caught_by,
            stop_at_first_failure=True, examples=Path(scratch) / "examples",
            **option,  # type: ignore[arg-type]
        )  # fmt: skip
        result = run_check(options).properties[mutant.caught_by]
    assert result.failures, f"{name}: {mutant.caught_by} recorded no failure"
    sample = {"property": result.name, "record": result.failures[0].record()}
    (HERE / f"{name}.json").write_text(json.dumps(sample, indent=1) + "\n")


if __name__ == "__main__":
    for path in sorted(HERE.glob("*.txt")) if len(sys.argv) < 2 else []:
        regenerate(path.stem)
    for name in sys.argv[1:]:
        regenerate(name)
