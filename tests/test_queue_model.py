"""The generic lease-queue model: it accepts every reading the generic properties allow,
and names the property of each behaviour it refuses."""

from __future__ import annotations

from dataclasses import replace

from leasecheck.models import queue_model as qm
from leasecheck.models._queue_spec import QueueSpec
from leasecheck.models.linearizability import Operation, check
from leasecheck.models.queue_ops import QueueOp, QueueOutcome


def _only(step: qm.Step) -> qm.QueueState:
    states, mismatch = step
    assert mismatch is None and len(states) == 1, step
    return states[0]


def _job(state: qm.QueueState, key: str = "a") -> qm.Job:
    job = state.job(key)
    assert job is not None, state
    return job


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
    remembered = again.put(replace(_job(again), stale_ack="c1"))
    assert qm.ack(again, "c1", "a", accepted=True) == ([remembered], None)
    done = qm.QueueState((qm.Job("a", "done"),), again.now)
    _, mismatch = qm.observe(again, [("a", "done")], ack_deletes=False)
    assert mismatch is not None and mismatch.prop == "queue.stale-ack"
    assert qm.observe(done, [("a", "done")], ack_deletes=False)[1] is None


def test_a_late_ack_by_the_holder_may_complete_or_be_refused() -> None:
    late = _only(qm.advance(_claimed(), 200))
    assert _job(_only(qm.ack(late, "c1", "a", accepted=True))).state == "done"
    assert _only(qm.ack(late, "c1", "a", accepted=False)) == late


def test_an_ack_that_returned_true_is_final_after_a_sweep() -> None:
    """The issue's allowance, now refused: an ack returned True, then recovery made the job
    claimable, then it was delivered again (queue.ack-final), or read ready again."""
    acked = _only(qm.ack(_only(qm.advance(_claimed(), 200)), "c1", "a", accepted=True))
    swept = _only(qm.recover(acked, 1))
    _, mismatch = qm.claim(swept, "c2", 150, "a")
    assert mismatch is not None and mismatch.prop == "queue.ack-final", mismatch
    _, mismatch = qm.observe(swept, [("a", "ready")], ack_deletes=False)
    assert mismatch is not None and mismatch.prop == "queue.ack-final", mismatch
    recovered = _only(qm.recover(_only(qm.advance(_claimed(), 200)), 1))
    assert _job(_only(qm.ack(recovered, "c1", "a", accepted=True))).state == "done"


def test_a_true_ack_then_a_redelivery_is_not_linearizable() -> None:
    """The same story as a history: no order explains it (it used to be linearizable)."""

    def op(n: int, name: str, value: object, **args: object) -> Operation:
        return Operation("P1", n, QueueOp.of(name, **args), n * 10, n * 10 + 5, QueueOutcome(value))

    history = [
        op(1, "enqueue", None, job="a"), op(2, "claim", "a", cid="c1", lease_ms=150),
        op(3, "advance", None, ms=200), op(4, "ack", True, cid="c1", job="a"),
        op(5, "recover", 1), op(6, "claim", "a", cid="c2", lease_ms=150),
    ]  # fmt: skip
    verdict = check(history, QueueSpec(), qm.QueueState())
    assert not verdict.linearizable
    tolerant = check(history, QueueSpec(tolerate=frozenset({"queue.ack-final"})), qm.QueueState())
    assert tolerant.linearizable


def test_a_lost_job_and_a_revived_ack_are_named() -> None:
    ready = _only(qm.enqueue(qm.QueueState(), "a"))
    assert qm.observe(ready, [], ack_deletes=False)[1] == qm.Mismatch(
        "queue.no-loss", "job 'a' reads 'gone' but the model has it 'a' ready: the job was lost"
    )
    done = _only(qm.ack(_claimed(), "c1", "a", accepted=True))
    assert qm.observe(done, [], ack_deletes=True)[1] is None
    assert qm.observe(done, [("a", "ready")], ack_deletes=True)[1].prop == "queue.ack-final"  # type: ignore[union-attr]


