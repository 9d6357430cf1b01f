"""The small argument types of the lease agreement machine, each printing as code.

A shrunk counterexample is a program such as
``state.finish(ticket=tickets_0, change=Shift('token', -1), ...)``; every value a
rule takes therefore has a short ``repr`` that is also a valid constructor call,
so the printed program can be pasted after ``LeaseAgreement.bind(...)`` and run.
Hypothesis' pretty printer uses ``_repr_pretty_`` when an object has one.

- ``When``: a time chosen around a job's boundary (resolved when the step runs).
- ``Hook``: the ``fault`` argument: record the points, or raise at one of them.
- ``Send`` / ``Clock``: the scripted ``send`` and ``clock`` of ``run_once``.
- ``Bad``: one argument of an otherwise valid call replaced by a value the spec rejects.
- ``Start``: the queue a program starts from (empty, or rows near the bounds).
- ``Keep``, ``Shift``, ``Put``, ``Drop``, ``Extra``, ``Subclass``: how a finish
  changes a ticket taken from the bundle of every ticket ever claimed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from leasecheck.models.contracts import InjectedFault, InjectedInterrupt, Snapshot
from leasecheck.models.edges import LEASE_STARTS
from leasecheck.models.lease_model import MAX_NOW

__all__ = [
    "Bad",
    "Change",
    "Clock",
    "Drop",
    "Extra",
    "Hook",
    "InjectedFault",
    "InjectedInterrupt",
    "Keep",
    "Put",
    "Send",
    "Shift",
    "Start",
    "Subclass",
    "TicketDict",
    "When",
]

SEND_KINDS = (
    "ack",  # returns exactly True
    "truthy",  # returns 1: not True, so BadAck
    "none",  # returns None: BadAck
    "retryable",  # raises the side's Retryable
    "permanent",  # raises the side's Permanent
    "error",  # raises RuntimeError, which must propagate
    "mutate",  # changes its dict, then returns True
    "probe",  # True only if the queue file is not locked by a transaction
    "enqueue",  # enqueues job 'c' through another connection, then returns True
)


class _Code:
    """Prints as ``repr`` in Hypothesis programs (instead of its dataclass fields)."""

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


@dataclass(frozen=True, repr=False)
class When(_Code):
    """A time: ``now`` or a job's ``available_at``/``deadline``/``lease_until``, plus delta.

    ``job=None`` means the first job (in seq order) that is leased (for
    ``lease_until``) or pending or leased (for the other two). Resolved against the
    model's state when the step runs (the target's equals it), falling back to ``now``
    when there is no such job or field, and clamped to the valid times ``0 .. MAX_NOW``.
    """

    anchor: str = "now"
    job: str | None = None
    delta: int = 0

    def resolve(self, now: int, rows: Any) -> int:
        row = next((r for r in rows if self._fits(r)), None)
        base = getattr(row, self.anchor, None) if row is not None else None
        value = (now if base is None else base) + self.delta
        return min(max(value, 0), MAX_NOW)

    def _fits(self, row: Any) -> bool:
        if self.job is not None:
            return bool(row.id == self.job)
        wanted = ("leased",) if self.anchor == "lease_until" else ("pending", "leased")
        return row.status in wanted

    def __repr__(self) -> str:
        if self.anchor == "now":
            return "When('now')" if not self.delta else f"When('now', delta={self.delta})"
        if self.job is None:
            return f"When({self.anchor!r}, delta={self.delta})"
        return f"When({self.anchor!r}, {self.job!r}, {self.delta})"


@dataclass(frozen=True, repr=False)
class Hook(_Code):
    """A ``fault`` callable: records each point; raises ``InjectedFault`` at ``raise_at``
    (``InjectedInterrupt``, which is no ``Exception``, with ``interrupt``)."""

    raise_at: str | None = None
    interrupt: bool = False

    def bind(self, calls: list[str]) -> Any:
        def fault(point: str) -> None:
            calls.append(point)
            if point == self.raise_at:
                error = InjectedInterrupt if self.interrupt else InjectedFault
                raise error(f"fault injected at {point!r}")

        return fault

    def __repr__(self) -> str:
        if self.raise_at is None:
            return "Hook()"
        return f"Hook({self.raise_at!r}{', interrupt=True' if self.interrupt else ''})"


@dataclass(frozen=True, repr=False)
class Bad(_Code):
    """Argument ``arg`` replaced by ``value``, which the spec rejects with ValueError."""

    arg: str
    value: object

    def apply(self, arguments: dict[str, object]) -> dict[str, object]:
        return {**arguments, self.arg: copy.deepcopy(self.value)}  # never share a dict

    def __repr__(self) -> str:
        return f"Bad({self.arg!r}, {self.value!r})"


@dataclass(frozen=True, repr=False)
class Send(_Code):
    """A scripted ``send`` for run_once/run_file; ``kind`` is one of ``SEND_KINDS``."""

    kind: str = "ack"

    def __repr__(self) -> str:
        return f"Send({self.kind!r})"


@dataclass(frozen=True, repr=False)
class Clock(_Code):
    """The two readings a ``clock`` gives (the last one repeats); ``When`` or bad values."""

    first: object = When()
    second: object = When()

    def readings(self, resolve: Any) -> list[object]:
        return [resolve(value) if isinstance(value, When) else value for value in self.tolist()]

    def tolist(self) -> list[object]:
        return [self.first, self.second]

    def __repr__(self) -> str:
        return f"Clock({self.first!r}, {self.second!r})"


@dataclass(frozen=True, repr=False)
class Start(_Code):
    """The queue a program starts from: one of ``models.edges.LEASE_STARTS``, written
    into the file directly in the spec's schema (``empty``: nothing written)."""

    name: str = "empty"

    def state(self) -> tuple[int, Snapshot]:
        """The clock and the rows to start from."""
        return LEASE_STARTS[self.name]

    def __repr__(self) -> str:
        return f"Start({self.name!r})"


