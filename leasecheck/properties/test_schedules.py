"""lease.schedules: every interleaving of two real dispatcher processes, up to a bound.

Each schedule forks two dispatchers on one queue file (the fork engine), steps them
hook by hook in the order the schedule says, SIGKILLs where it says, and the outcome
must be one some serial execution of the same operations gives in the model. A
failing schedule is printed as JSON (and written to ``$LEASECHECK_EXPORT`` if set);
``crash_harness.schedules.replay`` runs it again exactly.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest

from leasecheck.crash_harness.schedules import BOUNDS
from leasecheck.explore import check_schedules
from leasecheck.models.evidence import attach
from leasecheck.plugin import Checked
from leasecheck.profiles import Profile


@pytest.mark.leasecheck("lease.schedules")
def test_schedules(
    worker_target: ModuleType,
    lc_profile: Profile,
    scratch: Path,
    no_leaked_children: None,
    checked: Checked,
) -> None:
    schedules = 0
    for jobs, kills in BOUNDS[lc_profile.explore_scope]:
        report = check_schedules(worker_target, jobs, kills, scratch)
        if report.problem and os.environ.get("LEASECHECK_EXPORT"):
            export = Path(os.environ["LEASECHECK_EXPORT"])
            export.mkdir(parents=True, exist_ok=True)
            (export / f"schedule-jobs{jobs}-kills{kills}.json").write_text(
                report.problem.rsplit("\n", 1)[-1].strip()
            )
        if report.problem is not None:
            error = AssertionError(f"lease.schedules, {report.name}:\n{report.problem}")
            raise attach(error, report.evidence) if report.evidence else error
        schedules += report.schedules
    checked(f"{schedules} schedules", schedules=schedules)
