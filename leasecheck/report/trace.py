"""What a report draws from: one property's verdict and its counterexample, as plain data.

``Trace`` is the report's own input type, so the source can change without touching
the drawing: ``trace_from_result`` builds it from a ``PropertyResult`` and the
structured ``Counterexample`` the test process sent (its program, and the error's own
message, whose numbered steps or history the harness wrote). The three shapes of
counterexample it keeps apart:

- ``program``: a shrunk Hypothesis program of an agreement machine (``state.op(...)``);
- ``history``: a concurrent history with each operation's real-time interval
  (``P1#1 [ 0.334 ms .. 47.606 ms] poll(...) -> ...``), from the linearizability checker;
- ``scenario``: the numbered steps that process-level properties and the model checker
  print (``1. ...``, ``2. ...``), each with its indented continuation lines; a
  ``lease.interleavings`` schedule is drawn this way too (one lane per process).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from leasecheck.counterexample import Counterexample

if TYPE_CHECKING:
    from leasecheck.runner import PropertyResult

__all__ = ["ScenarioStep", "Trace", "trace_from_result"]

_ERROR_PREFIX = re.compile(r"^E(?: {1,7}|$)")
_NUMBERED = re.compile(r"^(\s*)(\d+)\.\s+(.*)$")
_HISTORY_OP = re.compile(r"^\s*\S+#\d+ \[\s*[\d.]+ ms \.\.")


@dataclass(frozen=True)
class ScenarioStep:
    """One numbered step of a printed scenario, with the indented lines under it."""

    number: int
    text: str
    more: tuple[str, ...] = ()


@dataclass(frozen=True)
class Trace:
    """One property's result as the report sees it."""

    property: str
    verdict: str
    message: tuple[str, ...] = ()
    machine: str | None = None
    program: tuple[str, ...] = ()
    scenario: tuple[ScenarioStep, ...] = ()
    history: tuple[str, ...] = ()
    """The history lines, in the order printed (the explainable prefix, then the
    operations no order explains, each followed by the model's reason)."""
    text: str = ""
    """The counterexample as text, exactly as the command line printed it."""
    checked: tuple[str, ...] = field(default=())
    seconds: float = 0.0
    adapter: str | None = None
    """The run's ``--adapter`` (a ``queue.*`` program is replayed on that library)."""


def trace_from_result(
    result: PropertyResult, example: Counterexample | None = None, adapter: str | None = None
) -> Trace:
    """Build a ``Trace`` from the runner's result and its recorded counterexample."""
    example = example or result.counterexample
    if example is None:
        return Trace(
            result.name, result.verdict, checked=tuple(result.runs), seconds=result.seconds,
            adapter=adapter,
        )  # fmt: skip
    lines = [_unprefixed(line) for line in example.message]
    if lines and lines[0].split(": ", 1)[0].endswith(("Error", "Exception")):
        lines[0] = lines[0].split(": ", 1)[-1]  # the message as the harness wrote it
    # A controlled schedule (lease.interleavings) is drawn step by step, one lane per
    # process: its history's instants are step numbers, so its steps are the picture.
    history = () if example.schedule is not None else _history(lines)
    return Trace(
        property=result.name,
        verdict=result.verdict,
        message=example.message or tuple(_first_error(lines)),
        machine=example.machine,
        program=example.program,
        scenario=() if example.machine or history else _scenario(lines),
        history=history,
        text=example.text(limit=200),
        checked=tuple(result.runs),
        seconds=result.seconds,
        adapter=adapter,
    )


def _unprefixed(line: str) -> str:
    match = _ERROR_PREFIX.match(line)
    return line[match.end() :] if match else line


def _first_error(lines: Sequence[str]) -> list[str]:
    found = [line.strip() for line in lines if "Error" in line.split(":", 1)[0]]
    return found[:1]


def _history(lines: Sequence[str]) -> tuple[str, ...]:
    """The last printed linearizability account: its interval lines and reasons (dedented
    by the account's own indent: pytest indents a multi-line ``assert`` message)."""
    start = max(
        (i for i, line in enumerate(lines) if line.lstrip().startswith("not linearizable")),
        default=-1,
    )
    if start < 0:
        return ()
    indent = len(lines[start]) - len(lines[start].lstrip())
    kept: list[str] = []
    for line in lines[start + 1 :]:
        line = line[indent:] if line[:indent].isspace() else line
        if line.startswith("Replay:") or not line.strip():
            break
        kept.append(line.rstrip())
    return tuple(kept) if any(_HISTORY_OP.match(line) for line in kept) else ()


def _scenario(lines: Sequence[str]) -> tuple[ScenarioStep, ...]:
    """The last block of numbered steps starting at ``1.`` (the shrunk report's own)."""
    found: tuple[ScenarioStep, ...] = ()
    for index, line in enumerate(lines):
        match = _NUMBERED.match(line)
        if match and match.group(2) == "1":
            block = _block(lines, index, len(match.group(1)))
            found = block or found
    return found


def _block(lines: Sequence[str], start: int, indent: int) -> tuple[ScenarioStep, ...]:
    steps: list[ScenarioStep] = []
    for line in lines[start:]:
        match = _NUMBERED.match(line)
        if match and len(match.group(1)) == indent and int(match.group(2)) == len(steps) + 1:
            steps.append(ScenarioStep(len(steps) + 1, match.group(3).strip()))
        elif steps and line.strip() and len(line) - len(line.lstrip()) >= indent:
            last = steps[-1]
            steps[-1] = ScenarioStep(last.number, last.text, (*last.more, line.strip()))
        else:
            break
    return tuple(steps)
