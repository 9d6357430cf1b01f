"""Counterexamples as pictures: one per failed property, drawn from its evidence, in an HTML
report.

Every harness attaches a ``models.evidence.Evidence`` to the failure it raises; it reaches
the CLI inside the counterexample record. ``draw`` turns that record into plain SVG (a
pure function: no replay, no message parsing); ``write_report`` writes ``index.html`` with
the summary table and every failed property's text and picture.
"""

from __future__ import annotations

from leasecheck.report.html import write_report
from leasecheck.report.picture import draw

__all__ = ["draw", "write_report"]
