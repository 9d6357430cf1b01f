"""lease.duplicate-send: a dispatcher killed after the receiver's commit; another resends.

See ``crash_harness.duplicate_send``: two HTTP requests, one inbox row, one effect,
and the job done with token 2 and attempts 2, as the model says.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from leasecheck.crash_harness.duplicate_send import check_duplicate_send
from leasecheck.plugin import Checked
from leasecheck.profiles import Profile


@pytest.mark.leasecheck("lease.duplicate-send")
def test_duplicate_send(
    worker_target: ModuleType,
    lc_profile: Profile,
    lc_seed: int,
    scratch: Path,
    no_leaked_children: None,
    checked: Checked,
) -> None:
    report = check_duplicate_send(worker_target, scratch, lc_profile.crash_states, lc_seed)
    checked(f"{report.scenarios} recoveries", recoveries=report.scenarios)
    print(f"lease.duplicate-send: {report.render()}")
    assert report.scenarios == lc_profile.crash_states
