"""A failing machine's program as data: the steps Hypothesis printed, and how many there are.

When a state machine fails, Hypothesis attaches the shrunk program to the exception
as notes (``state = LeaseAgreement()``, one ``state.<rule>(...)`` line per step,
the invariant checks between them, ``state.teardown()``). ``program_of`` reads it
from the exception itself, in the process that ran the test, so the program reaches
the CLI as data and is never scraped back out of a printed report.

Invariant checks are not steps: every machine declares them with ``check`` (instead
of Hypothesis' ``invariant``), which records their names for ``Program.steps``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis.stateful import invariant

__all__ = ["CHECKS", "Program", "check", "program_of"]

F = TypeVar("F", bound=Callable[..., Any])

CHECKS: set[str] = set()
"""The names of every machine's invariant checks (printed between steps, not steps)."""
_START, _END = "state = ", "state.teardown()"


def check(function: F) -> F:
    """Hypothesis' ``@invariant()``, remembering the name so it is not counted as a step."""
    CHECKS.add(function.__name__)
    decorated: F = invariant()(function)
    return decorated


@dataclass(frozen=True)
class Program:
    """The shrunk program of a failing state machine."""

    machine: str
    """The machine's class name (``LeaseAgreement``, ``JobAgreement``)."""
    lines: tuple[str, ...]
    """Every printed line after ``state = Machine()``, ending with ``state.teardown()``."""

    @property
    def steps(self) -> int:
        """The operations in the program (invariant checks and teardown excluded)."""
        skip = {"teardown", *CHECKS}
        return sum(1 for line in self.lines if _called(line) not in skip)


def _called(line: str) -> str:
    """The rule a printed line calls: ``claim`` in ``(t,) = state.claim(owner='w1')``."""
    head = line.split("state.", 1)[-1]
    return head.split("(", 1)[0].strip()


def program_of(error: BaseException) -> Program | None:
    """The last complete program among the notes Hypothesis added to ``error``."""
    notes: Sequence[str] = getattr(error, "__notes__", ())
    lines = [line for note in notes for line in str(note).splitlines()]
    found: Program | None = None
    machine: str | None = None
    body: list[str] = []
    for line in lines:
        text = line.strip()
        if text.startswith(_START) and text.endswith("()"):
            machine, body = text[len(_START) : -2], []
        elif machine is not None and "state." in text:
            body.append(line.rstrip())
            if text == _END:
                found, machine = Program(machine, tuple(body)), None
    return found
