"""``index.html``: the summary table and, per property that did not hold, its counterexample
as text and as a picture drawn from its evidence.

One self-contained file: CSS inline, each picture inline SVG, no script, no network,
so it opens from disk (``file://``) in any browser and can be kept as a CI artifact.
All text from a run (property names, messages, program lines) is HTML-escaped. The
verdicts are the console's own words (``VIOLATED``, ``not promised``, ``HUNG``, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from leasecheck.report.picture import STYLE, draw, escape

if TYPE_CHECKING:
    from leasecheck.runner import PropertyResult

__all__ = ["overall", "render_html", "write_report"]

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
"""
CAPTION = (
    "Drawn from the evidence the harness recorded (no replay, no message parsing). Time runs "
    "left to right; operations at the same instant stand side by side in order; a zigzag on "
    "the axis is a stretch with nothing in it, cut short; a dashed box on the last lane "
    "stands for folded steps. Dashed orange: a job's deadline; red shading: two live leases "
    "of one job; red line: where the target and the model part. Hover any element for its "
    "full text."
)


def write_report(
    directory: Path,
    results: Sequence[PropertyResult],
    *,
    heading: str = "",
    replay: str = "",
    adapter: str | None = None,
) -> Path:
    """Write ``directory/index.html`` for ``results`` (every property of a run).
    ``adapter`` is accepted for the callers of the replaying report; nothing is replayed."""
    del adapter
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "index.html"
    path.write_text(render_html(results, heading=heading, replay=replay), encoding="utf-8")
    return path


def render_html(results: Sequence[PropertyResult], *, heading: str = "", replay: str = "") -> str:
    rows = sorted(results, key=lambda r: r.name)
    heading = heading or (f"checked with: {replay}" if replay else "")
    verdict = overall(rows)
    body = [
        "<h1>leasecheck report</h1>" + (f"<p>{escape(heading)}</p>" if heading else ""),
        f'<p class="lc-overall">{escape(verdict)}</p>',
        _summary(rows),
        *(_section(row, replay) for row in rows if row.verdict != "holds"),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>leasecheck: {escape(verdict)}</title>"
        f"<style>{PAGE_STYLE}{STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def overall(rows: Sequence[PropertyResult]) -> str:
    """The page's verdict in the console's words: ``VIOLATED: a, b; not promised: c``."""
    named: dict[str, list[str]] = {}
    for row in sorted(rows, key=lambda r: r.name):
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


def _section(row: PropertyResult, replay: str) -> str:
    example = row.counterexample
    text = example.text(limit=200) if example is not None else ""
    picture, caption = _picture(row)
    parts = [
        f'<section class="lc-property" id="{_anchor(row.name)}"'
        f' data-property="{escape(row.name)}" data-verdict="{escape(row.verdict)}">',
        f"<h2>{escape(row.verdict)}: {escape(row.name)}</h2>",
        "<h3>Counterexample</h3>",
        f"<pre>{escape(text)}</pre>",
    ]
    if replay:
        parts.append(f"<p>replay: <code>{escape(replay)}</code></p>")
    if picture:
        parts += ["<h3>Timeline</h3>", _summary_line(row)]
        parts.append(f'<div class="lc-picture">{picture}</div>')
    parts += [f'<p class="lc-caption">{escape(caption)}</p>', "</section>"]
    return "\n".join(parts)


def _summary_line(row: PropertyResult) -> str:
    """What failed, in the harness's words: beside the picture, not in it (a picture is
    drawn from data alone, so rewording a message leaves it as it was)."""
    example = row.counterexample
    summary = example.evidence.summary if example and example.evidence else ""
    return f'<p class="lc-summary-line">✗ {escape(summary)}</p>' if summary else ""


def _picture(row: PropertyResult) -> tuple[str, str]:
    """The inline SVG and its caption, or no picture and the reason."""
    example = row.counterexample
    if example is None or example.evidence is None:
        return "", (
            f"No picture: {row.name} recorded no evidence with this failure (a run that hung "
            "or crashed, or a harness that does not attach evidence); the text above is all."
        )
    try:
        return draw(example.evidence), CAPTION
    except Exception as error:  # a drawing bug must not cost the user the verdict or the text
        return "", (
            f"No picture: drawing this counterexample failed ({type(error).__name__}: {error}); "
            "the text above is complete. Please report this with the text."
        )
