"""litequeue (``LiteQueue``) seen through the adapter protocol.

litequeue has no lease. ``pop()`` moves the oldest READY message to LOCKED and stamps
``lock_time``; a LOCKED message stays LOCKED until someone calls ``done``,
``mark_failed`` or ``retry``. Dead workers' messages come back only through the sweep
its API offers: ``list_locked(threshold_seconds)`` ("all the tasks that have been in the
LOCKED state for more than threshold_seconds") followed by ``retry(message_id)`` ("Mark
a locked message as free again"). Nothing is fenced: ``done``, ``retry`` and
``mark_failed`` update the row by ``message_id`` whatever its status.

What maps to what:

- ``enqueue(job, payload)`` -> ``put(envelope)`` (a JSON text holding leasecheck's key);
- ``claim(worker, lease)`` -> ``pop()``; the adapter then records ``lease`` for that
  ``message_id`` in its own table ``leasecheck_litequeue_lease`` in the same file, since
  litequeue stores no lease but the sweep needs one;
- ``ack`` -> ``done(message_id)``; ``nack`` -> ``retry(message_id)``; ``extend`` is
  ``Unsupported`` (litequeue has no such call);
- ``recover()`` -> for each recorded lease ``L``: ``list_locked(L)`` then ``retry`` of those
  messages whose lease is ``L``. A LOCKED message with no recorded lease (its claimer died
  between ``pop`` and the bookkeeping, so no caller ever held it) is swept with the longest
  recorded lease; with none recorded, it is left alone;
- ``observe()`` reads ``SELECT data, status, lock_time FROM <table>`` through litequeue's
  own connection (internals: ``LiteQueue.conn`` and ``LiteQueue.table``), because the
  public API lists LOCKED and FAILED messages but has no call that lists every message.

Time: litequeue reads time only through its module-level ``litequeue.time_ns`` ("Expose
function used by uuid7() to get current time in nanoseconds"): ``connect`` patches it to
read the given clock, so ``lock_time`` and the sweep's threshold follow that clock, and
``close`` puts it back (``adapters._libs.TimePatch``).

Settings litequeue applies on open (``litequeue.py:LiteQueue.__init__``): ``journal_mode =
WAL``, ``synchronous = NORMAL``, autocommit connections; ``pop`` runs in ``BEGIN
IMMEDIATE`` (an ``UPDATE ... RETURNING`` on SQLite >= 3.35).

Sources cited in ``Litequeue.promises``: the README of litequeue 0.9 (the PyPI long
description, https://pypi.org/project/litequeue/0.9/) and the docstrings and comments of
``litequeue.py`` 0.9.
"""

from __future__ import annotations

from pathlib import Path
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

__all__ = ["Litequeue", "LitequeueAdapter"]

_README = "https://pypi.org/project/litequeue/0.9/ (README)"
_LEASE_TABLE = "leasecheck_litequeue_lease"
_STATES: dict[int, JobState] = {0: "ready", 1: "leased", 2: "done", 3: "failed"}
"""``litequeue.MessageStatus``: READY, LOCKED, DONE, FAILED."""
_NS = 1_000_000_000

_TIME = TimePatch("litequeue", "time_ns", lambda current: lambda: round(current().now() * _NS))


