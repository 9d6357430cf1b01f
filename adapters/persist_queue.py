"""persist-queue's ``SQLiteAckQueue`` seen through the adapter protocol.

``SQLiteAckQueue`` has no lease and no clock. ``get()`` takes the READY row with the
smallest ``_id`` and sets its status to ``unack``; the row stays ``unack`` until ``ack``
(``acked``), ``nack`` (``ready``) or ``ack_failed`` (``ack_failed``). Dead workers' jobs
come back only through ``resume_unack_tasks()``, which sets *every* ``unack`` row to
``ready``, live or dead, and which the constructor runs by default (``auto_resume=True``).
Nothing is fenced: ``ack``/``nack``/``ack_failed`` update the row by id whatever its
status (``persistqueue/sqlackqueue.py:SQLiteAckQueue._mark_ack_status``).

What maps to what:

- ``enqueue(job, payload)`` -> ``put(envelope)`` (pickled, the default serializer);
- ``claim(worker, lease)`` -> ``get(block=False, raw=True)``; ``lease`` is ignored, since
  nothing in persist-queue expires (``Claim.lease_until`` is ``None``);
- ``ack`` -> ``ack(id=...)``, ``nack`` -> ``nack(id=...)``; each is refused (``False``) only
  where the library returns ``None``; ``extend`` is ``Unsupported``;
- ``recover()`` -> ``resume_unack_tasks()``; it returns the ``unack_count()`` read just
  before (the library returns nothing);
- ``observe()`` -> ``queue()``, the public list of every row with its status.

``connect`` opens ``SQLiteAckQueue(location, auto_resume=False)``: with the default, every
open would run ``resume_unack_tasks()`` and take back the jobs other live processes hold,
so recovery would depend on when a process happens to open the queue. Recovery is then
exactly ``recover()``; a property that models a restart calls it after reopening. The
library as its users open it by default is checked too, as ``persist-queue-defaults``
(``PersistQueueDefaults``: ``SQLiteAckQueue(location)``, so every open resumes every
``unack`` row); ``queue.interleavings`` opens and reopens stores while claims are live.

Time: the library reads ``time.time()`` through ``persistqueue.sqlackqueue._time`` only for
the ``timestamp`` column of ``put`` and for ``get``'s blocking timeout (never used here).
``connect`` patches that module attribute with an object whose ``time()`` reads the given
clock (``adapters._libs.TimePatch``), so timestamps follow it; no behaviour depends on it.

Settings (``persistqueue/sqlbase.py:SQLiteBase._new_db_connection``): ``journal_mode=WAL``,
SQLite's default ``synchronous`` (FULL), a 10 s busy timeout; ``get`` runs its SELECT and its
UPDATE as two statements with no transaction around them
(``sqlackqueue.py:SQLiteAckQueue._pop``), guarded only by a ``threading.Lock``.

Sources cited in ``PersistQueue.promises``: the README of persist-queue 1.1.0 (the PyPI long
description, https://pypi.org/project/persist-queue/1.1.0/) and ``persistqueue/*.py`` 1.1.0.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

from leasecheck.adapters._libs import TimePatch, envelope, installed_version, job_of
from leasecheck.adapters.protocol import (
    Capabilities,
    Claim,
    JobState,
    Promise,
    Promises,
    QueueClock,
    StoredJob,
    Unsupported,
)

__all__ = ["PersistQueue", "PersistQueueAdapter", "PersistQueueDefaults"]

_README = "https://pypi.org/project/persist-queue/1.1.0/ (README)"
_STATES: dict[int, JobState] = {0: "ready", 1: "ready", 2: "leased", 5: "done", 9: "failed"}
"""``persistqueue.sqlackqueue.AckStatus``: inited, ready, unack, acked, ack_failed."""

_TIME = TimePatch(
    "persistqueue.sqlackqueue",
    "_time",
    lambda current: SimpleNamespace(time=lambda: current().now()),
)


class PersistQueueAdapter:
    """One ``SQLiteAckQueue`` on one directory, its timestamps read from ``clock``."""

    def __init__(self, location: str, clock: QueueClock, auto_resume: bool = False) -> None:
        import persistqueue.sqlackqueue

        self.clock = clock
        self.queue: Any = persistqueue.sqlackqueue.SQLiteAckQueue(location, auto_resume=auto_resume)
        _TIME.attach(clock)

    def enqueue(self, job: str, payload: str) -> None:
        self.queue.put(envelope(job, payload))

    def claim(self, worker: str, lease: float) -> Claim | None:
        from persistqueue.exceptions import Empty

        try:
            item = self.queue.get(block=False, raw=True)
        except Empty:
            return None
        return Claim(job_of(item["data"]), worker, item["pqid"], None, None)

    def ack(self, claim: Claim) -> bool:
        return self.queue.ack(id=claim.handle) is not None

    def nack(self, claim: Claim) -> bool:
        return self.queue.nack(id=claim.handle) is not None

    def extend(self, claim: Claim, lease: float) -> bool:
        raise Unsupported("persist-queue has no lease, so nothing to extend")

    def recover(self) -> int:
        held = int(self.queue.unack_count())
        self.queue.resume_unack_tasks()
        return held

    def observe(self) -> list[StoredJob]:
        rows = sorted(self.queue.queue(), key=lambda row: row["id"])
        return [StoredJob(job_of(row["data"]), _STATES[int(row["status"])]) for row in rows]

    def close(self) -> None:
        try:
            self.queue.close()
        finally:
            _TIME.detach(self.clock)


class PersistQueue:
    """persist-queue's ``SQLiteAckQueue`` (``pip install persist-queue``), 1.1.0 checked."""

    name: ClassVar[str] = "persist-queue"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="patched", extend=False, nack=True, multiprocess=True
    )
    promises: ClassVar[Promises] = Promises(
        properties={
            "queue.ack-final": Promise(
                True,
                f"{_README}, 'Acknowledgment Queue': 'ackq.ack(item)  # Mark as completed'; "
                "'Overview': 'thread-safe, disk-based queue implementations that survive "
                "process crashes and restarts'",
            ),
            "queue.no-loss": Promise(
                True,
                f"{_README}, 'Key Features': 'Disk-based: Each queued item is stored on disk "
                "to survive crashes' and 'Recoverable: Items can be read after process "
                "restart'",
                "recovery is resume_unack_tasks() (run by the constructor by default)",
            ),
            "queue.exclusive": Promise(
                False,
                f"not mentioned for processes: {_README}, 'Key Features' promises "
                "'Thread-safe: Supports multi-threaded producers and consumers', never "
                "several processes",
            ),
            "queue.stale-ack": Promise(
                False, "not mentioned; SQLiteAckQueue has no lease and no delivery token"
            ),
            "queue.linearizable": Promise(
                False, "not mentioned in persist-queue's README or docstrings"
            ),
        },
        delivery="at-least-once",
        fencing="none: ack/nack/ack_failed update by row id whatever the status",
        recovery="explicit: resume_unack_tasks() sets every unack row ready (live ones too); "
        "the constructor runs it unless auto_resume=False; no lease expires",
        ordering="FIFO by row id (SQLiteAckQueue docstring: 'SQLite3 based FIFO queue with "
        "ack support')",
        durability="journal_mode=WAL, synchronous=FULL (SQLite's default; "
        "persistqueue/sqlbase.py:SQLiteBase._new_db_connection)",
    )

    def version(self) -> str:
        return installed_version("persist-queue", "persistqueue")

    def create(self, directory: Path, server: str | None) -> str:
        """An empty queue in the directory ``directory/persist-queue`` (its ``data.db``)."""
        self.version()
        import persistqueue.sqlackqueue

        path = directory / "persist-queue"
        persistqueue.sqlackqueue.SQLiteAckQueue(str(path), auto_resume=False).close()
        return str(path)

    def connect(self, location: str, clock: QueueClock) -> PersistQueueAdapter:
        self.version()
        return PersistQueueAdapter(location, clock)


class PersistQueueDefaults(PersistQueue):
    """persist-queue opened with its defaults (``auto_resume=True``): every open runs
    ``resume_unack_tasks()``, taking back the jobs other live processes hold."""

    name: ClassVar[str] = "persist-queue-defaults"

    def connect(self, location: str, clock: QueueClock) -> PersistQueueAdapter:
        self.version()
        return PersistQueueAdapter(location, clock, auto_resume=True)

    def reader(self, location: str, clock: QueueClock) -> PersistQueueAdapter:
        """A connection for the harness's own reads, which must not resume anything."""
        return PersistQueueAdapter(location, clock, auto_resume=False)
