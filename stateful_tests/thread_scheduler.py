"""A deterministic thread scheduler: every interleaving up to a preemption bound.

The model-checking mode of Lincheck, Loom and Shuttle (Rust) and CHESS, for Python
threads. Each thread of a scenario is a real thread, but only one runs at a time:
it stops at every *scheduling point* and waits until the scheduler chooses it again.
The points are every line executed in the target's own file (``sys.settrace``,
``line`` events of frames whose code comes from that file) and every acquire and
release of the target's locks (``stateful_tests._coop_threading`` loads the target
with cooperative ``Lock``/``RLock``/``Condition``). A thread that wants a held lock
is parked by the lock itself, so "blocked" is observed, never guessed from silence;
nothing here depends on the OS scheduler, and the same target gives the same
schedules in the same order on every run and machine.

A *schedule* is the list of thread names chosen at each point. Exploration is
CHESS's iterative context bounding (Musuvathi & Qadeer, PLDI 2007): switching away
from a thread that could go on is a *preemption*, switching when it blocked or
finished is free; every schedule with 0 preemptions is run first, then every one
with 1, and so on up to the bound. The first failure found therefore has the fewest
preemptions any failure has.

Pruning is by state: at each point with a choice, the scheduler fingerprints the
shared objects, every thread's position (each target frame's code, instruction,
locals and the path of lines it ran) and the history so far (which operations
started and returned, in what order, with what outcome; ``World.history_key``). A
state already met is not explored again: everything after it, and the verdict on
it, is the same. It is met at a preemption count no higher than now, because the
levels run in increasing order, so the earlier visit covered at least as much. See
docs/interleavings.md for why state hashing and not sleep sets or DPOR.
"""

from __future__ import annotations

import linecache
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any, Generic, Protocol, TypeVar

from stateful_tests import _coop_threading as coop
from stateful_tests._local_lines import LocalLines
from stateful_tests._state_key import state_key

__all__ = [
    "Bound",
    "Exploration",
    "Run",
    "Schedule",
    "SchedulerStuck",
    "Step",
    "World",
    "active_run",
    "explore",
    "follow",
]

POINT_DEADLINE_S = 5.0
"""How long a chosen thread may take to reach its next scheduling point."""
TURN_DEADLINE_S = 120.0
"""How long a paused thread waits for its turn before it gives up (the run was lost)."""

READY, BLOCKED, DONE = "ready", "blocked", "done"

V = TypeVar("V")
V_co = TypeVar("V_co", covariant=True)


class SchedulerStuck(Exception):
    """A thread ran away from the scheduler: it did not come back to a point in time."""


class _Aborted(BaseException):
    """Raised in a paused thread to unwind it when its run is cut short."""


@dataclass(frozen=True)
class Step:
    """One scheduling point a thread ran from: a line, a lock operation or a call."""

    thread: str
    kind: str
    """``start``, ``call`` (between operations), ``line``, ``acquire``, ``release``."""
    code: CodeType | None = None
    line: int = 0
    text: str = ""
    """For ``call``: the operation about to be called."""

    def function(self) -> str:
        return self.code.co_qualname if self.code else ""

    def source(self) -> str:
        if self.code is None:
            return ""
        return linecache.getline(self.code.co_filename, self.line).strip()

    def describe(self) -> str:
        if self.kind == "call":
            return f"{self.thread} calls {self.text}"
        if self.kind == "start":
            return f"{self.thread} starts"
        if self.kind == "line":
            return f"{self.thread} runs {self.where()}"
        return f"{self.thread} {self.kind}s a lock at {self.where()}"

    def where(self) -> str:
        return f"line {self.line} of {self.function()}: `{self.source()}`"