class LitequeueAdapter:
    """One ``LiteQueue`` on one SQLite file, with its time read from ``clock``."""

    def __init__(self, location: str, clock: QueueClock) -> None:
        import litequeue

        self.clock = clock
        _TIME.attach(clock)
        try:
            self.queue: Any = litequeue.LiteQueue(location)
            self.queue.conn.execute(
                f"CREATE TABLE IF NOT EXISTS {_LEASE_TABLE} "
                "(message_id TEXT PRIMARY KEY, lease REAL NOT NULL)"
            )
        except BaseException:
            _TIME.detach(clock)
            raise

    def enqueue(self, job: str, payload: str) -> None:
        self.queue.put(envelope(job, payload))

    def claim(self, worker: str, lease: float) -> Claim | None:
        message = self.queue.pop()
        if message is None:
            return None
        self.queue.conn.execute(
            f"INSERT OR REPLACE INTO {_LEASE_TABLE} (message_id, lease) VALUES (?, ?)",
            (message.message_id, lease),
        )
        until = message.lock_time / _NS + lease
        return Claim(job_of(message.data), worker, message.message_id, None, until)

    def ack(self, claim: Claim) -> bool:
        """``done`` never refuses (it updates the row whatever its status)."""
        self.queue.done(claim.handle)
        return True

    def nack(self, claim: Claim) -> bool:
        """``retry`` never refuses either: a DONE message becomes READY again."""
        self.queue.retry(claim.handle)
        return True

    def extend(self, claim: Claim, lease: float) -> bool:
        raise Unsupported("litequeue has no call that renews a LOCKED message's lease")

    def recover(self) -> int:
        leases = self._leases()
        longest = max(leases.values(), default=None)
        returned = 0
        for lease in sorted(set(leases.values())):
            expired = [m.message_id for m in self.queue.list_locked(lease)]
            for message_id in expired:
                if leases.get(message_id, longest) == lease:
                    self.queue.retry(message_id)
                    returned += 1
        return returned

    def observe(self) -> list[StoredJob]:
        leases = self._leases()
        rows = self.queue.conn.execute(
            f"SELECT data, status, lock_time, message_id FROM {self.queue.table} ORDER BY rowid"
        ).fetchall()
        return [self._view(leases, *row) for row in rows]

    def close(self) -> None:
        try:
            self.queue.close()
        finally:
            _TIME.detach(self.clock)

    def _leases(self) -> dict[str, float]:
        rows = self.queue.conn.execute(f"SELECT message_id, lease FROM {_LEASE_TABLE}")
        return {message_id: lease for message_id, lease in rows}

    @staticmethod
    def _view(
        leases: dict[str, float], data: str, status: int, lock_time: int | None, message_id: str
    ) -> StoredJob:
        state = _STATES[status]
        until = None
        if state == "leased" and lock_time is not None and message_id in leases:
            until = lock_time / _NS + leases[message_id]
        return StoredJob(job_of(data), state, None, until)


class Litequeue:
    """The litequeue library (``pip install litequeue``), version 0.9 checked."""

    name: ClassVar[str] = "litequeue"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="patched", extend=False, nack=True, multiprocess=True, lease_granularity=1e-9
    )
    promises: ClassVar[Promises] = Promises(
        properties={
            "queue.ack-final": Promise(
                True,
                f"{_README}, 'Why?': 'You can use this to implement a persistent queue' and "
                "'after you pop a message, you need to mark it as done when you finish "
                "processing it'; litequeue.py:LiteQueue.done: 'Mark message as done.'",
                "a done message is finished and the queue is persistent; litequeue says "
                "nothing about crashes beyond 'Persistence' (README, 'Differences')",
            ),
            "queue.no-loss": Promise(
                True,
                f"{_README}, 'Differences with a normal Python queue.Queue': 'Persistence'; "
                "litequeue.py:LiteQueue.list_locked and LiteQueue.retry ('Mark a locked "
                "message as free again') are the documented way back for stuck messages",
            ),
            "queue.exclusive": Promise(
                True,
                "litequeue.py:LiteQueue._pop_transaction, source comment: 'lock the message "
                "to avoid another process from getting it too' (pop runs in BEGIN IMMEDIATE)",
                "a source comment, not the README: the only place litequeue speaks of "
                "several processes popping",
            ),
            "queue.stale-ack": Promise(
                False,
                "not mentioned; litequeue.py:LiteQueue.done: 'If executed multiple times, "
                "done_time will be the last time this function is called' (no check of "
                "who holds the message)",
            ),
            "queue.linearizable": Promise(
                False, "not mentioned in litequeue's README or docstrings"
            ),
        },
        delivery="at-least-once",
        fencing="none: done/retry/mark_failed update by message_id whatever the status",
        recovery="explicit sweep: list_locked(threshold) then retry(message_id); no lease "
        "expires by itself",
        ordering="pop takes the READY message with the smallest message_id (a UUIDv7: "
        "time-ordered, ties within one process by a counter)",
        durability="journal_mode=WAL, synchronous=NORMAL (litequeue.py:LiteQueue.__init__)",
    )

    def version(self) -> str:
        return installed_version("litequeue", "litequeue")

    def create(self, directory: Path, server: str | None) -> str:
        """An empty queue file ``directory/litequeue.sqlite3`` (litequeue needs no server)."""
        self.version()
        import litequeue

        path = directory / "litequeue.sqlite3"
        litequeue.LiteQueue(str(path)).close()
        return str(path)

    def connect(self, location: str, clock: QueueClock) -> LitequeueAdapter:
        self.version()
        return LitequeueAdapter(location, clock)
