"""A watch inside a check's test process that sees a target call block for good.

A target that never returns from a call (a ``cancel`` that takes its own lock twice, two
connections of one worker waiting on each other) was HUNG only when its property's budget
ran out: 420 s at ci, and the run's other properties never ran. This watch observes the
block instead of waiting for the budget. Every ``TICK`` it looks at each thread of the
test process. A thread is blocked when, for ``BLOCKED_AFTER`` seconds:

1. its stack has not moved (the same innermost frame at the same instruction), and a
   frame of a target file is on it: it is inside a call to the target;
2. it used no CPU (``IDLE_CPU`` at most: a lock wait, not a loop);
3. no other thread of the process and none of its child processes used CPU either.

Then nothing can release it: a lock of this process is released only by one of its
threads, and every process that could answer (a child holding a file lock) is idle too.
Time alone would release it only if the target waited on a clock, and neither contract
does: lease-worker.md says "No randomness, no sleep" and its busy timeout is 1 s; the
JobQueue is in memory and its clock is the caller's. A target that merely runs slowly
uses CPU and is never called blocked (its budget still bounds it).

The watch then writes one ``blocked`` event, with every thread's stack, the blocked one
first; the runner names the operation, marks the property HUNG and runs the properties
that had not finished again without it (``runner``). The watch runs only when the runner
names the target files (``TARGETS_ENV``): a library's properties wait on servers and
real time, and are bounded by their budget alone.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Final

from leasecheck._wire import TARGETS_ENV

__all__ = ["BLOCKED_AFTER", "Watch", "current_frames", "start"]

BLOCKED_AFTER: Final = 10.0
"""Seconds a thread must stay still, and the whole process tree idle, to be blocked: ten
times the worker's 1 s busy timeout."""
TICK: Final = 0.5
IDLE_CPU: Final = 0.05
"""CPU seconds, over the whole ``BLOCKED_AFTER``, that still count as idle (a busy
handler's wake-ups, the stack dump a signal asks for)."""
_CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")


@dataclass
class _Still:
    """A thread seen at the same place inside the target since ``since``."""

    place: tuple[int, int]
    nodeid: str
    since: float
    thread_cpu: float
    tree_cpu: tuple[float, frozenset[int]] | None = None
    """The rest of the tree's CPU, from the second look on (a thread only passing
    through the target costs no scan of the process tree)."""


class Watch(threading.Thread):
    """Looks at the process's threads every ``TICK``; reports each blocked one once."""

    def __init__(
        self, files: frozenset[str], current: Callable[[], str | None],
        report: Callable[[dict[str, Any]], None], after: float = BLOCKED_AFTER,
    ) -> None:  # fmt: skip
        super().__init__(name="leasecheck-blocked-watch", daemon=True)
        self.files, self.current, self.report, self.after = files, current, report, after
        self.still: dict[int, _Still] = {}
        self.reported: set[tuple[int, tuple[int, int]]] = set()
        self.target_file: dict[str, bool] = {}

    def run(self) -> None:
        while True:
            time.sleep(TICK)
            try:
                self.look()
            except Exception:
                # A /proc this watch cannot read, a thread gone mid-look in a way not
                # foreseen: stop watching. The property's budget still bounds it, as it
                # does a run with no watch; an error thrown out of here would only be a
                # warning in the test's output.
                return

    def look(self) -> None:
        nodeid, now = self.current(), time.monotonic()
        frames = current_frames()
        frames.pop(threading.get_ident(), None)
        seen: dict[int, _Still] = {}
        for ident, top in frames.items():
            if nodeid is None or not self._inside_target(top):
                continue
            place = (id(top), top.f_lasti)
            before = self.still.get(ident)
            if before is not None and before.place == place and before.nodeid == nodeid:
                seen[ident] = before
                if before.tree_cpu is None:
                    before.tree_cpu = _tree_cpu()
                elif now - before.since >= self.after and self._idle(ident, before):
                    self._report(ident, before, frames, now)
                continue
            cpu = _thread_cpu(ident)
            if cpu is not None:
                seen[ident] = _Still(place, nodeid, now, cpu)
        self.still = seen

    def _inside_target(self, top: FrameType) -> bool:
        frame: FrameType | None = top
        while frame is not None:
            name = frame.f_code.co_filename
            known = self.target_file.get(name)
            if known is None:
                known = self.target_file[name] = os.path.realpath(name) in self.files
            if known:
                return True
            frame = frame.f_back
        return False

    @staticmethod
    def _idle(ident: int, still: _Still) -> bool:
        cpu = _thread_cpu(ident)
        if cpu is None or cpu - still.thread_cpu > IDLE_CPU or still.tree_cpu is None:
            return False
        total, processes = _tree_cpu()
        return processes == still.tree_cpu[1] and total - still.tree_cpu[0] <= IDLE_CPU

    def _report(self, ident: int, still: _Still, frames: dict[int, FrameType], now: float) -> None:
        if (ident, still.place) in self.reported:
            return
        self.reported.add((ident, still.place))
        order = [ident, *(other for other in frames if other != ident)]
        stacks = [
            [[f.filename, f.lineno, f.name] for f in traceback.extract_stack(frames[i])]
            for i in order
        ]
        self.report({
            "event": "blocked", "nodeid": still.nodeid, "pid": os.getpid(),
            "seconds": round(now - still.since, 1), "threads": stacks,
        })  # fmt: skip


