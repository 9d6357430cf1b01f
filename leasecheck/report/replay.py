"""Replaying a shrunk stateful program to learn what each step did in the reference model.

The printed program says what was called, not what came back: which claim got which
token and ``lease_until``, which finish was refused. To draw leases as intervals the
report replays the program through the agreement machine's own rules (so the
arguments mean exactly what they meant in the run: ``When`` anchors, ticket changes,
clock scripts) with the *bundled* implementation as the target, which agrees with the
model, and records the model's state before and after every step. The run that found
the bug is not repeated: the target under test is never loaded here.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis.stateful import MultipleResults, RuleBasedStateMachine

from leasecheck.report.program import Call, ProgramError, parse_line, value_of

__all__ = ["Recorded", "Replay", "replay"]


@dataclass(frozen=True)
class Recorded:
    """One operation of the program, with the model's state around it."""

    step: int
    """1-based position among the program's operations (invariant checks excluded)."""
    call: Call
    arguments: dict[str, Any]
    """The call's arguments with every variable resolved (``ticket=tickets_0`` -> the dict)."""
    time: int
    """The time the operation ran at (its ``now``, or the first clock reading)."""
    before: Any
    after: Any
    result: object


@dataclass(frozen=True)
class Replay:
    """The recorded steps; ``failed_after`` is the step the run stopped at (a rule or the
    invariant check that followed it); ``problem`` says why the replay stopped early."""

    machine: str
    steps: tuple[Recorded, ...]
    failed_after: int
    invariant_failed: bool
    problem: str = ""


def _lease_machine() -> tuple[type[RuleBasedStateMachine], dict[str, type]]:
    from leasecheck.targets import load_worker
    from models import edges
    from stateful_tests import _lease_values
    from stateful_tests.lease_machine import LeaseAgreement

    class _Replay(LeaseAgreement):
        target_module = load_worker()  # the bundled worker; the parent class is not rebound

    return _Replay, {**_constructors(_lease_values), **_constructors(edges)}


def _job_machine() -> tuple[type[RuleBasedStateMachine], dict[str, type]]:
    from leasecheck.targets import load_jobs_target
    from queue_impl import jobs
    from stateful_tests.job_machine import Backlog, JobAgreement

    class _Replay(JobAgreement):
        target_class = load_jobs_target()

    return _Replay, {**_constructors(jobs), "Backlog": Backlog}


def _constructors(module: object) -> dict[str, type]:
    """The value classes a printed program may call: the module's own classes."""
    return {
        name: value
        for name, value in vars(module).items()
        if inspect.isclass(value) and not issubclass(value, BaseException)
    }


MACHINES: dict[str, Callable[[], tuple[type[RuleBasedStateMachine], dict[str, type]]]] = {
    "LeaseAgreement": _lease_machine,
    "JobAgreement": _job_machine,
}


def _invariants(cls: type) -> set[str]:
    return {
        name
        for name, method in inspect.getmembers(cls, inspect.isfunction)
        if getattr(method, "hypothesis_stateful_invariant", None) is not None
    }


def replay(machine: str, program: Sequence[str]) -> Replay:
    """Run ``program`` (lines of a ``machine`` counterexample) on the bundled target."""
    if machine not in MACHINES:
        raise ProgramError(f"no replay for machine {machine!r}; known: {sorted(MACHINES)}")
    cls, constructors = MACHINES[machine]()
    skip = _invariants(cls) | {"teardown"}
    calls = [parse_line(line, constructors) for line in program]
    operations = [call for call in calls if call.method not in skip]
    last = next((c for c in reversed(calls) if c.method != "teardown"), None)
    state = cls()
    try:
        steps, problem = _run(state, operations)
    finally:
        with contextlib.suppress(Exception):
            state.teardown()
    invariant = last is not None and last.method in skip
    return Replay(machine, tuple(steps), len(operations), invariant, problem)


def _run(state: Any, operations: list[Call]) -> tuple[list[Recorded], str]:
    variables: dict[str, Any] = {}
    steps: list[Recorded] = []
    for number, call in enumerate(operations, start=1):
        arguments = {name: value_of(value, variables) for name, value in call.arguments.items()}
        time, before = _time(state, call.method, arguments), _model_state(state)
        try:
            result = getattr(state, call.method)(**arguments)
        except Exception as error:  # the bundled target is correct; say why, keep the rest
            return steps, f"step {number} ({call.method}) did not replay: {error}"
        _bind(variables, call, result)
        steps.append(Recorded(number, call, arguments, time, before, _model_state(state), result))
    return steps, ""


def _model_state(state: Any) -> Any:
    model = state.model
    return model.snapshot() if hasattr(model, "snapshot") else model.state


def _time(state: Any, method: str, arguments: dict[str, Any]) -> int:
    """When the step runs: the lease machine resolves ``now``/``clock``; JobQueue's clock."""
    if hasattr(state, "time"):
        return int(state.time.now)
    if "now" in arguments:
        at = state._at(arguments["now"])
    elif "clock" in arguments and hasattr(arguments["clock"], "readings"):
        at = arguments["clock"].readings(state._at)[0]
    else:
        at = state.now
    return at if isinstance(at, int) and not isinstance(at, bool) else int(state.now)


def _bind(variables: dict[str, Any], call: Call, result: object) -> None:
    if not call.targets:
        return
    values = list(result.values) if isinstance(result, MultipleResults) else [result]
    for name, value in zip(call.targets, values, strict=False):
        variables[name] = value
