"""The linearizability checker on hand-written histories, and the race mutants it must catch.

Histories are written with explicit instants (in ms), so each test states which
operations overlap. A toy register shows the classic cases; the lease and JobQueue
specs show busy timeouts, unknown outcomes, opaque tokens and per-job splitting.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from leasecheck.models._history import OpRecord
from leasecheck.models.contracts import JobRow, Snapshot
from leasecheck.models.job_model import JobState
from leasecheck.models.job_ops import JOB_KINDS, JobOp, JobOutcome
from leasecheck.models.lease_ops import LEASE_KINDS, LeaseOp, LeaseOutcome
from leasecheck.models.linearizability import (
    BUSY,
    OPEN_TRANSACTION,
    BudgetExceeded,
    HarnessStep,
    JobQueueSpec,
    LeaseSpec,
    Operation,
    SequentialSpec,
    check,
)
from leasecheck.models.queue_ops import QueueOutcome
from leasecheck.mutants import by_name, materialize
from leasecheck.queue_impl.jobs import JobStatus, JobView, Lease, RetryPolicy
from leasecheck.stateful_tests import _coop_threading as coop
from leasecheck.stateful_tests._parallel_jobs import (
    JOIN_DEADLINE_S,
    TurnScheduler,
    run_jobs_program,
)
from leasecheck.stateful_tests._parallel_lease import run_lease_program
from leasecheck.stateful_tests.parallel import (
    JOB_POLICY,
    FailureMemo,
    Held,
    ParallelProgram,
    ProgramOp,
    check_jobs_history,
    check_lease_history,
)
from leasecheck.targets import load_jobs_target, load_worker

MS = 1_000_000


@dataclass(frozen=True)
class Cell:
    """A call of the toy register (``write``/``read``): no contract's, a record all the same."""

    kind: str
    given: tuple[tuple[str, Any], ...] = ()

    def arguments(self) -> dict[str, Any]:
        return dict(self.given)

    def describe(self) -> str:
        return f"{self.kind}({', '.join(f'{k}={v!r}' for k, v in self.given)})"

    def to_json(self) -> dict[str, Any]:
        return {"contract": "register", "kind": self.kind, "args": dict(self.given)}


def call_of(name: str, args: dict[str, Any]) -> OpRecord:
    """The record a history holds for ``name(**args)``: the contract's, by its kind."""
    if name == "snapshot":
        return HarnessStep()
    if name in LEASE_KINDS:
        return LeaseOp.of(name, **args)
    if name in JOB_KINDS:
        now = args.pop("now", None)
        return JobOp.of(name, now=now, **args)
    return Cell(name, tuple(args.items()))


def done(value: Any = None) -> QueueOutcome:
    """What a call of the toy register returned. No contract has a register, so it borrows
    the generic queue's outcome record (a plain result, or an error's name)."""
    return QueueOutcome(value)


def op(who: str, name: str, start: float, end: float | None, result: Any, **args: Any) -> Operation:
    """An operation from ``start`` to ``end`` ms (``end=None``: never returned)."""
    index = int(who[-1]) if who[-1].isdigit() else 1
    finish = None if end is None else int(end * MS)
    return Operation(who, index, call_of(name, args), int(start * MS), finish, result)


class Register(SequentialSpec[int]):
    """A read/write register: the textbook linearizability example."""

    def step(self, state: int, op: Operation) -> Sequence[int]:
        if op.name == "write":
            after = op.args["value"]
            return [state, after] if op.outcome is None else [after]
        if op.outcome is None:
            return [state]
        assert op.ok
        return [state] if op.result == state else []

    def explain(self, state: int, op: Operation) -> str:
        return f"here the model reads {state}"

    def partition_key(self, op: Operation) -> Hashable | None:
        key: Hashable | None = op.args.get("key")
        return key


def test_a_sequential_history_is_linearizable() -> None:
    history = [
        op("P1", "write", 0, 1, done(None), value=1),
        op("P2", "read", 2, 3, done(1)),
    ]
    verdict = check(history, Register(), 0)
    assert verdict.linearizable
    assert [o.name for o in verdict.order] == ["write", "read"]


def test_overlapping_operations_may_be_ordered_either_way() -> None:
    history = [
        op("P1", "write", 0, 10, done(None), value=1),
        op("P2", "read", 1, 2, done(1)),  # inside the write: sees it
        op("P3", "read", 3, 4, done(0)),  # also inside the write ... but after P2 saw 1
    ]
    assert not check(history, Register(), 0).linearizable
    history[2] = op("P3", "read", 3, 4, done(1))
    assert check(history, Register(), 0).linearizable


