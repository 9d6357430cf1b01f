"""Shrinking a failing list of operations: delta debugging against the real target.

A property that finds a failure outside Hypothesis (a kill, a race round, a schedule)
holds a list of operations that failed once. ``shrink`` makes it as short and as
plain as it can while ``fails`` (which re-runs the *real* target, never a model of
it) still reports a failure:

1. drop chunks: halves, then quarters, ... (Zeller's ddmin, greedy: a chunk whose
   removal still fails stays removed, and the same size is tried again);
2. drop single operations (the last pass of 1, repeated until nothing drops);
3. simplify arguments: each operation is replaced by each of ``simpler(op)`` in
   turn (smaller numbers, fewer fields), kept when the program still fails.

Every candidate is tried in a fixed order, so the same failure shrinks to the same
program; the ``Budget`` (re-runs, then wall seconds as a safety net on a loaded
machine) bounds the cost, which is only ever spent once a property has failed.

It lives in ``models`` because both harness layers (``crash_harness`` and
``stateful_tests``) use it and neither may import the other; it imports nothing of
the project.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Budget", "Shrunk", "shrink"]

T = TypeVar("T")
F = TypeVar("F")


@dataclass(frozen=True)
class Budget:
    """At most ``runs`` re-runs of the target and ``seconds`` of wall time."""

    runs: int = 60
    seconds: float = 8.0


@dataclass(frozen=True)
class Shrunk(Generic[T, F]):
    """The smallest failing program found, its failure, and what finding it cost."""

    items: tuple[T, ...]
    failure: F
    before: int
    """How many operations the original failing program had."""
    runs: int
    seconds: float
    exhausted: bool
    """The budget ran out before every candidate was tried (the result may shrink further)."""

    @property
    def after(self) -> int:
        return len(self.items)

    def sentence(self) -> str:
        """What a user reads under the shrunk program."""
        cut = " (budget spent: it may shrink further)" if self.exhausted else ""
        return (
            f"shrunk from {self.before} to {self.after} operations in {self.runs} re-runs of "
            f"the target: this shorter program fails too{cut}"
        )


class _Tries(Generic[T, F]):
    """Counts re-runs against the budget and keeps the best failure so far."""

    def __init__(
        self, items: Sequence[T], failure: F, fails: Callable[[list[T]], F | None], budget: Budget
    ) -> None:
        self.items, self.failure, self.fails = list(items), failure, fails
        self.budget, self.runs = budget, 0
        self.started = time.monotonic()
        self.tried: set[str] = {repr(self.items)}

    @property
    def spent(self) -> bool:
        elapsed = time.monotonic() - self.started
        return self.runs >= self.budget.runs or elapsed >= self.budget.seconds

    def attempt(self, candidate: list[T]) -> bool:
        """Does ``candidate`` still fail? (Each distinct candidate runs at most once.)"""
        key = repr(candidate)
        if self.spent or key in self.tried:
            return False
        self.tried.add(key)
        self.runs += 1
        found = self.fails(candidate)
        if found is None:
            return False
        self.items, self.failure = candidate, found
        return True


def shrink(
    items: Sequence[T],
    failure: F,
    fails: Callable[[list[T]], F | None],
    budget: Budget = Budget(),
    simpler: Callable[[T], Iterable[T]] | None = None,
    keep: int = 0,
) -> Shrunk[T, F]:
    """The shortest, plainest sublist of ``items`` that ``fails`` (``failure``: what the
    original gave). ``fails(candidate)`` re-runs the target and returns the failure or
    None. The first ``keep`` items are never dropped (a fixture the check needs)."""
    tries = _Tries(items, failure, fails, budget)
    _drop_chunks(tries, keep)
    _simplify(tries, simpler)
    _drop_chunks(tries, keep)  # a simpler argument can make another operation needless
    return Shrunk(
        tuple(tries.items), tries.failure, len(items), tries.runs,
        time.monotonic() - tries.started, tries.spent,
    )  # fmt: skip


def _drop_chunks(tries: _Tries[T, F], keep: int) -> None:
    size = max((len(tries.items) - keep) // 2, 1)
    while size >= 1 and not tries.spent:
        start, dropped = keep, False
        while start < len(tries.items) and not tries.spent:
            candidate = tries.items[:start] + tries.items[start + size :]
            if candidate and tries.attempt(candidate):
                dropped = True
            else:
                start += size
        if not dropped or size >= len(tries.items) - keep:
            size //= 2


def _simplify(tries: _Tries[T, F], simpler: Callable[[T], Iterable[T]] | None) -> None:
    if simpler is None:
        return
    index = 0
    while index < len(tries.items) and not tries.spent:
        for plainer in simpler(tries.items[index]):
            candidate = [*tries.items[:index], plainer, *tries.items[index + 1 :]]
            if tries.attempt(candidate):
                break
        else:
            index += 1
