"""One run of the thread scheduler: real threads that take turns at scheduling points.

``Run`` starts one real thread per body. Each runs alone to its first point, then
waits for its turn. At every point (a visible line of the target's file, a lock's
acquire or release, a park) the thread that reached it calls ``decide`` and hands
the turn straight to the thread chosen, with no trip through the controller when it
goes on itself. ``stateful_tests.thread_scheduler`` owns the decisions; this module
owns the threads, the tracing and the bounded waits.
"""

from __future__ import annotations

import linecache
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

from leasecheck.stateful_tests import _coop_threading as coop
from leasecheck.stateful_tests._local_lines import LocalLines

__all__ = [
    "BLOCKED", "DONE", "READY", "Run", "ScheduledThread", "SchedulerStuck", "Step", "active_run",
    "held",
]  # fmt: skip

LOOP_POINTS = 8
"""Passes over one line, in one call, that are each a scheduling point; after those, only
the passes numbered by a power of two are (16, 32, 64, ...). A scan of 256 priority
buckets would otherwise make every pass a point, and the schedules grow with the square
of the points: jobs.interleavings took 806 s on such a queue, against 7 s on the bundled
one, whose loops never pass a line more than a few times. A loop that spins on a flag
another thread sets still reaches points, ever further apart, so the other thread runs."""
POINT_DEADLINE_S = 5.0
"""How long a chosen thread may take to reach its next scheduling point."""
TURN_DEADLINE_S = 120.0
"""How long a paused thread waits for its turn before it gives up (the run was lost)."""

READY, BLOCKED, DONE = "ready", "blocked", "done"


class SchedulerStuck(Exception):
    """A thread ran away from the scheduler: it did not come back to a point in time."""


class _Aborted(BaseException):
    """Raised in a paused thread to unwind it when its run is cut short."""


@dataclass(frozen=True)
class Step:
    """One scheduling point a thread ran from: a line of the target or a lock operation."""

    thread: str
    kind: str
    """``line``, ``acquire`` or ``release`` (``start`` before a thread's first point)."""
    code: CodeType | None = None
    line: int = 0

    def function(self) -> str:
        return self.code.co_qualname if self.code else ""

    def source(self) -> str:
        if self.code is None:
            return ""
        return linecache.getline(self.code.co_filename, self.line).strip()

    def describe(self) -> str:
        if self.kind == "start":
            return f"{self.thread} starts"
        if self.kind == "line":
            return f"{self.thread} runs {self.where()}"
        return f"{self.thread} {self.kind}s a lock at {self.where()}"

    def where(self) -> str:
        return f"line {self.line} of {self.function()}: `{self.source()}`"


class ScheduledThread:
    """One scenario thread: a real thread that runs only while it holds its turn."""

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
        decide: Callable[[Run], ScheduledThread | None],
    ) -> None:
        self.target_file = target_file
        self.decide = decide
        self.threads = {name: ScheduledThread(name, body, self) for name, body in bodies}
        self.ready = threading.Semaphore(0)
        self.over = threading.Lock()
        self.over.acquire()
        self.local = threading.local()
        self.paths: dict[FrameType, int] = {}
        """Per target frame, a hash of the lines it has run (part of its state)."""
        self.passes: dict[tuple[FrameType, int], int] = {}
        """Per target frame and line, the passes over it so far (``LOOP_POINTS``)."""
        self.thinned = False
        """A pass over a visible line was not a point: the run is not every interleaving."""
        self.lines = LocalLines.of(target_file)
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
        return [name for name, t in self.threads.items() if t.state == READY and not held(t)]

    def unfinished(self) -> list[ScheduledThread]:
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
                    f"lock not made through the target module's threading, a queue.Queue, "
                    f"sleep) or loops outside {self.target_file}"
                )
            seen = self.progress

    # -- the thread side (coop.Switcher) --
    def reschedule(self, me: ScheduledThread) -> None:
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

    def me(self) -> ScheduledThread:
        thread: ScheduledThread = self.local.thread
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
        if self._local(frame):
            return self.trace_line
        key = (frame, frame.f_lineno)
        passes = self.passes[key] = self.passes.get(key, 0) + 1
        if passes > LOOP_POINTS and passes & (passes - 1):
            self.thinned = True
            return self.trace_line
        thread = self.me()
        thread.frame, thread.step = frame, Step(thread.name, "line", frame.f_code, frame.f_lineno)
        self.reschedule(thread)
        return self.trace_line

    def _local(self, frame: FrameType) -> bool:
        try:
            return self.lines.local(frame)
        except Exception:  # a line the analysis cannot read is a point: never wrong, only slower
            return False

    # -- state --
    def frames_state(self, thread: ScheduledThread) -> list[object]:
        """Each target frame of ``thread``: code, instruction, lines run, locals."""
        frames: list[object] = []
        frame = thread.frame
        while frame is not None and frame.f_code.co_filename == self.target_file:
            frames.append((id(frame.f_code), frame.f_lasti, self.paths.get(frame), frame.f_locals))
            frame = frame.f_back
        return frames


def held(thread: ScheduledThread) -> bool:
    """``thread``'s next step acquires a lock that another thread holds, or a permit of a
    semaphore that has none left."""
    lock = thread.subject
    if thread.step.kind != "acquire":
        return False
    if isinstance(lock, coop.CoopSemaphore):
        return lock._value == 0
    if not isinstance(lock, coop.CoopLock):
        return False
    return lock.owner is not None and not (lock.reentrant and lock.owner == thread.name)


def active_run() -> Run | None:
    """The run whose threads are scheduled now (for a world's thread bodies)."""
    active = coop.active()
    return active if isinstance(active, Run) else None
