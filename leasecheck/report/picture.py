"""The picture of one failure: a pure function from its ``Evidence`` to SVG text.

One lane per actor (process, thread, connection, worker; ``queue`` for what no
worker does, ``clock`` for clock moves). Time runs left to right on a labelled axis
(``_layout``). In each lane: the leases its holder held, as bars from their start to
their end, the target's and the model's one above the other where they differ (one
bar where they agree); under them one glyph per operation, the same glyphs as the
legend drawn under the picture; under those the labels, each in the first row where
it overlaps no other. Across the lanes: each job's deadline (a dashed line), two live
leases of one job shaded where they overlap, and the red line where the target and
the model part, with what each side said under the axis.

Every element carries ``data-kind`` (``lease``, ``deadline``, ``overlap``, ``step``,
``event``, ``fold``, ``break``), its ``data-lane`` and, for leases and steps,
``data-job`` and ``data-token``, so a test finds them through the DOM. Labels are
monospace, so their width is known here and the no-overlap rule can be checked.

The words in the picture are data, never a message's: a step whose harness kept its
operation record (``Step.call``) is named and drawn by that record's own line and kind
(``record_from_json``); the failure's summary (a message's first line) is not drawn
(the page prints it beside the picture), so rewording a message changes no picture.
"""

from __future__ import annotations

import html
import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass

from leasecheck.models.evidence import Event, Evidence, Lease, Step
from leasecheck.models.operations import record_from_json
from leasecheck.report._layout import SLOT, Axis, Rows, shown_steps

__all__ = ["CHAR", "STYLE", "draw", "escape"]

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def escape(text: str) -> str:
    """``text`` for SVG/HTML: markup escaped, and the control characters XML forbids (a
    worker id of "\\x0b" is one of the spec's edges) written as ``\\xNN``."""
    return html.escape(_CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text))


def _name(lane: str) -> str:
    """A lane's printed name: a blank or odd name (an edge the spec rejects) as its repr."""
    return lane if lane.strip() == lane and lane.isprintable() and lane else repr(lane)