def current_frames() -> dict[int, FrameType]:
    """``sys._current_frames()`` with the cyclic collector off for the call.

    Up to CPython 3.11, ``sys._current_frames()`` holds the runtime's lock of thread
    states while it makes a frame object for each thread; a collection that starts there
    and frees a ``threading.local`` (its dealloc takes that same lock) deadlocks the whole
    process: the caller waits for a lock it holds, with the GIL (CPython gh-106883; 3.12
    runs the collector only between bytecodes). The thread scheduler frees thousands of
    ``threading.local`` objects a second, and this watch calls ``sys._current_frames()``
    every ``TICK``: a jobs.interleavings run stopped with every thread idle, once in
    several gate runs, and read HUNG when its budget ran out. No collection can start
    inside the call now. Another thread's ``gc.disable()`` made in the same instant would
    be undone; nothing in a check does that."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        if enabled:
            gc.enable()


def _thread_cpu(ident: int) -> float | None:
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(ident))
    except (OSError, ProcessLookupError):  # the thread has ended
        return None


def _tree_cpu() -> tuple[float, frozenset[int]]:
    """CPU seconds of this process's other threads and of all its descendants (alive or
    not yet reaped), and which descendants there are (one that starts or ends is news)."""
    total = time.process_time() - time.thread_time()
    pids = _descendants(os.getpid())
    for pid in pids:
        total += _process_cpu(pid)
    return total, frozenset(pids)


def _descendants(pid: int) -> list[int]:
    found, queue = [], [pid]
    while queue:
        parent = queue.pop()
        for task in _list(Path(f"/proc/{parent}/task")):
            try:
                children = (Path(f"/proc/{parent}/task/{task}/children")).read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                found.append(child)
                queue.append(child)
    return found


def _list(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _process_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime


def _can_watch() -> bool:
    """Per-thread CPU clocks and /proc's task lists: Linux. Elsewhere there is no watch,
    and a blocked call is HUNG when its budget runs out."""
    return hasattr(time, "pthread_getcpuclockid") and os.path.isdir(f"/proc/{os.getpid()}/task")


def start(
    current: Callable[[], str | None], report: Callable[[dict[str, Any]], None]
) -> Watch | None:
    """The watch of this test process, started, if the runner named target files."""
    named = os.environ.get(TARGETS_ENV)
    if not named or not _can_watch():
        return None
    files = frozenset(os.path.realpath(name) for name in named.split(os.pathsep))
    watch = Watch(files, current, report)
    watch.start()
    return watch