class TicketDict(dict[str, Any]):
    """A dict subclass: the spec wants *exactly* a dict, so this ticket is a ValueError."""

    def __repr__(self) -> str:
        return f"TicketDict({dict(self)!r})"


class Change(_Code):
    """How a finish alters a ticket from the bundle; ``apply`` never mutates its input."""

    def apply(self, ticket: dict[str, Any]) -> object:
        raise NotImplementedError


@dataclass(frozen=True, repr=False)
class Keep(Change):
    """The ticket as claimed."""

    def apply(self, ticket: dict[str, Any]) -> object:
        return copy.deepcopy(ticket)

    def __repr__(self) -> str:
        return "Keep()"


@dataclass(frozen=True, repr=False)
class Shift(Change):
    """An int field moved by ``delta`` (a near miss: token - 1, lease_until + 1, ...)."""

    key: str
    delta: int

    def apply(self, ticket: dict[str, Any]) -> object:
        changed = copy.deepcopy(ticket)
        changed[self.key] = changed[self.key] + self.delta
        return changed

    def __repr__(self) -> str:
        return f"Shift({self.key!r}, {self.delta})"


@dataclass(frozen=True, repr=False)
class Put(Change):
    """A field replaced by ``value`` (another owner, a bool, a float, a bad identifier)."""

    key: str
    value: object

    def apply(self, ticket: dict[str, Any]) -> object:
        changed = copy.deepcopy(ticket)
        changed[self.key] = self.value
        return changed

    def __repr__(self) -> str:
        return f"Put({self.key!r}, {self.value!r})"


@dataclass(frozen=True, repr=False)
class Drop(Change):
    """A key removed."""

    key: str

    def apply(self, ticket: dict[str, Any]) -> object:
        return {k: v for k, v in ticket.items() if k != self.key}

    def __repr__(self) -> str:
        return f"Drop({self.key!r})"


@dataclass(frozen=True, repr=False)
class Extra(Change):
    """A key added."""

    key: str

    def apply(self, ticket: dict[str, Any]) -> object:
        return {**copy.deepcopy(ticket), self.key: 1}

    def __repr__(self) -> str:
        return f"Extra({self.key!r})"


@dataclass(frozen=True, repr=False)
class Subclass(Change):
    """The same items in a dict subclass."""

    def apply(self, ticket: dict[str, Any]) -> object:
        return TicketDict(copy.deepcopy(ticket))

    def __repr__(self) -> str:
        return "Subclass()"