def test_a_stale_read_after_a_completed_write_is_reported_with_its_interval() -> None:
    history = [
        op("P1", "write", 0, 1, done(None), value=1),
        op("P2", "read", 2, 3, done(0)),
    ]
    verdict = check(history, Register(), 0)
    assert not verdict.linearizable
    assert [o.label() for o in verdict.conflicting] == ["P2#2"]
    report = verdict.report()
    assert "not linearizable: 2 operations" in report
    assert "P2#2 [    2.000 ms ..     3.000 ms] read() -> 0" in report
    assert "here the model reads 1" in report
    assert "The longest explainable prefix has 1 operations" in report


def test_an_unknown_outcome_may_take_effect_or_not_before_the_kill() -> None:
    killed = op("P1", "write", 0, 5, None, value=1)  # SIGKILLed; reaped at 5 ms
    assert check([killed, op("P2", "read", 6, 7, done(1))], Register(), 0).linearizable
    assert check([killed, op("P2", "read", 6, 7, done(0))], Register(), 0).linearizable
    flip = [killed, op("P2", "read", 6, 7, done(0)), op("P2", "read", 8, 9, done(1))]
    assert not check(flip, Register(), 0).linearizable  # no effect after its death


def test_an_operation_that_never_returned_may_take_effect_later() -> None:
    hung = op("P1", "write", 0, None, None, value=1)
    history = [hung, op("P2", "read", 6, 7, done(0)), op("P2", "read", 8, 9, done(1))]
    assert check(history, Register(), 0).linearizable


def test_independent_keys_are_checked_separately() -> None:
    history = [
        op("P1", "write", 0, 1, done(None), value=1, key="x"),
        op("P2", "read", 0, 1, done(0), key="y"),
    ]
    verdict = check(history, Register(), 0)
    assert verdict.linearizable and verdict.partitions == 2


def test_the_search_stops_at_its_budget() -> None:
    history = [op(f"P{i}", "write", 0, 10, done(None), value=i) for i in range(1, 9)]
    with pytest.raises(BudgetExceeded, match="visited 5 configurations"):
        check([*history, op("P9", "read", 11, 12, done(99))], Register(), 0, budget=5)


def test_a_long_history_is_checked_quickly() -> None:
    history = []
    for i in range(1000):  # two overlapping writers, then a read of the later value
        history.append(op("P1", "write", 3 * i, 3 * i + 2, done(None), value=2 * i))
        history.append(op("P2", "write", 3 * i + 1, 3 * i + 2, done(None), value=2 * i + 1))
    history.append(op("P3", "read", 4000, 4001, done(1999)))
    verdict = check(history, Register(), 0)
    assert verdict.linearizable and verdict.seconds < 10


# --- the lease worker spec ---------------------------------------------------------------

ENQUEUE = {"event": {"id": "a", "qty": 1}, "now_ms": 0, "ttl_ms": 60000, "max_attempts": 3}
CLAIM = {"now_ms": 10, "lease_ms": 100}


def _ticket(owner: str, token: int = 1) -> dict[str, Any]:
    return {"id": "a", "qty": 1, "owner": owner, "token": token, "attempt": token,
            "lease_until": 110}  # fmt: skip


def _leased(owner: str) -> Snapshot:
    row = JobRow("a", 1, "leased", 1, 3, 1, 0, 60000, owner, 110, None)
    return Snapshot(jobs=(row,))


def test_two_overlapping_claims_cannot_both_win_the_job() -> None:
    history = [
        op("prefix", "enqueue", 0, 1, LeaseOutcome(True), **ENQUEUE),
        op("P1", "claim", 2, 5, LeaseOutcome(_ticket("w1")), owner="w1", **CLAIM),
        op("P2", "claim", 3, 6, LeaseOutcome(_ticket("w2")), owner="w2", **CLAIM),
    ]
    verdict = check_lease_history(history)
    assert not verdict.linearizable
    assert "here the model returns None" in verdict.report()
    history[2] = op("P2", "claim", 3, 6, LeaseOutcome(None), owner="w2", **CLAIM)
    assert check_lease_history(history).linearizable


def test_the_final_snapshot_must_be_the_model_state() -> None:
    history = [
        op("prefix", "enqueue", 0, 1, LeaseOutcome(True), **ENQUEUE),
        op("P2", "claim", 3, 6, LeaseOutcome(_ticket("w2")), owner="w2", **CLAIM),
        op("harness", "snapshot", 7, 8, LeaseOutcome(_leased("w1"))),
    ]
    verdict = check_lease_history(history)
    assert not verdict.linearizable
    assert "stored state read after every process finished differs" in verdict.report()
    history[2] = op("harness", "snapshot", 7, 8, LeaseOutcome(_leased("w2")))
    assert check_lease_history(history).linearizable


