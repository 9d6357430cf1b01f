"""Counterexamples as pictures: a timeline per violated property, in an HTML report.

``trace_from_result`` turns a property's result into a ``Trace``; ``build_timeline``
turns a trace into a drawing-neutral ``Timeline`` (lanes, intervals, marks, the step
where it breaks); ``render_svg`` writes it as plain SVG; ``write_report`` writes
``index.html`` with the summary table and every failed property's picture. A
``queue.*`` program is replayed on the run's own library (``queue_replay``).
"""

from __future__ import annotations

from leasecheck.report.html import write_report
from leasecheck.report.svg import render_svg
from leasecheck.report.timeline import Timeline, build_timeline
from leasecheck.report.trace import Trace, trace_from_result

__all__ = ["Timeline", "Trace", "build_timeline", "render_svg", "trace_from_result", "write_report"]
