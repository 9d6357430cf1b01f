"""Run a ``ParallelProgram`` against a JobQueue: one thread per suffix on one queue.

The prefix runs in the calling thread. The suffix threads take turns: a
``TurnScheduler`` traces every line the target file executes in them
(``sys.settrace``) and lets one thread run at a time, switching to another at a
line with probability ``switch_percent`` % (``random.Random(seed)``), so calls
interleave *inside* the target's methods, where a missing lock lets two threads
see the same state, and the same program gives the same interleaving. The target
is loaded with cooperative locks (``stateful_tests._coop_threading``, as the thread
scheduler does), so a thread that wants a lock a waiting thread holds is parked by
the lock itself: it is known to be blocked, never guessed from silence, and the
turn passes at once to the next thread (by name) that can run.

Each thread's clock reads the ``now`` of the command it is running (a
thread-local value), so times are arguments and the model is deterministic given
the order. After the threads end, the harness views every job (the final state).
"""

from __future__ import annotations

import random
import sys
import threading
import time
from types import FrameType
from typing import Any

from leasecheck.models.job_ops import JobOp, JobOutcome
from leasecheck.models.linearizability import Operation
from leasecheck.queue_impl.jobs import Lease, RetryPolicy
from leasecheck.stateful_tests import _coop_threading as coop
from leasecheck.stateful_tests.parallel import JOB_POLICY, ParallelProgram, ProgramOp
from leasecheck.targets.lease_compare import error_kind

__all__ = ["ThreadClock", "TurnScheduler", "run_jobs_program"]

JOIN_DEADLINE_S = 10.0


class ThreadClock:
    """A ``TimeSource`` whose reading is the ``now`` of the calling thread's command."""

    def __init__(self) -> None:
        self._local = threading.local()

    def set(self, now: int) -> None:
        self._local.now = now

    def now_millis(self) -> int:
        now = getattr(self._local, "now", None)
        if now is None:
            raise RuntimeError(
                "ThreadClock.now_millis was called from a thread that is not running a "
                "command; a JobQueue must read its TimeSource in the calling thread"
            )
        return int(now)


class _Deadlocked(BaseException):
    """Raised in a parked thread to unwind it: every unfinished thread is parked."""


class TurnScheduler:
    """Lets one of ``names`` run at a time; switches at traced lines of ``target_file``.

    It is the ``coop.Switcher`` of the target's cooperative locks: a thread that must
    wait for a lock is parked (``block``) and hands the turn on; ``wake`` lets it
    compete for the turn again. A lock's acquire and release are not switch points
    (``point`` does nothing): the traced lines are.
    """

    def __init__(self, names: list[str], target_file: str, seed: int, switch_percent: int):
        self.target_file = target_file
        self.switch_percent = switch_percent
        self._rng = random.Random(seed)
        self._cond = threading.Condition()
        self._names = list(names)
        self._active = list(names)
        self._turn = names[0]
        self._parked: dict[str, object] = {}
        """Thread name -> the lock or condition it waits for."""
        self.switches = 0
        self.deadlock: str | None = None

    def tracer(self, frame: FrameType, event: str, arg: object) -> Any:
        """The global trace function: trace lines only in the target's own file."""
        return self._line if frame.f_code.co_filename == self.target_file else None

    def _line(self, frame: FrameType, event: str, arg: object) -> Any:
        if event == "line":
            self.line()
        return self._line

    def line(self) -> None:
        """A scheduling point: maybe pass the turn on, then wait for ours."""
        me = threading.current_thread().name
        with self._cond:
            switch = self._turn == me and len(self._active) > 1
            if switch and self._rng.randrange(100) < self.switch_percent:
                self._give(self._rng.choice([n for n in self._active if n != me]))
                self.switches += 1
            self._wait_turn(me)

    def _give(self, name: str) -> None:
        """The turn goes to ``name``, or, if it is parked, to the next thread after it
        (by name) that is not; with none left, the threads deadlock."""
        order = [n for n in self._names if n in self._active]
        start = order.index(name)
        for candidate in order[start:] + order[:start]:
            if candidate not in self._parked:
                self._turn = candidate
                break
        else:
            waits = ", ".join(sorted(self._parked))
            self.deadlock = f"every unfinished thread waits for a lock ({waits})"
        self._cond.notify_all()

    def _wait_turn(self, me: str) -> None:
        deadline = time.monotonic() + JOIN_DEADLINE_S
        while self._turn != me or me in self._parked:
            if self.deadlock is not None:
                raise _Deadlocked
            if not self._cond.wait(max(0.0, deadline - time.monotonic())):
                self.deadlock = f"{me} waited {JOIN_DEADLINE_S:g} s for its turn"
                self._cond.notify_all()
                raise _Deadlocked

    def begin(self) -> None:
        with self._cond:
            self._wait_turn(threading.current_thread().name)

    def end(self) -> None:
        """The calling thread has run all its commands: give the turn to another one."""
        me = threading.current_thread().name
        with self._cond:
            self._active.remove(me)
            self._parked.pop(me, None)
            if self._active and self._turn == me:
                self._give(self._rng.choice(self._active))
            self._cond.notify_all()

    # -- coop.Switcher: the target's locks --

    def point(self, kind: str, subject: object) -> None:
        """Acquire and release are not switch points here (the traced lines are)."""

    def block(self, subject: object, timed: bool) -> bool:
        """Park the caller on ``subject`` and hand the turn on; back when woken and
        chosen again. A timed wait with every thread parked runs out (False)."""
        me = threading.current_thread().name
        with self._cond:
            self._parked[me] = subject
            if self._turn == me:
                if timed and all(n in self._parked for n in self._active):
                    del self._parked[me]
                    return False
                self._give(me)
            self._wait_turn(me)
        return True

    def wake(self, subject: object) -> None:
        with self._cond:
            for name in [n for n, waits in self._parked.items() if waits is subject]:
                del self._parked[name]

    def yielded(self) -> None:
        """A non-blocking acquire failed: the caller spins, so another thread runs."""
        me = threading.current_thread().name
        with self._cond:
            others = [n for n in self._active if n != me and n not in self._parked]
            if others and self._turn == me:
                self._give(others[0])
            self._wait_turn(me)

    def name(self) -> str:
        return threading.current_thread().name


