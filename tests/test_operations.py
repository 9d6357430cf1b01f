"""Each contract's operations come from one table (docs/operations.md).

The records of ``models.lease_ops``, ``models.job_ops`` and ``models.queue_ops`` read
their parameters from ``LEASE_KINDS``, ``JOB_KINDS`` and ``QUEUE_KINDS``: binding,
``describe``, the JSON form and ``apply`` all follow an edit of the table.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from leasecheck.models import lease_ops
from leasecheck.models.contracts import JobRow, Snapshot
from leasecheck.models.job_ops import JOB_KINDS, JobOutcome
from leasecheck.models.lease_ops import LEASE_KINDS, LeaseOp, LeaseOutcome
from leasecheck.models.operations import Outcome, outcome_from_json
from leasecheck.models.queue_ops import QUEUE_KINDS, Granted, QueueOutcome
from leasecheck.queue_impl import worker
from leasecheck.queue_impl.jobs import Lease


def test_the_operation_kinds_of_each_contract() -> None:
    kinds = {
        "lease worker": {name: kind.params for name, kind in LEASE_KINDS.items()},
        "JobQueue": {name: kind.params for name, kind in JOB_KINDS.items()},
        "generic queue": {name: kind.params for name, kind in QUEUE_KINDS.items()},
    }
    assert kinds == {
        "lease worker": {
            "enqueue": ("event", "now_ms", "ttl_ms", "max_attempts"),
            "claim": ("owner", "now_ms", "lease_ms"),
            "finish": ("ticket", "outcome", "now_ms", "delay_ms"),
            "redrive": ("job_id", "now_ms", "ttl_ms", "note"),
            "run_once": ("owner", "now_ms", "lease_ms"),
            "run_file": ("owner", "now_ms", "lease_ms"),
        },
        "JobQueue": {
            "submit": ("type", "payload", "priority", "run_at_millis"),
            "poll": ("worker_id", "lease_millis"),
            "complete": ("job_id", "token"),
            "fail": ("job_id", "token", "error"),
            "view": ("job_id",),
            "dead_letters": (),
            "retry_dead": ("job_id",),
            "cancel": ("job_id",),
        },
        "generic queue": {
            "enqueue": ("job", "payload"),
            "claim": ("cid", "lease_ms"),
            "ack": ("cid", "job"),
            "nack": ("cid", "job"),
            "extend": ("cid", "job", "lease_ms"),
            "recover": (),
            "observe": (),
            "advance": ("ms",),
        },
    }


def test_an_argument_added_to_the_table_reaches_every_use(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What docs/operations.md promises: a new ``claim`` argument is one edit of
    ``LEASE_KINDS``; the record binds it, prints it, keeps it in JSON and passes it on."""
    claim = LEASE_KINDS["claim"]
    wider = replace(claim, params=(*claim.params, "priority"), defaults={"lease_ms": 1000})
    monkeypatch.setattr(lease_ops, "LEASE_KINDS", {**LEASE_KINDS, "claim": wider})
    op = LeaseOp.of("claim", "w1", 5, 1000, 7)
    assert op.describe() == "claim(owner='w1', now_ms=5, lease_ms=1000, priority=7)"
    assert LeaseOp.from_json(json.loads(json.dumps(op.to_json()))) == op
    con = worker.open_queue(tmp_path / "q.db")
    try:  # the bundled worker has no such parameter yet: the call reaches it and says so
        with pytest.raises(TypeError, match=r"claim\(\) got"):
            op.apply(worker, con)
    finally:
        con.close()


def test_every_history_outcome_reads_back_from_its_json_by_its_contract() -> None:
    """A history entry's outcome is its contract's record, and its JSON names the
    contract: a lease snapshot read, a JobQueue poll's lease, a generic claim's lease as
    the library reported it, and a raised error each read back equal."""
    snapshot = Snapshot((JobRow("a", 1, "leased", 1, 3, 2, 0, 60_000, "w1", 1_000),))
    outcomes: list[Outcome] = [
        LeaseOutcome(snapshot),
        LeaseOutcome(error="Conflict", detail="Conflict: job 'a' is leased"),
        JobOutcome(Lease("J1", 7, "email", "p", 1, 1_100)),
        JobOutcome(error="IllegalStateError", detail="stale token"),
        QueueOutcome("a", granted=Granted("a", "receipt-1", 1_000_000.05)),
        QueueOutcome(error="OperationalError", detail="database is locked"),
    ]
    for outcome in outcomes:
        assert outcome_from_json(json.loads(json.dumps(outcome.to_json()))) == outcome
    assert outcome_from_json({"contract": "register", "result": 1}) is None
