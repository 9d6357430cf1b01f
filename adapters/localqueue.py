"""localqueue (``SimpleQueue``) seen through the adapter protocol.

localqueue has real leases with fencing. ``get()`` takes the ready job with the smallest
id, stamps ``lease_until`` and a fresh ``receipt``, and counts an attempt; ``ack``,
``nack``, ``fail`` and ``extend_lease`` need the current receipt before the lease expires
and raise ``LeaseExpired`` otherwise. Expired leases come back through
``reclaim_expired_leases()``, which ``get()`` also runs by itself; after ``max_retries``
retries (3 by default) a job moves to the dead-letter state ``failed``. All of this lives in
a Rust extension (``localqueue.localqueue``); each call is one SQLite transaction.

What maps to what:

- ``enqueue(job, payload)`` -> ``put(envelope)`` (JSON, the default serializer; no
  ``job_id``, so no deduplication);
- ``claim(worker, lease)`` -> ``get(block=True, timeout=0)``: it waits for the write lock
  (localqueue's 5 s busy timeout) but not for new jobs. ``get(block=False)`` would answer
  ``Empty`` whenever another process holds the lock (``core.py:SimpleQueue._get``), which a
  race would read as "no job". The lease comes from ``queue.delivery.lease_seconds`` at each
  ``get`` (``core.py:SimpleQueue._get``), so ``claim`` first sets ``queue.delivery`` to a
  ``DeliveryPolicy`` with the asked lease and the same ``max_retries``;
- ``ack``/``nack``/``extend`` -> ``ack(job)``/``nack(job)``/``extend_lease(job, lease)``,
  ``False`` when localqueue raises ``LeaseExpired`` (its refusal of a stale receipt); any
  other error propagates. The claim's handle is ``(id, receipt)``, plain data;
- ``recover()`` -> ``reclaim_expired_leases()`` and its count;
- ``observe()`` reads ``messages`` (``payload, status, attempts, lease_until``) through a
  read-only connection to ``localqueue.db`` (internals: the public API has counts,
  ``stats()``, and the failed list, but no call that lists every job). A job whose lease
  has run out stays ``leased`` (with its ``lease_until``) until localqueue reclaims it.

Time: localqueue reads the system clock inside its Rust engine (``SystemTime::now``), which
no Python patch reaches, so this adapter runs on real time with short leases: ``connect``
requires a real clock (``SharedClock(path, real=True)``, whose ``advance`` sleeps), and
``Claim.lease_until`` is localqueue's own ``lease_expires_at`` (Unix seconds). The
generic properties then keep every call clear of the instants a lease may end
(``adapters.timing``).

Settings (README, 'Delivery guarantees'): ``DurabilityMode.RELAXED`` by default, i.e.
``journal_mode=WAL`` and ``synchronous=NORMAL``; claims use ``BEGIN IMMEDIATE``.

Sources cited in ``Localqueue.promises``: the README of localqueue 1.4.1 (the PyPI long
description, https://pypi.org/project/localqueue/1.4.1/) and the guarantees page it links,
https://github.com/brunoportis/localqueue/blob/main/docs/guarantees.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from leasecheck.adapters._libs import installed_version, job_of, read_rows
from leasecheck.adapters.protocol import (
    AdapterError,
    Capabilities,
    Claim,
    JobState,
    Promise,
    Promises,
    QueueClock,
    StoredJob,
)

if TYPE_CHECKING:
    from localqueue import Job

__all__ = ["Localqueue", "LocalqueueAdapter"]

_README = "https://pypi.org/project/localqueue/1.4.1/ (README)"
_GUARANTEES = "https://github.com/brunoportis/localqueue/blob/main/docs/guarantees.md"
_QUEUE = "default"
_STATES: dict[int, JobState] = {0: "ready", 1: "leased", 2: "done", 3: "failed"}
"""localqueue's ``messages.status``: ready, processing, acked, failed (``core.py:purge``
names 2 acked and 3 failed)."""


class LocalqueueAdapter:
    """One ``SimpleQueue`` on one directory; real time only."""

    def __init__(self, location: str, clock: QueueClock) -> None:
        if getattr(clock, "real", False) is not True:
            raise AdapterError(
                f"localqueue reads the system clock in its Rust engine, so it cannot follow "
                f"{clock!r}; connect it with SharedClock(path, real=True) and short leases"
            )
        from localqueue import SimpleQueue

        self.location = Path(location)
        self.queue: SimpleQueue[dict[str, str]] = SimpleQueue(location, _QUEUE)

    def enqueue(self, job: str, payload: str) -> None:
        self.queue.put({"job": job, "payload": payload})

    def claim(self, worker: str, lease: float) -> Claim | None:
        from localqueue import Empty

        policy = dataclasses.replace(self.queue.delivery, lease_seconds=lease)
        self.queue.delivery = policy
        try:
            job = self.queue.get(block=True, timeout=0)
        except Empty:
            return None
        handle = (job.id, job.receipt)
        return Claim(job_of(job.data), worker, handle, job.receipt, job.lease_expires_at)

    def ack(self, claim: Claim) -> bool:
        return self._fenced(lambda job: self.queue.ack(job), claim)

    def nack(self, claim: Claim) -> bool:
        return self._fenced(lambda job: self.queue.nack(job), claim)

    def extend(self, claim: Claim, lease: float) -> bool:
        return self._fenced(lambda job: self.queue.extend_lease(job, lease), claim)

    def recover(self) -> int:
        return self.queue.reclaim_expired_leases()

    def observe(self) -> list[StoredJob]:
        rows = read_rows(
            self.location / "localqueue.db",
            "SELECT payload, status, attempts, lease_until FROM messages "
            "WHERE queue = ? ORDER BY id",
            (_QUEUE,),
        )
        return [self._view(*row) for row in rows]

    def close(self) -> None:
        self.queue.close()

    def _fenced(self, call: Callable[[Job[dict[str, str]]], object], claim: Claim) -> bool:
        """Run ``call(job)`` for the claim's delivery; ``False`` where localqueue refuses it."""
        from localqueue import Job, LeaseExpired

        job_id, receipt = _handle(claim)
        job = Job[dict[str, str]](
            id=job_id, data={}, attempts=0, receipt=receipt, lease_expires_at=0.0, queue=self.queue
        )
        try:
            call(job)
        except LeaseExpired:
            return False
        return True

    @staticmethod
    def _view(payload: bytes, status: int, attempts: int, lease_until: int | None) -> StoredJob:
        state = _STATES[status]
        until = lease_until / 1000 if state == "leased" and lease_until is not None else None
        return StoredJob(job_of(payload), state, attempts, until)


