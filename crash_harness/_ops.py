"""What the model says a lease-worker operation does, as the crash harness compares it.

The operation itself is ``models.lease_ops.LeaseOp`` (picklable and printable, so a
failing scenario lists the exact calls a user can replay). ``Expected`` is what the
model says one does: a result or the name of the error it raises (error classes are
compared by name, because a target defines its own ``Conflict``), with the hook points
it passes, so a harness knows which of them come after COMMIT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from leasecheck.crash_harness.engine import ChildResult
from leasecheck.models.contracts import Snapshot
from leasecheck.models.lease_ops import MODEL_ERRORS, LeaseOp, LeaseOutcome
from leasecheck.targets.lease_compare import kind_from_classes, same

__all__ = ["Expected", "agrees", "as_compared", "expect", "same"]


@dataclass(frozen=True)
class Expected:
    """The model's verdict on one operation: the state after, and a result or an error name."""

    state: Snapshot
    result: Any = None
    error: str | None = None
    points: tuple[str, ...] = ()
    committed_at: int = 0
    """Index in ``points`` of the first hook after COMMIT (== len(points) when none)."""

    def describe(self) -> str:
        return f"raises {self.error}" if self.error else f"returns {self.result!r}"


def expect(op: LeaseOp, state: Snapshot) -> Expected:
    """What ``op`` does to ``state`` according to the model."""
    try:
        step = op.step(state)
    except MODEL_ERRORS as error:
        name = next(c.__name__ for c in MODEL_ERRORS if isinstance(error, c))
        return Expected(state, error=name)
    points = step.before_commit + step.after_commit
    return Expected(step.state, step.result, None, points, len(step.before_commit))


def agrees(outcome: ChildResult, expected: Expected) -> bool:
    """True if the target's outcome is the model's result, or an error of the same kind."""
    return as_compared(outcome).agrees_with(LeaseOutcome(expected.result, expected.error))


def as_compared(outcome: ChildResult) -> LeaseOutcome:
    """A child's result (its error as class names) as the contract's ``LeaseOutcome``."""
    if outcome.error is None:
        return LeaseOutcome(outcome.value)
    return LeaseOutcome(
        error=kind_from_classes(outcome.error.classes), detail=outcome.error.message
    )
