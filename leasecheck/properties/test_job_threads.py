"""jobs.threads: no job is leased to two workers at once, under many threads.

Runs ``stateful_tests.job_threads.hammer`` on the class chosen by ``--jobs-impl``
(default: the bundled ``queue_impl/job_queue.py``): short rounds of 8 threads
polling, completing and failing one queue with a tiny switch interval, for
``lc_profile.thread_rounds`` rounds or until a round shows a violation (a double
lease, a reused token, an error the spec does not allow, a final state the model
cannot reach, or a possible deadlock). Seeded from ``lc_seed``; a correct queue
passes every run, whatever the interleaving.
"""

from __future__ import annotations

from typing import Any

import pytest

from leasecheck.plugin import Checked
from leasecheck.profiles import Profile
from leasecheck.stateful_tests.job_threads import hammer


@pytest.mark.leasecheck("jobs.threads")
def test_job_threads(
    jobs_target: type[Any], lc_profile: Profile, lc_seed: int, checked: Checked
) -> None:
    report = hammer(jobs_target, lc_profile.thread_rounds, lc_seed)
    checked(str(report))
