"""lease.edges and jobs.edges: every edge of both contracts, tried once each.

``stateful_tests.edge_sweep`` runs short programs of the agreement machines' own rules
over the edge tables of ``models.edges``: both valid ends and both invalid neighbours
of every range, the look-alike types and subclasses of every exact-type rule, every
printable character outside the identifier alphabet, the start states near the bounds
and, for the JobQueue, a dozen jobs, policies of up to 16 attempts and values far past
the draws (times of 2e9, leases of a day, Unicode blanks, look-alike ids). Random
programs (``lease.agreement``, ``jobs.agreement``) draw from the same tables; this
makes sure each edge is tried on every run. A disagreement prints its program.
jobs.edges then polls one job tens of thousands of times (``stateful_tests.job_tokens``):
tokens drawn at random repeat long after any machine's program has ended.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from leasecheck.plugin import Checked
from leasecheck.profiles import Profile
from leasecheck.stateful_tests.edge_sweep import SweepReport, sweep_jobs, sweep_lease
from leasecheck.stateful_tests.job_tokens import many_polls


def _verdict(report: SweepReport, checked: Checked, more: str = "", **figures: object) -> None:
    checked(
        f"{report.calls} edge calls{more}", programs=report.programs, calls=report.calls,
        **figures,
    )  # fmt: skip
    if report.failure is not None:
        raise report.failure.error()


@pytest.mark.leasecheck("lease.edges")
def test_lease_edges(worker_target: ModuleType, checked: Checked) -> None:
    _verdict(sweep_lease(worker_target), checked)


@pytest.mark.leasecheck("jobs.edges")
def test_job_edges(
    jobs_target: type[Any], lc_profile: Profile, lc_seed: int, checked: Checked
) -> None:
    report = sweep_jobs(jobs_target)
    if report.failure is not None:
        _verdict(report, checked)
    tokens = many_polls(jobs_target, lc_profile.token_polls, lc_seed)
    _verdict(report, checked, f"; {tokens.describe()}", token_polls=tokens.polls)
