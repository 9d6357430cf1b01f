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

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from hypothesis.stateful import invariant

from leasecheck.models.evidence import attach, evidence_of, shrunk_evidence
from leasecheck.models.shrinking import Budget, shrink

__all__ = ["CHECKS", "Program", "check", "program_of", "without_idle_steps"]

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


IDLE_BUDGET = Budget(runs=40, seconds=4.0)
"""What dropping idle steps may spend: each try replays a whole program on the target."""
DROPPED = "leasecheck dropped {count} steps Hypothesis left that change nothing (without "
DROPPED += "them the program fails with the same error); the program without them:"


def _units(program: Program) -> list[tuple[str, ...]]:
    """The program's steps, each with the invariant checks printed after it."""
    units: list[tuple[str, ...]] = []
    for line in program.lines:
        if _called(line) == "teardown":
            continue
        if _called(line) in CHECKS and units:
            units[-1] = (*units[-1], line)
        else:
            units.append((line,))
    return units


def replay_lines(machine: type[Any], lines: Sequence[str]) -> BaseException | None:
    """Run the printed ``lines`` on a fresh ``machine()`` (as an exported file does); the
    error they end with, or None. Teardown always runs."""
    namespace = dict(vars(sys.modules[machine.__module__]))
    state = namespace["state"] = machine()
    try:
        for line in lines:
            exec(line.strip(), namespace)  # the program Hypothesis printed for this machine
    except Exception as error:
        return error
    finally:
        state.teardown()
    return None


def _signature(error: BaseException) -> tuple[object, ...]:
    """What makes two failures the same: the error's type and, from its evidence, the
    summary and the step where target and model part (its call and both results), but
    not that step's number; without evidence, the whole message."""
    found = evidence_of(error)
    if found is None:
        return (type(error), str(error))
    parted = found.step(found.parted)
    where = None if parted is None else (parted.operation, parted.target, parted.model)
    return (type(error), found.summary, where)


def without_idle_steps(
    machine: type[Any], error: BaseException, budget: Budget = IDLE_BUDGET
) -> BaseException | None:
    """``error`` with a shorter program when the one Hypothesis printed holds steps whose
    removal leaves the failure identical (``_signature``, re-run on the target):
    a note with the shorter program (``program_of`` reads the last one) and the evidence
    of its run. None if no step can go."""
    program = program_of(error)
    if program is None:
        return None
    units = _units(program)

    def identical(kept: list[tuple[str, ...]]) -> BaseException | None:
        again = replay_lines(machine, [line for unit in kept for line in unit])
        return again if again is not None and _signature(again) == _signature(error) else None

    shrunk = shrink(units, error, identical, budget)
    if shrunk.failure is error:
        return None
    lines = (*(line for unit in shrunk.items for line in unit), "state.teardown()")
    shorter = replace(program, lines=lines)
    error.args = shrunk.failure.args  # the message of the shorter program's run
    error.add_note(DROPPED.format(count=len(units) - shrunk.after))
    error.add_note("\n".join([f"state = {program.machine}()", *shorter.lines]))
    found = evidence_of(shrunk.failure)
    if found is not None:
        attach(error, shrunk_evidence(found, program.steps, shorter.steps))
    return error
