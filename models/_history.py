"""A concurrent history: operations with their invocation and response instants.

The linearizability checker reads these records; the parallel runners in
``stateful_tests/parallel.py`` write them. Times are ``time.monotonic_ns()``
readings, one clock domain for every process and thread of a run (Linux'
CLOCK_MONOTONIC is system-wide, so forked children stamp on the same clock).

An entry does not encode its call again: it holds the contract's own record
(``LeaseOp``, ``JobOp``, ``QueueOp``; docs/operations.md) and that contract's outcome
(``LeaseOutcome``, ``JobOutcome``, ``QueueOutcome``), and adds who made it and when.
A step of the harness's own that no contract has (its read of every stored row after
a run, a process opening its connection again) is a ``HarnessStep``; its outcome is
that of the contract the history is about (a snapshot read returns a ``Snapshot``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from leasecheck.models.job_ops import JobOutcome
from leasecheck.models.lease_ops import LeaseOutcome
from leasecheck.models.queue_ops import QueueOutcome

__all__ = [
    "HarnessStep",
    "OpRecord",
    "Operation",
    "Outcome",
    "Response",
    "SequentialSpec",
    "format_value",
]

S = TypeVar("S", bound=Hashable)

Outcome = LeaseOutcome | JobOutcome | QueueOutcome
"""What a call returned (``result``) or raised (``error``, the contract's name for it, with
``detail``): the outcome record of the contract its entry's call belongs to (a harness
step's outcome is that of the contract the history is about)."""

Response = Outcome | None
"""``None`` is an unknown outcome: the caller died (SIGKILL) before the response arrived."""


def format_value(value: object) -> str:
    """A short repr for reports (long values are cut in the middle)."""
    text = repr(value)
    return text if len(text) <= 160 else f"{text[:110]} ... {text[-40:]}"


@dataclass(frozen=True, slots=True)
class HarnessStep:
    """A step of the harness that is no contract's operation: ``snapshot`` reads the whole
    stored state (the model answers with its own state); ``open`` and ``reopen`` (re)connect
    a process of ``queue.interleavings`` (a scheduling step the model does not take)."""

    kind: Literal["snapshot", "open", "reopen"] = "snapshot"

    def arguments(self) -> dict[str, Any]:
        return {}

    def describe(self) -> str:
        return f"{self.kind}()"

    def to_json(self) -> dict[str, Any]:
        return {"contract": "harness", "kind": self.kind, "args": {}}


class OpRecord(Protocol):
    """What a history entry called: its contract's record (``LeaseOp``, ``JobOp``,
    ``QueueOp``) or a ``HarnessStep``. Each spec takes the records of its contract."""

    @property
    def kind(self) -> str: ...

    def arguments(self) -> dict[str, Any]: ...

    def describe(self) -> str: ...

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True, eq=False)
class Operation:
    """One call in a history: who made it, the call (its contract's record), when, and
    what came back.

    ``returned_ns`` is ``None`` when the call never returned (the caller is still
    blocked or was never reaped); with ``outcome=None`` and a ``returned_ns`` the
    caller was killed and reaped at that instant, so any effect happened before it.
    """

    process: str
    index: int
    call: OpRecord
    invoked_ns: int
    returned_ns: int | None
    outcome: Response
    note: str = field(default="", compare=False)

    @property
    def name(self) -> str:
        """The operation's kind (``claim``, ``poll``, ``ack``, ``snapshot``)."""
        return self.call.kind

    @property
    def args(self) -> dict[str, Any]:
        """The call's arguments by name, as its record holds them."""
        return self.call.arguments()

    @property
    def unknown(self) -> bool:
        return self.outcome is None

    @property
    def ok(self) -> bool:
        """The call returned (it neither raised nor has an unknown outcome)."""
        return self.outcome is not None and self.outcome.error is None

    @property
    def result(self) -> Any:
        """What the call returned; None when it raised or its outcome is unknown."""
        outcome = self.outcome
        return outcome.result if outcome is not None and outcome.error is None else None

    @property
    def error(self) -> str | None:
        """The contract's name for what the call raised; None when it returned or its
        outcome is unknown."""
        return None if self.outcome is None else self.outcome.error

    def call_text(self) -> str:
        """The record's own line (a long one cut in the middle)."""
        text = self.call.describe()
        return text if len(text) <= 240 else f"{text[:170]} ... {text[-60:]}"

    def outcome_text(self) -> str:
        if self.outcome is None:
            return "outcome unknown (killed mid-operation)"
        if self.outcome.error is None:
            return f"-> {format_value(self.outcome.result)}"
        return f"raised {self.outcome.error}"

    def interval_text(self, origin_ns: int) -> str:
        start = (self.invoked_ns - origin_ns) / 1e6
        if self.returned_ns is None:
            return f"[{start:9.3f} ms .. never returned]"
        end = (self.returned_ns - origin_ns) / 1e6
        return f"[{start:9.3f} ms .. {end:9.3f} ms]"

    def label(self) -> str:
        return f"{self.process}#{self.index}"

    def describe(self, origin_ns: int = 0) -> str:
        note = f"  ({self.note})" if self.note else ""
        return (
            f"{self.label():>9} {self.interval_text(origin_ns)} "
            f"{self.call_text()} {self.outcome_text()}{note}"
        )


class SequentialSpec(Generic[S]):
    """The sequential model seen by the checker. Subclasses override ``step``."""

    def step(self, state: S, op: Operation) -> Sequence[S]:
        """Every state after ``op`` that is consistent with ``op``'s reported outcome."""
        raise NotImplementedError

    def explain(self, state: S, op: Operation) -> str:
        """Why ``op`` cannot come next in ``state`` (what the model would do instead)."""
        return "the model does not allow this outcome here"

    def partition_key(self, op: Operation) -> Hashable | None:
        """The one key ``op`` touches, or None when it reads or writes across keys."""
        return None

    def restrict(self, state: S, key: Hashable) -> S:
        """The part of ``state`` that belongs to ``key`` (used only with partitioning)."""
        return state

    def precheck(self, history: Sequence[Operation]) -> tuple[tuple[Operation, ...], str] | None:
        """A violation visible without search (e.g. two polls returned the same token)."""
        return None

    def describe_state(self, state: S) -> str:
        return f"  {format_value(state)}"
