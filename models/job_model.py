"""The reference model of JobQueue (job-queue.md): pure state, pure transitions.

``JobState`` holds every job in submission order and the next token; each
operation is a function of (state, policy, now, arguments) returning the new state
and the result, so the explorer can branch on states and a state machine can keep
several candidate states. ``JobQueueModel`` wraps them as a ``JobQueueLike``.

Readings the spec leaves open: the model validates arguments before processing
expired leases and keeps ``last_error`` across ``retry_dead`` (pass
``clear_error_on_retry=True`` for the other reading); checks that compare a target
with the model must accept both (``expire`` is public for that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from leasecheck.queue_impl.jobs import (
    IllegalStateError,
    JobStatus,
    JobView,
    Lease,
    RetryPolicy,
    TimeSource,
)

__all__ = [
    "JobQueueModel",
    "JobState",
    "ModelJob",
    "cancel",
    "complete",
    "dead_letters",
    "expire",
    "fail",
    "holds",
    "poll",
    "retry_dead",
    "submit",
    "view",
]

LEASE_EXPIRED = "lease expired"
_PENDING, _RUNNING, _SUCCEEDED, _DEAD, _CANCELLED = (
    JobStatus.PENDING,
    JobStatus.RUNNING,
    JobStatus.SUCCEEDED,
    JobStatus.DEAD,
    JobStatus.CANCELLED,
)
"""The statuses read once: ``JobStatus.RUNNING`` goes through the enum class's
descriptor (Python 3.11), about 15 times a global's read, on every job of every move."""

_D = TypeVar("_D", "ModelJob", "JobState")


def replace(value: _D, **changes: object) -> _D:
    """``dataclasses.replace`` for this module's frozen dataclasses (no ``__post_init__``,
    no slots), copying the field dict: the explorer makes hundreds of thousands of them."""
    copy = object.__new__(type(value))
    fields = copy.__dict__
    fields.update(value.__dict__)
    fields.update(changes)
    if len(fields) != len(value.__dict__):  # a name that is not a field (a set difference
        # on every call costs more than this count)
        unknown = changes.keys() - value.__dict__.keys()
        raise TypeError(f"{type(value).__name__} has no fields {sorted(unknown)}")
    return copy


@dataclass(frozen=True)
class ModelJob:
    id: str
    type: str
    payload: str
    priority: int
    run_at: int
    status: JobStatus = JobStatus.PENDING
    attempts: int = 0
    last_error: str | None = None
    token: int | None = None
    """The token of the current lease while RUNNING, else None."""
    lease_until: int | None = None

    def view(self) -> JobView:
        return JobView(
            self.id, self.type, self.priority, self.status, self.attempts, self.run_at,
            self.last_error,
        )  # fmt: skip


@dataclass(frozen=True)
class JobState:
    jobs: tuple[ModelJob, ...] = ()
    next_token: int = 1


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _index(state: JobState, job_id: object) -> int:
    for index, job in enumerate(state.jobs):
        if job.id == job_id:
            return index
    raise KeyError(f"no job with id {job_id!r}")


def _put(state: JobState, index: int, job: ModelJob) -> JobState:
    return replace(state, jobs=(*state.jobs[:index], job, *state.jobs[index + 1 :]))


def _failed(job: ModelJob, policy: RetryPolicy, at: int, error: str) -> ModelJob:
    """One failed attempt at instant ``at``: back to PENDING after the backoff, or DEAD."""
    base = replace(job, last_error=error, token=None, lease_until=None)
    if job.attempts < policy.max_attempts:
        return replace(base, status=_PENDING, run_at=at + policy.backoff_after(job.attempts))
    return replace(base, status=_DEAD)


def expire(state: JobState, policy: RetryPolicy, now: int) -> JobState:
    """Every lease with ``now >= lease_until`` fails as if at the instant ``lease_until``."""
    for job in state.jobs:
        if _lapsed(job, now):
            break
    else:
        return state  # the common case, and the explorer's memos key on identity
    jobs = tuple(
        _failed(job, policy, job.lease_until, LEASE_EXPIRED)
        if job.status is _RUNNING and job.lease_until is not None and now >= job.lease_until
        else job
        for job in state.jobs
    )
    return replace(state, jobs=jobs)


def _lapsed(job: ModelJob, now: int) -> bool:
    running = job.status is _RUNNING
    return running and job.lease_until is not None and now >= job.lease_until


def submit(
    state: JobState, type: object, payload: object, priority: object, run_at_millis: object
) -> tuple[JobState, str]:
    if _blank(type):
        raise ValueError(f"submit needs a non-blank type but got type={type!r}")
    job_id = f"J{len(state.jobs) + 1}"
    job = ModelJob(job_id, type, "" if payload is None else payload, priority, run_at_millis)  # type: ignore[arg-type]
    return replace(state, jobs=(*state.jobs, job)), job_id


def _best_ready(state: JobState, now: int) -> int | None:
    ready = [
        (-job.priority, job.run_at, index)
        for index, job in enumerate(state.jobs)
        if job.status is _PENDING and job.run_at <= now
    ]
    return min(ready)[2] if ready else None


