"""The processes of one ``leasecheck check`` run: found, attributed, and never outliving it.

The runner is the run's child subreaper (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``), so a
process the target starts in a new session, whose parent then dies, is reparented to
the runner instead of to init and stays in reach. While a property's test runs, the
test process sets ``LEASECHECK_NODEID`` in its environment (``leasecheck._events``), so
every process started during it carries the name of the test that started it: a
process still alive after its test finished is that property's finding.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import psutil

__all__ = ["NODEID_ENV", "Leftover", "Tree", "started_since", "subreaper"]

NODEID_ENV = "LEASECHECK_NODEID"
"""Set in a test process while a property's test body runs: its node id."""
_PR_SET_CHILD_SUBREAPER = 36


def subreaper(on: bool) -> None:
    """Make this process the subreaper of its descendants (or stop being it)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)


def started_since(me: psutil.Process, before: set[int]) -> list[psutil.Process]:
    """The descendants of ``me`` that were not running at ``before`` (the pids alive then)
    and sit below no process that was: what a run or a test started, at any depth (a
    server running before it may fork children of its own meanwhile).

    Each descendant's parent is read once, not ``Process.parents()`` per process: that
    walks up to init through psutil objects, about 2 ms a process, and the runner asks
    once a second."""
    descendants = me.children(recursive=True)
    parent: dict[int, int] = {}
    for child in descendants:
        with contextlib.suppress(psutil.NoSuchProcess):
            parent[child.pid] = child.ppid()
    return [
        child
        for child in descendants
        if child.pid in parent and not _below(child.pid, parent, before)
    ]


def _below(pid: int, parent: Mapping[int, int], before: set[int]) -> bool:
    """``pid``, or a process between it and the top of ``parent``'s chains, is in ``before``."""
    for _ in range(len(parent)):  # each process on the way up is a descendant, once
        if pid in before:
            return True
        pid = parent[pid]
        if pid not in parent:  # the process whose descendants these are
            return False
    return False


@dataclass(frozen=True)
class Leftover:
    """A process of the run that was still alive, and the test that started it."""

    pid: int
    command: str
    nodeid: str | None

    def describe(self) -> str:
        return f"pid {self.pid} ({self.command})"


def _describe(process: psutil.Process) -> Leftover | None:
    try:
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        words = process.cmdline() or [process.name()]
        try:
            nodeid = process.environ().get(NODEID_ENV)
        except psutil.AccessDenied:
            nodeid = None
        return Leftover(process.pid, " ".join(words)[:80], nodeid)
    except psutil.NoSuchProcess:
        return None


class Tree:
    """The processes of a run: descendants of this process that neither were running
    nor sit below a process that was running when the run started (a test that calls
    ``run_check`` may have servers of its own)."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.before = {child.pid for child in self.me.children(recursive=True)}
        self.waited_by_owner: set[int] = set()
        """Children whose exit status their owner collects (the run's test process,
        which ``subprocess.Popen`` waits for): never reaped here."""

    def processes(self) -> list[psutil.Process]:
        return started_since(self.me, self.before)

    def left_by(self, finished: Mapping[str, float], grace: float) -> list[Leftover]:
        """Live processes started by a test that finished more than ``grace`` s ago."""
        now = time.monotonic()
        left = [_describe(process) for process in self.processes()]
        return [
            item
            for item in left
            if item and item.nodeid and now - finished.get(item.nodeid, now) > grace
        ]

    def kill(self, pids: Iterable[int]) -> None:
        for pid in pids:
            with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                psutil.Process(pid).kill()
        self.reap()

    def kill_all(self, deadline: float) -> list[Leftover]:
        """SIGKILL every process of the run, again and again until none is left (orphans
        of the killed ones land on us) or ``deadline`` (monotonic) passes; what was alive."""
        seen: dict[int, Leftover] = {}
        while time.monotonic() < deadline:
            alive = [item for item in map(_describe, self.processes()) if item]
            if not alive and not self.reap():
                break
            for item in alive:
                seen.setdefault(item.pid, item)
                with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                    os.kill(item.pid, 9)
            time.sleep(0.02)
        self.reap()
        return list(seen.values())

    def reap(self) -> int:
        """Collect the exit status of our zombie children that the run left (orphans
        reparented to us); the number reaped."""
        reaped = 0
        for child in self.me.children():
            if child.pid in self.before or child.pid in self.waited_by_owner:
                continue
            with contextlib.suppress(psutil.NoSuchProcess, ChildProcessError):
                if child.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(child.pid, os.WNOHANG)
                    reaped += 1
        return reaped
