"""Run a ``ParallelProgram`` against a JobQueue: one thread per suffix on one queue.

The prefix runs in the calling thread. The suffix threads take turns: a
``TurnScheduler`` traces every line the target file executes in them
(``sys.settrace``) and lets one thread run at a time, switching to another at a
line with probability ``switch_percent`` % (``random.Random(seed)``), so calls
interleave *inside* the target's methods, where a missing lock lets two threads
see the same state, and the same program gives the same interleaving. A thread
that holds the turn but makes no progress for ``STALL_S`` is blocked (on a lock
held by a waiting thread): a waiting thread then takes the turn, which changes
only the interleaving, never a verdict.

Each thread's clock reads the ``now`` of the command it is running (a
thread-local value), so times are arguments and the model is deterministic given
the order. After the threads end, the harness views every job (the final state).
"""

from __future__ import annotations

import inspect
import random
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from leasecheck.models.linearizability import Operation, Raised, Returned
from leasecheck.queue_impl.jobs import Lease, RetryPolicy
from leasecheck.stateful_tests.parallel import JOB_POLICY, Command, Held, ParallelProgram
from leasecheck.targets.lease_compare import error_kind

__all__ = ["ThreadClock", "TurnScheduler", "run_jobs_program"]

STALL_S = 0.002
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


class TurnScheduler:
    """Lets one of ``names`` run at a time; switches at traced lines of ``target_file``."""

    def __init__(self, names: list[str], target_file: str, seed: int, switch_percent: int):
        self.target_file = target_file
        self.switch_percent = switch_percent
        self._rng = random.Random(seed)
        self._cond = threading.Condition()
        self._active = list(names)
        self._turn = names[0]
        self._progress = 0
        self.switches = 0

    def tracer(self, frame: FrameType, event: str, arg: object) -> Any:
        """The global trace function: trace lines only in the target's own file."""
        return self._line if frame.f_code.co_filename == self.target_file else None

    def _line(self, frame: FrameType, event: str, arg: object) -> Any:
        if event == "line":
            self.point()
        return self._line

    def point(self) -> None:
        """A scheduling point: maybe pass the turn on, then wait for ours."""
        me = threading.current_thread().name
        with self._cond:
            self._progress += 1
            switch = self._turn == me and len(self._active) > 1
            if switch and self._rng.randrange(100) < self.switch_percent:
                self._turn = self._rng.choice([n for n in self._active if n != me])
                self.switches += 1
                self._cond.notify_all()
            self._wait_turn(me)

    def _wait_turn(self, me: str) -> None:
        while self._turn != me:
            seen = self._progress
            if not self._cond.wait(STALL_S) and self._progress == seen:
                self._turn = me  # the thread holding the turn is blocked: run meanwhile

    def begin(self) -> None:
        with self._cond:
            self._wait_turn(threading.current_thread().name)

    def end(self) -> None:
        """The calling thread has run all its commands: give the turn to another one."""
        me = threading.current_thread().name
        with self._cond:
            self._active.remove(me)
            self._progress += 1
            if self._active and self._turn == me:
                self._turn = self._rng.choice(self._active)
            self._cond.notify_all()


def _call(queue: Any, command: Command, args: dict[str, Any]) -> Callable[[], Any]:
    name = command.name
    if name == "submit":
        return lambda: queue.submit(args["type"], args["payload"], args["priority"], args["run_at"])
    if name == "poll":
        return lambda: queue.poll(args["worker_id"], args["lease_millis"])
    if name == "complete":
        return lambda: queue.complete(args["job_id"], args["token"])
    if name == "fail":
        return lambda: queue.fail(args["job_id"], args["token"], args["error"])
    if name == "dead_letters":
        return lambda: queue.dead_letters()
    method = getattr(queue, name)
    return lambda: method(args["job_id"])


def _resolve(command: Command, held: list[Lease]) -> dict[str, Any] | None:
    args = command.kwargs()
    if isinstance(args.get("token"), Held):
        back = args["token"].back
        if back >= len(held):
            return None
        lease = held[-1 - back]
        args["job_id"], args["token"] = lease.job_id, lease.token
        args = {"job_id": args.pop("job_id"), **args}
    return args


def run_command(
    queue: Any, clock: ThreadClock, where: tuple[str, int], command: Command, held: list[Lease]
) -> Operation | None:
    """Run one command; keep a returned lease in ``held``; the recorded operation."""
    args = _resolve(command, held)
    if args is None:
        return None
    clock.set(args["now"])
    call = _call(queue, command, args)
    started = time.monotonic_ns()
    try:
        outcome: Returned | Raised = Returned(call())
    except Exception as error:
        outcome = Raised(error_kind(error), str(error))
    ended = time.monotonic_ns()
    if isinstance(outcome, Returned) and isinstance(outcome.value, Lease):
        held.append(outcome.value)
    return Operation(where[0], where[1], command.name, args, started, ended, outcome)


def _thread_body(
    queue: Any, clock: ThreadClock, name: str, suffix: tuple[Command, ...],
    held: list[Lease], scheduler: TurnScheduler, out: list[Operation],
) -> None:  # fmt: skip
    scheduler.begin()
    sys.settrace(scheduler.tracer)
    try:
        for index, command in enumerate(suffix, 1):
            op = run_command(queue, clock, (name, index), command, held)
            if op is not None:
                out.append(op)
    finally:
        sys.settrace(None)
        scheduler.end()


def run_jobs_program(
    cls: type[Any], program: ParallelProgram, policy: RetryPolicy = JOB_POLICY
) -> list[Operation]:
    """Run ``program`` on a fresh ``cls(clock, policy)``; the whole history."""
    clock = ThreadClock()
    queue = cls(clock, policy)
    held: list[Lease] = []
    ops = [
        op
        for index, command in enumerate(program.prefix, 1)
        if (op := run_command(queue, clock, ("prefix", index), command, held)) is not None
    ]
    ops += _run_threads(queue, clock, program, held)
    return ops + _final_views(queue, clock, ops)


def _run_threads(
    queue: Any, clock: ThreadClock, program: ParallelProgram, held: list[Lease]
) -> list[Operation]:
    names = [f"leasecheck-P{n}" for n in range(1, len(program.suffixes) + 1)]
    target_file = inspect.getsourcefile(type(queue)) or ""
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
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + JOIN_DEADLINE_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [thread.name for thread in threads if thread.is_alive()]
    if stuck:
        raise AssertionError(
            f"threads {stuck} did not finish their commands within {JOIN_DEADLINE_S:g} s; "
            f"the JobQueue target deadlocks or loops forever under concurrent calls"
        )
    return [op for out in outs for op in out]


def _final_views(queue: Any, clock: ThreadClock, ops: list[Operation]) -> list[Operation]:
    """The harness views every job the history submitted: the final state."""
    submitted = sum(1 for op in ops if op.name == "submit" and isinstance(op.outcome, Returned))
    views = []
    for number in range(1, submitted + 1):
        command = Command("view", (("job_id", f"J{number}"), ("now", 0)))
        op = run_command(queue, clock, ("harness", number), command, [])
        assert op is not None
        views.append(op)
    return views