def poll(
    state: JobState, policy: RetryPolicy, now: int, worker_id: object, lease_millis: object
) -> tuple[JobState, Lease | None]:
    if _blank(worker_id):
        raise ValueError(f"poll needs a non-blank worker_id but got worker_id={worker_id!r}")
    if not lease_millis > 0:  # type: ignore[operator]
        raise ValueError(f"poll needs lease_millis > 0 but got lease_millis={lease_millis!r}")
    state = expire(state, policy, now)
    index = _best_ready(state, now)
    if index is None:
        return state, None
    job = state.jobs[index]
    leased = replace(
        job, status=_RUNNING, attempts=job.attempts + 1, token=state.next_token,
        lease_until=now + lease_millis,  # type: ignore[operator]
    )  # fmt: skip
    assert leased.lease_until is not None
    lease = Lease(
        job.id, state.next_token, job.type, job.payload, leased.attempts, leased.lease_until
    )
    return replace(_put(state, index, leased), next_token=state.next_token + 1), lease


def holds(job: ModelJob, token: object) -> bool:
    """Whether ``token`` is ``job``'s current lease: what complete and fail require of the
    job after expiring leases (else IllegalStateError)."""
    return job.status is _RUNNING and job.token == token


def _current(state: JobState, job_id: object, token: object) -> int:
    index = _index(state, job_id)
    job = state.jobs[index]
    if not holds(job, token):
        raise IllegalStateError(
            f"job {job_id!r} is {job.status._name_} with token {job.token!r};"
            f" token {token!r} is not its current lease"
        )
    return index


def complete(
    state: JobState, policy: RetryPolicy, now: int, job_id: object, token: object
) -> JobState:
    state = expire(state, policy, now)
    index = _current(state, job_id, token)
    done = replace(state.jobs[index], status=_SUCCEEDED, token=None, lease_until=None)
    return _put(state, index, done)


def fail(
    state: JobState, policy: RetryPolicy, now: int, job_id: object, token: object, error: object
) -> JobState:
    state = expire(state, policy, now)
    index = _current(state, job_id, token)
    message = "failed" if error is None else error
    return _put(state, index, _failed(state.jobs[index], policy, now, message))  # type: ignore[arg-type]


def view(state: JobState, job_id: object) -> JobView:
    return state.jobs[_index(state, job_id)].view()


def views(state: JobState) -> list[JobView]:
    """The view of every job, in submission order."""
    return [job.view() for job in state.jobs]


def dead_letters(state: JobState) -> list[JobView]:
    return [job.view() for job in state.jobs if job.status is _DEAD]


def retry_dead(state: JobState, now: int, job_id: object, clear_error: bool = False) -> JobState:
    index = _index(state, job_id)
    job = state.jobs[index]
    if job.status is not _DEAD:
        raise IllegalStateError(
            f"retry_dead needs a DEAD job, but job {job_id!r} is {job.status._name_}"
        )
    error = None if clear_error else job.last_error
    return _put(
        state,
        index,
        replace(job, status=_PENDING, attempts=0, run_at=now, last_error=error),
    )


def cancel(state: JobState, job_id: object) -> JobState:
    index = _index(state, job_id)
    job = state.jobs[index]
    if job.status is not _PENDING:
        raise IllegalStateError(
            f"cancel needs a PENDING job, but job {job_id!r} is {job.status._name_}"
        )
    return _put(state, index, replace(job, status=_CANCELLED))


class JobQueueModel:
    """The model as a ``JobQueueLike``; reads ``time`` once per call, like a target would."""

    def __init__(
        self,
        time: TimeSource,
        policy: RetryPolicy,
        *,
        state: JobState | None = None,
        clear_error_on_retry: bool = False,
    ) -> None:
        self.time = time
        self.policy = policy
        self.state = state or JobState()
        self.clear_error_on_retry = clear_error_on_retry

    def submit(self, type: object, payload: object, priority: object, run_at_millis: object) -> str:
        self.state, job_id = submit(self.state, type, payload, priority, run_at_millis)
        return job_id

    def poll(self, worker_id: object, lease_millis: object) -> Lease | None:
        now = self.time.now_millis()
        self.state, lease = poll(self.state, self.policy, now, worker_id, lease_millis)
        return lease

    def complete(self, job_id: object, token: object) -> None:
        now = self.time.now_millis()
        self.state = expire(self.state, self.policy, now)  # kept even if the call then raises
        self.state = complete(self.state, self.policy, now, job_id, token)

    def fail(self, job_id: object, token: object, error: object) -> None:
        now = self.time.now_millis()
        self.state = expire(self.state, self.policy, now)  # kept even if the call then raises
        self.state = fail(self.state, self.policy, now, job_id, token, error)

    def view(self, job_id: object) -> JobView:
        return view(self.state, job_id)

    def dead_letters(self) -> list[JobView]:
        return dead_letters(self.state)

    def retry_dead(self, job_id: object) -> None:
        now = self.time.now_millis()
        self.state = retry_dead(self.state, now, job_id, self.clear_error_on_retry)

    def cancel(self, job_id: object) -> None:
        self.state = cancel(self.state, job_id)
