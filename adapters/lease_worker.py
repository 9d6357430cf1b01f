"""The adapter for leasecheck's own bundled lease worker (``queue_impl/worker.py``).

So the generic properties run on a queue whose promises we wrote ourselves: every
one is promised, each by a sentence of ``docs/lease-worker.md`` (cited below).

Mapping: ``enqueue`` is ``worker.enqueue`` with ``qty=1``, the largest ttl (60 s) and
attempt budget (16) the contract allows; ``claim`` is ``worker.claim`` and its ticket
is the handle; ``ack`` / ``nack`` are ``finish`` with ``'ok'`` / ``'retry'``. Time is
the contract's ``now_ms`` argument, read from the shared clock (``now-parameter``).
There is no extend operation, and no sweep: an expired lease is claimable again by
the next ``claim`` (``recover`` returns -1). ``observe`` reads the ``jobs`` table.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

from leasecheck.adapters.protocol import (
    Capabilities,
    Claim,
    JobState,
    Promise,
    Promises,
    QueueAdapter,
    QueueClock,
    StoredJob,
    Unsupported,
)
from leasecheck.queue_impl import worker

__all__ = ["LeaseWorker", "LeaseWorkerAdapter", "claim_of", "now_ms"]

SPEC = "docs/lease-worker.md"
TTL_MS = 60000
MAX_ATTEMPTS = 16
STATES: dict[str, JobState] = {
    "pending": "ready",
    "leased": "leased",
    "done": "done",
    "dead": "failed",
}


def now_ms(clock: QueueClock) -> int:
    """The shared clock in the contract's integer milliseconds."""
    return round(clock.now() * 1000)


def lease_ms(lease: float) -> int:
    """A lease in seconds as the contract's ``lease_ms`` (1 .. 60000)."""
    return min(60000, max(1, round(lease * 1000)))


class LeaseWorkerAdapter:
    """One connection (``worker.open_queue``) to one queue file."""

    def __init__(self, path: str, clock: QueueClock) -> None:
        self.con = worker.open_queue(path)
        self.clock = clock

    def enqueue(self, job: str, payload: str) -> None:
        worker.enqueue(self.con, {"id": job, "qty": 1}, now_ms(self.clock), TTL_MS, MAX_ATTEMPTS)

    def claim(self, worker_name: str, lease: float) -> Claim | None:
        ticket = worker.claim(self.con, worker_name, now_ms(self.clock), lease_ms(lease))
        return None if ticket is None else claim_of(ticket)

    def ack(self, claim: Claim) -> bool:
        return worker.finish(self.con, _ticket(claim), "ok", now_ms(self.clock)) == "done"

    def nack(self, claim: Claim) -> bool:
        return worker.finish(self.con, _ticket(claim), "retry", now_ms(self.clock)) is not False

    def extend(self, claim: Claim, lease: float) -> bool:
        raise Unsupported("the lease worker contract has no way to extend a lease")

    def recover(self) -> int:
        return -1  # claim itself takes expired leases (lease-worker.md, claim step 2)

    def observe(self) -> list[StoredJob]:
        rows = self.con.execute(
            "SELECT id, status, attempts, lease_until FROM jobs ORDER BY seq"
        ).fetchall()
        return [_view(*row) for row in rows]

    def close(self) -> None:
        self.con.close()


def claim_of(ticket: dict[str, Any]) -> Claim:
    """A worker ticket as a ``Claim`` (the ticket is the handle ``finish`` needs)."""
    return Claim(
        ticket["id"], ticket["owner"], dict(ticket), ticket["token"], ticket["lease_until"] / 1000
    )


def _ticket(claim: Claim) -> dict[str, Any]:
    handle = claim.handle
    assert isinstance(handle, dict), f"a lease-worker claim's handle is its ticket, got {handle!r}"
    return dict(handle)


def _view(job: str, status: str, attempts: int, until: int | None) -> StoredJob:
    return StoredJob(job, STATES[status], attempts, None if until is None else until / 1000)


def _cite(section: str, note: str = "") -> Promise:
    return Promise(True, f"{SPEC}, {section}", note)


class LeaseWorker:
    """leasecheck's bundled lease worker as a ``QueueLibrary``."""

    name: ClassVar[str] = "lease-worker"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="now-parameter", extend=False, nack=True, multiprocess=True
    )
    promises: ClassVar[Promises] = Promises(
        properties={
            "queue.ack-final": _cite(
                "finish: ok -> done; claim picks only pending or expired leased rows",
                "and Transactions: one BEGIN IMMEDIATE, rolled back on any error",
            ),
            "queue.no-loss": _cite("claim step 2: an expired lease is claimable again"),
            "queue.exclusive": _cite("Transactions: read-then-write is one BEGIN IMMEDIATE"),
            "queue.stale-ack": _cite(
                "finish: returns False with no change if ... token ... differs"
            ),
            "queue.linearizable": _cite("Transactions: read-then-write is one BEGIN IMMEDIATE"),
        },
        delivery="at-least-once",
        fencing="a token per claim; finish compares the whole ticket (owner, token, attempt)",
        recovery="lazy: claim takes any lease whose lease_until <= now",
        ordering="lowest seq first (enqueue order)",
        durability="journal_mode=DELETE, synchronous=FULL",
    )

    def version(self) -> str:
        return metadata.version("leasecheck")  # the worker ships inside leasecheck

    def create(self, directory: Path, server: str | None) -> str:
        path = directory / "queue.db"
        worker.open_queue(path).close()
        return str(path)

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return LeaseWorkerAdapter(location, clock)
