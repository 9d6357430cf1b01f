"""lease.edges and jobs.edges: every edge of both contracts, tried once each.

``stateful_tests.edge_sweep`` runs short programs of the agreement machines' own rules
over the edge tables of ``models.edges``: both valid ends and both invalid neighbours
of every range, the look-alike types and subclasses of every exact-type rule, every
printable character outside the identifier alphabet, the start states near the bounds
and, for the JobQueue, a dozen jobs, policies of up to 16 attempts and values far past
the draws (times of 2e9, leases of a day, Unicode blanks, look-alike ids). Random
programs (``lease.agreement``, ``jobs.agreement``) draw from the same tables; this
makes sure each edge is tried on every run. A disagreement prints its program.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from leasecheck.plugin import Checked
from leasecheck.stateful_tests.edge_sweep import SweepReport, sweep_jobs, sweep_lease


def _verdict(report: SweepReport, checked: Checked) -> None:
    checked(f"{report.calls} edge calls", programs=report.programs, calls=report.calls)
    if report.failure is not None:
        raise report.failure.error()


@pytest.mark.leasecheck("lease.edges")
def test_lease_edges(worker_target: ModuleType, checked: Checked) -> None:
    _verdict(sweep_lease(worker_target), checked)


@pytest.mark.leasecheck("jobs.edges")
def test_job_edges(jobs_target: type[Any], checked: Checked) -> None:
    _verdict(sweep_jobs(jobs_target), checked)
