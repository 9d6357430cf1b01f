"""Replaying a shrunk ``QueueMachine`` program (``queue.no-loss``, ``queue.stale-ack``) to
learn what each step did: which job each claim got, which acks the library took, and
the model's state around every step.

Which queue it is replayed on: the library the run checked, through the adapter the
run's ``--adapter`` named (a bundled name, ``planted:NAME`` or the adapter file), not
the bundled lease worker. The lease machines replay on the bundled implementation
because their model is deterministic: the program's arguments and the model say what
every step returns, so a correct target draws the same picture. The generic queue
model is not: a claim may get any ready or expired job, a late ack may be taken or
refused, a sweep may run lazily. The program only says ``claim(conn=0, lease_ms=150)``;
what came back is the library's choice, and on the lease worker (which agrees with
the model) the bug would not happen, so the picture would show a run that passes.
The adapters are leasecheck's own code over a PyPI library (or the user's adapter
file, which the check itself already loaded), every one on the harness's shared fake
clock, so the same program gives the same outcomes and the replay fails at the same
step as the run. When it does not (a library with real timing), the replay says so
and the picture is still drawn up to where the program ends.

The machine's rules are wrapped, not changed: a subclass records, per rule call, the
arguments, the library calls its connections made (through a recording proxy) and
``states[0]`` (a possible model state; the machine keeps the set) before and after.
Program lines are parsed with ``leasecheck.report.program`` (``ast``, never ``eval``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis.stateful import MultipleResults

from adapters.protocol import AdapterError
from adapters.registry import load_library
from leasecheck.report.program import Call, ProgramError, parse_line, value_of
from models.queue_model import QueueState
from stateful_tests.queue_machine import QueueMachine

__all__ = ["LibraryCall", "QueueReplay", "QueueStep", "replay_queue"]

RULES = ("first_job", "enqueue", "claim", "ack", "nack", "extend", "recover", "advance_clock")
CHECK = "observed"
RECORDED_CALLS = ("enqueue", "claim", "ack", "nack", "extend", "recover")


@dataclass(frozen=True)
class LibraryCall:
    """One call a step made on a connection: ``result`` is what came back (or the error)."""

    connection: int
    method: str
    arguments: tuple[object, ...]
    result: object


@dataclass(frozen=True)
class QueueStep:
    """One rule call, with the model's state (``states[0]``) around it."""

    number: int
    method: str
    arguments: dict[str, Any]
    line: str
    time: int
    """The model's clock (ms) when the step ran."""
    before: QueueState
    after: QueueState
    result: object
    calls: tuple[LibraryCall, ...] = ()
    drain: bool = False
    """Run by the machine's teardown (expire, recover, claim and ack everything)."""


@dataclass(frozen=True)
class QueueReplay:
    """The steps; where the replay failed and why (``failure`` empty: it did not fail)."""

    adapter: str
    steps: tuple[QueueStep, ...]
    failed_after: int = 0
    failure: str = ""
    in_check: bool = False
    """The failure came from the ``observed()`` check after step ``failed_after``."""
    problem: str = ""


class _Recorder:
    """A connection proxy: every queue call and its result go to the machine's log."""

    def __init__(self, inner: Any, index: int, log: list[LibraryCall]) -> None:
        self._inner, self._index, self._log = inner, index, log

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if name not in RECORDED_CALLS:
            return attribute

        def call(*args: object) -> object:
            try:
                result = attribute(*args)
            except Exception as error:
                self._log.append(LibraryCall(self._index, name, args, error))
                raise
            self._log.append(LibraryCall(self._index, name, args, result))
            return result

        return call


@dataclass
class _Log:
    steps: list[QueueStep] = field(default_factory=list)
    calls: list[LibraryCall] = field(default_factory=list)
    depth: int = 0
    line: str = ""
    drain: bool = False
    failed: tuple[int, str, bool] | None = None


def _wrapped(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)  # keeps Hypothesis' rule markers: a machine must have rules
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        log: _Log = self.replay_log
        if log.depth:  # a rule called by a rule (first_job -> enqueue): one step
            return original(self, *args, **kwargs)
        arguments = dict(signature.bind(self, *args, **kwargs).arguments)
        arguments.pop("self", None)
        before, log.depth = self.states[0], 1
        log.calls.clear()
        result: object = None
        try:
            result = original(self, *args, **kwargs)
        except AssertionError as error:
            if log.failed is None:
                number = len(log.steps) + (name != CHECK)
                log.failed = (number, str(error), name == CHECK)
            raise
        finally:
            log.depth = 0
            if name != CHECK:
                log.steps.append(
                    QueueStep(
                        len(log.steps) + 1, name, arguments, log.line, before.now, before,
                        self.states[0], result, tuple(log.calls), log.drain,
                    )
                )  # fmt: skip
        return result

    return method


def recording(machine: type[QueueMachine]) -> type[QueueMachine]:
    """``machine`` (a bound ``QueueMachine``) whose rule calls and library calls are logged."""

    def __init__(self: Any) -> None:
        self.replay_log = _Log()
        machine.__init__(self)
        self.connections = [
            _Recorder(connection, index, self.replay_log.calls)
            for index, connection in enumerate(self.connections)
        ]

    namespace: dict[str, Any] = {"__init__": __init__}
    for name in (*RULES, CHECK):
        namespace[name] = _wrapped(name, getattr(machine, name))
    return type("QueueMachine", (machine,), namespace)


def replay_queue(adapter: str, prop: str, program: Sequence[str]) -> QueueReplay:
    """Run ``program`` (a ``QueueMachine`` counterexample of ``prop``) on ``adapter``."""
    calls = [parse_line(line, {}) for line in program]
    try:
        library = load_library(adapter)
    except AdapterError as error:
        raise ProgramError(f"the program replays on its library, which fails: {error}") from None
    machine = recording(QueueMachine.bound(library, frozenset({prop})))
    state: Any = machine()
    log: _Log = state.replay_log
    problem, torn_down = "", False
    try:
        problem = _run(state, [c for c in calls if c.method != "teardown"])
        if not problem and log.failed is None:
            log.drain = torn_down = True
            state.teardown()
    except AssertionError as error:  # the failure being replayed
        log.failed = log.failed or (len(log.steps), str(error), True)
    except Exception as error:  # the library failed differently: keep what was recorded
        problem = f"the replay stopped: {type(error).__name__}: {error}"
    finally:
        if not torn_down:
            with contextlib.suppress(Exception):
                state.teardown()
    number, failure, in_check = log.failed or (len(log.steps), "", False)
    if not failure and not problem:
        problem = f"the replay on {adapter} did not fail where the run did"
    return QueueReplay(adapter, tuple(log.steps), number, failure, in_check, problem)


def _run(state: Any, calls: list[Call]) -> str:
    """Run each line; an ``AssertionError`` ends the run (the failure being replayed)."""
    variables: dict[str, Any] = {}
    for call in calls:
        if call.method not in (*RULES, CHECK):
            return f"the program calls state.{call.method}(), which QueueMachine has no rule for"
        arguments = {name: value_of(value, variables) for name, value in call.arguments.items()}
        state.replay_log.line = call.line
        result = getattr(state, call.method)(**arguments)
        values = list(result.values) if isinstance(result, MultipleResults) else [result]
        if len(values) < len(call.targets):
            raise ProgramError(
                f"{call.line!r}: the claim returned nothing on replay, so {call.targets[0]} "
                f"is unbound (the library chose differently from the run)"
            )
        variables.update(zip(call.targets, values, strict=False))
    return ""
