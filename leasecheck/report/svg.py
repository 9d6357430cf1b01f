"""Plain SVG text for a ``Timeline``, written by this module with no drawing dependency.

Why plain SVG written by hand rather than a plotting library: the picture is a few
dozen rectangles, lines and labels; SVG text needs no package, no font files and no
network, opens from a file in any browser, embeds inline in the HTML report (so the
report is one file), and is diffable text in docs/. Every element carries classes and
``data-*`` attributes (``data-lane``, ``data-step``, ``data-kind``) so a test can find
the lanes and the marked step through the DOM, and a ``<title>`` (the browser's own
tooltip, no JavaScript) with the full text of the step. All text is XML-escaped.
"""

from __future__ import annotations

import textwrap
from html import escape

from leasecheck.report.timeline import Disagreement, Interval, Mark, Timeline

__all__ = ["STYLE", "render_svg"]

LEFT, TOP, LANE, COLUMN, PLOT, MIN_PLOT = 130, 12, 74, 118, 860, 640
"""Lane-name gutter, top padding, lane height, column width (steps), plot width (ms)."""
STYLE = """
.lc-lane-bg { fill: #f6f7f9; } .lc-lane-bg.lc-alt { fill: #eceef2; }
.lc-lane-name { font: bold 13px sans-serif; fill: #222; }
.lc-tick { stroke: #c9ced6; stroke-dasharray: 2 3; }
.lc-tick-label { font: 11px sans-serif; fill: #444; text-anchor: middle; }
.lc-tick-note { font: 10px monospace; fill: #777; text-anchor: middle; }
.lc-interval rect { fill: #4a7bd0; stroke: #2c569f; }
.lc-interval.lc-kind-expired rect { fill: #a9bde3; stroke: #6f8fca; stroke-dasharray: 4 2; }
.lc-interval.lc-kind-op rect { fill: #b8bec8; stroke: #7d8591; }
.lc-interval.lc-kind-op-conflict rect { fill: #e0524d; stroke: #a01d18; }
.lc-interval text { font: 11px sans-serif; fill: #fff; }
.lc-interval.lc-kind-op text, .lc-interval.lc-kind-expired text,
.lc-interval text.lc-outside { fill: #111; }
.lc-mark text { font: 10px sans-serif; fill: #222; text-anchor: middle; }
.lc-kind-commit .lc-shape { fill: #2e9b4f; } .lc-kind-claim .lc-shape { fill: #2c569f; }
.lc-kind-refused .lc-shape { fill: #fff; stroke: #666; stroke-width: 2; }
.lc-kind-kill .lc-shape { stroke: #000; stroke-width: 4; }
.lc-kind-clock .lc-shape { fill: #e08a1e; } .lc-kind-send .lc-shape { fill: #7b4fc0; }
.lc-kind-enqueue .lc-shape { fill: #777; } .lc-kind-note .lc-shape { fill: #999; }
.lc-kind-result .lc-shape { fill: #333; }
.lc-disagreement line { stroke: #d0021b; stroke-width: 3; }
.lc-disagreement circle { fill: none; stroke: #d0021b; stroke-width: 3; }
.lc-disagreement text { font: bold 12px sans-serif; fill: #b00015; }
"""


class _Scale:
    def __init__(self, timeline: Timeline) -> None:
        self.low, self.high = timeline.span
        self.steps = timeline.axis == "steps"
        count = self.high - self.low + 1
        self.width = max(int(count * COLUMN), MIN_PLOT) if self.steps else PLOT

    def x(self, at: float) -> float:
        if self.steps:
            return LEFT + (at - self.low + 0.5) * COLUMN
        return LEFT + 10 + (at - self.low) / max(self.high - self.low, 1e-9) * (PLOT - 20)


def render_svg(timeline: Timeline, *, standalone: bool = False) -> str:
    """The timeline as one ``<svg>`` element; ``standalone`` embeds the stylesheet (for an
    ``.svg`` file; inline in HTML the page's stylesheet serves every picture)."""
    scale = _Scale(timeline)
    lanes: dict[str, float] = {name: TOP + i * LANE for i, name in enumerate(timeline.lanes)}
    axis_y = TOP + len(lanes) * LANE
    message = _wrapped(timeline.disagreement, int((scale.width + LEFT - 60) / 7.4))
    height = axis_y + 44 + 17 * len(message) + 8
    width = LEFT + scale.width + 20
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="lc-timeline" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'data-axis="{escape(timeline.axis)}" aria-label="{escape(timeline.title)}">',
        f"<title>{escape(timeline.title)}</title>",
        f"<style>{STYLE}</style>" if standalone else "",
        *_lanes(lanes, width),
        *_ticks(timeline, scale, axis_y),
        *(_interval(i, scale, lanes[i.lane]) for i in timeline.intervals),
        *(_mark(m, scale, lanes[m.lane]) for m in timeline.marks),
    ]
    if timeline.disagreement:
        parts.append(_disagreement(timeline.disagreement, scale, lanes, axis_y, message))
    parts.append("</svg>")
    return "\n".join(parts)


def _lanes(lanes: dict[str, float], width: int) -> list[str]:
    out = []
    for index, (name, y) in enumerate(lanes.items()):
        alt = " lc-alt" if index % 2 else ""
        out.append(
            f'<g class="lc-lane" data-lane="{escape(name)}">'
            f'<rect class="lc-lane-bg{alt}" x="0" y="{y}" width="{width}" height="{LANE}"/>'
            f'<text class="lc-lane-name" x="8" y="{y + LANE / 2 + 4}">{escape(name)}</text></g>'
        )
    return out


