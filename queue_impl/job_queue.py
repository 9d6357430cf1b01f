"""The retrying job queue of job-queue.md: priorities, leases, backoff, dead letters.

One ``threading.Lock`` guards every public method, and the time source is read
inside it, so concurrent calls behave as if they ran one after another.

Readings chosen where job-queue.md leaves the behaviour open (the suite accepts
every reading; these are the bundled target's):

- Tokens are ints from a per-queue counter: 1, 2, 3, ... in poll order; a token
  that merely compares equal (``True``, ``1.0``) is not the token and is refused.
- ``retry_dead`` keeps ``last_error`` (it only resets status, attempts and run-at).
- ``priority`` and ``run_at_millis`` must be exact ints (bool rejected) and
  ``lease_millis`` too; ``type``, ``payload``, ``worker_id`` and ``error`` must be
  ``str`` or ``None``. Anything else is a ``ValueError``.
- Order of checks: a ``ValueError`` (bad argument) or ``KeyError`` (unknown id)
  is raised before anything changes, not even expiry processing. Only then are
  expired leases processed, and only then is the state/token checked, so the
  token of a lease that has just expired is refused with ``IllegalStateError``.
- Several expired leases are processed together; each is independent of the others.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from leasecheck.queue_impl.jobs import (
    IllegalStateError,
    JobStatus,
    JobView,
    Lease,
    RetryPolicy,
    TimeSource,
)

__all__ = ["JobQueue"]

LEASE_EXPIRED = "lease expired"
DEFAULT_ERROR = "failed"


@dataclass
class _Job:
    """One job's mutable state; ``seq`` is its submission order."""

    id: str
    seq: int
    type: str
    payload: str
    priority: int
    run_at: int
    status: JobStatus = JobStatus.PENDING
    attempts: int = 0
    last_error: str | None = None
    token: int | None = None
    lease_until: int = 0

    def view(self) -> JobView:
        return JobView(
            self.id, self.type, self.priority, self.status, self.attempts, self.run_at,
            self.last_error,
        )  # fmt: skip


