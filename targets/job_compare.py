"""The one comparison core of the JobQueue contract: error kinds, leases and views.

The agreement machine, the conformance replay of explored transitions and the
thread hammer all ask the same questions of a JobQueue target and the model: did
the call raise the same kind of spec error, is the returned lease the model's
(tokens aside: a target's tokens are opaque, matched by a learned bijection), and
are the visible states (``view`` of every job, ``dead_letters()``) equal.
"""

from __future__ import annotations

from typing import Any

from leasecheck.models import job_model
from leasecheck.queue_impl.jobs import IllegalStateError, JobStatus, JobView, Lease

__all__ = [
    "LEASE_FIELDS",
    "SPEC_ERRORS",
    "brief",
    "error_kind",
    "lease_differences",
    "model_visible",
    "said",
    "target_visible",
]

SPEC_ERRORS = (IllegalStateError, KeyError, ValueError)
LEASE_FIELDS = ("job_id", "type", "payload", "attempt", "lease_until")
"""What a target's lease must equal the model's in: everything but the opaque token."""


def error_kind(error: BaseException | None) -> str:
    """The spec's name for an outcome: 'returned', a spec exception class, or the raw class."""
    if error is None:
        return "returned"
    for cls in SPEC_ERRORS:
        if isinstance(error, cls):
            return cls.__name__
    return type(error).__name__


def said(result: object, error: BaseException | None) -> str:
    """What a call did, as the second half of a sentence ('returned ...', 'raised ...')."""
    if error is not None:
        return f"raised {type(error).__name__}({error})"
    return f"returned {result!r}"


def brief(view: object) -> str:
    """One job's view on one line."""
    if not isinstance(view, JobView):
        return repr(view)
    status = view.status.name if isinstance(view.status, JobStatus) else repr(view.status)
    return (
        f"{status} attempts={view.attempts} next_run_at={view.next_run_at} "
        f"last_error={view.last_error!r} priority={view.priority} type={view.type!r}"
    )


def lease_differences(got: Lease, expected: Lease) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields (tokens aside) in which ``got`` differs from ``expected``: both sides'
    values of every field, or two empty dicts when the leases agree."""
    if all(getattr(got, name) == getattr(expected, name) for name in LEASE_FIELDS):
        return {}, {}
    shown = {name: getattr(got, name) for name in LEASE_FIELDS}
    wanted = {name: getattr(expected, name) for name in LEASE_FIELDS}
    return shown, wanted


def model_visible(state: job_model.JobState) -> tuple[list[JobView], list[JobView]]:
    """The model's visible state: the view of every job, and ``dead_letters()``."""
    return job_model.views(state), job_model.dead_letters(state)


def target_visible(queue: Any, state: job_model.JobState) -> tuple[list[Any], list[Any]]:
    """The target's visible state for the jobs ``state`` holds (raises what the target raises)."""
    return [queue.view(job.id) for job in state.jobs], list(queue.dead_letters())
