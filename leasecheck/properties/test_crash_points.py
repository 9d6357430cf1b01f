"""lease.crash-points: SIGKILL inside every fault hook; the file holds the model's before or after.

See ``crash_harness.atomicity`` for what is checked after each kill.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from leasecheck.crash_harness.atomicity import POINT_CASES, KillTable, check_every_point
from leasecheck.plugin import Checked
from leasecheck.profiles import Profile


@pytest.mark.leasecheck("lease.crash-points")
def test_crash_points(
    worker_target: ModuleType,
    lc_profile: Profile,
    lc_seed: int,
    scratch: Path,
    no_leaked_children: None,
    checked: Checked,
) -> None:
    table = check_every_point(worker_target, scratch, lc_profile.crash_states, lc_seed)
    checked(f"{sum(table.kills.values())} kills", kills=dict(table.kills))
    print(f"lease.crash-points kills per point:\n{table.render()}")
    wanted = {KillTable.label(*case): lc_profile.crash_states for case in POINT_CASES}
    assert dict(table.kills) == wanted
