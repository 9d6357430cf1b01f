"""What the kernel says about a child: is it asleep, who holds which lock on a file.

The interleavings engine decides that a process is blocked on SQLite's write lock by
observing it, never by waiting for silence: SQLite's busy handler sleeps between
retries (``usleep``, i.e. ``clock_nanosleep``), which Linux shows in
``/proc/PID/wchan`` (``hrtimer_nanosleep``) and ``/proc/PID/syscall``; and SQLite's
locks are POSIX byte-range locks on the database file, which ``/proc/locks`` lists
with the holder's pid (a ``WRITE`` lock is RESERVED, PENDING or EXCLUSIVE; a ``READ``
lock is SHARED).

Every scheduler of forked SQLite children asks here (``next_or_blocked``): the
interleavings engine, ``crash_harness.schedules`` and the lease linearizability runs.
"""

from __future__ import annotations

import os
import platform
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from leasecheck.crash_harness.engine import Child, Engine, HarnessTimeout, Message

__all__ = [
    "FileLock", "asleep", "file_locks", "in_way", "locks_on", "next_or_blocked", "resume",
    "stop", "stopped_asleep", "waits_for_lock", "wal",
]  # fmt: skip

POLL_S = (0.001, 0.002, 0.004, 0.008)
"""How long a silent child is waited for before its kernel state is read again: soon
at first, then less often (each read costs the scheduler CPU that a child merely busy
with its statement would use). Only how soon a waiter is seen depends on it, never
whether."""

_NANOSLEEP = {"x86_64": {"35", "230"}, "aarch64": {"101", "115"}}
"""Syscall numbers of nanosleep and clock_nanosleep (what usleep becomes)."""
_SLEEP_WCHAN = ("hrtimer_nanosleep", "do_nanosleep")


@dataclass(frozen=True)
class FileLock:
    pid: int
    write: bool


def asleep(pid: int) -> bool:
    """True when ``pid`` is sleeping in nanosleep right now (SQLite's busy-wait)."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
        if wchan in _SLEEP_WCHAN:
            return True
        number = Path(f"/proc/{pid}/syscall").read_text().split(" ", 1)[0]
    except OSError:
        return False
    return number in _NANOSLEEP.get(platform.machine(), set())


def stopped_asleep(pid: int) -> bool:
    """True when the stopped ``pid`` was stopped inside nanosleep (between two retries of
    the busy handler, so it holds the locks it holds while waiting), not while running."""
    try:
        number = Path(f"/proc/{pid}/syscall").read_text().split(" ", 1)[0]
    except OSError:
        return False
    return number in _NANOSLEEP.get(platform.machine(), set())


def file_locks(path: Path) -> list[FileLock]:
    """The POSIX locks held on ``path`` (a waiter's ``->`` line is not a lock held)."""
    try:
        inode = os.stat(path).st_ino
    except FileNotFoundError:
        return []
    fd = os.open("/proc/locks", os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    suffix = b":%d" % inode
    found = []
    for line in b"".join(chunks).splitlines():
        fields = line.split()
        if len(fields) < 8 or fields[1] != b"POSIX":  # a waiter's line reads '-> POSIX'
            continue
        if fields[5].endswith(suffix) and fields[5].count(b":") == 2:
            found.append(FileLock(int(fields[4]), fields[3] == b"WRITE"))
    return found


def wal(path: Path) -> bool:
    """The database is in WAL mode (its wal-index file exists)."""
    return Path(f"{path}-shm").exists()


def locks_on(path: Path) -> list[FileLock]:
    """The locks on the database file and, in WAL mode, on its ``-shm`` file (where a WAL
    writer's lock lives: byte-range locks of the wal-index)."""
    locks = file_locks(path)
    return locks + file_locks(Path(f"{path}-shm")) if wal(path) else locks


def in_way(pid: int, path: Path) -> bool:
    """Another process holds a lock on the database ``path`` (so a sleeping ``pid`` waits
    for it)."""
    return any(lock.pid != pid for lock in locks_on(path))


def waits_for_lock(pid: int, path: Path) -> bool:
    """``pid`` sleeps in SQLite's busy handler while another process holds a lock on
    ``path``: it is blocked on that lock (observed, not guessed from silence)."""
    return asleep(pid) and in_way(pid, path)


def next_or_blocked(
    children: Sequence[Child], path: Path, waiting_for: str, deadline_s: float
) -> tuple[Child, Message] | None:
    """The first message of any of ``children``, or None once every one of them is seen
    blocked on a lock of ``path`` (``waits_for_lock``). Children that are neither talking
    nor asleep in the busy handler for ``deadline_s`` raise HarnessTimeout."""
    deadline = time.monotonic() + deadline_s
    reads = 0
    while True:
        wait_s = POLL_S[min(reads, len(POLL_S) - 1)]
        try:
            return Engine(wait_s).wait_any(list(children), waiting_for)
        except HarnessTimeout:
            reads += 1  # silent for a while: ask the kernel
        if all(waits_for_lock(child.pid, path) for child in children):
            return None
        if time.monotonic() > deadline:
            names = ", ".join(repr(child.name) for child in children)
            raise HarnessTimeout(
                f"timed out after {deadline_s:g} s waiting for {waiting_for} from {names}: "
                f"neither talking nor asleep in SQLite's busy handler (does the target loop?)"
            )


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text.rsplit(")", 1)[1].split()[0]


def stop(pid: int, deadline_s: float) -> None:
    """SIGSTOP ``pid`` and wait (bounded) until the kernel shows it stopped."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + deadline_s
    while _state(pid) not in ("T", "t"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {pid} did not stop within {deadline_s:g} s of SIGSTOP")
        time.sleep(0.0001)


def resume(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)
