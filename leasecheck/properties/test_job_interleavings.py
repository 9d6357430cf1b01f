"""jobs.interleavings: every interleaving of small JobQueue scenarios is linearizable.

job-queue.md: "with many threads polling at once, a job is never leased to two
workers at the same time; all methods are safe to call from many threads".
``stateful_tests.job_interleavings`` runs each scenario of the profile's plan (a
seeded queue, then 2-3 threads of 1-3 calls) under the deterministic thread
scheduler, through every schedule up to the scenario's preemption bound, fewest
preemptions first, and judges each one: tokens unique, no job leased twice at once,
and the history linearizable against the reference model. Nothing depends on the
OS scheduler or on the seed: the same target gives the same schedules, in the same
order, and the same verdict on every run. A failure prints the schedule line by
line and carries it as a JSON record, which ``--export`` writes as a test that
replays exactly that schedule.
"""

from __future__ import annotations

from typing import Any

import pytest

from leasecheck.plugin import Checked, NotChecked
from leasecheck.profiles import Profile
from leasecheck.stateful_tests.job_interleavings import PLANS, check_scenarios
from leasecheck.stateful_tests.thread_scheduler import SchedulerStuck


@pytest.mark.leasecheck("jobs.interleavings")
def test_job_interleavings(
    jobs_target: type[Any], lc_profile: Profile, checked: Checked, not_checked: NotChecked
) -> None:
    plan = PLANS.get(lc_profile.name, PLANS["ci"])
    try:
        summary = check_scenarios(jobs_target, plan)
    except SchedulerStuck as stuck:
        not_checked(
            f"the scheduler lost control of the target's threads: {stuck}",
            "make the target wait only on threading's Lock, RLock, Condition, Semaphore, "
            "BoundedSemaphore or Event taken from its own module's threading (those are the "
            "ones the scheduler can switch)",
        )
    if summary.explored == 0:
        not_checked("no schedule ran", "give the plan at least one scenario")
    checked(
        summary.text(),
        scenarios=len(summary.scenarios),
        exhaustive=summary.exhaustive,
        threads=summary.threads,
        operations=summary.operations,
        preemptions=summary.preemptions,
        explored=summary.explored,
        pruned=summary.pruned,
        steps=summary.steps,
    )
