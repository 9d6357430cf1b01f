"""lease.crash-random: SIGKILL at random instants of long histories; a prefix survives.

See ``crash_harness.random_kills``: the reopened state is the model's after the
acknowledged operations, or after those plus the one in flight — nothing else.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from leasecheck.crash_harness.random_kills import check_random_kills
from leasecheck.plugin import Checked
from leasecheck.profiles import Profile


@pytest.mark.leasecheck("lease.crash-random")
def test_crash_random(
    worker_target: ModuleType,
    lc_profile: Profile,
    lc_seed: int,
    scratch: Path,
    no_leaked_children: None,
    checked: Checked,
) -> None:
    report = check_random_kills(worker_target, scratch, lc_profile.random_kills, lc_seed)
    checked(f"{report.kills} random kills", random_kills=report.kills)
    print(f"lease.crash-random: {report.render()}")
    assert report.kills == lc_profile.random_kills
