"""The two reference models as ``SequentialSpec``s for the linearizability checker.

Which histories may be split per job (P-compositionality) — only those in which
*every* operation touches one job's state and nothing else decides its outcome:

- Lease worker: ``finish`` reads and writes only the row its ticket names, so a
  history of finishes splits by ticket id. ``claim`` does not: it quarantines
  every open row and picks the *lowest seq* claimable job, so whether it gets job
  ``b`` depends on job ``a``. ``enqueue`` fixes the seq order claim looks at, and
  ``redrive`` appends to the one ``redrives`` table whose row order is stored state;
  the final snapshot reads everything. Histories with any of these stay whole.
- JobQueue: ``view``, ``cancel`` and ``retry_dead`` touch one job and never process
  expiry, so they split by job id. ``poll`` picks the best job of all;
  ``complete`` and ``fail`` first expire *every* lease that has run out (a later
  ``view`` of another job sees the difference); ``submit`` numbers ids by count
  and ``dead_letters`` reads all jobs. Histories with any of these stay whole.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

from leasecheck.models import job_model as jm
from leasecheck.models import lease_model as lm
from leasecheck.models._history import (
    HarnessStep,
    Operation,
    Outcome,
    SequentialSpec,
    format_value,
)
from leasecheck.models.contracts import Snapshot, same
from leasecheck.models.job_ops import JobOp, JobOutcome
from leasecheck.models.lease_ops import LeaseOp, LeaseOutcome
from leasecheck.queue_impl.jobs import IllegalStateError, Lease, RetryPolicy

__all__ = ["BUSY", "OPEN_TRANSACTION", "JobQueueSpec", "LeaseSpec"]

BUSY = "database is locked"
"""Error kind of a SQLite busy timeout: allowed by the spec's timeout=1, and no effect."""
OPEN_TRANSACTION = "left a transaction open"
"""Error kind recorded when an operation returned with its connection in a transaction."""


def _agrees(observed: Outcome, result: object, error: str | None) -> bool:
    """The model's ``result`` or ``error`` is the outcome observed: errors of one kind, or
    no error and the same result (exact types). The checker asks this for every
    configuration it visits, so the model's side is not built into a record here."""
    if error is not None or observed.error is not None:
        return error == observed.error
    return same(result, observed.result)


def _unique(states: Sequence[Hashable]) -> list[Any]:
    return list(dict.fromkeys(states))


UNNUMBERED = -1
"""The token of a poll the precheck did not number (it returned no lease, or was killed)."""


class _NewToken:
    """Shown where the model's lease has a token nobody was handed: a new one."""

    def __repr__(self) -> str:
        return "<a new token>"


def _outcome_text(outcome: Outcome) -> str:
    return (
        f"raises {outcome.error}"
        if outcome.error is not None
        else f"returns {format_value(outcome.result)}"
    )


# --- lease worker -------------------------------------------------------------------------


def lease_op(op: Operation) -> LeaseOp:
    """The history entry's call, which a lease history holds as the contract's record."""
    call = op.call
    if not isinstance(call, LeaseOp):
        raise TypeError(f"a lease-worker history holds {call!r} at {op.label()}")
    return call


class LeaseSpec(SequentialSpec[Snapshot]):
    """lease-worker.md over a ``Snapshot``; ``snapshot`` is a read of the whole stored state."""

    def _run(self, state: Snapshot, op: Operation) -> tuple[Snapshot, object, str | None]:
        """The model's state after ``op``, and its result or the name of its error."""
        if isinstance(op.call, HarnessStep):
            return state, state, None
        try:
            step = lease_op(op).step(state)
        except (lm.Conflict, ValueError) as error:
            return state, None, type(error).__name__
        return step.state, step.result, None

    def step(self, state: Snapshot, op: Operation) -> Sequence[Snapshot]:
        after, result, error = self._run(state, op)
        if op.outcome is None:  # killed: the effect happened, or it never will
            return _unique([state, after])
        if op.outcome.error == BUSY:
            return [state]  # a busy timeout rolled back: no effect
        return [after] if _agrees(op.outcome, result, error) else []

    def explain(self, state: Snapshot, op: Operation) -> str:
        _, result, error = self._run(state, op)
        model = LeaseOutcome(result, error)
        stored = op.result
        if isinstance(op.call, HarnessStep) and isinstance(stored, Snapshot):
            return (
                "the stored state read after every process finished differs from the model:\n"
                f"{'':14}stored:\n{_indent(stored.describe())}\n"
                f"{'':14}model:\n{_indent(state.describe())}"
            )
        if op.error == OPEN_TRANSACTION:
            return "the operation returned with its connection still inside a transaction"
        return f"here the model {_outcome_text(model)}"

    def partition_key(self, op: Operation) -> Hashable | None:
        ticket = op.args.get("ticket")
        if op.name == "finish" and type(ticket) is dict and type(ticket.get("id")) is str:
            key: str = ticket["id"]
            return key
        return None

    def restrict(self, state: Snapshot, key: Hashable) -> Snapshot:
        return Snapshot(jobs=tuple(row for row in state.jobs if row.id == key))

    def describe_state(self, state: Snapshot) -> str:
        return _indent(state.describe())


def _indent(text: str) -> str:
    return "\n".join(f"{'':12}{line}" for line in text.splitlines())


# --- JobQueue ----------------------------------------------------------------------------

_JOB_ERRORS = (KeyError, IllegalStateError, ValueError)


def job_op(op: Operation) -> JobOp:
    """The history entry's call, which a JobQueue history holds as the contract's record."""
    call = op.call
    if not isinstance(call, JobOp):
        raise TypeError(f"a JobQueue history holds {call!r} at {op.label()}")
    return call


