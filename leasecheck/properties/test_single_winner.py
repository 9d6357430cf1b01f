"""lease.single-winner and lease.races: one winner per (job, token), stale finishes refused.

``crash_harness.single_winner`` holds two processes at exactly the instants that
matter (a fault hook, a BEGIN); ``crash_harness.races`` releases N processes
together from a barrier, round after round.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from leasecheck.crash_harness.races import check_races
from leasecheck.crash_harness.single_winner import check_single_winner
from leasecheck.plugin import Checked
from leasecheck.profiles import Profile


@pytest.mark.leasecheck("lease.single-winner")
def test_single_winner(
    worker_target: ModuleType,
    lc_profile: Profile,
    lc_seed: int,
    scratch: Path,
    no_leaked_children: None,
    checked: Checked,
) -> None:
    report = check_single_winner(worker_target, scratch, lc_profile.crash_states, lc_seed)
    checked(f"{sum(report.scenarios.values())} schedules", schedules=dict(report.scenarios))
    print(f"lease.single-winner: {report.render()}")
    assert sum(report.scenarios.values()) == 2 + 4 * lc_profile.crash_states


@pytest.mark.leasecheck("lease.races")
def test_races(
    worker_target: ModuleType,
    lc_profile: Profile,
    lc_seed: int,
    scratch: Path,
    no_leaked_children: None,
    checked: Checked,
) -> None:
    report = check_races(
        worker_target, scratch, lc_profile.race_processes, lc_profile.race_rounds, lc_seed
    )
    checked(f"{report.rounds} race rounds", race_rounds=report.rounds)
    print(f"lease.races: {report.render()}")
    assert report.rounds == lc_profile.race_rounds