def run_command(
    queue: Any, clock: ThreadClock, where: tuple[str, int], command: ProgramOp, held: list[Lease]
) -> Operation | None:
    """Run one command; keep a returned lease in ``held``; the recorded operation."""
    assert isinstance(command, JobOp), f"a JobQueue program holds {command!r}"
    op = command.resolve(held)
    if op is None:
        return None
    clock.set(op.now or 0)
    started = time.monotonic_ns()
    try:
        outcome = JobOutcome(op.apply(queue))
    except Exception as error:
        outcome = JobOutcome(error=error_kind(error), detail=str(error))
    ended = time.monotonic_ns()
    if outcome.error is None and isinstance(outcome.result, Lease):
        held.append(outcome.result)
    return Operation(where[0], where[1], op, started, ended, outcome)


def _thread_body(
    queue: Any, clock: ThreadClock, name: str, suffix: tuple[JobOp, ...],
    held: list[Lease], scheduler: TurnScheduler, out: list[Operation],
) -> None:  # fmt: skip
    coop.scheduled(True)
    try:
        scheduler.begin()
        sys.settrace(scheduler.tracer)
        for index, command in enumerate(suffix, 1):
            op = run_command(queue, clock, (name, index), command, held)
            if op is not None:
                out.append(op)
    except _Deadlocked:
        pass  # reported by _run_threads
    finally:
        sys.settrace(None)
        coop.scheduled(False)
        scheduler.end()


def run_jobs_program(
    cls: type[Any], program: ParallelProgram, policy: RetryPolicy = JOB_POLICY
) -> list[Operation]:
    """Run ``program`` on a fresh ``cls(clock, policy)`` (its module loaded again with
    cooperative locks); the whole history."""
    clock = ThreadClock()
    instrumented, target_file = coop.instrument(cls)
    queue = instrumented(clock, policy)
    held: list[Lease] = []
    ops = [
        op
        for index, command in enumerate(program.prefix, 1)
        if (op := run_command(queue, clock, ("prefix", index), command, held)) is not None
    ]
    ops += _run_threads(queue, target_file, clock, program, held)
    return ops + _final_views(queue, clock, ops)


def _run_threads(
    queue: Any, target_file: str, clock: ThreadClock, program: ParallelProgram,
    held: list[Lease],
) -> list[Operation]:  # fmt: skip
    names = [f"leasecheck-P{n}" for n in range(1, len(program.suffixes) + 1)]
    scheduler = TurnScheduler(names, target_file, program.seed, program.switch_percent)
    outs: list[list[Operation]] = [[] for _ in program.suffixes]
    threads = [
        threading.Thread(
            target=_thread_body,
            name=names[n - 1],
            daemon=True,
            args=(queue, clock, f"P{n}", suffix, list(held), scheduler, outs[n - 1]),
        )
        for n, suffix in enumerate(program.suffixes, 1)
    ]
    coop.install(scheduler)
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + JOIN_DEADLINE_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
    finally:
        coop.install(None)
    stuck = [thread.name for thread in threads if thread.is_alive()]
    if stuck or scheduler.deadlock:
        raise AssertionError(
            f"threads {stuck or names} did not finish their commands within "
            f"{JOIN_DEADLINE_S:g} s ({scheduler.deadlock or 'still running'}); the JobQueue "
            f"target deadlocks or loops forever under concurrent calls"
        )
    return [op for out in outs for op in out]


def _final_views(queue: Any, clock: ThreadClock, ops: list[Operation]) -> list[Operation]:
    """The harness views every job the history submitted: the final state, read at the
    latest instant any call of the history read (a view processes no expiry, so only
    the line it prints depends on it)."""
    submitted = sum(1 for op in ops if op.name == "submit" and op.ok)
    latest = max((getattr(op.call, "now", None) or 0 for op in ops), default=0)
    views = []
    for number in range(1, submitted + 1):
        command = JobOp.of("view", f"J{number}", now=latest)
        op = run_command(queue, clock, ("harness", number), command, [])
        assert op is not None
        views.append(op)
    return views
