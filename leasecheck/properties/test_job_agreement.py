"""jobs.agreement: the target JobQueue and the reference model agree on every step.

Runs ``stateful_tests.job_machine.JobAgreement`` against the class chosen by
``--jobs-impl`` (default: the bundled ``queue_impl/job_queue.py``) with the
Hypothesis settings of the active profile, scaled from it: 1.2 times its example
count, with at least ``MIN_STEPS`` steps each (ci: 600 programs of up to 40 steps,
about 10 s). JobQueue is in memory, so a step costs microseconds, and the deeper
bugs (a capped backoff after a job's second failure, two dead letters in order)
need programs that long to be reached on every seed. A disagreement fails with the
shrunk program and a message naming the comparison that failed, both sides side
by side.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from leasecheck.plugin import Checked
from leasecheck.profiles import Profile
from stateful_tests.job_machine import JobAgreement

MIN_STEPS = 40


@pytest.mark.leasecheck("jobs.agreement")
def test_job_agreement(jobs_target: type[Any], lc_profile: Profile, checked: Checked) -> None:
    examples = lc_profile.max_examples * 6 // 5
    steps = max(lc_profile.step_count, MIN_STEPS)
    JobAgreement.bind(jobs_target)
    run_state_machine_as_test(
        JobAgreement,
        settings=settings(
            settings.get_profile("leasecheck"),
            max_examples=examples,
            stateful_step_count=steps,
        ),
    )
    checked(f"{examples} programs of up to {steps} steps", programs=examples, steps=steps)
