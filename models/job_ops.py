"""One JobQueue operation, and what it did: the records every JobQueue harness shares.

job-queue.md's methods are the operations: ``JOB_KINDS`` lists each with its parameters
in the spec's order. A ``JobOp`` is one call as data: it runs on a target queue
(``apply``), on the model (``step``), prints as the one line every message and picture
uses (``describe``) and crosses processes as JSON. ``now`` is the instant the harness
sets its time source to before the call (``None``: whatever the clock reads); the
queue reads time through its ``TimeSource``, never as an argument.

A ``JobOutcome`` is what the call returned (a ``Lease``, a ``JobView``, a list of them,
a job id or ``None``) or the contract's name for what it raised.

To add an argument to a method, add it to its ``Kind`` in ``JOB_KINDS`` (and to the
model's method and the target's, which the contract fixes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast

from leasecheck.models import job_model as jm
from leasecheck.models._values import Answer, Held, Kind, bind, from_json_value, to_json_value
from leasecheck.models.contracts import JobQueueLike, same
from leasecheck.queue_impl.jobs import IllegalStateError, Lease, RetryPolicy

__all__ = ["JOB_ERRORS", "JOB_KINDS", "Held", "JobKind", "JobOp", "JobOutcome"]

JobKind = Literal[
    "submit", "poll", "complete", "fail", "view", "dead_letters", "retry_dead", "cancel"
]

JOB_KINDS: Mapping[str, Kind] = {
    "submit": Kind("submit", ("type", "payload", "priority", "run_at_millis")),
    "poll": Kind("poll", ("worker_id", "lease_millis")),
    "complete": Kind("complete", ("job_id", "token")),
    "fail": Kind("fail", ("job_id", "token", "error")),
    "view": Kind("view", ("job_id",), writes=False),
    "dead_letters": Kind("dead_letters", writes=False),
    "retry_dead": Kind("retry_dead", ("job_id",)),
    "cancel": Kind("cancel", ("job_id",)),
}
"""Every JobQueue method and its parameters, in the spec's order: the one table."""

JOB_ERRORS: tuple[type[Exception], ...] = (IllegalStateError, KeyError, ValueError)
"""The errors the contract names (Java's exceptions, in their Python form)."""


class _FixedTime:
    def __init__(self, now: int) -> None:
        self.now = now

    def now_millis(self) -> int:
        return self.now


@dataclass(frozen=True, slots=True)
class JobOp:
    """One call of job-queue.md as data: ``kind(**args)`` with the clock at ``now``.

    ``args`` are (parameter, value) pairs in the order of ``JOB_KINDS[kind]``. Build one
    with ``JobOp.of('poll', 'w1', 100, now=5)``.
    """

    kind: JobKind
    args: tuple[tuple[str, Any], ...] = ()
    now: int | None = None

    @classmethod
    def of(cls, kind: str, *args: object, now: int | None = None, **kwargs: object) -> JobOp:
        if kind not in JOB_KINDS:
            raise ValueError(f"{kind!r} is no JobQueue method ({', '.join(JOB_KINDS)})")
        return cls(cast(JobKind, kind), bind(JOB_KINDS[kind], args, kwargs), now)

    def arguments(self) -> dict[str, Any]:
        return dict(self.args)

    def positional(self) -> tuple[Any, ...]:
        return tuple(value for _, value in self.args)

    def resolve(self, held: Sequence[Lease]) -> JobOp | None:
        """This call with ``Held`` arguments replaced by the job id and token of the lease
        the thread holds; None when it holds too few."""
        marks = [value for _, value in self.args if isinstance(value, Held)]
        if not marks:
            return self
        if marks[0].back >= len(held):
            return None
        lease = held[-1 - marks[0].back]
        real = {"job_id": lease.job_id, "token": lease.token}
        args = tuple((n, real[n] if isinstance(v, Held) else v) for n, v in self.args)
        return JobOp(self.kind, args, self.now)

    def replaced(self, **values: object) -> JobOp:
        """This call with the given arguments' values changed (a copy)."""
        unknown = set(values) - set(self.arguments())
        if unknown:
            raise TypeError(f"{self.describe()} has no argument {sorted(unknown)}")
        return JobOp(self.kind, tuple((n, values.get(n, v)) for n, v in self.args), self.now)

    def apply(self, queue: JobQueueLike) -> Any:
        """Call the method on ``queue`` (a target or ``JobQueueModel``). The caller has set
        its time source to ``now`` (where not None) and put real leases for ``Held``."""
        method: Callable[..., Any] = getattr(queue, self.kind)
        return method(*self.positional())

    def step(
        self, state: jm.JobState, policy: RetryPolicy, clear_error: bool = False
    ) -> tuple[jm.JobState, JobOutcome]:
        """The model's state after this call and its outcome, with the clock at ``now``
        (0 when None). Expired leases processed by poll/complete/fail stay processed when
        the call then raises, as in ``JobQueueModel``."""
        model = jm.JobQueueModel(
            _FixedTime(self.now or 0), policy, state=state, clear_error_on_retry=clear_error
        )
        outcome = JobOutcome.running(lambda: self.apply(model))
        return model.state, outcome

    def describe(self) -> str:
        """The one line for this call: ``poll(worker_id='w1', lease_millis=100) at t=5``."""
        shown = ", ".join(f"{name}={_shown(name, value)}" for name, value in self.args)
        at = "" if self.now is None else f" at t={self.now}"
        return f"{self.kind}({shown}){at}"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "contract": "jobs",
            "kind": self.kind,
            "args": {name: to_json_value(value) for name, value in self.args},
        }
        if self.now is not None:
            data["now"] = self.now
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobOp:
        args = {name: from_json_value(value) for name, value in data["args"].items()}
        return cls.of(data["kind"], now=data.get("now"), **args)


@dataclass(frozen=True, slots=True)
class JobOutcome(Answer):
    """What one JobQueue call did: returned ``result``, or raised the error named ``error``
    (``IllegalStateError``, ``KeyError``, ``ValueError`` or ``unexpected <class>``)."""

    CONTRACT: ClassVar[str] = "jobs"

    @classmethod
    def running(cls, call: Callable[[], object]) -> JobOutcome:
        """Run ``call`` and record what it did (an error the contract does not name is
        recorded as ``unexpected <class>``, never re-raised)."""
        try:
            return cls(call())
        except Exception as error:
            return cls.raised(error)

    @classmethod
    def raised(cls, error: BaseException) -> JobOutcome:
        name = next((c.__name__ for c in JOB_ERRORS if isinstance(error, c)), None)
        kind = name or f"unexpected {type(error).__name__}"
        return cls(error=kind, detail=f"{type(error).__name__}: {error}")

    def agrees_with(self, model: JobOutcome) -> bool:
        """Same error kind, or no error and the same result (exact types)."""
        return self.error == model.error and (
            self.error is not None or same(self.result, model.result)
        )


def _shown(name: str, value: object) -> str:
    """An argument as the line shows it; a held lease's field in the JobQueue's words
    (``<the job_id of its latest lease>``), not the lease worker's "ticket"."""
    if not isinstance(value, Held):
        return repr(value)
    which = "its latest lease" if value.back == 0 else f"its lease {value.back} before the latest"
    return f"<the {name} of {which}>"
