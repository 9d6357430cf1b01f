"""The evidence of a history no sequential order explains (``models.linearizability``).

Each operation is a step on its process's lane, from its invocation to its response
in wall milliseconds since the first invocation (one clock domain: ``_history``);
the target's side is what the operation returned, the model's is the checker's
reason for each operation that may come next but is not explained. The step where
they part is the first such operation. Leases are not drawn: their ends are model
times, on another axis than the intervals linearizability is about.
"""

from __future__ import annotations

from collections.abc import Sequence

from leasecheck.models._history import Operation, Returned
from leasecheck.models.evidence import Evidence, Recorder, Unit
from leasecheck.models.linearizability import Verdict

__all__ = ["history_evidence", "schedule_evidence"]


def history_evidence(verdict: Verdict, summary: str) -> Evidence:
    """``verdict``'s history as evidence, parting at its first unexplained operation."""
    reasons = {
        (op.process, op.index): reason
        for op, reason in zip(verdict.conflicting, verdict.reasons, strict=True)
    }
    return _evidence(verdict.history, summary, "wall ms", 1_000_000, reasons, verdict.conflicting)


def schedule_evidence(
    history: Sequence[Operation], summary: str, step_ns: int, kind: str
) -> Evidence:
    """A controlled schedule's history (``lease.interleavings``, ``jobs.interleavings``),
    whose clock counts scheduling steps of ``step_ns`` each: one lane per ``kind``
    (process or thread), each call a bar from the step it began to the step it returned;
    it parts after the last step (the check that failed judges the whole schedule)."""
    return _evidence(history, summary, "step", step_ns, {}, (), kind)


def _evidence(
    ops: Sequence[Operation],
    summary: str,
    unit: Unit,
    per_unit_ns: int,
    reasons: dict[tuple[str, int], str],
    conflicting: Sequence[Operation],
    kind: str = "process",
) -> Evidence:
    history = sorted(ops, key=lambda op: (op.invoked_ns, op.process, op.index))
    origin = min((op.invoked_ns for op in history), default=0)
    last = max((op.returned_ns or op.invoked_ns for op in history), default=origin)
    record = Recorder(unit)
    index_of: dict[tuple[str, int], int] = {}
    for op in history:
        record.actor(op.process, kind)
        job, token = _job_token(op)
        end = op.returned_ns if op.returned_ns is not None else last
        index_of[(op.process, op.index)] = record.step(
            op.process, f"{op.label()} {op.call_text()}", op.name,
            _scaled(op.invoked_ns, origin, per_unit_ns), job, token, target=op.outcome_text(),
            model=reasons.get((op.process, op.index)), end=_scaled(end, origin, per_unit_ns),
            call=op.call.to_json(),
        )  # fmt: skip
    parted = min((index_of[(op.process, op.index)] for op in conflicting), default=None)
    return record.evidence(summary, parted)


def _scaled(ns: int, origin: int, per_unit_ns: int) -> float:
    return round((ns - origin) / per_unit_ns, 3)


def _job_token(op: Operation) -> tuple[str | None, int | None]:
    """The job and token an operation names (a ticket argument) or got (its result)."""
    value = op.outcome.value if isinstance(op.outcome, Returned) else None
    for ticket in (op.args.get("ticket"), op.args.get("lease"), value):
        if isinstance(ticket, dict) and isinstance(ticket.get("id"), str):
            token = ticket.get("token")
            return ticket["id"], token if type(token) is int else None
        job = getattr(ticket, "job_id", None) or getattr(ticket, "job", None)
        if isinstance(job, str):
            token = getattr(ticket, "token", None)
            return job, token if type(token) is int else None
    job = op.args.get("job_id") or op.args.get("job")
    return (job if isinstance(job, str) else None), None