LEFT, TOP, BAR, GLYPHS, LINE = 150.0, 10.0, 17.0, 26.0, 15.0
"""Lane-name gutter, top padding, lease bar height, glyph row, label row."""
CHAR = 6.7
"""Width of one character of an 11px monospace label (0.6 em, with a margin)."""
STYLE = """
.lc-pic .lc-lane-bg { fill: #f6f7f9; }
.lc-pic .lc-lane-bg.lc-alt { fill: #eceef2; }
.lc-pic .lc-lane-name { font: bold 12px monospace; fill: #222; }
.lc-pic text { font: 11px monospace; fill: #222; }
.lc-pic .lc-lease rect { fill: #4a7bd0; stroke: #2c569f; }
.lc-pic .lc-lease.lc-side-model rect { fill: #e6edf9; stroke: #4a7bd0; stroke-dasharray: 4 2; }
.lc-pic .lc-lease.lc-side-target text, .lc-pic .lc-lease.lc-side-both text { fill: #fff; }
.lc-pic .lc-deadline line { stroke: #c25e00; stroke-width: 2; stroke-dasharray: 6 3; }
.lc-pic .lc-deadline text { fill: #9a4a00; }
.lc-pic .lc-overlap { fill: #d0021b; fill-opacity: 0.18; stroke: #d0021b; stroke-dasharray: 3 2; }
.lc-pic .lc-op { fill: #c9ced6; }
.lc-pic .lc-glyph-claim { fill: #2c569f; }
.lc-pic .lc-glyph-run { fill: #2c569f; }
.lc-pic .lc-glyph-finish { fill: #2e9b4f; }
.lc-pic .lc-glyph-enqueue { fill: #777; }
.lc-pic .lc-glyph-redrive { fill: #7b4fc0; }
.lc-pic .lc-glyph-other { fill: #999; }
.lc-pic .lc-glyph-send { fill: #7b4fc0; }
.lc-pic .lc-glyph-check { fill: #333; }
.lc-pic .lc-glyph-kill { stroke: #000; stroke-width: 3.5; fill: none; }
.lc-pic .lc-glyph-power-cut { fill: #e0b000; stroke: #000; }
.lc-pic .lc-glyph-clock { fill: #e08a1e; }
.lc-pic .lc-glyph-pause { stroke: #000; stroke-width: 3; fill: none; }
.lc-pic .lc-tick { stroke: #c9ced6; stroke-dasharray: 2 3; }
.lc-pic .lc-break path { stroke: #555; fill: none; stroke-width: 1.5; }
.lc-pic .lc-fold rect { fill: #fff; stroke: #999; stroke-dasharray: 2 2; }
.lc-pic .lc-disagreement line { stroke: #d0021b; stroke-width: 3; }
.lc-pic .lc-disagreement circle { fill: none; stroke: #d0021b; stroke-width: 3; }
.lc-pic .lc-disagreement text { font: bold 11px monospace; fill: #b00015; }
.lc-pic .lc-axis-name { fill: #555; }
"""
LEASE_LEGEND = "lease (dashed: the model's, where it differs)"
FAMILIES = {
    "enqueue": "enqueue", "enqueue_first": "enqueue", "submit": "enqueue",
    "claim": "claim", "poll": "claim", "run_once": "run", "run_file": "run",
    "finish": "finish", "complete": "finish", "fail": "finish", "ack": "finish",
    "nack": "finish", "extend": "finish", "redrive": "redrive", "recover": "redrive",
    "send": "send", "kill": "kill", "pause": "pause", "power-cut": "power-cut", "clock": "clock",
}  # fmt: skip
"""Operation and event names -> the glyph drawn for them (anything else: 'other')."""
GLYPH_NAMES = {
    "enqueue": "enqueue", "claim": "claim", "run": "run_once / run_file",
    "finish": "finish / ack", "redrive": "redrive / recover", "send": "send",
    "other": "other call", "kill": "SIGKILL", "pause": "SIGSTOP", "power-cut": "power cut",
    "clock": "clock move",
}  # fmt: skip


def family(kind: str) -> str:
    """The glyph of an operation or event name (a glyph's own name stands for itself)."""
    return kind if kind in GLYPH_NAMES else FAMILIES.get(kind, "other")


@dataclass(frozen=True)
class _Bar:
    lease: Lease
    side: str
    """'target', 'model' or 'both' (the two sides hold the same lease)."""

    one_side: bool = False
    """Only one side recorded leases: no side is named."""

    @property
    def label(self) -> str:
        lease = self.lease
        token = "" if lease.token is None else f" · token {lease.token}"
        text = f"{lease.job}{token} · until {_time(lease.until)}"
        return text if self.side == "both" or self.one_side else f"{text} ({self.side})"


def _bars(leases: Iterable[Lease], one_side: bool) -> list[_Bar]:
    """One bar per lease; a lease both sides hold alike is one bar (side 'both')."""
    leases = list(leases)
    bars = []
    for lease in leases:
        twin = next((o for o in leases if o.side != lease.side and o.same_lease(lease)), None)
        if twin is None:
            bars.append(_Bar(lease, lease.side, one_side))
        elif lease.side == "target":
            bars.append(_Bar(lease, "both"))
    order = {"target": 0, "both": 0, "model": 1}
    return sorted(bars, key=lambda b: (b.lease.start, b.lease.job, order[b.side]))


def _token(token: object) -> str:
    """A token for an attribute (a library's receipt is any text)."""
    return escape(str(token))


def _time(t: float) -> str:
    return f"t={t:g}"


