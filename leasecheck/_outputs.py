"""What ``leasecheck check`` shows while it runs and writes when it ends.

On a terminal a live status line says which property runs, for how long, and how many
of the collected properties are done; elsewhere (a CI log) only one plain line per
finished property. Colour only on a terminal, never with ``NO_COLOR`` (no-color.org).
Every verdict also exists as data: ``--json FILE`` holds one record per property, and
``--junit-xml FILE`` one test case per property, named after it.
"""

from __future__ import annotations

import json
import os
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from leasecheck import __version__
from leasecheck.runner import (
    CRASHED,
    HOLDS,
    HUNG,
    NOT_PROMISED,
    VIOLATED,
    CheckResult,
    Progress,
    PropertyResult,
)

__all__ = ["PHASES", "View", "document", "write_json", "write_junit"]

PHASES = ("setup", "call", "teardown")
"""The phases of a property's tests whose seconds ``--json`` records (``phases``)."""

_COLOURS = {HOLDS: "32", VIOLATED: "31;1", HUNG: "31;1", CRASHED: "31;1"}
_OTHER = "33"
_FAILED = (VIOLATED, HUNG, CRASHED)


class View:
    """The terminal side of a run: progress lines, the status line, verdict colours."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.colour = self.tty and not os.environ.get("NO_COLOR")
        self.shown = 0.0
        self.line = False

    def paint(self, verdict: str, width: int = 0) -> str:
        text = f"{verdict:<{width}}"
        if not self.colour:
            return text
        return f"\x1b[{_COLOURS.get(verdict, _OTHER)}m{text}\x1b[0m"

    def event(self, nodeid: str, result: PropertyResult) -> None:
        """A property test ended: one plain line (the status line is redrawn after it)."""
        self.clear()
        test = nodeid.removesuffix("::runTest").rsplit("::", 1)[-1]  # a TestCase: its class
        print(f"  {self.paint(result.verdict, 12)} {result.name:<22} {test}", file=self.stream)
        self.stream.flush()

    def tick(self, progress: Progress) -> None:
        """On a terminal, redraw the status line (at most five times a second)."""
        if not self.tty or time.monotonic() - self.shown < 0.2:
            return
        self.shown = time.monotonic()
        running = ", ".join(progress.running) or "-"
        count = f"{progress.done} of {progress.total}" if progress.total else "collecting"
        text = f"  running {running}  {progress.elapsed:.0f}s  ({count})"
        self.stream.write(f"\r\x1b[2K{text[: _columns()]}")
        self.stream.flush()
        self.line = True

    def clear(self) -> None:
        if self.line:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self.line = False


def _columns() -> int:
    try:
        columns = os.get_terminal_size().columns
    except OSError:
        columns = 0
    return columns - 1 if columns > 1 else 119  # a fresh pseudo-terminal says 0


def _record(prop: PropertyResult, replay: str) -> dict[str, object]:
    example = prop.counterexample
    return {
        "property": prop.name,
        "verdict": prop.verdict,
        "seconds": round(prop.seconds, 3),
        "phases": {when: round(prop.phase(when), 3) for when in PHASES},
        "cpu": round(prop.cpu, 3),
        "checked": prop.runs,
        "figures": prop.figures,
        "counterexample": example.record() if example and prop.verdict != HOLDS else None,
        "left_running": prop.left,
        "replay": replay if prop.verdict != HOLDS else None,
    }


def document(result: CheckResult, replay: str) -> dict[str, object]:
    """The ``--json`` document of one run: one record per property (verdict, figures,
    counterexample, replay command); a batch holds one of these per file."""
    return {
        "leasecheck": __version__,
        "exit_code": result.exit_code,
        "interrupted": result.interrupted,
        "problem": result.problem,
        "seconds": round(result.seconds, 3),
        "properties": [_record(p, replay) for p in sorted(result.properties.values(), key=_name)],
    }


def write_json(path: Path, result: CheckResult, replay: str) -> None:
    """``--json FILE``: the run's ``document``."""
    path.write_text(json.dumps(document(result, replay), indent=2, default=str) + "\n")


def _name(prop: PropertyResult) -> str:
    return prop.name


def write_junit(path: Path, result: CheckResult, text: Callable[[PropertyResult], str]) -> None:
    """One ``testcase`` per property, named after it: a violation, hang or crash is a
    failure; "not checked" and "not run" are errors (exit 2); "not promised" passes
    (it does not change the exit status) with its counterexample in ``system-out``."""
    rows = sorted(result.properties.values(), key=_name)
    failures = sum(1 for p in rows if p.verdict in _FAILED)
    errors = sum(1 for p in rows if p.verdict not in (*_FAILED, HOLDS, NOT_PROMISED))
    suite = ET.Element(
        "testsuite", name="leasecheck", tests=str(len(rows)), failures=str(failures),
        errors=str(errors), skipped="0", time=f"{result.seconds:.3f}",
    )  # fmt: skip
    for prop in rows:
        case = ET.SubElement(
            suite, "testcase", classname="leasecheck", name=prop.name, time=f"{prop.seconds:.3f}"
        )
        if prop.verdict in _FAILED:
            ET.SubElement(case, "failure", message=prop.verdict).text = text(prop)
        elif prop.verdict == NOT_PROMISED:
            ET.SubElement(case, "system-out").text = f"{NOT_PROMISED}: {text(prop)}"
        elif prop.verdict != HOLDS:
            ET.SubElement(case, "error", message=prop.verdict).text = text(prop)
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
