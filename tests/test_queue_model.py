"""The generic lease-queue model: it accepts every reading the generic properties allow,
and names the property of each behaviour it refuses."""

from __future__ import annotations

from models import queue_model as qm
from models._queue_spec import QueueSpec
from models.linearizability import Operation, Returned, check


def _only(step: qm.Step) -> qm.QueueState:
    states, mismatch = step
    assert mismatch is None and len(states) == 1, step
    return states[0]


def _claimed(lease_ms: int = 150) -> qm.QueueState:
    state = _only(qm.enqueue(qm.QueueState(), "a"))
    return _only(qm.claim(state, "c1", lease_ms, "a"))


def test_a_live_lease_cannot_be_claimed_again() -> None:
    _, mismatch = qm.claim(_claimed(), "c2", 150, "a")
    assert mismatch is not None and mismatch.prop == "queue.exclusive"
    assert "two live leases" in mismatch.text


def test_an_expired_lease_may_be_claimed_again_or_left_for_recovery() -> None:
    later = _only(qm.advance(_claimed(), 200))
    assert qm.claim(later, "c2", 150, "a")[1] is None
    assert _only(qm.claim(later, "c2", 150, None)).job("a") == later.job("a")


def test_a_stale_ack_must_change_nothing() -> None:
    again = _only(qm.claim(_only(qm.advance(_claimed(), 200)), "c2", 150, "a"))
    assert qm.ack(again, "c1", "a", accepted=True) == ([again], None)
    done = qm.QueueState((qm.Job("a", "done"),), again.now)
    _, mismatch = qm.observe(again, [("a", "done")], ack_deletes=False)
    assert mismatch is not None and mismatch.prop == "queue.stale-ack"
    assert qm.observe(done, [("a", "done")], ack_deletes=False)[1] is None


def test_a_stale_ack_that_deletes_the_job_is_named_where_acks_delete() -> None:
    again = _only(qm.claim(_only(qm.advance(_claimed(), 200)), "c2", 150, "a"))
    _, deleted = qm.observe(again, [], ack_deletes=True)
    assert deleted is not None and deleted.prop == "queue.stale-ack", deleted
    adopted, _ = qm.observe(again, [], ack_deletes=True)
    found = adopted[0].job("a")
    assert found is not None and found.state == "done", "adopted as done, as gone reads"
    _, lost = qm.observe(again, [], ack_deletes=False)
    assert lost is not None and lost.prop == "queue.no-loss", lost


def test_a_late_ack_by_the_holder_may_complete_or_be_refused() -> None:
    late = _only(qm.advance(_claimed(), 200))
    states, mismatch = qm.ack(late, "c1", "a", accepted=True)
    assert mismatch is None
    assert {job.state for s in states for job in s.jobs} == {"done", "leased"}


def test_a_lost_job_and_a_revived_ack_are_named() -> None:
    ready = _only(qm.enqueue(qm.QueueState(), "a"))
    assert qm.observe(ready, [], ack_deletes=False)[1] == qm.Mismatch(
        "queue.no-loss", "job 'a' reads 'gone' but the model has it 'a' ready: the job was lost"
    )
    done = _only(qm.ack(_claimed(), "c1", "a", accepted=True))
    assert qm.observe(done, [], ack_deletes=True)[1] is None
    assert qm.observe(done, [("a", "ready")], ack_deletes=True)[1].prop == "queue.ack-final"  # type: ignore[union-attr]


def test_the_spec_rejects_two_overlapping_wins_and_tolerates_what_is_not_promised() -> None:
    enqueue = Operation("H", 1, "enqueue", {"job": "a"}, 0, 1, Returned(None))
    claims = [
        Operation(p, 2, "claim", {"cid": f"{p}#2", "lease_ms": 1000}, 2, 5, Returned("a"))
        for p in ("P1", "P2")
    ]
    history = [enqueue, *claims]
    assert not check(history, QueueSpec(), qm.QueueState()).linearizable
    tolerant = QueueSpec(tolerate=frozenset({"queue.exclusive"}))
    assert check(history, tolerant, qm.QueueState()).linearizable
