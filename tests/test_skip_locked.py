"""Two readings queue.linearizable adopts from pgqueuer, where whether a run met them
depended on timing (docs/determinism.md).

A claim that skips locked rows (``Capabilities.skips_locked``): the generic model lets a
claim that answered None beside other calls leave the jobs they may have held locked as
they were, and nothing else. The histories are the shape pgqueuer produced in some ci
runs only: P1's dequeue re-picks the stale ``a`` and also locks the queued ``b`` it does
not take, and P2's dequeue beside it skips both and answers None; ``b`` then reads ready.

A stale ack that completed its job, where ``queue.stale-ack`` is not promised, is adopted
even when the holder's next call on the job comes before any observe.
"""

from __future__ import annotations

from typing import Any

from leasecheck.adapters.pgqueuer import Pgqueuer, PgqueuerDefaults
from leasecheck.adapters.procrastinate import Procrastinate
from leasecheck.models import queue_model as qm
from leasecheck.models._queue_spec import QueueSpec
from leasecheck.models.linearizability import Operation, check
from leasecheck.models.queue_ops import QueueOp, QueueOutcome

UNPROMISED = frozenset({"queue.exclusive", "queue.stale-ack"})
"""What pgqueuer does not promise (its ``promises``): adopted, as queue.linearizable does."""


def _op(
    who: str, index: int, span: tuple[int, int], name: str, value: Any, **args: Any
) -> Operation:
    ms = 1_000_000
    return Operation(
        who, index, QueueOp.of(name, **args), span[0] * ms, span[1] * ms, QueueOutcome(value)
    )


def _skipped(beside: tuple[int, int], by: str = "claim") -> list[Operation]:
    """``a`` claimed and its lease run out, ``b`` enqueued; P2's claim during ``beside``
    answers None while P1's call (``by``) runs during [20, 30]; ``b`` reads ready."""
    second = (
        _op("P1", 5, (20, 30), "claim", "a", cid="P1#5", lease_ms=80)
        if by == "claim"
        else _op("P1", 5, (20, 30), "ack", True, cid="P1#2", job="a")
    )
    return [
        _op("H", 1, (0, 1), "enqueue", None, job="a"),
        _op("P1", 2, (2, 3), "claim", "a", cid="P1#2", lease_ms=10),
        _op("H", 3, (4, 15), "advance", None, ms=11),
        _op("H", 4, (16, 17), "enqueue", None, job="b"),
        second,
        _op("P2", 6, beside, "claim", None, cid="P2#6", lease_ms=80),
        _op("H", 7, (40, 41), "observe", (("a", "leased" if by == "claim" else "done"),
                                          ("b", "ready"))),
    ]  # fmt: skip


def _linearizable(history: list[Operation], skips_locked: bool) -> bool:
    spec = QueueSpec(tolerate=UNPROMISED, real_time=True, skips_locked=skips_locked)
    return check(history, spec.beside(history), qm.QueueState()).linearizable


def test_a_none_beside_another_claim_may_leave_a_ready_job_ready() -> None:
    history = _skipped((21, 29))
    assert not _linearizable(history, skips_locked=False)  # the "not promised" of some runs
    assert _linearizable(history, skips_locked=True)


def test_a_none_clear_of_every_other_call_is_still_judged() -> None:
    """Nothing held a lock: the None passed over a ready job (queue.no-loss's reading)."""
    assert not _linearizable(_skipped((32, 38)), skips_locked=True)


def test_a_none_beside_an_ack_may_skip_only_the_acked_job() -> None:
    """An ack of ``a`` locks ``a``'s row only: ``b`` was free, so the None is no skip."""
    assert not _linearizable(_skipped((21, 29), by="ack"), skips_locked=True)


def test_beside_changes_nothing_unless_the_library_skips_locked_rows() -> None:
    history = _skipped((21, 29))
    plain = QueueSpec()
    assert plain.beside(history) is plain
    assert QueueSpec(skips_locked=True).beside(history).locked == {("P2", 6): (True, frozenset())}


def test_the_model_keeps_a_skippable_job_and_fails_the_rest() -> None:
    state = qm.QueueState((qm.Job("a"), qm.Job("b")))
    states, mismatch = qm.claim(state, "c1", 80, None, frozenset({"a"}))
    assert mismatch is None
    assert [[job.state for job in s.jobs] for s in states] == [
        ["failed", "failed"], ["ready", "failed"]
    ]  # fmt: skip


def test_which_adapters_skip_locked_rows() -> None:
    """pgqueuer's dequeue locks rows it may not take; procrastinate's fetch locks only the
    row it takes (``LIMIT 1``), so its None beside another fetch needs no allowance."""
    assert Pgqueuer.capabilities.skips_locked and PgqueuerDefaults.capabilities.skips_locked
    assert not Procrastinate.capabilities.skips_locked


def test_a_stale_ack_that_completed_the_job_is_adopted_before_the_holder_nacks() -> None:
    """pgqueuer's ack deletes by job id alone (``queue.stale-ack`` not promised): P1's stale
    ack completes ``a``, P2 (the holder) then nacks, which changes nothing on a deleted
    row, and ``a`` reads done. Adopted only when an observe came between, before."""
    history = [
        _op("H", 1, (0, 1), "enqueue", None, job="a"),
        _op("P1", 2, (2, 3), "claim", "a", cid="P1#2", lease_ms=10),
        _op("H", 3, (4, 15), "advance", None, ms=11),
        _op("P2", 4, (16, 17), "claim", "a", cid="P2#4", lease_ms=80),
        _op("P1", 5, (18, 19), "ack", True, cid="P1#2", job="a"),
        _op("P2", 6, (20, 21), "nack", True, cid="P2#4", job="a"),
        _op("H", 7, (22, 23), "observe", (("a", "done"),)),
    ]
    spec = QueueSpec(tolerate=UNPROMISED, real_time=True)
    assert check(history, spec, qm.QueueState()).linearizable
    fenced = QueueSpec(tolerate=frozenset({"queue.exclusive"}), real_time=True)
    assert not check(history, fenced, qm.QueueState()).linearizable
