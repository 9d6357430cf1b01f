"""The power-loss model applied to real SQLite-backed queue libraries, through their public API.

For each library a traced child (``crash_harness._syscalls``) creates nothing new: the
queue directory is made by the harness first (durable), then the child puts
``ITEMS`` items one by one with the library's own ``put``, writing one
acknowledgement to a marker file as each ``put`` returns. Every cut point and crash
state is rebuilt exactly as for ``lease.power-loss`` (``crash_harness._disk``), the
database passes ``PRAGMA integrity_check``, and the library itself reads the queue
back (its own ``get``/``pop``): every acknowledged item must be there.

Each library is judged by its own promise, cited in ``Library.promise``: a loss the
library documents (e.g. localqueue's default ``RELAXED`` mode) is "not promised".
Reproduce one with ``python -m crash_harness.power_libraries NAME`` (extra ``power``).
"""

from __future__ import annotations

import importlib.util
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leasecheck.crash_harness._disk import CrashState, Cut, Disk, crash_states
from leasecheck.crash_harness._syscalls import record

__all__ = ["LIBRARIES", "Library", "LibraryReport", "check_library", "main"]

ITEMS = 4
INSTALL = "pip install -e '.[power]'"


@dataclass(frozen=True)
class Library:
    """How to put items into, and read them back from, one library's queue directory."""

    name: str
    module: str
    db: str
    """The SQLite file inside the queue directory."""
    promise: str
    promised: bool
    """True if the library's docs promise that an acknowledged put survives a power cut."""
    put: Callable[[Path, list[str], Callable[[], None]], None]
    read: Callable[[Path], list[str]]

    def installed(self) -> bool:
        return importlib.util.find_spec(self.module) is not None


def _litequeue_put(directory: Path, items: list[str], ack: Callable[[], None]) -> None:
    from litequeue import LiteQueue

    queue = LiteQueue(str(directory / "queue.db"))
    for item in items:
        queue.put(item)
        ack()
    queue.conn.close()


def _litequeue_read(directory: Path) -> list[str]:
    from litequeue import LiteQueue

    queue = LiteQueue(str(directory / "queue.db"))
    try:
        found = []
        while (message := queue.pop()) is not None:
            found.append(str(message.data))
        return found
    finally:
        queue.conn.close()


def _persist_put(directory: Path, items: list[str], ack: Callable[[], None]) -> None:
    from persistqueue import SQLiteAckQueue

    queue = SQLiteAckQueue(str(directory))
    for item in items:
        queue.put(item)
        ack()
    queue.close()


def _persist_read(directory: Path) -> list[str]:
    from persistqueue import Empty, SQLiteAckQueue

    queue = SQLiteAckQueue(str(directory))
    try:
        found = []
        while True:
            try:
                found.append(str(queue.get(block=False)))
            except Empty:
                return found
    finally:
        queue.close()


def _localqueue(durable: bool) -> tuple[Callable[..., None], Callable[[Path], list[str]]]:
    def open_queue(directory: Path) -> Any:
        from localqueue import DurabilityMode, SimpleQueue

        mode = DurabilityMode.DURABLE if durable else DurabilityMode.RELAXED
        return SimpleQueue(str(directory), durability=mode)

    def put(directory: Path, items: list[str], ack: Callable[[], None]) -> None:
        queue = open_queue(directory)
        for item in items:
            queue.put(item)
            ack()
        queue.close()

    def read(directory: Path) -> list[str]:
        from localqueue import Empty

        queue = open_queue(directory)
        try:
            found = []
            while True:
                try:
                    found.append(str(queue.get_nowait().data))
                except Empty:
                    return found
        finally:
            queue.close()

    return put, read


_LQ_RELAXED, _LQ_DURABLE = _localqueue(False), _localqueue(True)

LIBRARIES: dict[str, Library] = {
    "litequeue": Library(
        "litequeue", "litequeue", "queue.db",
        "README: 'Persistence' (no promise about power loss); it sets journal_mode=WAL, "
        "synchronous=NORMAL (litequeue.py, LiteQueue.__init__)",
        False, _litequeue_put, _litequeue_read,
    ),
    "persist-queue": Library(
        "persist-queue", "persistqueue", "data.db",
        "README: 'Each queued item is stored on disk to survive crashes'; SQLiteAckQueue sets "
        "journal_mode=WAL and leaves synchronous at SQLite's default (FULL)",
        True, _persist_put, _persist_read,
    ),
    "localqueue": Library(
        "localqueue", "localqueue", "localqueue.db",
        "README, Delivery guarantees: the default RELAXED selects synchronous=NORMAL; "
        "'Recent transactions may be lost after abrupt operating-system, host, kernel, or "
        "power failure'",
        False, _LQ_RELAXED[0], _LQ_RELAXED[1],
    ),
    "localqueue-durable": Library(
        "localqueue-durable", "localqueue", "localqueue.db",
        "README, Delivery guarantees: DURABLE selects synchronous=FULL 'and prioritizes "
        "stronger protection for recent commits' (no absolute guarantee)",
        False, _LQ_DURABLE[0], _LQ_DURABLE[1],
    ),
}  # fmt: skip


