"""jobs.agreement: the target JobQueue and the reference model agree on every step.

Runs ``stateful_tests.job_machine.JobAgreement`` against the class chosen by
``--jobs-impl`` (default: the bundled ``queue_impl/job_queue.py``) with the
Hypothesis settings of the active profile, scaled from it: 1.2 times its example
count, with at least ``MIN_STEPS`` steps each (``job_machine.agreement_budget``, which
says why; ci: 1200 programs of up to 40 steps, the longest property of the gate: about
45 s of one core on a slow 2-core machine, two thirds of it Hypothesis' own generation,
see ``benchmarks/bench_lease_machine.py``; how much of that budget the mutant catalogue
needs: ``benchmarks/bench_margin.py``).
A disagreement fails with the shrunk program and a message naming the comparison
that failed, both sides side by side.

The property is a ``TestCase`` (``leasecheck.machine_property``) so that
``leasecheck hunt`` fuzzes it under HypoFuzz with the example-database key that
``check`` replays.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings

from leasecheck.machine_property import machine_test_case
from leasecheck.plugin import Checked, active_run
from leasecheck.stateful_tests.job_machine import (
    MAX_ATTEMPTS,
    MAX_JOBS,
    JobAgreement,
    agreement_budget,
)

PROFILE = active_run().profile  # the plugin chose it before pytest imports this module
EXAMPLES, STEPS = agreement_budget(PROFILE.max_examples, PROFILE.step_count)


@pytest.fixture(autouse=True)
def _bind_target(jobs_target: type[Any], checked: Checked) -> None:
    JobAgreement.bind(jobs_target)
    checked(
        f"{EXAMPLES} programs of up to {STEPS} steps; <= {MAX_JOBS} jobs, <= {MAX_ATTEMPTS}"
        " attempts", programs=EXAMPLES, steps=STEPS, max_jobs=MAX_JOBS, max_attempts=MAX_ATTEMPTS,
    )  # fmt: skip


TestJobAgreement = pytest.mark.leasecheck("jobs.agreement")(
    machine_test_case(
        "TestJobAgreement",
        JobAgreement,
        settings(
            settings.get_profile("leasecheck"), max_examples=EXAMPLES, stateful_step_count=STEPS
        ),
        __name__,
    )
)
