"""What one side did in a step, and the sentences that say how two sides disagree.

Results are compared *strictly*: ``True`` and ``1`` differ, and so do ``{'a': 1}``
and a dict subclass with the same items, because the spec fixes exact types
("returns ``True``", "exactly a dict").
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from models.contracts import Snapshot

__all__ = ["Outcome", "Side", "same", "snapshot_differences"]


@dataclass
class Side:
    """One side of a step: who it is, its exception classes, what its callbacks saw."""

    name: str
    """'target' or 'model'."""
    errors: Any
    """The module whose ``Retryable``/``Permanent`` this side's ``send`` raises."""
    hooks: list[str] = field(default_factory=list)
    """Every point at which the fault hook was called, in order."""
    sends: list[object] = field(default_factory=list)
    """A copy of every payload ``send`` received, taken before any mutation."""


@dataclass
class Outcome:
    """What one call did on one side."""

    side: Side
    result: object = None
    error: Exception | None = None
    kind: str | None = None
    """The contract's name for ``error`` ('Conflict', 'ValueError', ...)."""

    def describe(self) -> str:
        if self.error is None:
            return f"returned {self.result!r}"
        text = str(self.error)
        detail = f": {text[:160]}" if text else ""
        return f"raised {self.kind} ({type(self.error).__name__}{detail})"


def same(left: object, right: object) -> bool:
    """Equal values of exactly the same types, recursively through dicts and sequences."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        assert isinstance(right, dict)
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list | tuple):
        assert isinstance(right, list | tuple)
        return len(left) == len(right) and all(map(same, left, right))
    return left == right


def snapshot_differences(target: Snapshot, model: Snapshot) -> list[str]:
    """One line per differing row: which job or audit row, and which columns differ."""
    lines = []
    ids = list(dict.fromkeys([row.id for row in model.jobs] + [row.id for row in target.jobs]))
    for job_id in ids:
        ours, theirs = target.job(job_id), model.job(job_id)
        if ours is None or theirs is None:
            where = "target" if ours is None else "model"
            lines.append(f"  job {job_id!r} is missing on the {where}")
        elif ours != theirs:
            columns = [
                f"{f.name}: target {getattr(ours, f.name)!r}, model {getattr(theirs, f.name)!r}"
                for f in fields(ours)
                if getattr(ours, f.name) != getattr(theirs, f.name)
            ]
            lines.append(f"  job {job_id!r}: " + "; ".join(columns))
    if [r.id for r in target.jobs] != [r.id for r in model.jobs] and not lines:
        lines.append("  the jobs are in a different seq order")
    if target.redrives != model.redrives:
        lines.append(
            f"  redrives: target has {len(target.redrives)} rows, model {len(model.redrives)}"
            f"; first difference at row {_first_difference(target.redrives, model.redrives)}"
        )
    return lines


def _first_difference(left: tuple[object, ...], right: tuple[object, ...]) -> int:
    return next(
        (i for i, (a, b) in enumerate(zip(left, right, strict=False)) if a != b),
        min(len(left), len(right)),
    )