@dataclass
class LibraryReport:
    name: str
    cuts: int = 0
    states: int = 0
    losses: int = 0
    seconds: float = 0.0
    first: str = ""

    def verdict(self, library: Library) -> str:
        if not self.losses:
            return "holds"
        return "VIOLATED" if library.promised else "not promised"


def _child(name: str, directory: str, marker: str) -> None:
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    items = [f"item-{i}" for i in range(ITEMS)]

    def ack() -> None:
        os.write(fd, b"ack\n")

    LIBRARIES[name].put(Path(directory), items, ack)
    os.close(fd)


def check_library(library: Library, root: Path, limit: int = 64, seed: int = 0) -> LibraryReport:
    """Trace ``ITEMS`` puts, then check every crash state of every cut point."""
    report, began = LibraryReport(library.name), time.monotonic()
    queue = root / "queue"
    queue.mkdir(parents=True)
    library.read(queue)  # creates the empty queue: the durable starting point
    before = {p.name: p.read_bytes() for p in queue.iterdir() if not p.name.endswith("-shm")}
    argv = [sys.executable, "-m", "leasecheck.crash_harness.power_libraries", "--child",
        library.name,
            str(queue), str(root / "acks")]  # fmt: skip
    events = record(argv, root, root / "strace.log", 120.0)
    disk = Disk.holding(str(queue), str(root / "acks"), before)
    cuts = [disk.cut("before the first system call")]
    cuts += [disk.cut(what) for event in events if (what := disk.feed(event)) is not None]
    rng = random.Random(f"power-libraries:{library.name}:{seed}")
    for cut in cuts:
        report.cuts += 1
        for state in crash_states(disk, cut, limit, rng):
            report.states += 1
            problem = _judge(library, root / "crash", cut, state)
            if problem and not report.losses:
                report.first = f"power cut after system call {cut.number} ({cut.event}): {problem}"
            report.losses += problem is not None
    report.seconds = time.monotonic() - began
    return report


def _judge(library: Library, scratch: Path, cut: Cut, state: CrashState) -> str | None:
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    for name, content in state.files:
        (scratch / name).write_bytes(content)
    try:
        con = sqlite3.connect(scratch / library.db)
        try:
            (verdict,) = con.execute("PRAGMA integrity_check").fetchone()
        finally:
            con.close()
        found = library.read(scratch)
    except Exception as error:
        return f"reopening failed: {type(error).__name__}: {error}"
    if verdict != "ok":
        return f"PRAGMA integrity_check says {verdict!r}"
    acked = [f"item-{i}" for i in range(cut.acked)]
    missing = [item for item in acked if item not in found]
    if missing:
        lost = "; ".join(change.describe() for change in state.lost) or "nothing"
        return f"acknowledged put of {missing} is gone (not on disk: {lost})"
    return None


def main(argv: list[str] | None = None) -> int:
    """``python -m crash_harness.power_libraries [NAME ...]``: one line per library."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--child"]:
        _child(*args[1:4])
        return 0
    names = args or list(LIBRARIES)
    unknown = [name for name in names if name not in LIBRARIES]
    if unknown:
        print(f"no library named {unknown}; choose from {', '.join(LIBRARIES)}")
        return 2
    for name in names:
        library = LIBRARIES[name]
        if not library.installed():
            print(f"{name}: not installed; install the extra with `{INSTALL}`")
            return 2
        with tempfile.TemporaryDirectory(prefix="leasecheck-power-") as root:
            report = check_library(library, Path(root))
        print(
            f"{name}: {report.verdict(library)}: {report.losses} of {report.states} crash "
            f"states at {report.cuts} cut points lose an acknowledged put "
            f"({report.seconds:.1f} s)\n  promise: {library.promise}"
            + (f"\n  first: {report.first}" if report.first else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