def _optional_str(name: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{name} must be a str or None but got {name}={value!r}")
    return value


def _exact_int(name: str, value: object) -> int:
    if type(value) is not int:
        raise ValueError(f"{name} must be an int (not bool) but got {name}={value!r}")
    return value


class JobQueue:
    """``JobQueue(time, policy)``: an in-memory, thread-safe retrying job queue."""

    def __init__(self, time: TimeSource, policy: RetryPolicy) -> None:
        self._time = time
        self._policy = policy
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self._last_token = 0

    def submit(self, type: object, payload: object, priority: object, run_at_millis: object) -> str:
        """Add a PENDING job ready at ``run_at_millis``; return its id ``"J<n>"``."""
        job_type = _optional_str("type", type)
        text = _optional_str("payload", payload)
        rank = _exact_int("priority", priority)
        run_at = _exact_int("run_at_millis", run_at_millis)
        if job_type is None or not job_type.strip():
            raise ValueError(f"submit needs a non-blank job type but got type={type!r}")
        with self._lock:
            seq = len(self._jobs) + 1
            job = _Job(f"J{seq}", seq, job_type, "" if text is None else text, rank, run_at)
            self._jobs[job.id] = job
            return job.id

    def poll(self, worker_id: object, lease_millis: object) -> Lease | None:
        """Lease the best ready job to ``worker_id`` for ``lease_millis``, or return None."""
        worker = _optional_str("worker_id", worker_id)
        if worker is None or not worker.strip():
            raise ValueError(f"poll needs a non-blank worker id but got worker_id={worker_id!r}")
        lease_for = _exact_int("lease_millis", lease_millis)
        if lease_for <= 0:
            raise ValueError(f"poll needs lease_millis > 0 but got lease_millis={lease_millis!r}")
        with self._lock:
            now = self._time.now_millis()
            self._expire_leases(now)
            ready = [
                job
                for job in self._jobs.values()
                if job.status is JobStatus.PENDING and job.run_at <= now
            ]
            if not ready:
                return None
            job = min(ready, key=lambda j: (-j.priority, j.run_at, j.seq))
            self._last_token += 1
            job.status = JobStatus.RUNNING
            job.attempts += 1
            job.token = self._last_token
            job.lease_until = now + lease_for
            return Lease(job.id, job.token, job.type, job.payload, job.attempts, job.lease_until)

    def complete(self, job_id: object, token: object) -> None:
        """Mark the job SUCCEEDED; only with the token of its current, unexpired lease."""
        with self._lock:
            job = self._find(job_id)
            self._expire_leases(self._time.now_millis())
            self._check_lease(job, token, "complete")
            job.status = JobStatus.SUCCEEDED
            job.token = None

    def fail(self, job_id: object, token: object, error: object) -> None:
        """Record ``error`` (None → "failed") and retry after backoff or dead-letter the job."""
        message = _optional_str("error", error)
        with self._lock:
            job = self._find(job_id)
            now = self._time.now_millis()
            self._expire_leases(now)
            self._check_lease(job, token, "fail")
            self._record_failure(job, DEFAULT_ERROR if message is None else message, now)

    def view(self, job_id: object) -> JobView:
        """The job's current state (expired leases are not processed here)."""
        with self._lock:
            return self._find(job_id).view()

    def dead_letters(self) -> list[JobView]:
        """Every DEAD job, in submission order."""
        with self._lock:
            return [job.view() for job in self._jobs.values() if job.status is JobStatus.DEAD]

    def retry_dead(self, job_id: object) -> None:
        """Put a DEAD job back: PENDING, attempts 0, ready now."""
        with self._lock:
            job = self._find(job_id)
            if job.status is not JobStatus.DEAD:
                raise IllegalStateError(
                    f"retry_dead({job_id!r}) needs a DEAD job but it is {job.status.name}; "
                    f"only dead letters can be retried"
                )
            job.status = JobStatus.PENDING
            job.attempts = 0
            job.run_at = self._time.now_millis()

    def cancel(self, job_id: object) -> None:
        """Cancel a PENDING job."""
        with self._lock:
            job = self._find(job_id)
            if job.status is not JobStatus.PENDING:
                raise IllegalStateError(
                    f"cancel({job_id!r}) needs a PENDING job but it is {job.status.name}; "
                    f"only jobs that are not running or finished can be cancelled"
                )
            job.status = JobStatus.CANCELLED

    def _find(self, job_id: object) -> _Job:
        job = self._jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            raise KeyError(f"no job with id {job_id!r}; ids come from submit (J1, J2, ...)")
        return job

    def _check_lease(self, job: _Job, token: object, action: str) -> None:
        if job.status is not JobStatus.RUNNING:
            raise IllegalStateError(
                f"{action} of job {job.id!r} with token {token!r} was refused: the job is "
                f"{job.status.name}, not RUNNING (its lease ended or it was never leased)"
            )
        if type(token) is not int:
            raise IllegalStateError(
                f"{action} of job {job.id!r} with token {token!r} was refused: this queue "
                f"issues int tokens only, so that is not the token of the job's current lease"
            )
        if token != job.token:
            raise IllegalStateError(
                f"{action} of job {job.id!r} with token {token!r} was refused: that is not "
                f"the token of the job's current lease (a newer poll leased it again)"
            )

    def _expire_leases(self, now: int) -> None:
        """Every RUNNING job whose lease ended by ``now`` fails at the instant it ended."""
        for job in self._jobs.values():
            if job.status is JobStatus.RUNNING and now >= job.lease_until:
                self._record_failure(job, LEASE_EXPIRED, job.lease_until)

    def _record_failure(self, job: _Job, error: str, failed_at: int) -> None:
        """A failed attempt: retry after backoff while attempts remain, else DEAD."""
        job.last_error = error
        job.token = None
        if job.attempts < self._policy.max_attempts:
            job.status = JobStatus.PENDING
            job.run_at = failed_at + self._backoff(job.attempts)
        else:
            job.status = JobStatus.DEAD

    def _backoff(self, attempts: int) -> int:
        """Backoff after the n-th attempt: min(max_backoff, base_backoff * 2**(n-1))."""
        doubled: int = self._policy.base_backoff_millis * 2 ** (attempts - 1)
        return min(self._policy.max_backoff_millis, doubled)
