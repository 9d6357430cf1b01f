"""The types the job-queue seed calls "given" (package ``jobs``), in their Python form.

Every JobQueue target imports these from ``queue_impl.jobs``, so the suite, the
reference model and every target agree on one definition of each.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "IllegalStateError",
    "JobStatus",
    "JobView",
    "Lease",
    "RetryPolicy",
    "TimeSource",
]


class IllegalStateError(RuntimeError):
    """The seed's IllegalStateException: the call is valid but not in this state."""


class JobStatus(enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    DEAD = "DEAD"
    CANCELLED = "CANCELLED"


class TimeSource(Protocol):
    def now_millis(self) -> int: ...


def _exact_int(name: str, value: object, minimum: int) -> None:
    if type(value) is not int:
        raise ValueError(f"RetryPolicy expected an int for {name} but got {name}={value!r}")
    if value < minimum:
        raise ValueError(f"RetryPolicy needs {name} >= {minimum} but got {name}={value!r}")


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    base_backoff_millis: int
    max_backoff_millis: int

    def __post_init__(self) -> None:
        _exact_int("max_attempts", self.max_attempts, 1)
        _exact_int("base_backoff_millis", self.base_backoff_millis, 1)
        _exact_int("max_backoff_millis", self.max_backoff_millis, self.base_backoff_millis)

    def backoff_after(self, attempt: int) -> int:
        """Backoff after the ``attempt``-th failed attempt: base * 2**(n-1), capped."""
        if type(attempt) is not int or attempt < 1:
            raise ValueError(f"backoff_after needs an int attempt >= 1 but got attempt={attempt!r}")
        backoff: int = self.base_backoff_millis * 2 ** (attempt - 1)
        return min(self.max_backoff_millis, backoff)


@dataclass(frozen=True)
class Lease:
    job_id: str
    token: object
    type: str
    payload: str
    attempt: int
    lease_until: int


@dataclass(frozen=True)
class JobView:
    id: str
    type: str
    priority: int
    status: JobStatus
    attempts: int
    next_run_at: int
    last_error: str | None
