"""The edges of both contracts: one table per contract, shared by every generator.

Every range of lease-worker.md and job-queue.md is written here once, with both of
its valid ends and both invalid neighbours; every "exact" type rule with the
look-alikes it must refuse (bool, float, a numeric str, None and a *subclass* of the
exact type); identifiers with both length ends and every printable ASCII character
outside their alphabet; the kinds of path a queue file can be given. The agreement
machines, the crash harness and the explorers draw from these tables, so an edge added
here is tried everywhere.

Look-alike values print as constructor calls (``IntSubclass(5)``), like the values of
``stateful_tests._lease_values``, so a shrunk program that uses one can be pasted and run.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, Final

from leasecheck.models.contracts import JobRow, RedriveRow, Snapshot
from leasecheck.models.lease_model import MAX_NOW, MAX_TOKEN

__all__ = [
    "BAD_IDENTIFIERS",
    "BLANK_TEXTS",
    "IDENTIFIER_ALPHABET",
    "IDENTIFIER_ENDS",
    "JOB_RANGES",
    "LEASE_RANGES",
    "LEASE_STARTS",
    "OUTSIDE_ALPHABET",
    "OUTSIDE_IDENTIFIERS",
    "PATH_KINDS",
    "DictSubclass",
    "IntRange",
    "IntSubclass",
    "StrSubclass",
    "bad_ints",
]


class IntSubclass(int):
    """An int that is not exactly an int: ``type(x) is int`` is False (the spec's test)."""

    def __repr__(self) -> str:
        return f"IntSubclass({int(self)})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


class StrSubclass(str):
    """A str that is not exactly a str (an identifier must be ``type(x) is str``)."""

    def __repr__(self) -> str:
        return f"StrSubclass({str(self)!r})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


class DictSubclass(dict[str, Any]):
    """A dict that is not exactly a dict (an event or ticket must be exactly a ``dict``)."""

    def __repr__(self) -> str:
        return f"DictSubclass({dict(self)!r})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


@dataclass(frozen=True)
class IntRange:
    """An exact-int range ``low .. high`` of a contract, both ends included."""

    low: int
    high: int

    @property
    def ends(self) -> tuple[int, int]:
        """Both valid ends."""
        return (self.low, self.high)

    @property
    def neighbours(self) -> tuple[int, int]:
        """Both invalid neighbours."""
        return (self.low - 1, self.high + 1)


# --- lease-worker.md --------------------------------------------------------------------

LEASE_RANGES: Final = {
    "qty": IntRange(1, 1000),
    "ttl_ms": IntRange(1, 60000),
    "max_attempts": IntRange(1, 16),
    "lease_ms": IntRange(1, 60000),
    "delay_ms": IntRange(0, 60000),
    "now_ms": IntRange(0, MAX_NOW),
    "token": IntRange(1, MAX_TOKEN),
    "attempt": IntRange(1, 16),
    "lease_until": IntRange(1, MAX_TOKEN),
    "base_ms": IntRange(1, 60000),
    "cap_ms": IntRange(1, 60000),
}
"""Every exact-int range of lease-worker.md (cap_ms starts at base_ms; 1 is its floor)."""


def bad_ints(low: int, high: int) -> tuple[object, ...]:
    """What an exact int in ``low .. high`` must refuse: both invalid neighbours, bool, a
    float and a str of a valid value, None, and int subclasses at both valid ends."""
    return (
        low - 1, high + 1, True, False, float(low), str(low), None,
        IntSubclass(low), IntSubclass(high),
    )  # fmt: skip


IDENTIFIER_ALPHABET: Final = string.ascii_letters + string.digits + "_-"
OUTSIDE_ALPHABET: Final = tuple(c for c in string.printable if c not in IDENTIFIER_ALPHABET)
"""Every printable ASCII character (whitespace included) that no identifier may hold."""
IDENTIFIER_ENDS: Final = ("a", (IDENTIFIER_ALPHABET * 2)[:64])
"""The shortest and the longest identifier (the long one holds every allowed character)."""
BAD_IDENTIFIERS: Final = (
    "", "a\n", StrSubclass("a"), "a b", "é", "x" * 65, "a.b", True, 1, None, b"a",
)  # fmt: skip
"""Identifiers the spec refuses: both length neighbours, a trailing newline, a str
subclass, non-ASCII, other types."""
OUTSIDE_IDENTIFIERS: Final = tuple(f"a{c}" for c in OUTSIDE_ALPHABET)
"""``'a'`` followed by each printable ASCII character outside the alphabet (a generator
draws from these as one group, so they do not crowd out ``BAD_IDENTIFIERS``)."""

PATH_KINDS: Final = (
    "queue", "missing", "directory", "fifo", "socket", "symlink to the queue",
    "dangling symlink", "symlink to a directory", "corrupt", "empty", "read-only",
)  # fmt: skip
"""Every kind of path ``open_queue``/``run_file`` can be given (``lease.configuration``
tries each; the agreement machine the ones whose outcome the model decides)."""


# --- job-queue.md -----------------------------------------------------------------------

JOB_RANGES: Final = {
    "max_attempts": IntRange(1, 6),
    "base_backoff_millis": IntRange(1, 50),
    "lease_millis": IntRange(1, 40),
}
"""The JobQueue's lower bounds (``>= 1``, ``lease_millis <= 0`` refused) and the tops of
the scope the machine explores (the spec sets no top: these are scope, not rules)."""
BLANK_TEXTS: Final = (None, "", *(c for c in string.whitespace), " \t\n")
"""Blank ``type``/``worker_id`` values: None, empty, and each ASCII whitespace string."""


# --- start states near the bounds (lease-worker.md's schema, written directly) -----------


def _job(job_id: str, status: str, **fields: Any) -> JobRow:
    """A job row; unspecified columns are those of a fresh pending job at t=0."""
    row: dict[str, Any] = {
        "qty": 1, "attempts": 0, "max_attempts": 3, "token": 0, "available_at": 0,
        "deadline": 60000, "owner": None, "lease_until": None, "reason": None,
    }  # fmt: skip
    return JobRow(id=job_id, status=status, **{**row, **fields})


_MANY_ROWS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("a", "done", {"attempts": 1, "token": 1}),
    ("b", "dead", {"attempts": 3, "token": 3, "reason": "exhausted"}),
    ("c", "pending", {"available_at": 400, "reason": "retry", "attempts": 1, "token": 1}),
    *((f"j{n}", "pending", {"available_at": 100 * n}) for n in range(1, 10)),
    ("k", "leased", {"attempts": 1, "token": 1, "owner": "w2", "lease_until": 500}),
)
"""Thirteen rows: every status, nine pending jobs becoming ready one after another."""
TOP = MAX_TOKEN
"""The top of token, lease_until and deadline: 10**15."""
LEASE_STARTS: Final[dict[str, tuple[int, Snapshot]]] = {
    "empty": (0, Snapshot()),
    "one-below-budget": (1000, Snapshot(jobs=(
        _job("a", "pending", attempts=15, max_attempts=16, token=15),
        _job("b", "leased", attempts=2, token=2, owner="w1", lease_until=1000),
        _job("c", "dead", attempts=16, max_attempts=16, token=16, reason="exhausted"),
    ))),
    "near-clock-top": (MAX_NOW, Snapshot(jobs=(
        _job("a", "pending", available_at=MAX_NOW, deadline=TOP, qty=1000),
        _job("b", "leased", attempts=1, token=1, available_at=MAX_NOW - 5, deadline=TOP,
             owner="w2", lease_until=TOP - 1),
        _job("c", "pending", attempts=1, token=1, available_at=MAX_NOW, deadline=MAX_NOW + 1,
             reason="retry"),
    ))),
    "token-top": (0, Snapshot(
        jobs=(
            _job("a", "dead", attempts=1, max_attempts=1, token=TOP - 1, reason="permanent"),
            _job("b", "pending", max_attempts=1, token=TOP - 1),
        ),
        redrives=(RedriveRow(id="a", token=TOP - 2, at_ms=0, note="n1"),),
    )),
    "many-rows": (500, Snapshot(jobs=tuple(_job(*row[:2], **row[2]) for row in _MANY_ROWS))),
}  # fmt: skip
"""Start states of the agreement machine: (the clock, the rows). Budgets and tokens one
below their maximum, times at the clock's top, a dozen rows. A job is never past token
10**15 (that behaviour is left open), so a start holds tokens of at most 10**15 - 1."""
