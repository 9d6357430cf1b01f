"""``index.html``: the summary table and, per failed property, its counterexample as text
and as a timeline picture.

One self-contained file: CSS inline, each picture inline SVG, no script, no network,
so it opens from disk (``file://``) in any browser and can be kept as a CI artifact.
All text from a run (property names, messages, program lines) is HTML-escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from leasecheck.report.picture import STYLE as PICTURE_STYLE
from leasecheck.report.picture import draw
from leasecheck.report.program import ProgramError
from leasecheck.report.svg import STYLE, render_svg
from leasecheck.report.timeline import build_timeline
from leasecheck.report.trace import Trace, trace_from_result

if TYPE_CHECKING:
    from leasecheck.runner import PropertyResult

__all__ = ["render_html", "write_report"]

PAGE_STYLE = """
body { font: 14px/1.45 sans-serif; margin: 24px; color: #1d1f23; max-width: 1400px; }
table.lc-summary { border-collapse: collapse; margin: 8px 0 24px; }
.lc-summary th, .lc-summary td { border-bottom: 1px solid #dde1e6; padding: 4px 12px;
  text-align: left; }
.lc-summary td.num { text-align: right; }
.lc-verdict-holds { color: #1f7a3a; } .lc-verdict-bad { color: #b00015; font-weight: bold; }
pre { background: #f6f7f9; padding: 10px; white-space: pre-wrap; font-size: 12px; }
section.lc-property { border-top: 2px solid #dde1e6; margin-top: 28px; }
.lc-picture { overflow-x: auto; } .lc-caption { color: #555; font-size: 13px; }
.lc-legend span { margin-right: 14px; }
"""
LEGEND = (
    "bar: a lease (job · token) or an operation's span · ▲ claim · ● commit · ○ refused · "
    "✕ SIGKILL · ◆ clock move · ▶ send · ■ enqueue · red line: where it breaks"
)

EVIDENCE_CAPTION = (
    "Drawn from the evidence the harness recorded (no replay, no message parsing). Time runs "
    "left to right; operations at the same instant stand side by side in order; a zigzag on "
    "the axis is a stretch with nothing in it, cut short. Dashed orange: a job's deadline; "
    "red shading: two live leases of one job; red line: where the target and the model part. "
    "Hover any element for its full text."
)


def write_report(
    directory: Path,
    results: Sequence[PropertyResult],
    *,
    heading: str = "",
    replay: str = "",
    adapter: str | None = None,
) -> Path:
    """Write ``directory/index.html`` for ``results`` (every property of a run);
    ``adapter`` is the run's ``--adapter``, on which a ``queue.*`` program is replayed."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = sorted(results, key=lambda r: r.name)
    traces = [trace_from_result(r, adapter=adapter) for r in rows if r.verdict != "holds"]
    path = directory / "index.html"
    path.write_text(render_html(rows, traces, heading=heading, replay=replay), encoding="utf-8")
    return path


def render_html(
    rows: Sequence[PropertyResult], traces: Sequence[Trace], *, heading: str, replay: str
) -> str:
    heading = heading or (f"checked with: {replay}" if replay else "")
    verdict = overall(rows)
    body = [
        f"<h1>leasecheck report</h1><p>{escape(heading)}</p>"
        if heading
        else "<h1>leasecheck report</h1>",
        f'<p class="lc-overall">{escape(verdict)}</p>',
        _summary(rows),
        *(_section(trace, replay) for trace in traces),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>leasecheck: {escape(verdict)}</title>"
        f"<style>{PAGE_STYLE}{STYLE}{PICTURE_STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def overall(rows: Sequence[PropertyResult]) -> str:
    """The page's verdict in the console's words: ``VIOLATED: a, b; not promised: c``."""
    named: dict[str, list[str]] = {}
    for row in rows:
        if row.verdict != "holds":
            named.setdefault(row.verdict, []).append(row.name)
    if not named:
        return "every property holds"
    return "; ".join(f"{verdict}: {', '.join(names)}" for verdict, names in named.items())


def _summary(rows: Sequence[PropertyResult]) -> str:
    lines = [
        '<table class="lc-summary"><thead><tr><th>property</th><th>verdict</th>'
        "<th>checked</th><th>time</th></tr></thead><tbody>"
    ]
    for row in rows:
        css = "lc-verdict-holds" if row.verdict == "holds" else "lc-verdict-bad"
        link = f'<a href="#{_anchor(row.name)}">{escape(row.name)}</a>'
        name = escape(row.name) if row.verdict == "holds" else link
        lines.append(
            f'<tr data-property="{escape(row.name)}"><td>{name}</td>'
            f'<td class="{css}">{escape(row.verdict)}</td>'
            f"<td>{escape('; '.join(row.runs) or '-')}</td>"
            f'<td class="num">{row.seconds:.1f} s</td></tr>'
        )
    lines.append("</tbody></table>")
    return "\n".join(lines)


def _anchor(name: str) -> str:
    return "p-" + "".join(c if c.isalnum() else "-" for c in name)


def _section(trace: Trace, replay: str) -> str:
    picture, caption = _picture(trace)
    parts = [
        f'<section class="lc-property" id="{_anchor(trace.property)}"'
        f' data-property="{escape(trace.property)}" data-verdict="{escape(trace.verdict)}">',
        f"<h2>{escape(trace.verdict)}: {escape(trace.property)}</h2>",
        "<h3>Counterexample</h3>",
        f"<pre>{escape(trace.text)}</pre>",
    ]
    if replay:
        parts.append(f"<p>replay: <code>{escape(replay)}</code></p>")
    if picture:
        parts += [
            "<h3>Timeline</h3>",
            f'<div class="lc-picture">{picture}</div>',
            f'<p class="lc-caption">{escape(caption)}</p>',
        ]
        if trace.evidence is None:  # an evidence picture draws its own legend
            parts.append(f'<p class="lc-legend">{escape(LEGEND)}</p>')
    else:
        parts.append(f'<p class="lc-caption">{escape(caption)}</p>')
    parts.append("</section>")
    return "\n".join(parts)


def _picture(trace: Trace) -> tuple[str, str]:
    """The inline SVG and its caption, or no picture and the reason."""
    try:
        if trace.evidence is not None:
            return draw(trace.evidence), EVIDENCE_CAPTION
        timeline = build_timeline(trace)
    except ProgramError as error:
        return "", f"No picture: {error}"
    except Exception as error:  # a drawing bug must not cost the user the verdict or the text
        return "", (
            f"No picture: drawing this counterexample failed ({type(error).__name__}: {error}); "
            "the text above is complete. Please report this with the text."
        )
    if timeline is None:
        return "", "No picture: this result carries no counterexample to draw."
    return render_svg(timeline), timeline.caption