class _Picture:
    def __init__(self, evidence: Evidence) -> None:
        self.e = evidence
        self.steps, self.folds = shown_steps(evidence)
        self.leases = [lease for lease in evidence.leases if self._by_then(lease.step)]
        self.events = [event for event in evidence.events if self._by_then(event.step)]
        self.one_side = len({lease.side for lease in self.leases}) < 2
        jobs = {s.job for s in self.steps if s.job} | {lease.job for lease in self.leases}
        self.deadlines = [d for d in evidence.deadlines if d.job in jobs]
        times = [t for lease in self.leases for t in (lease.start, lease.end)]
        times += [d.at for d in self.deadlines] + [e.at for e in self.events]
        times += [s.end for s in self.steps if s.end is not None]
        self.axis = Axis.build(LEFT + 24, times, self.steps)
        self.lanes = self._lane_names()
        self.parts: list[str] = []
        self.top: dict[str, float] = {}
        self.height: dict[str, float] = {}
        self.right = self.axis.right + 24

    def _by_then(self, step: int | None) -> bool:
        """Made by the parting step or before it (what came after is not drawn)."""
        return step is None or self.e.parted is None or step <= self.e.parted

    def _lane_names(self) -> list[str]:
        """The actors with something drawn, in the evidence's order."""
        used = [s.actor for s in self.steps] + [lease.holder for lease in self.leases]
        used += [event.actor for event in self.events]
        names = [a.name for a in self.e.actors if a.name in used]
        return list(dict.fromkeys(names + used))

    def step_x(self, step: Step) -> float:
        return self.axis.slots.get(step.index, self.axis.x(step.start))

    def event_x(self, event: Event) -> float:
        """An event at the instant of its step stands just after that step's glyph."""
        made = self.e.step(event.step)
        if made is not None and made.start == event.at and made.index in self.axis.slots:
            return self.axis.slots[made.index] + SLOT / 2
        return self.axis.x(event.at)

    def lease_x(self, lease: Lease) -> tuple[float, float]:
        """A lease's bar starts at the step that made it, when that step is drawn."""
        made = self.e.step(lease.step)
        x1 = self.axis.x(lease.start)
        if made is not None and made.start == lease.start and made.index in self.axis.slots:
            x1 = self.axis.slots[made.index]
        return x1, max(self.axis.x(lease.end), x1 + 10)

    # --- the whole picture ----------------------------------------------------------------

    def svg(self, standalone: bool) -> str:
        header = self._deadline_labels()
        y = TOP + header
        backgrounds: list[str] = []
        contents: list[str] = []
        for number, lane in enumerate(self.lanes):
            self.top[lane] = y
            height, content = self._lane(lane, y)
            self.height[lane] = height
            backgrounds.append(self._lane_background(lane, y, height, number))
            contents += content
            y += height
        bottom = y
        axis, axis_height = self._axis(bottom)
        under = self._parted_text(bottom + axis_height)
        legend_y = bottom + axis_height + 18 * len(under) + 14
        legend, legend_right = self._legend(legend_y)
        height = legend_y + 26
        width = max(self.right, legend_right, LEFT + 420) + 10
        body = [
            *backgrounds,
            *self._overlaps(),
            *self._deadlines(TOP + header, bottom),
            *contents,
            *axis,
            *self._folds(bottom),
            *self._parted(TOP + header, bottom, under, bottom + axis_height),
            *legend,
        ]
        return "\n".join(
            [
                f'<svg xmlns="http://www.w3.org/2000/svg" class="lc-timeline lc-pic" '
                f'width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} '
                f'{height:.0f}" role="img" data-unit="{escape(self.e.unit)}" '
                f'aria-label="{escape(self._caption())}">',
                f"<title>{escape(self._caption())}</title>",
                f"<style>{STYLE}</style>" if standalone else "",
                *self.parts,
                *body,
                "</svg>",
            ]
        )

    def _caption(self) -> str:
        """What the picture shows, from the evidence's data alone."""
        step = self.e.step(self.e.parted)
        where = f"; target and model part at step {step.index}: {said(step)[0]}" if step else ""
        return f"timeline of {len(self.e.steps)} steps on {len(self.lanes)} lanes{where}"

    # --- lanes ----------------------------------------------------------------------------

    def _lane_background(self, lane: str, y: float, height: float, number: int) -> str:
        alt = " lc-alt" if number % 2 else ""
        return (
            f'<g class="lc-lane" data-lane="{escape(lane)}">'
            f'<rect class="lc-lane-bg{alt}" x="0" y="{y:.1f}" width="100%" '
            f'height="{height:.1f}"/><text class="lc-lane-name" x="8" '
            f'y="{y + 16:.1f}">{escape(_name(lane))}</text></g>'
        )

    def _lane(self, lane: str, y: float) -> tuple[float, list[str]]:
        """The lane's height and its elements: lease bars, glyphs, labels."""
        out: list[str] = []
        bars = _bars((x for x in self.leases if x.holder == lane), self.one_side)
        packed = Rows(gap=2)
        placed = []
        for bar in bars:
            x1, x2 = self.lease_x(bar.lease)
            placed.append((bar, x1, x2, packed.place(x1, x2)))
        bar_rows = len(packed.rows)
        for bar, x1, x2, row in placed:
            out.append(self._bar(bar, lane, x1, x2, y + 6 + row * (BAR + 3)))
        glyph_y = y + 6 + bar_rows * (BAR + 3) + GLYPHS / 2
        labels = Rows(gap=8)
        items: list[tuple[float, str, str]] = []
        for step in (s for s in self.steps if s.actor == lane):
            x = self.step_x(step)
            if step.end is not None:
                out.append(self._op_span(step, lane, x, glyph_y))
            out.append(self._step(step, lane, x, glyph_y))
            items.append((x, _step_label(step), f"step {step.index}"))
        for event in (e for e in self.events if e.actor == lane):
            x = self.event_x(event)
            out.append(self._event(event.kind, lane, x, glyph_y, event.label, event.step))
            items.append((x, event.label, event.kind))
        label_rows: list[tuple[float, int, str]] = []
        for x, text, _ in sorted(items):
            row = labels.place(x - 4, x - 4 + len(text) * CHAR)
            label_rows.append((x - 4, row, text))
        base = glyph_y + GLYPHS / 2 + 10
        for x1, row, text in label_rows:
            out.append(
                f'<text class="lc-label" data-lane="{escape(lane)}" x="{x1:.1f}" '
                f'y="{base + row * LINE:.1f}">{escape(text)}</text>'
            )
            self.right = max(self.right, x1 + len(text) * CHAR + 8)
        height = 6 + bar_rows * (BAR + 3) + GLYPHS + len(labels.rows) * LINE + 10
        return max(height, 44.0), out

    def _bar(self, bar: _Bar, lane: str, x1: float, x2: float, y: float) -> str:
        lease = bar.lease
        room = int((x2 - x1 - 8) / CHAR)
        text = bar.label if len(bar.label) <= room else bar.label[: max(room - 1, 0)] + "…"
        label = (
            f'<text x="{x1 + 4:.1f}" y="{y + 12.5:.1f}">{escape(text)}</text>' if room >= 2 else ""
        )
        ended = f"; ended at {_time(lease.ended)}" if lease.ended is not None else ""
        token = "" if lease.token is None else f" with token {lease.token}"
        title = (
            f"{bar.label}: job {lease.job!r} leased to {lease.holder!r}{token} "
            f"from {_time(lease.start)} until {_time(lease.until)}{ended}"
        )
        return (
            f'<g class="lc-lease lc-side-{bar.side}" data-kind="lease" data-lane="{escape(lane)}"'
            f' data-job="{escape(lease.job)}" data-token="{_token(lease.token)}"'
            f' data-side="{bar.side}"'
            f' data-start="{lease.start:g}" data-end="{lease.end:g}"'
            f' data-x1="{x1:.1f}" data-x2="{x2:.1f}"><title>{escape(title)}</title>'
            f'<rect x="{x1:.1f}" y="{y:.1f}" width="{x2 - x1:.1f}" height="{BAR}" rx="3"/>'
            f"{label}</g>"
        )

    def _op_span(self, step: Step, lane: str, x: float, y: float) -> str:
        end = self.axis.x(step.end if step.end is not None else step.start)
        return (
            f'<rect class="lc-op" data-kind="op" data-lane="{escape(lane)}" '
            f'data-step="{step.index}" x="{x:.1f}" y="{y - 5:.1f}" '
            f'width="{max(end - x, 2):.1f}" height="10" rx="3"/>'
        )

    def _step(self, step: Step, lane: str, x: float, y: float) -> str:
        sides = f"target {step.target}" if step.target else ""
        if step.model and step.model != step.target:
            sides += f"; model {step.model}"
        line, kind = said(step)
        title = f"#{step.index} at {_time(step.start)}: {line}" + (f" — {sides}" if sides else "")
        token = f' data-job="{escape(step.job)}"' if step.job else ""
        token += f' data-token="{_token(step.token)}"' if step.token is not None else ""
        return (
            f'<g class="lc-step" data-kind="step" data-step-kind="{escape(kind)}" '
            f'data-lane="{escape(lane)}" data-step="{step.index}"{token} data-x="{x:.1f}">'
            f"<title>{escape(title)}</title>{glyph(kind, x, y)}</g>"
        )

    def _event(self, kind: str, lane: str, x: float, y: float, label: str, step: int | None) -> str:
        at = f' data-step="{step}"' if step is not None else ""
        return (
            f'<g class="lc-event" data-kind="event" data-event="{escape(kind)}" '
            f'data-lane="{escape(lane)}"{at} data-x="{x:.1f}"><title>{escape(label)}</title>'
            f"{glyph(kind, x, y)}</g>"
        )

    # --- across lanes ---------------------------------------------------------------------

    def _deadline_labels(self) -> float:
        """Place each deadline's label in a header row; returns the header's height."""
        rows = Rows(gap=10)
        self.deadline_rows: dict[str, int] = {}
        for deadline in sorted(self.deadlines, key=lambda d: d.at):
            x = self.axis.x(deadline.at)
            text = f"deadline {deadline.job}: {_time(deadline.at)}"
            self.deadline_rows[deadline.job] = rows.place(x - 4, x - 4 + len(text) * CHAR)
            self.right = max(self.right, x + len(text) * CHAR + 8)
        return len(rows.rows) * LINE + (6 if rows.rows else 0)

    def _deadlines(self, top: float, bottom: float) -> list[str]:
        out = []
        for deadline in self.deadlines:
            x = self.axis.x(deadline.at)
            row = self.deadline_rows[deadline.job]
            text = f"deadline {deadline.job}: {_time(deadline.at)}"
            out.append(
                f'<g class="lc-deadline" data-kind="deadline" data-job="{escape(deadline.job)}"'
                f' data-at="{deadline.at:g}" data-x="{x:.1f}">'
                f'<line x1="{x:.1f}" y1="{top - 2:.1f}" x2="{x:.1f}" y2="{bottom:.1f}"/>'
                f'<text x="{x - 4:.1f}" y="{TOP + 10 + row * LINE:.1f}">{escape(text)}</text></g>'
            )
        return out

    def _overlaps(self) -> list[str]:
        """Two live leases of one job on one side, shaded where they overlap in time."""
        out = []
        for first, second in _overlapping(self.leases):
            start, end = max(first.start, second.start), min(first.end, second.end)
            x1 = max(self.lease_x(first)[0], self.lease_x(second)[0])
            x2 = min(self.lease_x(first)[1], self.lease_x(second)[1])
            lanes = [first.holder, second.holder]
            y1 = min(self.top[lane] for lane in lanes)
            y2 = max(self.top[lane] + self.height[lane] for lane in lanes)
            out.append(
                f'<rect class="lc-overlap" data-kind="overlap" data-job="{escape(first.job)}"'
                f' data-side="{first.side}"'
                f' data-tokens="{_token(first.token)} {_token(second.token)}"'
                f' data-lanes="{escape(" ".join(lanes))}" x="{x1:.1f}" y="{y1:.1f}"'
                f' width="{max(x2 - x1, 3):.1f}" height="{y2 - y1:.1f}">'
                f"<title>{escape(f'job {first.job}: two live leases ({first.holder} token ')}"
                f"{escape(f'{first.token}, {second.holder} token {second.token}) from ')}"
                f"{_time(start)} to {_time(end)}</title></rect>"
            )
        return out

    def _axis(self, y: float) -> tuple[list[str], float]:
        unit = {"model ms": "model time (ms)", "wall ms": "wall ms since start"}.get(
            self.e.unit, "scheduling step"
        )
        out = [f'<text class="lc-axis-name" x="8" y="{y + 16:.1f}">{escape(unit)}</text>']
        rows = Rows(gap=8)
        for t in self.axis.moments:
            x = self.axis.x(t)
            text = (
                _time(t)
                if self.e.unit == "model ms"
                else (f"#{t:g}" if self.e.unit == "step" else f"{t:.3g}")
            )
            row = rows.place(x - len(text) * CHAR / 2, x + len(text) * CHAR / 2)
            if row > 1:
                continue  # two rows of ticks are enough; the tooltips of steps keep the rest
            left = x - len(text) * CHAR / 2
            out.append(
                f'<g class="lc-axis-tick" data-at="{t:g}"><line class="lc-tick" x1="{x:.1f}" '
                f'y1="{TOP}" x2="{x:.1f}" y2="{y + 4:.1f}"/><text x="{left:.1f}"'
                f' y="{y + 16 + row * LINE:.1f}">{escape(text)}</text></g>'
            )
        for x, before, after in self.axis.breaks:
            out.append(
                f'<g class="lc-break" data-kind="break" data-from="{before:g}" '
                f'data-to="{after:g}"><title>axis break: {after - before:g} ms with nothing '
                f'in it</title><path d="M{x - 6:.1f},{y + 6} l4,-8 l4,8 l4,-8"/></g>'
            )
        return out, 16 + len(rows.rows[:2]) * LINE + 8

    def _folds(self, y: float) -> list[str]:
        out = []
        for before, after, hidden in self.folds:
            x1, x2 = self.step_x(before), self.step_x(after)
            x = (x1 + x2) / 2
            out.append(
                f'<g class="lc-fold" data-kind="fold" data-hidden="{hidden}">'
                f"<title>{hidden} steps between #{before.index} and #{after.index} are folded: "
                f"they involve neither the failing job nor its worker</title>"
                f'<rect x="{x - 9:.1f}" y="{y - 14:.1f}" width="18" height="10"/></g>'
            )
        return out

    def _parted_text(self, y: float) -> list[str]:
        step = self.e.step(self.e.parted)
        lines = [f"✗ step {step.index}: {said(step)[0]}" if step else "✗ after the last step"]
        if step is not None and step.target and step.model and step.target != step.model:
            lines += [f"target: {step.target}", f"model:  {step.model}"]
        columns = int((max(self.right, LEFT + 420) - 16) / CHAR)
        wrapped = [part for line in lines for part in textwrap.wrap(line, columns)]
        return wrapped[:8] + (["…"] if len(wrapped) > 8 else [])

    def _parted(self, top: float, bottom: float, text: list[str], y: float) -> list[str]:
        step = self.e.step(self.e.parted)
        lane = step.actor if step else (self.lanes[0] if self.lanes else "")
        index = f' data-step="{step.index}"' if step else ""
        texts = "".join(
            f'<text x="8" y="{y + 12 + 18 * i:.1f}">{escape(line)}</text>'
            for i, line in enumerate(text)
        )
        mark = ""
        if step is not None and step.index in self.axis.slots:
            x = self.step_x(step)
            glyph_y = self._glyph_y(step.actor)
            mark = (
                f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}"/>'
                f'<circle cx="{x:.1f}" cy="{glyph_y:.1f}" r="12"/>'
            )
        return [
            f'<g class="lc-disagreement" data-kind="parted" data-lane="{escape(lane)}"{index}>'
            f"<title>{escape(self._caption())}</title>{mark}{texts}</g>"
        ]

    def _glyph_y(self, lane: str) -> float:
        bars = _bars((x for x in self.leases if x.holder == lane), self.one_side)
        rows = Rows(gap=2)
        for bar in bars:
            rows.place(*self.lease_x(bar.lease))
        return self.top[lane] + 6 + len(rows.rows) * (BAR + 3) + GLYPHS / 2

    def _legend(self, y: float) -> tuple[list[str], float]:
        names = [said(s)[1] for s in self.steps] + [e.kind for e in self.events]
        kinds = list(dict.fromkeys(family(name) for name in names))
        out, x = [], 8.0
        for kind in kinds:
            name = GLYPH_NAMES.get(kind, kind)
            out.append(
                f'<g class="lc-legend-item" data-kind="legend" data-glyph="{escape(kind)}">'
                f'{glyph(kind, x + 7, y)}<text x="{x + 18:.1f}" y="{y + 4:.1f}">'
                f"{escape(name)}</text></g>"
            )
            x += 30 + len(name) * CHAR
        if self.leases:
            out.append(
                f'<g class="lc-legend-item" data-glyph="lease"><rect class="lc-legend-bar" '
                f'x="{x:.1f}" y="{y - 6:.1f}" width="22" height="12" fill="#4a7bd0"/>'
                f'<text x="{x + 28:.1f}" y="{y + 4:.1f}">{LEASE_LEGEND}</text></g>'
            )
            x += 36 + len(LEASE_LEGEND) * CHAR
        return out, x