def test_a_stale_ack_that_deletes_the_job_is_a_stale_ack_finding_not_a_loss() -> None:
    again = _only(qm.claim(_only(qm.advance(_claimed(), 200)), "c2", 150, "a"))
    after = _only(qm.ack(again, "c1", "a", accepted=True))
    _, mismatch = qm.observe(after, [], ack_deletes=True)
    assert mismatch is not None and mismatch.prop == "queue.stale-ack", mismatch
    assert "the ack from c1, whose job was claimed again since, deleted it while c2 held it" in (
        mismatch.text
    )
    # The holder's own ack deleting it is done, and a job nobody acked going is a loss.
    done = _only(qm.ack(again, "c2", "a", accepted=True))
    assert qm.observe(done, [], ack_deletes=True)[1] is None
    assert qm.observe(again, [], ack_deletes=True)[1].prop == "queue.no-loss"  # type: ignore[union-attr]


def test_an_expired_lease_read_as_ready_keeps_its_holder_who_may_extend_it() -> None:
    late = _only(qm.advance(_claimed(), 200))
    ready = _only(qm.observe(late, [("a", "ready")], ack_deletes=False))
    assert ready.job("a") == qm.Job("a", "ready", "c1", 150)
    states, mismatch = qm.extend(ready, "c1", "a", 350, accepted=True)
    assert mismatch is None
    assert qm.Job("a", "leased", "c1", 550) in [s.job("a") for s in states]
    renewed = next(s for s in states if s.job("a") == qm.Job("a", "leased", "c1", 550))
    assert qm.observe(renewed, [("a", "leased")], ack_deletes=False)[1] is None
    assert _job(_only(qm.ack(renewed, "c1", "a", accepted=True))).state == "done"
    # Someone else's extend changes nothing, whoever the library says it took it from.
    assert qm.extend(ready, "c2", "a", 350, accepted=True) == ([ready], None)


def test_recovery_keeps_the_holder_until_another_claim() -> None:
    late = _only(qm.advance(_claimed(), 200))
    back = _only(qm.recover(late, 1))
    assert back.job("a") == qm.Job("a", "ready", "c1", 150)
    again = _only(qm.claim(back, "c2", 150, "a"))
    assert again.job("a") == qm.Job("a", "leased", "c2", 350)


def test_no_message_says_leased_to_none() -> None:
    ready = _only(qm.enqueue(qm.QueueState(), "a"))
    states, mismatch = qm.observe(ready, [("a", "leased")], ack_deletes=False)
    assert mismatch is not None and "None" not in mismatch.text
    adopted = states[0]
    assert "None" not in adopted.describe(), adopted.describe()
    assert "leased to a claim the model never saw" in adopted.describe()
    live = adopted.put(replace(_job(adopted), until=500))
    _, clash = qm.claim(live, "c9", 150, "a")
    assert clash is not None and "None" not in clash.text, clash


def test_the_spec_rejects_two_overlapping_wins_and_tolerates_what_is_not_promised() -> None:
    enqueue = Operation("H", 1, QueueOp.of("enqueue", job="a"), 0, 1, QueueOutcome(None))
    claims = [
        Operation(p, 2, QueueOp.of("claim", f"{p}#2", 1000), 2, 5, QueueOutcome("a"))
        for p in ("P1", "P2")
    ]
    history = [enqueue, *claims]
    assert not check(history, QueueSpec(), qm.QueueState()).linearizable
    tolerant = QueueSpec(tolerate=frozenset({"queue.exclusive"}))
    assert check(history, tolerant, qm.QueueState()).linearizable


def test_a_job_reported_gone_that_the_model_does_not_hold_is_not_unknown() -> None:
    """observe may list a deleted job as "gone" (brokers that delete on ack): that agrees
    with a model that holds no such job; a job the store really holds does not."""
    state = _only(qm.advance(_claimed(), 0))
    assert qm.observe(state, [("a", "leased"), ("zz", "gone")], ack_deletes=True)[1] is None
    mismatch = qm.observe(state, [("a", "leased"), ("zz", "ready")], ack_deletes=True)[1]
    assert mismatch is not None and "unknown jobs 'zz'" in mismatch.text