def _ticks(timeline: Timeline, scale: _Scale, axis_y: float) -> list[str]:
    out = []
    for tick in timeline.ticks:
        x = scale.x(tick.at)
        out.append(
            f'<g class="lc-axis-tick" data-at="{tick.at:g}">'
            f'<line class="lc-tick" x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{axis_y}"/>'
            f'<text class="lc-tick-label" x="{x:.1f}" y="{axis_y + 15}">{escape(tick.label)}</text>'
            f'<text class="lc-tick-note" x="{x:.1f}" y="{axis_y + 29}">{escape(tick.note)}</text>'
            "</g>"
        )
    return out


def _attributes(css: str, kind: str, lane: str, label: str) -> str:
    kind, lane, label = escape(kind), escape(lane), escape(label)
    return (
        f'class="{css} lc-kind-{kind}" data-kind="{kind}" data-lane="{lane}" data-label="{label}"'
    )


def _step_attr(step: int | None) -> str:
    return f' data-step="{step}"' if step is not None else ""


def _interval(interval: Interval, scale: _Scale, lane_y: float) -> str:
    x1, x2 = scale.x(interval.start), scale.x(interval.end)
    if x2 - x1 < 18:
        x1, x2 = (x1 + x2) / 2 - 9, (x1 + x2) / 2 + 9
    y = lane_y + 8
    arrow = (
        f'<polygon points="{x2:.1f},{y} {x2 + 10:.1f},{y + 11} {x2:.1f},{y + 22}" fill="#2c569f"/>'
        if interval.open_end
        else ""
    )
    inside = len(interval.label) * 6.3 + 10 <= x2 - x1
    text_x, css = (x1 + 5, "") if inside else (x2 + (14 if interval.open_end else 4), "lc-outside")
    return (
        f"<g {_attributes('lc-interval', interval.kind, interval.lane, interval.label)}"
        f"{_step_attr(interval.step)}><title>{escape(interval.detail or interval.label)}</title>"
        f'<rect x="{x1:.1f}" y="{y}" width="{x2 - x1:.1f}" height="22" rx="4"/>{arrow}'
        f'<text class="{css}" x="{text_x:.1f}" y="{y + 15}">{escape(interval.label)}</text></g>'
    )


def _fit(label: str, width: float) -> str:
    room = max(int(width / 6.3), 3)
    return label if len(label) <= room else label[: room - 1] + "…"


def _polygon(points: list[tuple[float, float]]) -> str:
    text = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return f'<polygon class="lc-shape" points="{text}"/>'


def _shape(kind: str, x: float, y: float) -> str:
    if kind == "kill":
        return (
            f'<path class="lc-shape" d="M{x - 7:.1f},{y - 7} L{x + 7:.1f},{y + 7} '
            f'M{x + 7:.1f},{y - 7} L{x - 7:.1f},{y + 7}"/>'
        )
    if kind == "claim":
        return _polygon([(x - 7, y + 6), (x + 7, y + 6), (x, y - 7)])
    if kind == "clock":
        return _polygon([(x, y - 8), (x + 8, y), (x, y + 8), (x - 8, y)])
    if kind == "send":
        return _polygon([(x - 7, y - 7), (x + 8, y), (x - 7, y + 7)])
    if kind == "enqueue":
        return f'<rect class="lc-shape" x="{x - 6:.1f}" y="{y - 6}" width="12" height="12"/>'
    return f'<circle class="lc-shape" cx="{x:.1f}" cy="{y}" r="7"/>'


def _mark(mark: Mark, scale: _Scale, lane_y: float) -> str:
    x, y = scale.x(mark.at), lane_y + 44
    return (
        f"<g {_attributes('lc-mark', mark.kind, mark.lane, mark.label)}"
        f"{_step_attr(mark.step)}><title>{escape(mark.detail or mark.label)}</title>"
        f"{_shape(mark.kind, x, y)}"
        f'<text x="{x:.1f}" y="{y + 20}">{escape(_fit(mark.label, COLUMN - 6))}</text></g>'
    )


def _wrapped(disagreement: Disagreement | None, columns: int) -> list[str]:
    if disagreement is None:
        return []
    where = f"step {disagreement.step}: " if disagreement.step is not None else ""
    lines = textwrap.wrap(f"✗ {where}{disagreement.text}", columns)
    return lines[:6] + (["…"] if len(lines) > 6 else [])


def _disagreement(
    found: Disagreement, scale: _Scale, lanes: dict[str, float], axis_y: float, message: list[str]
) -> str:
    x, lane_y = scale.x(found.at), lanes.get(found.lane, TOP)
    texts = "".join(
        f'<text x="{LEFT - 100}" y="{axis_y + 50 + 17 * i}">{escape(line)}</text>'
        for i, line in enumerate(message)
    )
    return (
        f'<g class="lc-disagreement" data-lane="{escape(found.lane)}"{_step_attr(found.step)}>'
        f"<title>{escape(found.text)}</title>"
        f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{axis_y}"/>'
        f'<circle cx="{x:.1f}" cy="{lane_y + 44}" r="13"/>{texts}</g>'
    )