def said(step: Step) -> tuple[str, str]:
    """The step's line and kind: its operation record's own (``describe()`` and ``kind``)
    where the harness kept the record, else the line and kind the harness recorded."""
    record = record_from_json(step.call) if step.call else None
    if record is None:
        return step.operation, step.kind
    return record.describe(), record.kind


def _step_label(step: Step) -> str:
    job = f" {step.job}" if step.job else ""
    token = f" token {step.token}" if step.token is not None else ""
    return f"#{step.index} {said(step)[1]}{job}{token}"


def _overlapping(leases: Iterable[Lease]) -> list[tuple[Lease, Lease]]:
    """Pairs of one side's leases of one job, held by two holders or tokens at once."""
    leases = sorted(leases, key=lambda x: (x.side, x.job, x.start))
    found = []
    for i, first in enumerate(leases):
        for second in leases[i + 1 :]:
            same = (first.side, first.job) == (second.side, second.job)
            other = (first.holder, first.token) != (second.holder, second.token)
            if same and other and second.start < first.end and first.start < second.end:
                found.append((first, second))
    return found


def glyph(kind: str, x: float, y: float) -> str:
    """The shape of one kind of step or event; the legend draws the same function."""
    kind = family(kind)
    css = f'class="lc-glyph lc-glyph-{kind}"'
    points: list[tuple[float, float]] = []
    if kind == "kill":
        return f'<path {css} d="M{x - 6:.1f},{y - 6:.1f} l12,12 m0,-12 l-12,12"/>'
    if kind == "pause":
        return f'<path {css} d="M{x - 3:.1f},{y - 6:.1f} v12 M{x + 3:.1f},{y - 6:.1f} v12"/>'
    if kind == "enqueue":
        return f'<rect {css} x="{x - 5:.1f}" y="{y - 5:.1f}" width="10" height="10"/>'
    if kind == "claim":
        points = [(x - 6, y + 5), (x + 6, y + 5), (x, y - 6)]
    elif kind in ("run", "send"):
        points = [(x - 5, y - 6), (x + 7, y), (x - 5, y + 6)]
    elif kind == "clock":
        points = [(x, y - 7), (x + 7, y), (x, y + 7), (x - 7, y)]
    elif kind == "power-cut":
        points = [(x + 1, y - 8), (x - 5, y + 1), (x, y + 1), (x - 1, y + 8), (x + 5, y - 1)]
        points.append((x, y - 1))
    elif kind == "redrive":
        points = [(x - 6, y), (x + 6, y - 6), (x + 6, y + 6)]
    if points:
        text = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        return f'<polygon {css} points="{text}"/>'
    return f'<circle {css} cx="{x:.1f}" cy="{y:.1f}" r="6"/>'


def draw(evidence: Evidence, *, standalone: bool = False) -> str:
    """The SVG of ``evidence``; ``standalone`` embeds the stylesheet (an ``.svg`` file)."""
    return _Picture(evidence).svg(standalone)
