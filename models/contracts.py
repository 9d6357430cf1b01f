"""The contracts, written once: what a target and its reference model both offer.

A target file and the pure model are driven through the same Protocol, so mypy
sees a disagreement between them before a test does. ``LeaseQueue`` is one open
lease-worker queue (a target module plus its connection, or the model);
``JobQueueLike`` is the JobQueue class of ``job-queue.md``.

Stored state is compared as a ``Snapshot``: every column of both tables, rows in
``seq`` order, without the ``seq`` values themselves (the spec fixes their order,
not their numbers).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from leasecheck.queue_impl.jobs import JobView, Lease

__all__ = [
    "ClockFunction",
    "Fault",
    "InjectedFault",
    "InjectedInterrupt",
    "JobQueueLike",
    "JobRow",
    "LeaseQueue",
    "RedriveRow",
    "Send",
    "Snapshot",
    "Ticket",
    "same",
    "shown",
]

Ticket = dict[str, Any]
"""What ``claim`` returns and ``finish`` takes: id, qty, owner, token, attempt, lease_until."""

Fault = Callable[[str], object] | None
ClockFunction = Callable[[], object]
Send = Callable[[dict[str, Any]], object]

JOB_COLUMNS = (
    "id", "qty", "status", "attempts", "max_attempts", "token",
    "available_at", "deadline", "owner", "lease_until", "reason",
)  # fmt: skip
REDRIVE_COLUMNS = ("id", "token", "at_ms", "note")
FAULT_POINTS = ("after-claim", "after-finish", "after-audit", "after-redrive", "after-commit")


def same(left: object, right: object) -> bool:
    """Equal values of exactly the same types, recursively through dicts and sequences.

    The contracts fix exact types ("returns ``True``", "exactly a dict"), so ``True`` is
    not ``1`` and a dict subclass is not a dict, at every depth. Every comparison of a
    target with a model uses this one function.
    """
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        assert isinstance(right, dict)
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list | tuple):
        assert isinstance(right, list | tuple)
        return len(left) == len(right) and all(map(same, left, right))
    return bool(left == right)


def shown(value: object) -> str:
    """``repr(value)``, but an int of more than 30 digits that is a power of 10 or of 2 as
    that power (``10**400``, ``-(2**1024)``): still a Python expression for the same int."""
    if type(value) is not int or abs(value) < 10**30:
        return repr(value)
    size = abs(value)
    for base in (10, 2):
        exponent = round(math.log(size, base))
        if base**exponent == size:
            power = f"{base}**{exponent}"
            return f"-({power})" if value < 0 else power
    return repr(value)


class InjectedFault(Exception):
    """What every harness's fault hook raises at its chosen point (one class for all)."""


class InjectedInterrupt(BaseException):
    """A fault that is not an ``Exception``, as ``KeyboardInterrupt`` and ``SystemExit`` are
    not: lease-worker.md rolls back "on any error before COMMIT" and leaves no transaction
    open "whatever happens", so a target that rolls back only on ``Exception`` breaks it.
    Raised by the fault hooks of the edge sweep's interrupt programs (``lease.edges``)."""


@dataclass(frozen=True)
class JobRow:
    """One row of ``jobs``, every column but ``seq``."""

    id: str
    qty: int
    status: str
    attempts: int
    max_attempts: int
    token: int
    available_at: int
    deadline: int
    owner: str | None = None
    lease_until: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class RedriveRow:
    """One row of ``redrives``, every column but ``seq``."""

    id: str
    token: int
    at_ms: int
    note: str


@dataclass(frozen=True)
class Snapshot:
    """The whole stored state of a lease queue: both tables in ``seq`` order."""

    jobs: tuple[JobRow, ...] = ()
    redrives: tuple[RedriveRow, ...] = ()

    def job(self, job_id: str) -> JobRow | None:
        for row in self.jobs:  # a loop, not next(generator): the explorer asks this often
            if row.id == job_id:
                return row
        return None

    def describe(self) -> str:
        """A few readable lines, for failure messages."""
        lines = [
            f"  job {r.id!r}: {r.status} qty={r.qty} attempts={r.attempts}/{r.max_attempts}"
            f" token={r.token} available_at={r.available_at} deadline={r.deadline}"
            f" owner={r.owner!r} lease_until={r.lease_until} reason={r.reason!r}"
            for r in self.jobs
        ]
        lines += [
            f"  redrive {r.id!r} token={r.token} at={r.at_ms} note={r.note!r}"
            for r in self.redrives
        ]
        return "\n".join(lines) or "  (empty)"


class LeaseQueue(Protocol):
    """One open lease-worker queue. Arguments are ``object``: the suite sends bad ones too."""

    def enqueue(
        self, event: object, now_ms: object, ttl_ms: object, max_attempts: object = 3
    ) -> object: ...

    def claim(
        self, owner: object, now_ms: object, lease_ms: object = 1000, fault: Fault = None
    ) -> object: ...

    def finish(
        self,
        ticket: object,
        outcome: object,
        now_ms: object,
        delay_ms: object = 0,
        fault: Fault = None,
    ) -> object: ...

    def redrive(
        self, job_id: object, now_ms: object, ttl_ms: object, note: object, fault: Fault = None
    ) -> object: ...

    def run_once(
        self,
        owner: object,
        clock: ClockFunction,
        send: Send,
        jitter: object,
        lease_ms: object = 1000,
    ) -> object: ...

    def retry_delay(
        self, attempt: object, base_ms: object, cap_ms: object, jitter: object
    ) -> int: ...

    def snapshot(self) -> Snapshot: ...

    def error_kind(self, error: BaseException) -> str:
        """The contract's name for an error: 'Conflict', 'ValueError', ... ."""
        ...


class JobQueueLike(Protocol):
    """``JobQueue(time, policy)`` of job-queue.md, as both the target and the model offer it."""

    def submit(
        self, type: object, payload: object, priority: object, run_at_millis: object
    ) -> str: ...

    def poll(self, worker_id: object, lease_millis: object) -> Lease | None: ...

    def complete(self, job_id: object, token: object) -> None: ...

    def fail(self, job_id: object, token: object, error: object) -> None: ...

    def view(self, job_id: object) -> JobView: ...

    def dead_letters(self) -> list[JobView]: ...

    def retry_dead(self, job_id: object) -> None: ...

    def cancel(self, job_id: object) -> None: ...