class _Thread:
    def __init__(self, name: str, body: Callable[[], None], run: Run) -> None:
        self.name = name
        self.body = body
        self.run = run
        self.turn = threading.Lock()
        self.turn.acquire()
        self.state = READY
        self.waiting_on: object = None
        self.timed = False
        self.timed_out = False
        self.spinning = False
        self.frame: FrameType | None = None
        self.step = Step(name, "start")
        self.subject: object = None
        """The lock of a pending ``acquire`` step."""
        self.on_grant: Callable[[], None] | None = None
        """Called when the thread is next granted a step (the harness's invocation event)."""
        self.error: BaseException | None = None
        self.os_thread = threading.Thread(target=self.main, name=f"leasecheck-{name}", daemon=True)

    def main(self) -> None:
        run = self.run
        run.local.thread = self
        coop.scheduled(True)
        try:
            sys.settrace(run.trace_call)
            self.body()
        except _Aborted:
            pass
        except BaseException as error:  # the harness failed: reported by the run
            self.error = error
        finally:
            sys.settrace(None)
            coop.scheduled(False)
            self.state = DONE
            if not run.aborting:
                run.reschedule(self)


class Run:
    """One execution. The threads start paused; at every point the thread that reached it
    asks ``decide`` which thread runs next and hands the turn over directly (no trip
    through the controller when it goes on itself)."""

    def __init__(
        self,
        bodies: Sequence[tuple[str, Callable[[], None]]],
        target_file: str,
        decide: Callable[[Run], _Thread | None],
    ) -> None:
        self.target_file = target_file
        self.decide = decide
        self.threads = {name: _Thread(name, body, self) for name, body in bodies}
        self.ready = threading.Semaphore(0)
        self.over = threading.Lock()
        self.over.acquire()
        self.local = threading.local()
        self.paths: dict[FrameType, int] = {}
        """Per target frame, a hash of the lines it has run (part of its state)."""
        self.lines = LocalLines(target_file)
        self.aborting = False
        self.starting = True
        """Threads are being started: each runs alone to its first point."""
        self.ended: BaseException | None = None
        """What stopped the run early from inside a thread (``_Cut``, a harness error)."""
        self.taken = 0
        """Steps granted so far (the current step's number, counted from 1)."""
        self.progress = 0

    # -- the controller side --
    def go(self) -> None:
        """Run every thread to its end (or until ``decide`` stops the run)."""
        coop.install(self)
        try:
            for thread in self.threads.values():
                thread.os_thread.start()
                if not self.ready.acquire(timeout=POINT_DEADLINE_S):
                    raise SchedulerStuck(
                        f"{thread.name} did not reach its first scheduling point within "
                        f"{POINT_DEADLINE_S:g} s"
                    )
            self.starting = False
            first = self.decide(self)
            if first is None:
                return
            first.turn.release()
            self._wait_over()
        finally:
            self.close()
        if self.ended is not None:
            raise self.ended

    def enabled(self) -> list[str]:
        """Threads that can take a step: not parked, not done, and not about to acquire a
        lock another thread holds (that step would only park it: CHESS counts such a
        thread as disabled, so switching to it is never explored)."""
        return [name for name, t in self.threads.items() if t.state == READY and not _held(t)]

    def unfinished(self) -> list[_Thread]:
        return [t for t in self.threads.values() if t.state != DONE]

    def time_out_one(self) -> bool:
        """Every thread is parked: a timed wait runs out (the first by name), if any."""
        for thread in self.threads.values():
            if thread.state == BLOCKED and thread.timed:
                thread.state, thread.timed_out, thread.waiting_on = READY, True, None
                return True
        return False

    def close(self) -> None:
        """Unwind every thread still paused (``_Aborted``) and join them all."""
        self.aborting = True
        for thread in self.threads.values():
            if thread.state != DONE and thread.turn.locked():
                thread.turn.release()
        deadline = time.monotonic() + POINT_DEADLINE_S
        for thread in self.threads.values():
            if thread.os_thread.ident is not None:
                thread.os_thread.join(max(0.0, deadline - time.monotonic()))
        coop.install(None)
        alive = [t.name for t in self.threads.values() if t.os_thread.is_alive()]
        if alive:
            raise SchedulerStuck(
                f"threads {alive} did not unwind within {POINT_DEADLINE_S:g} s after their "
                f"run was cut short; the target catches BaseException or loops outside its file"
            )

    def _wait_over(self) -> None:
        seen = -1
        while not self.over.acquire(timeout=POINT_DEADLINE_S):
            if self.progress == seen:
                running = [t for t in self.threads.values() if t.state != DONE]
                step = running[0].step.describe() if running else "the end"
                raise SchedulerStuck(
                    f"no thread reached a scheduling point for {POINT_DEADLINE_S:g} s (last: "
                    f"{step}): a thread blocks on something the scheduler does not control (a "
                    f"lock not made through the target module's threading, an Event, a Queue, "
                    f"sleep) or loops outside {self.target_file}"
                )
            seen = self.progress

    # -- the thread side (coop.Switcher) --
    def reschedule(self, me: _Thread) -> None:
        """``me`` reached a point (or blocked, or finished): hand the turn to the next thread."""
        self.progress += 1
        if self.starting:  # back to the controller, which starts the next thread
            self.ready.release()
            if me.state != DONE and not me.turn.acquire(timeout=TURN_DEADLINE_S):
                raise _Aborted
            if self.aborting:
                raise _Aborted
            return
        try:
            chosen = self.decide(self)
        except BaseException as error:  # _Cut, or a failure of the harness
            self.ended, chosen = error, None
        if chosen is None:
            self.aborting = True
            self.over.release()
            if me.state != DONE:
                raise _Aborted
            return
        if chosen is me:
            return
        chosen.turn.release()
        if me.state == DONE:
            return
        if not me.turn.acquire(timeout=TURN_DEADLINE_S) or self.aborting:
            raise _Aborted

    def me(self) -> _Thread:
        thread: _Thread = self.local.thread
        return thread

    def name(self) -> str:
        return self.me().name

    def point(self, kind: str, subject: object) -> None:
        if self.aborting:
            raise _Aborted
        thread = self.me()
        frame = coop.caller_in(self.target_file)
        thread.frame = frame
        code, line = (frame.f_code, frame.f_lineno) if frame else (None, 0)
        thread.step, thread.subject = Step(thread.name, kind, code, line), subject
        self.reschedule(thread)
        thread.subject = None

    def on_next_grant(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the calling thread is next granted a step (or now, if the
        thread is not scheduled). A harness records an operation's invocation this way:
        at the operation's first visible step, the latest instant it can be said to start,
        which constrains a linearization most (see docs/interleavings.md)."""
        thread = getattr(self.local, "thread", None)
        if thread is None:
            callback()
        else:
            thread.on_grant = callback

    def granted_pending(self) -> None:
        """The calling thread returns from an operation: its invocation, if not yet recorded."""
        thread = self.me()
        if thread.on_grant is not None:
            callback, thread.on_grant = thread.on_grant, None
            callback()

    def block(self, subject: object, timed: bool) -> bool:
        if self.aborting:
            raise _Aborted
        thread = self.me()
        thread.state, thread.waiting_on, thread.timed = BLOCKED, subject, timed
        self.reschedule(thread)
        timed_out, thread.timed_out = thread.timed_out, False
        return not timed_out

    def wake(self, subject: object) -> None:
        for thread in self.threads.values():
            if thread.state == BLOCKED and thread.waiting_on is subject:
                thread.state, thread.waiting_on = READY, None

    def yielded(self) -> None:
        self.me().spinning = True

    def trace_call(self, frame: FrameType, event: str, arg: object) -> Any:
        return self.trace_line if frame.f_code.co_filename == self.target_file else None

    def trace_line(self, frame: FrameType, event: str, arg: object) -> Any:
        if event != "line":
            return self.trace_line
        self.paths[frame] = hash((self.paths.get(frame, 0), frame.f_lineno))
        self.progress += 1
        if self.aborting:
            raise _Aborted
        if self.lines.local(frame):
            return self.trace_line
        thread = self.me()
        thread.frame, thread.step = frame, Step(thread.name, "line", frame.f_code, frame.f_lineno)
        self.reschedule(thread)
        return self.trace_line

    # -- state --
    def frames_state(self, thread: _Thread) -> list[object]:
        """Each target frame of ``thread``: code, instruction, lines run, locals."""
        frames: list[object] = []
        frame = thread.frame
        while frame is not None and frame.f_code.co_filename == self.target_file:
            frames.append((id(frame.f_code), frame.f_lasti, self.paths.get(frame), frame.f_locals))
            frame = frame.f_back
        return frames


def _held(thread: _Thread) -> bool:
    """``thread``'s next step acquires a lock that another thread holds."""
    lock = thread.subject
    if thread.step.kind != "acquire" or not isinstance(lock, coop.CoopLock):
        return False
    return lock.owner is not None and not (lock.reentrant and lock.owner == thread.name)


class World(Protocol[V_co]):
    """A fresh copy of what is scheduled: a scenario's threads on a new queue."""

    target_file: str

    def bodies(self) -> list[tuple[str, Callable[[], None]]]: ...

    def roots(self) -> tuple[object, ...]:
        """The shared objects, fingerprinted first."""
        ...

    def thread_key(self, name: str) -> object:
        """What the harness keeps for thread ``name`` (its next operation, its leases)."""
        ...

    def history_key(self) -> object:
        """The history so far: calls and returns in order, with outcomes."""
        ...

    def judge(self, steps: Sequence[Step], problem: str | None) -> V_co | None:
        """The verdict on a finished run (``problem``: a deadlock or runaway the run saw)."""
        ...

    def atoms(self) -> tuple[type, ...]:
        """Harness types fingerprinted by type alone."""
        ...


@dataclass(frozen=True)
class Bound:
    """How far to explore: at most ``preemptions``; ``max_steps`` per schedule."""

    preemptions: int
    max_steps: int = 20_000
    prune: bool = True


@dataclass(frozen=True)
class Schedule:
    """One run: the thread chosen at each point, the steps run, where it preempted."""

    choices: tuple[str, ...]
    steps: tuple[Step, ...]
    preempted: tuple[int, ...]
    """Indices into ``steps`` of the steps that ran right after a preemption."""
    diverged: bool = False
    """(replay) a recorded choice no longer applied and the run went on without it."""


@dataclass
class Exploration(Generic[V]):
    """What ``explore`` did and found."""

    preemptions: int
    explored: int = 0
    """Schedules run to the end and judged."""
    pruned: int = 0
    """Schedules cut short at a state already explored."""
    steps: int = 0
    """Scheduled steps run in total (every schedule, pruned ones too)."""
    by_level: list[int] = field(default_factory=list)
    """Schedules explored with exactly 0, 1, ... preemptions."""
    failure: tuple[Schedule, V] | None = None
    seconds: float = 0.0


class _Cut(Exception):
    """This run reached a state already explored."""


class _Execution(Generic[V]):
    """One run of a fresh world, following ``prefix`` and then the default choices;
    ``decide`` is called by whichever thread reached a point."""

    def __init__(
        self,
        world: World[V],
        bound: Bound,
        prefix: Sequence[str],
        deferred: Callable[[list[str], int], None] | None = None,
        seen: set[bytes] | None = None,
    ) -> None:
        self.world = world
        self.bound = bound
        self.prefix = prefix
        self.deferred = deferred
        """Gets every choice not taken now, with its cost (1: a preemption)."""
        self.seen = seen
        """States already explored: reaching one cuts the run (``_Cut``)."""
        self.run = Run(world.bodies(), world.target_file, self.decide)
        self.choices: list[str] = []
        self.steps: list[Step] = []
        self.preempted: list[int] = []
        self.current: str | None = None
        self.diverged = False
        self.problem: str | None = None

    def go(self) -> tuple[Schedule, V | None]:
        """Run to the end (raise ``_Cut`` at a state already seen); the schedule and verdict."""
        self.run.go()
        schedule = Schedule(
            tuple(self.choices), tuple(self.steps), tuple(self.preempted), self.diverged
        )
        return schedule, self.world.judge(self.steps, self.problem)

    def decide(self, run: Run) -> _Thread | None:
        crashed = next((t for t in run.threads.values() if t.error), None)
        if crashed is not None:
            raise RuntimeError(f"the harness of {crashed.name} failed") from crashed.error
        enabled = run.enabled()
        if not enabled and run.unfinished() and run.time_out_one():
            enabled = run.enabled()
        if not enabled:
            self.problem = self._deadlock() if run.unfinished() else None
            return None
        if len(self.choices) >= self.bound.max_steps:
            self.problem = (
                f"the threads did not finish within {self.bound.max_steps} scheduling points "
                f"(a loop that waits for another thread without blocking on a lock?)"
            )
            return None
        choice = self._choose(enabled)
        self._take(choice, enabled)
        run.taken += 1
        return run.threads[choice]

    def _choose(self, enabled: list[str]) -> str:
        current = self.current
        default = current if current in enabled else enabled[0]
        position = len(self.choices)
        if position < len(self.prefix):
            wanted = self.prefix[position]
            if wanted in enabled:
                return wanted
            self.diverged = True
            return default
        if self.deferred is None or len(enabled) < 2:
            return default
        if self.seen is not None:
            key = self._key()
            if key is not None:
                if key in self.seen:
                    raise _Cut
                self.seen.add(key)
        spinning = current is not None and self.run.threads[current].spinning
        cost = 1 if current in enabled and not spinning else 0
        for other in enabled:
            if other != default:
                self.deferred([*self.choices, other], cost)
        return default

    def _take(self, choice: str, enabled: list[str]) -> None:
        current = self.current
        threads = self.run.threads
        switched = current is not None and choice != current and current in enabled
        if switched and current is not None and not threads[current].spinning:
            self.preempted.append(len(self.steps))
        self.choices.append(choice)
        self.current = choice
        chosen = threads[choice]
        self.steps.append(chosen.step)
        chosen.spinning = False
        if chosen.on_grant is not None:
            callback, chosen.on_grant = chosen.on_grant, None
            callback()

    def _key(self) -> bytes | None:
        threads = [
            (
                name,
                t.state,
                t.waiting_on,
                t.spinning,
                self.world.thread_key(name),
                self.run.frames_state(t),
            )
            for name, t in self.run.threads.items()
        ]
        parts = (self.current, self.world.roots(), threads, self.world.history_key())
        return state_key(parts, self.world.atoms())

    def _deadlock(self) -> str:
        parked = "; ".join(
            f"{t.name} waits for a lock at {t.step.where()}" for t in self.run.unfinished()
        )
        return f"deadlock: every unfinished thread is blocked ({parked})"


def active_run() -> Run | None:
    """The run whose threads are scheduled now (for a world's thread bodies)."""
    active = coop.active()
    return active if isinstance(active, Run) else None


def explore(factory: Callable[[], World[V]], bound: Bound) -> Exploration[V]:
    """Every schedule of ``factory()``'s threads with at most ``bound.preemptions``
    preemptions, fewest first; stops at the first schedule the world judges a failure."""
    started = time.perf_counter()
    result: Exploration[V] = Exploration(bound.preemptions)
    levels: list[list[list[str]]] = [[[]]]
    levels += [[] for _ in range(bound.preemptions)]
    seen: set[bytes] | None = set() if bound.prune else None
    for level, stack in enumerate(levels):
        explored_before = result.explored

        def defer(prefix: list[str], cost: int, level: int = level) -> None:
            if level + cost <= bound.preemptions:
                levels[level + cost].append(prefix)

        while stack:
            execution = _Execution(factory(), bound, stack.pop(), defer, seen)
            try:
                schedule, verdict = execution.go()
            except _Cut:
                result.pruned += 1
                result.steps += len(execution.steps)
                continue
            result.explored += 1
            result.steps += len(schedule.steps)
            if verdict is not None:
                result.failure = (schedule, verdict)
                break
        result.by_level.append(result.explored - explored_before)
        if result.failure is not None:
            break
    result.seconds = time.perf_counter() - started
    return result


def follow(world: World[V], choices: Sequence[str]) -> tuple[Schedule, V | None]:
    """Run exactly ``choices`` on ``world`` (a replay); where a choice no longer applies,
    go on without preempting (``Schedule.diverged``). The schedule and its verdict."""
    return _Execution(world, Bound(preemptions=0), choices).go()