def test_a_busy_timeout_has_no_effect_and_an_open_transaction_is_a_violation() -> None:
    history = [
        op("prefix", "enqueue", 0, 1, LeaseOutcome(True), **ENQUEUE),
        op("P1", "claim", 2, 5, LeaseOutcome(error=BUSY), owner="w1", **CLAIM),
        op("P2", "claim", 3, 6, LeaseOutcome(_ticket("w2")), owner="w2", **CLAIM),
    ]
    assert check_lease_history(history).linearizable
    history[1] = op("P1", "claim", 2, 5, LeaseOutcome(error=OPEN_TRANSACTION), owner="w1", **CLAIM)
    verdict = check_lease_history(history)
    assert "still inside a transaction" in verdict.report()


def test_a_killed_claim_may_have_leased_the_job() -> None:
    history = [
        op("prefix", "enqueue", 0, 1, LeaseOutcome(True), **ENQUEUE),
        op("P1", "claim", 2, 5, None, owner="w1", **CLAIM),
        op("harness", "snapshot", 7, 8, LeaseOutcome(_leased("w1"))),
    ]
    assert check_lease_history(history).linearizable
    history[2] = op("harness", "snapshot", 7, 8, LeaseOutcome(_enqueued()))  # it had no effect
    assert check_lease_history(history).linearizable


def _enqueued() -> Snapshot:
    return Snapshot(jobs=(JobRow("a", 1, "pending", 0, 3, 0, 0, 60000),))


def test_finishes_alone_split_per_job_but_claims_do_not() -> None:
    start = Snapshot(jobs=(*_leased("w1").jobs, JobRow("b", 1, "pending", 0, 3, 0, 0, 60000)))
    finishes = [
        op("P1", "finish", 0, 2, LeaseOutcome("done"), ticket=_ticket("w1"), outcome="ok",
           now_ms=20, delay_ms=0),
        op("P2", "finish", 1, 3, LeaseOutcome(False), ticket={**_ticket("w1"), "id": "b"},
           outcome="ok", now_ms=20, delay_ms=0),
    ]  # fmt: skip
    split = check(finishes, LeaseSpec(), start)
    assert split.linearizable and split.partitions == 2
    whole = check([*finishes, op("P3", "claim", 0, 1, LeaseOutcome(None), owner="w3", **CLAIM)],
                  LeaseSpec(), start)  # fmt: skip
    assert whole.partitions == 1


# --- the JobQueue spec -------------------------------------------------------------------

SUBMIT = {"type": "email", "payload": "p", "priority": 0, "run_at_millis": 0, "now": 0}


def _lease(token: object) -> Lease:
    return Lease("J1", token, "email", "p", 1, 1100)


def test_opaque_tokens_are_matched_by_equality() -> None:
    history = [
        op("prefix", "submit", 0, 1, JobOutcome("J1"), **SUBMIT),
        op("P1", "poll", 2, 3, JobOutcome(_lease("tok-x")), worker_id="w", lease_millis=1000,
           now=100),
        op("P1", "complete", 4, 5, JobOutcome(None), job_id="J1", token="tok-x", now=100),
        op("P2", "complete", 6, 7, JobOutcome(error="IllegalStateError"), job_id="J1",
           token="tok-y", now=100),
    ]  # fmt: skip
    assert check(history, JobQueueSpec(JOB_POLICY), JobState()).linearizable
    history[3] = op("P2", "complete", 6, 7, JobOutcome(None), job_id="J1", token="tok-y", now=100)
    assert not check(history, JobQueueSpec(JOB_POLICY), JobState()).linearizable


def test_two_polls_returning_one_token_are_reported() -> None:
    history = [
        op("prefix", "submit", 0, 1, JobOutcome("J1"), **SUBMIT),
        op("prefix", "submit", 1, 2, JobOutcome("J2"), **SUBMIT),
        op("P1", "poll", 2, 3, JobOutcome(_lease(7)), worker_id="w", lease_millis=1000, now=100),
        op("P2", "poll", 2, 3, JobOutcome(Lease("J2", 7, "email", "p", 1, 1100)), worker_id="w",
           lease_millis=1000, now=100),
    ]  # fmt: skip
    verdict = check(history, JobQueueSpec(JOB_POLICY), JobState())
    assert not verdict.linearizable
    assert "two polls returned the same token 7" in verdict.report()


