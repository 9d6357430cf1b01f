"""A property that exercised nothing reads "not checked", never "holds" (issue 22).

Two user adapters that are wrong in a way that leaves a property nothing to judge: one
whose ack always refuses (queue.ack-final then has no acknowledged job to follow
through a SIGKILL), one whose claim never returns a job (queue.stale-ack then never
sees a claim whose job was claimed again). Each property must say so, with the figure,
and the run must exit 2 (suite.md), whatever else holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from leasecheck.runner import NOT_CHECKED, CheckOptions, run_check

ADAPTER = """
from leasecheck.adapters.lease_worker import LeaseWorker, LeaseWorkerAdapter
from leasecheck.adapters.protocol import Claim, QueueClock, QueueAdapter


class Broken(LeaseWorkerAdapter):
    {method}


class BrokenQueue(LeaseWorker):
    name = "broken-queue"

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return Broken(location, clock)
"""
REFUSES_ACKS = "def ack(self, claim: Claim) -> bool:\n        return False"
CLAIMS_NOTHING = "def claim(self, worker: str, lease: float) -> Claim | None:\n        return None"


@pytest.mark.parametrize(
    ("method", "prop", "figure"),
    [
        (REFUSES_ACKS, "queue.ack-final", "0 acks in 40 kill rounds"),
        (CLAIMS_NOTHING, "queue.stale-ack", "no zombie ack in"),
    ],
    ids=["no-ack", "no-zombie"],
)
def test_a_property_that_exercised_nothing_is_not_checked(
    tmp_path: Path, method: str, prop: str, figure: str
) -> None:
    path = tmp_path / "broken_queue.py"
    path.write_text(ADAPTER.format(method=method))
    options = CheckOptions(adapter=str(path), profile="ci", workers="0", properties=(prop,))
    result = run_check(options)
    row = result.properties[prop]
    assert row.verdict == NOT_CHECKED, result.log[-3000:]
    assert result.exit_code == 2
    record = row.figures.get("not_checked")
    assert isinstance(record, dict), row.figures
    assert figure in str(record["what"]) and record["change"], record