def _handle(claim: Claim) -> tuple[int, str]:
    """The ``(id, receipt)`` a claim of this adapter carries."""
    if not (isinstance(claim.handle, tuple) and len(claim.handle) == 2):
        raise AdapterError(
            f"claim {claim!r} was not made by the localqueue adapter: its handle should be "
            f"(id, receipt), got {claim.handle!r}"
        )
    job_id, receipt = claim.handle
    return int(job_id), str(receipt)


class Localqueue:
    """The localqueue library (``pip install localqueue``), version 1.4.1 checked."""

    name: ClassVar[str] = "localqueue"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="real", extend=True, nack=True, multiprocess=True, lease_granularity=0.001
    )
    promises: ClassVar[Promises] = Promises(
        properties={
            "queue.ack-final": Promise(
                True,
                f"{_README}, 'Delivery guarantees': the diagram ends at 'acked', and 'Stale "
                "worker: ack(), nack(), fail(), and lease extension require the current "
                f"receipt'; 'Durable: jobs survive process restarts'; {_GUARANTEES}, 'What "
                "put() guarantees': RELAXED 'protects the state against normal process "
                "crashes'",
            ),
            "queue.no-loss": Promise(
                True,
                f"{_README}, 'Delivery guarantees': 'Worker crash: An unacknowledged job "
                "becomes available after its lease expires'; 'Retries: ... exhaustion moves "
                "the job to failed'",
            ),
            "queue.exclusive": Promise(
                True,
                f"{_README}, 'Architecture': 'Claims and multi-step transitions use immediate "
                "transactions so concurrent processes cannot reserve the same delivery'; "
                "'Safe under concurrency: multiple Python threads and processes can share a "
                "queue'",
            ),
            "queue.stale-ack": Promise(
                True,
                f"{_README}: 'Fenced: every delivery has a unique receipt, so stale workers "
                f"cannot acknowledge a newer delivery'; {_GUARANTEES}, 'Fencing token "
                "(receipt)': 'accepted only with the current receipt and before the lease "
                "expires'",
            ),
            "queue.linearizable": Promise(
                True,
                "localqueue/core.py:SimpleQueue docstring: 'A native Rust extension implements "
                "the transactional engine and preserves atomicity across multiple processes "
                f"and threads'; {_README}, 'Ordering': 'Ready jobs are claimed by insertion ID'",
                "atomic operations on one shared queue is what linearizability asks; "
                f"'completion order is best effort under concurrency' ({_README})",
            ),
        },
        delivery="at-least-once",
        fencing="a unique receipt per delivery; ack/nack/fail/extend_lease need the current "
        "receipt before lease_until, else LeaseExpired",
        recovery="lease expiry: reclaim_expired_leases(), also run by every get(); after "
        "max_retries (3) retries the job is failed (dead letter)",
        ordering="ready jobs claimed by insertion id; completion order best effort",
        durability="journal_mode=WAL, synchronous=NORMAL (DurabilityMode.RELAXED, the default)",
    )

    def version(self) -> str:
        return installed_version("localqueue", "localqueue")

    def create(self, directory: Path, server: str | None) -> str:
        """An empty queue in the directory ``directory/localqueue`` (its ``localqueue.db``)."""
        self.version()
        from localqueue import SimpleQueue

        path = directory / "localqueue"
        SimpleQueue[dict[str, str]](str(path), _QUEUE).close()
        return str(path)

    def connect(self, location: str, clock: QueueClock) -> LocalqueueAdapter:
        self.version()
        return LocalqueueAdapter(location, clock)
