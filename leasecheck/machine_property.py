"""A stateful property that ``leasecheck check`` and ``leasecheck hunt`` run as the same test.

Hypothesis keys a state machine's examples by the machine ("Use a machine digest to
identify stateful tests in the example database", ``hypothesis.stateful``), through
``get_state_machine_test`` -- the function Hypothesis split out "so that HypoFuzz can
get and call the test function directly". HypoFuzz fuzzes a pytest item shaped like
``RuleBasedStateMachine.TestCase`` (a ``runTest`` carrying the machine class, settings
on the instance) by calling exactly that function, so a failure it saves lands under
the key that ``check`` reads here: a counterexample found by a hunt on one machine is
replayed by the next ``check`` anywhere.

Two Hypothesis internals are used, because there is no public way to have both:

- ``leasecheck check`` forces a seed (``hypothesis.core.global_force_seed``, what
  ``--hypothesis-seed`` does) so that ``ci`` is deterministic, and Hypothesis then
  skips the example database entirely. Setting the test's
  ``_hypothesis_internal_database_key`` (what ``hypothesis.find`` does) to the key the
  test has without a seed makes the seeded run replay the database first.
- ``get_state_machine_test``, to get the test whose key that is.
"""

from __future__ import annotations

import unittest
from typing import Any

from hypothesis import settings as Settings
from hypothesis.errors import FlakyStrategyDefinition
from hypothesis.internal.reflection import function_digest
from hypothesis.stateful import RuleBasedStateMachine, get_state_machine_test

from leasecheck.stateful_tests.program import without_idle_steps

__all__ = ["database_key", "machine_test_case", "run_machine"]


def _machine_test(machine: type[RuleBasedStateMachine], settings: Settings) -> Any:
    flaky_state = {"selecting_rule": False}
    test: Any = get_state_machine_test(machine, settings=settings, _flaky_state=flaky_state)
    test._hypothesis_internal_database_key = database_key(test)
    return test


def database_key(test: Any) -> bytes:
    """The example-database key of a Hypothesis test (the one HypoFuzz computes too)."""
    return function_digest(test.hypothesis.inner_test)


def run_machine(machine: type[RuleBasedStateMachine], settings: Settings) -> None:
    """``run_state_machine_as_test``, replaying the example database first even when seeded;
    a failing program loses the steps Hypothesis left that change nothing
    (``stateful_tests.program.without_idle_steps``)."""
    test = _machine_test(machine, settings)
    try:
        test()
    except FlakyStrategyDefinition as error:
        error.add_note("while selecting a rule: a flaky precondition or an empty bundle?")
        raise
    except Exception as error:
        without_idle_steps(machine, error)
        raise


def machine_test_case(
    name: str, machine: type[RuleBasedStateMachine], settings: Settings, module: str
) -> type[unittest.TestCase]:
    """A ``unittest.TestCase`` running ``machine``, shaped like ``machine.TestCase``.

    pytest collects it as a Hypothesis test (``runTest.is_hypothesis_test``) and
    HypoFuzz as a state machine (``runTest._hypothesis_state_machine_class``, with the
    settings on the instance). ``name`` is the class name pytest shows, ``module`` the
    property module that defines it (``__name__``).
    """

    def runTest(self: unittest.TestCase) -> None:
        run_machine(machine, type(self).settings)  # type: ignore[attr-defined]

    runTest.is_hypothesis_test = True  # type: ignore[attr-defined]
    runTest._hypothesis_state_machine_class = machine  # type: ignore[attr-defined]
    namespace = {"runTest": runTest, "settings": settings, "__module__": module}
    return type(name, (unittest.TestCase,), {**namespace, "__qualname__": name})
