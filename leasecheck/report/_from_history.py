"""Timelines of non-linearizable histories (``lease.linearizable``, ``jobs.linearizable``).

Drawn as porcupine and Knossos draw them: one lane per process (or thread), each
operation a bar from its invocation to its response in real time, to scale. The
operations that no order explains are drawn in red, with the model's reason; the
checker prints each operation as
``P1#1 [    0.334 ms ..    47.606 ms] poll(worker_id='w1', ...) -> Lease(...)``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from leasecheck.report.timeline import Disagreement, Interval, Tick, Timeline, headline
from leasecheck.report.trace import Trace

__all__ = ["history_timeline"]

_OP = re.compile(
    r"^\s*(?P<process>\S+)#(?P<index>\d+) \[\s*(?P<start>[\d.]+) ms \.\.\s*"
    r"(?:(?P<end>[\d.]+) ms|never returned)\] (?P<rest>.*)$"
)
_CONFLICTS_START = "No operation that may come next"


@dataclass(frozen=True)
class _Op:
    process: str
    index: int
    start: float
    end: float | None
    text: str
    conflicting: bool
    reason: str = ""


def _ops(lines: tuple[str, ...]) -> list[_Op]:
    ops: list[_Op] = []
    conflicting = False
    for line in lines:
        match = _OP.match(line)
        if match:
            end = float(match["end"]) if match["end"] else None
            ops.append(
                _Op(match["process"], int(match["index"]), float(match["start"]), end,
                    match["rest"].strip(), conflicting)
            )  # fmt: skip
        elif line.startswith(_CONFLICTS_START):
            conflicting = True
        elif conflicting and ops and line.strip() and line.startswith(" "):
            last = ops[-1]
            ops[-1] = _Op(last.process, last.index, last.start, last.end, last.text, True,
                          line.strip())  # fmt: skip
    return ops


def _short(text: str) -> str:
    """``poll(…) -> Lease(… token=2 …)`` style label: the call name and a short outcome."""
    name = text.split("(", 1)[0]
    outcome = text.rsplit(" -> ", 1)[1] if " -> " in text else text.rsplit(")", 1)[-1].strip()
    token = re.search(r"'?token'?[:=] ?(\d+)", outcome)
    if token:
        outcome = f"token {token.group(1)}"
    elif len(outcome) > 14:
        outcome = outcome[:13] + "…"
    return f"{name} → {outcome}" if outcome else name


def _ticks(low: float, high: float) -> list[Tick]:
    span = max(high - low, 1e-3)
    step = 10 ** math.floor(math.log10(span / 5))
    step *= next(f for f in (1, 2, 5, 10) if span / (step * f) <= 6)
    first = math.floor(low / step) * step
    count = int((high - first) / step) + 2
    return [Tick(first + i * step, f"{first + i * step:g} ms") for i in range(count)]


def history_timeline(trace: Trace) -> Timeline:
    """Per-process real-time intervals; the operations no order explains in red."""
    ops = _ops(trace.history)
    horizon = max([op.end or op.start for op in ops], default=1.0)
    lanes: list[str] = []
    intervals = []
    for op in ops:
        if op.process not in lanes:
            lanes.append(op.process)
        end = op.end if op.end is not None else horizon
        detail = f"{op.process}#{op.index} [{op.start} ms .. {op.end} ms] {op.text}"
        detail += f"\n{op.reason}" if op.reason else ""
        kind = "op-conflict" if op.conflicting else "op"
        intervals.append(
            Interval(op.process, op.start, end, _short(op.text), kind, None, detail, op.end is None)
        )
    bad = next((op for op in ops if op.conflicting), None)
    disagreement = None
    if bad is not None:
        text = f"{bad.process}#{bad.index}: {bad.reason or 'not explained'} — {headline(trace)}"
        disagreement = Disagreement(bad.process, bad.end or horizon, None, text)
    caption = (
        "One lane per process; each bar runs from the operation's invocation to its response, "
        "in real time (ms from the first invocation). Grey: the longest explainable prefix "
        "the checker printed; red: operations no order that respects real time explains."
    )
    low = min([op.start for op in ops], default=0.0)
    return Timeline(
        f"{trace.property}: the history no sequential order explains", "ms", tuple(lanes),
        tuple(_ticks(low, horizon)), tuple(intervals), (), disagreement, caption,
    )  # fmt: skip
