"""Where things go in an evidence picture: the time axis, folded steps, packed rows.

The axis is time (model or wall ms), not one column per step, with two concessions
to reading: operations at the same millisecond (a shrunk program runs many at t=0)
stand side by side in their order at that instant, and a long stretch with nothing
in it is cut to a fixed width and drawn as an axis break that says how long it was.
A long program folds its uninvolved middle, so the step where target and model part
is on screen without scrolling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from leasecheck.models.evidence import Evidence, Step

__all__ = ["Axis", "Rows", "shown_steps"]

SLOT = 30.0
"""Pixels between two operations at the same instant."""
WIDTH, LONG, BREAK = 760.0, 6.0, 56.0
"""The plot's width to aim for, how many median gaps make a gap long (cut to an axis
break), an axis break's width."""
KEEP_HEAD, KEEP_TAIL, FOLD_OVER = 2, 6, 14


def shown_steps(evidence: Evidence) -> tuple[list[Step], list[tuple[Step, Step, int]]]:
    """The steps to draw and the folds (last shown before, first shown after, how many
    steps folded between). A long run keeps its first steps, the last ones up to the
    parting step, and the steps that made the leases of the job that step names; steps
    after the parting step are left out."""
    steps = [s for s in evidence.steps if evidence.parted is None or s.index <= evidence.parted]
    if len(steps) <= FOLD_OVER:
        return steps, []
    keep = {s.index for s in steps[:KEEP_HEAD] + steps[-KEEP_TAIL:]}
    parted = evidence.step(evidence.parted)
    jobs = {parted.job} if parted is not None and parted.job else set()
    keep |= {lease.step for lease in evidence.leases if lease.job in jobs and lease.step}
    shown = [s for s in steps if s.index in keep]
    folds = []
    for before, after in pairwise(shown):
        hidden = sum(1 for s in steps if before.index < s.index < after.index)
        if hidden:
            folds.append((before, after, hidden))
    return shown, folds


@dataclass
class Axis:
    """Time to x: each instant's position, the slots of its steps, and the breaks."""

    left: float
    moments: list[float] = field(default_factory=list)
    at: dict[float, float] = field(default_factory=dict)
    slots: dict[int, float] = field(default_factory=dict)
    """Step index -> its x."""
    breaks: list[tuple[float, float, float]] = field(default_factory=list)
    """(x of the break's middle, time before, time after)."""
    right: float = 0.0

    @classmethod
    def build(cls, left: float, times: Sequence[float], steps: Sequence[Step]) -> Axis:
        axis = cls(left)
        moments = sorted({*times, *(s.start for s in steps)})
        axis.moments = moments
        crowd = {t: [s for s in steps if s.start == t] for t in moments}
        gaps = [b - a for a, b in pairwise(moments)]
        room = WIDTH - sum(SLOT * max(len(c) - 1, 0) for c in crowd.values())
        scale, cap = _scale(gaps, room)
        x = left
        for index, t in enumerate(moments):
            axis.at[t] = x
            for slot, step in enumerate(crowd[t]):
                axis.slots[step.index] = x + slot * SLOT
            x += SLOT * max(len(crowd[t]) - 1, 0)
            if index < len(gaps):
                width = gaps[index] * scale
                if width > cap + 0.5:
                    axis.breaks.append((x + BREAK / 2, t, moments[index + 1]))
                    width = BREAK
                x += max(width, 4.0 if crowd[t] or crowd[moments[index + 1]] else 0.0)
        axis.right = x
        return axis

    def x(self, t: float) -> float:
        """The x of time ``t``: an instant of the axis, or between two (interpolated)."""
        if t in self.at:
            return self.at[t]
        before = [m for m in self.moments if m < t]
        after = [m for m in self.moments if m > t]
        if not before or not after:
            return self.at[before[-1]] if before else self.left
        a, b = before[-1], after[0]
        return self.at[a] + (self.at[b] - self.at[a]) * (t - a) / (b - a)


def _scale(gaps: Sequence[float], width: float) -> tuple[float, float]:
    """Pixels per ms, and the widest gap drawn to scale: a gap over ``LONG`` times the
    median is cut to an axis break, the rest share ``width`` in proportion."""
    positive = sorted(g for g in gaps if g > 0)
    width = max(width, 120.0)
    if not positive:
        return 1.0, float("inf")
    cut = LONG * positive[len(positive) // 2]
    short = [g for g in positive if g <= cut]
    room = max(width - BREAK * (len(positive) - len(short)), 120.0)
    return room / sum(short), cut * room / sum(short)


@dataclass
class Rows:
    """Rows of horizontal intervals: each placed item takes the first row it fits in."""

    gap: float = 6.0
    rows: list[list[tuple[float, float]]] = field(default_factory=list)

    def place(self, x1: float, x2: float) -> int:
        for number, row in enumerate(self.rows):
            if all(x2 + self.gap <= a or x1 >= b + self.gap for a, b in row):
                row.append((x1, x2))
                return number
        self.rows.append([(x1, x2)])
        return len(self.rows) - 1
