"""One queue operation as data: run on a target inside a child, or on the model in the harness.

An ``Op`` is picklable and printable, so a failing scenario lists the exact calls a
user can replay. ``Expected`` is what the model says an operation does: a result or
the name of the error it raises (error classes are compared by name, because a
target defines its own ``Conflict``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from leasecheck.crash_harness.engine import Outcome
from leasecheck.models import lease_model
from leasecheck.models.contracts import Fault, Snapshot
from leasecheck.targets.lease_compare import Outcome as Outcome_
from leasecheck.targets.lease_compare import kind_from_classes, same

__all__ = ["Expected", "Op", "agrees", "as_compared", "expect", "same"]

_MODEL_ERRORS = (
    lease_model.Conflict,
    lease_model.Retryable,
    lease_model.Permanent,
    lease_model.BadAck,
    ValueError,
)


@dataclass(frozen=True)
class Op:
    """``name(*args)`` on a queue: enqueue, claim, finish or redrive (connection implied)."""

    name: str
    args: tuple[Any, ...]

    def call(self, module: ModuleType, con: sqlite3.Connection, fault: Fault = None) -> Any:
        """Run on a target (in a child); enqueue takes no fault hook."""
        function = getattr(module, self.name)
        if self.name == "enqueue":
            return function(con, *self.args)
        return function(con, *self.args, fault=fault)

    def step(self, state: Snapshot) -> lease_model.Step:
        """Run on the model; raises the model's error for an invalid call."""
        function = getattr(lease_model, self.name)
        step: lease_model.Step = function(state, *self.args)
        return step

    def describe(self) -> str:
        return f"{self.name}({', '.join(repr(arg) for arg in self.args)})"


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


def expect(op: Op, state: Snapshot) -> Expected:
    """What ``op`` does to ``state`` according to the model."""
    try:
        step = op.step(state)
    except _MODEL_ERRORS as error:
        name = next(c.__name__ for c in _MODEL_ERRORS if isinstance(error, c))
        return Expected(state, error=name)
    points = step.before_commit + step.after_commit
    return Expected(step.state, step.result, None, points, len(step.before_commit))


def agrees(outcome: Outcome, expected: Expected) -> bool:
    """True if the target's outcome is the model's result, or an error of the same kind."""
    return as_compared(outcome).agrees_with(Outcome_(expected.result, expected.error))


def as_compared(outcome: Outcome) -> Outcome_:
    """A child's outcome (its error as class names) as the comparison core's ``Outcome``."""
    if outcome.error is None:
        return Outcome_(outcome.value)
    return Outcome_(error=kind_from_classes(outcome.error.classes), detail=outcome.error.message)
