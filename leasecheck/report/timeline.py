"""The drawing-neutral picture of a counterexample: lanes, intervals, marks, one disagreement.

One lane per worker (owner, connection, process or thread), plus a ``queue`` lane for
what no worker does (enqueue, redrive, the state a scenario starts from) and a
``clock`` lane for clock moves. The horizontal axis is either the program's steps
(``axis="steps"``: one column per operation, with the time each ran at under it,
because many operations of a shrunk program happen at the same millisecond) or real
time in milliseconds (``axis="ms"``: a concurrent history, where overlap in real time
is what linearizability is about). ``build_timeline`` picks the reading from the
trace's shape; the SVG writer only draws what is here.
"""

from __future__ import annotations

from dataclasses import dataclass

from leasecheck.report.trace import Trace

__all__ = ["Disagreement", "Interval", "Mark", "Tick", "Timeline", "build_timeline"]

MARK_KINDS = (
    "enqueue", "claim", "commit", "refused", "kill", "clock", "send", "note", "result",
)  # fmt: skip
INTERVAL_KINDS = ("lease", "expired", "op", "op-conflict")


@dataclass(frozen=True)
class Tick:
    """A labelled position on the axis (``#3`` with ``t=100`` under it)."""

    at: float
    label: str
    note: str = ""


@dataclass(frozen=True)
class Interval:
    """A lease (from its claim to its end) or an operation's real-time span, on one lane."""

    lane: str
    start: float
    end: float
    label: str
    kind: str = "lease"
    step: int | None = None
    detail: str = ""
    open_end: bool = False
    """The interval runs past the last step (drawn with an arrow)."""


@dataclass(frozen=True)
class Mark:
    """One thing that happened at one position on one lane (a commit, a SIGKILL, ...)."""

    lane: str
    at: float
    label: str
    kind: str = "note"
    step: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class Disagreement:
    """Where the target and the model part ways (or the property's check fails)."""

    lane: str
    at: float
    step: int | None
    text: str


@dataclass(frozen=True)
class Timeline:
    title: str
    axis: str
    lanes: tuple[str, ...]
    ticks: tuple[Tick, ...]
    intervals: tuple[Interval, ...] = ()
    marks: tuple[Mark, ...] = ()
    disagreement: Disagreement | None = None
    caption: str = ""

    @property
    def span(self) -> tuple[float, float]:
        """The axis range every element fits in."""
        points = [t.at for t in self.ticks] + [m.at for m in self.marks]
        points += [p for i in self.intervals for p in (i.start, i.end)]
        if self.disagreement:
            points.append(self.disagreement.at)
        return (min(points, default=0.0), max(points, default=1.0))


def build_timeline(trace: Trace) -> Timeline | None:
    """The picture of ``trace``'s counterexample, or None when it has nothing to draw."""
    if trace.machine == "QueueMachine" and trace.program:
        from leasecheck.report._from_queue import queue_timeline

        return queue_timeline(trace)
    if trace.machine and trace.program:
        from leasecheck.report._from_program import program_timeline

        return program_timeline(trace)
    if trace.history:
        from leasecheck.report._from_history import history_timeline

        return history_timeline(trace)
    if trace.scenario:
        from leasecheck.report._from_scenario import scenario_timeline

        return scenario_timeline(trace)
    return None


def headline(trace: Trace) -> str:
    """The message line that says what disagreed (the target/model line when there is one)."""
    lines = [line.strip() for line in trace.message if line.strip()]
    for line in lines:
        if " on the target but " in line or line.startswith("-> "):
            return line.removeprefix("-> ").removeprefix("AssertionError: ")
    first = lines[0].removeprefix("AssertionError: ") if lines else trace.verdict
    if first.endswith(":") and len(lines) > 1:
        return f"{first} {lines[1]}"
    return first