class _At:
    """A time source that reads one instant (the call's ``now``)."""

    def __init__(self, now: int) -> None:
        self.now = now

    def now_millis(self) -> int:
        return self.now


class JobQueueSpec(SequentialSpec[jm.JobState]):
    """job-queue.md over a ``JobState`` whose tokens are canonical numbers.

    A target's tokens are opaque: only uniqueness and equality count. ``precheck``
    numbers every token a poll returned (1, 2, ... in history order, a bijection)
    and fails the history if two polls returned equal tokens; the model state then
    holds these numbers, so states reached through different poll orders compare
    equal when they are the same up to renaming. ``clear_error`` picks the reading
    of ``retry_dead`` (whether it clears ``last_error``); a call that raises may or
    may not have processed expired leases first, and both are accepted.
    """

    def __init__(self, policy: RetryPolicy, clear_error: bool = False) -> None:
        self.policy = policy
        self.clear_error = clear_error
        self._tokens: dict[Operation, int] = {}
        self._issued: list[tuple[object, Operation]] = []
        self._by_hash: dict[object, Operation] = {}

    # -- tokens --
    def precheck(self, history: Sequence[Operation]) -> tuple[tuple[Operation, ...], str] | None:
        self._tokens, self._issued, self._by_hash = {}, [], {}
        for op in history:
            lease = op.result
            if job_op(op).kind != "poll" or not isinstance(lease, Lease):
                continue
            twin = self._issuer(lease.token)
            if twin is not None:
                return (twin, op), (
                    f"two polls returned the same token {lease.token!r}; "
                    "job-queue.md: every successful poll makes a token never issued before"
                )
            self._issued.append((lease.token, op))
            self._tokens[op] = len(self._issued)
            with contextlib.suppress(TypeError):  # unhashable tokens are found by scanning
                self._by_hash[lease.token] = op
        return None

    def _issuer(self, token: object) -> Operation | None:
        """The poll that returned a token equal to ``token``, if any."""
        try:
            return self._by_hash.get(token)
        except TypeError:
            return next((op for known, op in self._issued if known == token), None)

    def _canonical(self, token: object) -> int:
        """The number of the poll that issued ``token``, or 0 for a token never issued."""
        issuer = self._issuer(token)
        return 0 if issuer is None else self._tokens[issuer]

    # -- model --
    def _model(self, state: jm.JobState, op: Operation) -> tuple[list[jm.JobState], JobOutcome]:
        """The possible states after ``op`` and its outcome, with tokens canonical: the
        entry's ``JobOp`` (its token made canonical) run on the model at its ``now``."""
        call = job_op(op)
        now = call.now if call.now is not None else 0
        if call.kind in ("complete", "fail"):
            call = call.replaced(token=self._canonical(call.arguments()["token"]))
        model = jm.JobQueueModel(
            _At(now), self.policy, state=state, clear_error_on_retry=self.clear_error
        )
        try:
            value = call.apply(model)
        except _JOB_ERRORS as error:
            kind = next(cls.__name__ for cls in _JOB_ERRORS if isinstance(error, cls))
            if call.kind in ("poll", "complete", "fail"):  # expired leases processed, or not
                return _unique([state, jm.expire(state, self.policy, now)]), JobOutcome(error=kind)
            return [state], JobOutcome(error=kind)
        if call.kind == "poll":
            return self._numbered(model.state, op, value)
        return [model.state], JobOutcome(value)

    def _numbered(
        self, after: jm.JobState, op: Operation, lease: Lease | None
    ) -> tuple[list[jm.JobState], JobOutcome]:
        """A poll's state and lease with the token the precheck numbered it by."""
        if lease is None:
            return [after], JobOutcome(None)
        number = self._tokens.get(op, UNNUMBERED)  # a killed poll's token: nobody holds it
        jobs = tuple(
            replace(job, token=number) if job.id == lease.job_id else job for job in after.jobs
        )
        observed = op.result
        token = observed.token if isinstance(observed, Lease) else number
        return [replace(after, jobs=jobs, next_token=1)], JobOutcome(replace(lease, token=token))

    def step(self, state: jm.JobState, op: Operation) -> Sequence[jm.JobState]:
        states, model = self._model(state, op)
        if op.outcome is None:
            return _unique([state, *states])
        return states if _agrees(op.outcome, model.result, model.error) else []

    def explain(self, state: jm.JobState, op: Operation) -> str:
        _, model = self._model(state, op)
        if isinstance(model.result, Lease) and model.result.token == UNNUMBERED:
            model = JobOutcome(replace(model.result, token=_NewToken()))
        return f"here the model {_outcome_text(model)}"

    def partition_key(self, op: Operation) -> Hashable | None:
        call = job_op(op)
        job_id = call.arguments().get("job_id")
        if call.kind in ("view", "cancel", "retry_dead") and isinstance(job_id, str):
            return job_id
        return None

    def restrict(self, state: jm.JobState, key: Hashable) -> jm.JobState:
        return replace(state, jobs=tuple(job for job in state.jobs if job.id == key))

    def describe_state(self, state: jm.JobState) -> str:
        lines = [
            f"{'':12}job {job.id}: {job.status.name} priority={job.priority} run_at={job.run_at}"
            f" attempts={job.attempts} last_error={job.last_error!r}"
            + (f" lease #{job.token} until {job.lease_until}" if job.token is not None else "")
            for job in state.jobs
        ]
        return "\n".join(lines) or f"{'':12}(no jobs)"
