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

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from leasecheck.stateful_tests._state_key import state_key
from leasecheck.stateful_tests._thread_run import (
    Run,
    ScheduledThread,
    SchedulerStuck,
    Step,
    active_run,
)

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

V = TypeVar("V")
V_co = TypeVar("V_co", covariant=True)


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
    complete: bool = True
    """No schedule was left out for the bound: every interleaving was explored."""
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
        self.last_level = False
        self.bounded = False
        """The bound left out a schedule of this run (a preemption it could not afford)."""
        """The run has no preemption left (points where only a preemption could branch
        are not cached: fingerprinting them costs more than the runs they would cut)."""

    def go(self) -> tuple[Schedule, V | None]:
        """Run to the end (raise ``_Cut`` at a state already seen); the schedule and verdict."""
        self.run.go()
        schedule = Schedule(
            tuple(self.choices), tuple(self.steps), tuple(self.preempted), self.diverged
        )
        return schedule, self.world.judge(self.steps, self.problem)

    def decide(self, run: Run) -> ScheduledThread | None:
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
        spinning = current is not None and self.run.threads[current].spinning
        cost = 1 if current in enabled and not spinning else 0
        if cost and self.last_level:
            self.bounded = True  # a preemption would branch here, but none is left
            return default  # nothing to branch on, so nothing worth caching
        if self.seen is not None:
            key = self._key()
            if key is not None:
                if key in self.seen:
                    raise _Cut
                self.seen.add(key)
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
            levels[level + cost].append(prefix)  # the last level defers no preemption

        while stack:
            execution = _Execution(factory(), bound, stack.pop(), defer, seen)
            execution.last_level = level == bound.preemptions
            try:
                schedule, verdict = execution.go()
            except _Cut:
                result.pruned += 1
                result.steps += len(execution.steps)
                continue
            finally:
                thinned = execution.run.thinned  # a loop's pass that was not a point
                result.complete = result.complete and not execution.bounded and not thinned
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