@pytest.mark.parametrize("cleared", [None, "x"])
def test_both_readings_of_retry_dead_are_accepted(cleared: str | None) -> None:
    policy = RetryPolicy(max_attempts=1, base_backoff_millis=1, max_backoff_millis=1)
    view = JobView("J1", "email", 0, JobStatus.PENDING, 0, 5, cleared)
    history = [
        op("prefix", "submit", 0, 1, JobOutcome("J1"), **SUBMIT),
        op("prefix", "poll", 1, 2, JobOutcome(Lease("J1", 1, "email", "p", 1, 1000)),
           worker_id="w", lease_millis=1000, now=0),
        op("prefix", "fail", 2, 3, JobOutcome(None), job_id="J1", token=1, error="x", now=0),
        op("prefix", "retry_dead", 3, 4, JobOutcome(None), job_id="J1", now=5),
        op("prefix", "view", 4, 5, JobOutcome(view), job_id="J1", now=5),
    ]  # fmt: skip
    assert check_jobs_history(history, policy).linearizable
    wrong = JobView("J1", "email", 0, JobStatus.PENDING, 0, 5, "y")
    history[-1] = op("prefix", "view", 4, 5, JobOutcome(wrong), job_id="J1", now=5)
    assert not check_jobs_history(history, policy).linearizable


# --- the race mutants are caught -----------------------------------------------------------


def _c(name: str, **args: Any) -> LeaseOp:
    return LeaseOp.of(name, **args)


def _j(name: str, now: int, **args: Any) -> JobOp:
    return JobOp.of(name, now=now, **args)


LEASE_RACES = {
    "claim-select-before-begin": (
        [_c("enqueue", event={"id": "a", "qty": 1}, now_ms=0, ttl_ms=60000, max_attempts=3)],
        [[_c("claim", owner="w1", now_ms=100, lease_ms=1000)]] * 2,
    ),
    "enqueue-check-before-begin": (
        [_c("enqueue", event={"id": "a", "qty": 1}, now_ms=0, ttl_ms=60000, max_attempts=3)],
        [[_c("enqueue", event={"id": "c", "qty": 1}, now_ms=100, ttl_ms=60000, max_attempts=3)]]
        * 2,
    ),
    "finish-checks-owner-only": (
        [
            _c("enqueue", event={"id": "a", "qty": 1}, now_ms=0, ttl_ms=60000, max_attempts=3),
            _c("claim", owner="w1", now_ms=60, lease_ms=30),
        ],
        [
            [_c("claim", owner="w1", now_ms=100, lease_ms=1000)],
            [_c("finish", ticket=Held(0), outcome="ok", now_ms=100, delay_ms=0)],
        ],
    ),
}


def _program(
    prefix: Sequence[ProgramOp], suffixes: Sequence[Sequence[ProgramOp]], seed: int
) -> ParallelProgram:
    return ParallelProgram(tuple(prefix), tuple(tuple(s) for s in suffixes), seed, 50)


@pytest.mark.usefixtures("no_leaked_children")
@pytest.mark.parametrize("name", sorted(LEASE_RACES))
def test_lease_races_are_not_linearizable(name: str, scratch: Path) -> None:
    module = load_worker(materialize(by_name(name), scratch))
    prefix, suffixes = LEASE_RACES[name]
    verdicts = [
        check_lease_history(run_lease_program(module, scratch, _program(prefix, suffixes, seed)))
        for seed in range(12)
    ]
    assert any(not v.linearizable for v in verdicts), f"{name} passed 12 schedules"
    bundled = load_worker(None)
    for seed in range(4):
        history = run_lease_program(bundled, scratch, _program(prefix, suffixes, seed))
        assert check_lease_history(history).linearizable


@pytest.mark.usefixtures("no_leaked_children")
def test_one_program_and_seed_give_one_history(scratch: Path) -> None:
    """The same program and seed run again make the same calls in the same order with the
    same results, and each child's first call starts after the previous child's, by name.
    (The children used to start together and reach their first statements in the order
    the kernel ran them: expiry-off-by-one-claim's lease.linearizable then read VIOLATED
    in 5 of 6 ci runs and "holds" in the sixth.)"""
    enqueue = [
        _c("enqueue", event={"id": job, "qty": 1}, now_ms=0, ttl_ms=60000, max_attempts=3)
        for job in ("a", "b")
    ]
    claims = [
        [
            _c("claim", owner=owner, now_ms=100, lease_ms=1000),
            _c("claim", owner=owner, now_ms=120, lease_ms=1000),
        ]
        for owner in ("w1", "w2", "w1")
    ]
    bundled = load_worker(None)
    shapes = set()
    for _ in range(6):
        history = run_lease_program(bundled, scratch, _program(enqueue, claims, 7))
        ran = [op for op in history if op.process.startswith("P")]
        shapes.add(tuple((op.process, op.index, repr(op.outcome)) for op in ran))
        firsts = [min(op.invoked_ns for op in ran if op.process == p) for p in ("P1", "P2", "P3")]
        assert firsts == sorted(firsts), f"the children started out of order: {firsts}"
    assert len(shapes) == 1, f"one program and seed gave {len(shapes)} histories"


