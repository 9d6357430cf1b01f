"""lease.races gives the same history on every run of one seed (``crash_harness.races``).

Which racer wins a claim is a real race. The rounds after it used to depend on the
winner (each racer claimed with a lease length of its own, and finished the tickets it
had won), so two runs of one seed went different ways: 274, 290, 266 and 281 wins in
four runs on the bundled worker, and a planted expiry off-by-one read VIOLATED in one
run of a 20-file batch and "holds" alone. The counts of a run are its fingerprint here.
"""

from __future__ import annotations

from pathlib import Path

from leasecheck.crash_harness.races import check_races
from leasecheck.targets import load_worker


def test_two_runs_of_one_seed_have_the_same_history(tmp_path: Path) -> None:
    module = load_worker()
    runs = []
    for number in range(3):
        directory = tmp_path / f"run{number}"
        directory.mkdir()
        runs.append(check_races(module, directory, processes=3, rounds=120, seed=7).render())
    assert runs[0] == runs[1] == runs[2], runs
