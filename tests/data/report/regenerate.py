"""Regenerate the report samples: each public mutant of FAMILIES run through the product path.

    python tests/data/report/regenerate.py

Each ``<mutant>.json`` holds the property that caught the mutant and the structured
counterexample the test process sent (``Counterexample.record()``), exactly what
``leasecheck check --report`` draws from.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from leasecheck.mutants import by_name
from leasecheck.selfcheck import run_mutant

HERE = Path(__file__).parent


def regenerate(name: str) -> None:
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
