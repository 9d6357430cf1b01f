"""The generic-queue operation record: one table, the adapter and the model, exact JSON."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from leasecheck.adapters.litequeue import Litequeue
from leasecheck.adapters.protocol import QueueAdapter, SharedClock
from leasecheck.models import queue_model as qm
from leasecheck.models.queue_ops import QUEUE_KINDS, REFUSABLE, QueueOp, QueueOutcome

SECONDS = {"lease_ms": "lease", "cid": "claim"}


@pytest.mark.parametrize("kind", [k for k in QUEUE_KINDS if k != "advance"])
def test_every_verb_is_an_adapter_method(kind: str) -> None:
    """Each verb but ``advance`` (the shared clock's) is a ``QueueAdapter`` method, and the
    record's parameters map onto the method's one by one."""
    params = list(inspect.signature(getattr(QueueAdapter, kind)).parameters)[1:]
    # ack, nack and extend name their claim and its job; the adapter takes the Claim
    record = [p for p in QUEUE_KINDS[kind].params if not (kind in REFUSABLE and p == "job")]
    mapped = ["worker" if (kind, p) == ("claim", "cid") else SECONDS.get(p, p) for p in record]
    assert mapped == params


def test_a_program_runs_on_a_real_library_and_the_model_allows_it(tmp_path: Path) -> None:
    library = Litequeue()
    clock = SharedClock(tmp_path / "clock")
    queue = library.connect(library.create(tmp_path, None), clock)
    claims: dict[str, object] = {}
    states = [qm.QueueState()]
    try:
        program = [
            QueueOp.of("enqueue", "a"),
            QueueOp.of("claim", "c1", 500),
            QueueOp.of("ack", "c1", "a"),
            QueueOp.of("claim", "c2", 500),
            QueueOp.of("advance", 1000),
            QueueOp.of("observe"),
        ]
        for op in program:
            value, outcome = op.run(queue, claims, clock)
            if op.kind == "claim" and value is not None:
                claims[op.arguments()["cid"]] = value
            after: list[qm.QueueState] = []
            for state in states:
                allowed, mismatch = op.step(state, outcome)
                assert mismatch is None, (op.describe(), outcome, mismatch)
                after += allowed
            states = after
            assert states, op.describe()
    finally:
        queue.close()
        clock.close()


def test_ops_and_outcomes_survive_json() -> None:
    ops = [QueueOp.of("claim", "c1", 500), QueueOp.of("enqueue", "a", "p"), QueueOp.of("recover")]
    for op in ops:
        assert QueueOp.from_json(json.loads(json.dumps(op.to_json()))) == op
    outcomes = [QueueOutcome((("a", "done"),)), QueueOutcome("a"), QueueOutcome(error="Busy")]
    for outcome in outcomes:
        assert QueueOutcome.from_json(json.loads(json.dumps(outcome.to_json()))) == outcome


def test_describe_is_one_line() -> None:
    assert QueueOp.of("extend", "c1", "a", 200).describe() == (
        "extend(cid='c1', job='a', lease_ms=200)"
    )
