"""Evidence for the crash properties, from the operations and outcomes they already hold.

Every ``LeaseOp`` names its time (``now_ms``), so a step's model time is that argument.
The target's leases are the tickets its claims returned (ended by a later claim of the
job or by a finish with that ticket that it took); the model's are read from the model's
state after each step. A stored state read back after a kill adds the leases its rows
show.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from leasecheck.crash_harness._ops import Expected, expect
from leasecheck.crash_harness.engine import ChildResult
from leasecheck.models.contracts import Snapshot
from leasecheck.models.evidence import Evidence, Lease, Recorder
from leasecheck.models.lease_ops import LeaseOp

__all__ = ["HistoryRecorder", "at_of", "job_token", "owner_of"]


def at_of(op: LeaseOp) -> float:
    """The model time an operation runs at (its ``now_ms``)."""
    at = op.arguments().get("now_ms", 0)
    return float(at) if isinstance(at, int | float) and not isinstance(at, bool) else 0.0


def owner_of(op: LeaseOp, default: str = "queue") -> str:
    """Who runs ``op``: a claim's owner, a finish's ticket owner, else ``default``."""
    owner, ticket = op.arguments().get("owner"), op.arguments().get("ticket")
    if op.kind == "claim" and isinstance(owner, str):
        return owner
    if op.kind == "finish" and isinstance(ticket, dict) and isinstance(ticket.get("owner"), str):
        return str(ticket["owner"])
    return default


def job_token(op: LeaseOp, result: object = None) -> tuple[str | None, int | None]:
    """The job and token ``op`` names (a finish's ticket) or got (a claim's ticket)."""
    ticket = op.arguments().get("ticket") if op.kind == "finish" else result
    if not isinstance(ticket, dict):
        job = op.arguments().get("job_id")
        return (job if isinstance(job, str) else None), None
    job, token = ticket.get("id"), ticket.get("token")
    return (job if isinstance(job, str) else None), (token if type(token) is int else None)


class HistoryRecorder(Recorder):
    """A ``Recorder`` for operations run one after another (or claims run at once)."""

    def __init__(self, before: Snapshot, now: float, stored: Snapshot | None = None) -> None:
        """``before``: the model's state at ``now``; ``stored``: the rows the target showed
        then (default: the same, a file the harness wrote to hold ``before``)."""
        super().__init__("model ms")
        self.model_state = before
        self.rows("model", before.jobs, now)
        self.rows("target", (before if stored is None else stored).jobs, now)
        self.target_live: dict[tuple[str, int | None], Lease] = {}

    def ran(
        self,
        op: LeaseOp,
        got: ChildResult | None,
        who: str | None = None,
        expected: Expected | None = None,
        *,
        advance_model: bool = True,
    ) -> Expected:
        """Record ``op`` with the target's outcome ``got`` (None: it never answered) and the
        model's verdict on it; returns that verdict."""
        expected = expected or expect(op, self.model_state)
        at = at_of(op)
        job, token = job_token(op, got.value if got is not None else expected.result)
        actor = who or owner_of(op)
        self.step(
            actor, op.describe(), op.kind, at, job, token,
            target=got.describe() if got is not None else "no answer (killed)",
            model=expected.describe(), call=op.to_json(),
        )  # fmt: skip
        if got is not None and got.error is None:
            self._target_lease(op, actor, got.value, at)
        if advance_model:
            self.model_state = expected.state
            self.rows("model", self.model_state.jobs, at)
            for row in self.model_state.jobs:
                self.deadlines.setdefault(row.id, row.deadline)
        return expected

    def _target_lease(self, op: LeaseOp, actor: str, value: Any, at: float) -> None:
        if op.kind == "claim" and isinstance(value, dict):
            job, token = value.get("id"), value.get("token")
            until = value.get("lease_until")
            if isinstance(job, str) and isinstance(until, int | float):
                lease = Lease("target", job, token, actor, at, float(until), self.last)
                self.target_live[(job, token)] = lease
        elif op.kind == "finish" and value not in (False, None) and op.args:
            job, token = job_token(op)
            if job is not None:
                self._end_target((job, token), at)

    def _end_target(self, key: tuple[str, int | None], at: float) -> None:
        """A ticket the target took a finish for stops being its lease there."""
        held = self.target_live.pop(key, None)
        if held is not None:
            self.closed.append(replace(held, ended=at if at < held.until else None))

    def stored(self, state: Snapshot, at: float) -> None:
        """The leases a stored state shows (read back after a kill) for the target."""
        self.rows("target", state.jobs, at)

    def evidence(self, summary: str, parted: int | None = None, **extra: str) -> Evidence:
        self.closed.extend(self.target_live.values())
        self.target_live = {}
        return super().evidence(summary, parted, **extra)
