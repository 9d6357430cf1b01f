"""Running an agreement machine inside a test, and reading how it failed.

Shared by tests/test_lease_machine.py and tests/test_job_machine.py: the seeded
settings mutant runs use, ``Caught`` (the error, the printed program, the time to
detection) and ``Machine.run``, which binds a target, runs the machine and binds the
bundled target again whatever happens, so one test's target never leaks into the next.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

__all__ = ["Caught", "Machine", "mutant_settings"]

PROGRAM_LINE = re.compile(r"^(?:[\w(), ]+ = )?state[ .]")
"""A printed program line: ``state = ...``, ``state.rule(...)``, ``(v,) = state.rule(...)``."""


def mutant_settings(max_examples: int, step_count: int) -> settings:
    """The same verdict every run (the seed the plugin forces, as ``leasecheck check``
    does: not ``derandomize``, whose seed is a digest of the machine's source, so any edit
    of a rule would draw other programs), no database, one bug reported."""
    return settings(
        max_examples=max_examples,
        stateful_step_count=step_count,
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        phases=[phase for phase in Phase if phase is not Phase.explain],  # explain costs ~2 min
    )


class Agreement(Protocol):
    """An agreement machine class: ``bind(target)`` chooses what it checks from now on."""

    first_failure_at: float | None

    def bind(self, target: Any, /) -> object: ...

    def __call__(self) -> RuleBasedStateMachine: ...


class Caught:
    """How the machine failed on a target: the error, its program, and when it struck."""

    def __init__(self, error: AssertionError, detection_seconds: float, invariant: str) -> None:
        self.error = error
        self.message = str(error)
        self.notes = "\n".join(getattr(error, "__notes__", []))
        self.detection_seconds = detection_seconds
        self.program = [line for line in self.notes.splitlines() if PROGRAM_LINE.match(line)]
        bookkeeping = ("state = ", f"state.{invariant}()", "state.teardown()")
        self.steps = [line for line in self.program if not line.startswith(bookkeeping)]


@dataclass(frozen=True)
class Machine:
    """One agreement machine as the tests run it."""

    agreement: Agreement
    bundled: Callable[[], object]
    """Loads the bundled target, bound again after every run."""
    invariant: str
    """The invariant's name: it prints in the program but is not a step."""

    def run(self, target: object, config: settings) -> Caught | None:
        """Run the machine on ``target``; how it failed, or None if it passed."""
        self.agreement.bind(target)
        self.agreement.first_failure_at = None
        started = time.perf_counter()
        try:
            # LeaseAgreement and JobAgreement are RuleBasedStateMachine classes; the Protocol
            # only adds the two class attributes used here, which no type can say at once.
            machine = cast(type[RuleBasedStateMachine], self.agreement)
            run_state_machine_as_test(machine, settings=config)
        except AssertionError as error:
            first = self.agreement.first_failure_at
            return Caught(error, (first or time.perf_counter()) - started, self.invariant)
        finally:
            self.agreement.bind(self.bundled())
        return None