@pytest.mark.parametrize("name", ["jobs-poll-two-critical-sections", "jobs-unlocked-poll"])
def test_jobs_races_are_not_linearizable(name: str, tmp_path: Path) -> None:
    cls = load_jobs_target(materialize(by_name(name), tmp_path))
    submit = _j("submit", 0, type="email", payload="p", priority=0, run_at_millis=0)
    poll = _j("poll", 100, worker_id="w1", lease_millis=1000)
    programs = [_program([submit, submit], [[poll, poll]] * 3, seed) for seed in range(20)]
    assert any(not check_jobs_history(run_jobs_program(cls, p)).linearizable for p in programs)
    bundled = load_jobs_target(None)
    assert all(check_jobs_history(run_jobs_program(bundled, p)).linearizable for p in programs)


def test_a_failed_program_fails_again_without_running() -> None:
    memo = FailureMemo(budget_s=0.0)
    program = _program([], [[]], 0)
    with pytest.raises(AssertionError, match="boom"):
        memo.run(program, lambda: "boom")
    with pytest.raises(AssertionError, match="boom"):
        memo.run(program, lambda: None)  # replay: the recorded failure, not a new run
    memo.run(_program([], [[]], 1), lambda: "never run: the shrink budget is spent")


BOX = """
import threading


class Box:
    def __init__(self):
        self.lock = threading.Lock()
        self.other = threading.Lock()
        self.log = []

    def pair(self, name):
        with self.lock:
            self.log.append(name)
            self.log.append(name)

    def cross(self, lock_first):
        first, second = (self.lock, self.other) if lock_first else (self.other, self.lock)
        with first:
            self.log.append("in")
            with second:
                self.log.append("both")
"""


def _turns(tmp_path: Path, work: Callable[[Any, int], None]) -> tuple[list[object], str | None]:
    """Two threads take turns on one instrumented ``Box``, switching at every line."""
    (tmp_path / "box.py").write_text(BOX)
    sys.path.insert(0, str(tmp_path))
    try:
        import box  # type: ignore[import-not-found]

        cls, target_file = coop.instrument(box.Box)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("box", None)
    shared = cls()
    names = ["leasecheck-P1", "leasecheck-P2"]
    scheduler = TurnScheduler(names, target_file, seed=0, switch_percent=100)

    def body(n: int) -> None:
        coop.scheduled(True)
        try:
            scheduler.begin()
            sys.settrace(scheduler.tracer)
            work(shared, n)
        except BaseException:
            pass  # a deadlock unwinds the thread; the scheduler says so
        finally:
            sys.settrace(None)
            coop.scheduled(False)
            scheduler.end()

    threads = [threading.Thread(target=body, args=(n,), name=names[n]) for n in (0, 1)]
    coop.install(scheduler)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(JOIN_DEADLINE_S)
    finally:
        coop.install(None)
    assert not any(thread.is_alive() for thread in threads)
    return shared.log, scheduler.deadlock


def test_a_thread_waiting_for_a_lock_hands_the_turn_on_at_once(tmp_path: Path) -> None:
    """job-queue.md: methods are safe to call from many threads. The turn scheduler
    switches at every line here, so each thread is stopped inside ``pair``'s critical
    section; the other one, wanting the lock, is parked by it and hands the turn back:
    known blocked, never waited out, and the same log every time."""
    started = time.monotonic()
    runs = [_turns(tmp_path, lambda box, n: box.pair(f"T{n}")) for _ in range(3)]
    assert time.monotonic() - started < 5.0
    assert all(run == runs[0] for run in runs), runs
    log, deadlock = runs[0]
    assert deadlock is None
    assert log[0] == log[1] and log[2] == log[3] and log[0] != log[2], log


def test_threads_that_wait_for_each_other_are_a_deadlock_seen_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    log, deadlock = _turns(tmp_path, lambda box, n: box.cross(n == 0))
    assert deadlock is not None and "every unfinished thread waits for a lock" in deadlock
    assert time.monotonic() - started < JOIN_DEADLINE_S / 2
    assert log == ["in", "in"]
