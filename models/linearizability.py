"""Is a concurrent history linearizable with respect to a sequential model?

A history is linearizable when its operations can be put in one order that
(1) keeps real-time precedence (if A returned before B was invoked, A comes
first) and (2) makes the sequential model give every operation the outcome it
actually had. This module decides that with the Wing & Gong search as refined by
Lowe and by porcupine: walk the invocation/response events in time order, try to
linearize any operation invoked before the earliest pending response, backtrack
when a response is reached with its operation still unlinearized, and never
visit the same (set of linearized operations, model state) twice — that cache
turns an exponential search into one linear in the history length for bounded
concurrency.

The model is given as a ``SequentialSpec``: ``step(state, op)`` returns every
state the model may be in after ``op`` *given the outcome the target reported*
(empty: no explanation). That one method covers:

- nondeterminism the model allows (several readings of the spec, opaque
  tokens): return several states;
- unknown outcomes (a process killed mid-operation): return both the state with
  and without the effect; "without" is the same as never linearizing it;
- outcomes that mean "no effect" (SQLite ``database is locked``): return ``[state]``.

Per-job splitting (P-compositionality, Horn & Kroening 2015) is sound only when
the model is a product of independent per-key objects *for every operation of
the history*: each operation touches one key's sub-state and its outcome depends
on nothing else. A spec names that key with ``partition_key`` (``None``: the
operation reads or writes across keys), and the checker splits only histories in
which every operation has one. See ``models/_linear_specs.py`` for why lease
``claim`` and JobQueue ``poll`` never do.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic

from leasecheck.models._history import (
    HarnessStep,
    Operation,
    Outcome,
    Response,
    S,
    SequentialSpec,
)
from leasecheck.models._linear_specs import BUSY, OPEN_TRANSACTION, JobQueueSpec, LeaseSpec

__all__ = [
    "BUSY",
    "OPEN_TRANSACTION",
    "BudgetExceeded",
    "HarnessStep",
    "JobQueueSpec",
    "LeaseSpec",
    "Operation",
    "Outcome",
    "Response",
    "SequentialSpec",
    "Verdict",
    "check",
]


DEFAULT_BUDGET = 5_000_000
"""Configurations (linearized set, state) the search may visit before giving up."""


class BudgetExceeded(Exception):
    """The search visited more configurations than allowed; the history is undecided."""


@dataclass(frozen=True)
class Verdict:
    """The checker's answer, with a witness order or the place where every order fails."""

    linearizable: bool
    history: tuple[Operation, ...]
    order: tuple[Operation, ...]
    """A linearization (when linearizable), else the longest explainable prefix found."""
    state_text: str
    """The model state after ``order``."""
    conflicting: tuple[Operation, ...] = ()
    reasons: tuple[str, ...] = ()
    explored: int = 0
    partitions: int = 1
    seconds: float = 0.0

    def report(self, tail: int = 6) -> str:
        """A readable account: the failing frontier, each conflicting op with its interval."""
        origin = min((op.invoked_ns for op in self.history), default=0)
        if self.linearizable:
            return f"linearizable: {len(self.history)} operations, order found\n" + "\n".join(
                op.describe(origin) for op in self.order
            )
        lines = [
            f"not linearizable: {len(self.history)} operations; no order that respects real time "
            f"explains every outcome (searched {self.explored} configurations).",
            f"The longest explainable prefix has {len(self.order)} operations; its last ones:",
            *(f"  {op.describe(origin)}" for op in self.order[-tail:]),
            "Model state after that prefix:",
            self.state_text,
            "No operation that may come next is explained by the model "
            "(times are from the first invocation):",
        ]
        for op, reason in zip(self.conflicting, self.reasons, strict=True):
            lines += [f"  {op.describe(origin)}", f"{'':14}{reason}"]
        return "\n".join(lines)


@dataclass(eq=False)
class _Entry:
    """One event in the doubly linked list the search lifts operations out of."""

    op: int
    is_call: bool
    match: _Entry | None = None
    prev: _Entry | None = None
    next: _Entry | None = None


def _entries(history: Sequence[Operation]) -> _Entry:
    """A linked list of call and return events in time order; calls first at equal times."""
    events: list[tuple[float, int, int]] = []
    for i, op in enumerate(history):
        events.append((op.invoked_ns, 0, i))
        events.append((math.inf if op.returned_ns is None else op.returned_ns, 1, i))
    events.sort()
    head = _Entry(-1, False)
    calls: dict[int, _Entry] = {}
    last = head
    for _, kind, i in events:
        entry = _Entry(i, kind == 0)
        if kind == 0:
            calls[i] = entry
        else:
            calls[i].match = entry
        entry.prev, last.next = last, entry
        last = entry
    return head


def _lift(entry: _Entry) -> None:
    """Remove a call and its return from the list."""
    for node in (entry, entry.match):
        assert node is not None and node.prev is not None
        node.prev.next = node.next
        if node.next is not None:
            node.next.prev = node.prev


def _unlift(entry: _Entry) -> None:
    """Put a lifted call and its return back (in reverse order of removal)."""
    for node in (entry.match, entry):
        assert node is not None and node.prev is not None
        node.prev.next = node
        if node.next is not None:
            node.next.prev = node


class _Search(Generic[S]):
    """One depth-first search over a (sub)history; see the module docstring."""

    def __init__(self, history: Sequence[Operation], spec: SequentialSpec[S], budget: int) -> None:
        self.history = history
        self.spec = spec
        self.budget = budget
        self.cache: set[tuple[int, S]] = set()
        self.best: tuple[tuple[int, ...], S] | None = None
        self.deepest = 0

    def run(self, initial: S) -> tuple[bool, list[int], S]:
        """(linearizable, order of op indices, final state) or the deepest prefix found."""
        head = _entries(self.history)
        stack: list[tuple[_Entry, S, Sequence[S], int]] = []
        state, linearized = initial, 0
        self.best = ((), initial)
        entry = head.next
        while head.next is not None:
            assert entry is not None
            if entry.is_call:
                options = self.spec.step(state, self.history[entry.op])
                chosen = self._choose(linearized | (1 << entry.op), options, 0)
                if chosen < 0:
                    entry = entry.next
                    continue
                stack.append((entry, state, options, chosen + 1))
                state, linearized = options[chosen], linearized | (1 << entry.op)
                _lift(entry)
                self.deepest = max(self.deepest, len(stack))
                entry = head.next
                continue
            while True:  # a response reached with its operation unlinearized: backtrack
                if not stack:
                    order, best_state = self.best
                    return False, list(order), best_state
                self._note_depth(stack, state)
                top, state, options, start = stack.pop()
                _unlift(top)
                linearized &= ~(1 << top.op)
                chosen = self._choose(linearized | (1 << top.op), options, start)
                if chosen < 0:
                    entry = top.next
                    break
                stack.append((top, state, options, chosen + 1))
                state, linearized = options[chosen], linearized | (1 << top.op)
                _lift(top)
                entry = head.next
                break
        return True, [frame[0].op for frame in stack], state

    def _choose(self, linearized: int, options: Sequence[S], start: int) -> int:
        """The first option from ``start`` whose configuration is new (cached now), or -1."""
        for i in range(start, len(options)):
            key = (linearized, options[i])
            if key not in self.cache:
                if len(self.cache) >= self.budget:
                    raise BudgetExceeded(
                        f"the linearizability search visited {self.budget} configurations "
                        f"without deciding ({len(self.history)} operations); shorten the "
                        f"history or lower its concurrency"
                    )
                self.cache.add(key)
                return i
        return -1

    def _note_depth(self, stack: list[tuple[_Entry, S, Sequence[S], int]], state: S) -> None:
        """Keep the deepest prefix, copied only when the search backs out of it."""
        assert self.best is not None
        if len(stack) == self.deepest > len(self.best[0]):
            self.best = (tuple(frame[0].op for frame in stack), state)


def _frontier(history: Sequence[Operation], done: set[int]) -> list[int]:
    """The operations that may come next after ``done``: the one that must (earliest
    pending response) and every one invoked before that response."""
    pending = [i for i in range(len(history)) if i not in done]
    if not pending:
        return []

    def response(i: int) -> float:
        end = history[i].returned_ns
        return math.inf if end is None else end

    first = min(pending, key=response)
    others = [i for i in pending if i != first and history[i].invoked_ns <= response(first)]
    return [first, *sorted(others, key=lambda i: history[i].invoked_ns)]


def _check_one(
    history: Sequence[Operation], spec: SequentialSpec[S], initial: S, budget: int
) -> Verdict:
    started = time.perf_counter()
    found = spec.precheck(history)
    if found is not None:
        ops, message = found
        return Verdict(
            False, tuple(history), (), spec.describe_state(initial), ops, (message,) * len(ops)
        )
    search = _Search(history, spec, budget)
    ok, order, state = search.run(initial)
    conflicting = () if ok else tuple(_frontier(history, set(order)))
    return Verdict(
        linearizable=ok,
        history=tuple(history),
        order=tuple(history[i] for i in order),
        state_text=spec.describe_state(state),
        conflicting=tuple(history[i] for i in conflicting),
        reasons=tuple(spec.explain(state, history[i]) for i in conflicting),
        explored=len(search.cache),
        seconds=time.perf_counter() - started,
    )


def check(
    history: Sequence[Operation],
    spec: SequentialSpec[S],
    initial: S,
    *,
    partition: bool = True,
    budget: int = DEFAULT_BUDGET,
) -> Verdict:
    """Decide whether ``history`` is linearizable for ``spec`` starting from ``initial``.

    With ``partition`` the history is split per key when every operation names one
    (``spec.partition_key``), and each part is checked from ``spec.restrict(initial, key)``.
    Raises ``BudgetExceeded`` instead of guessing when the search is too large.
    """
    keys: list[Hashable | None] = [spec.partition_key(op) for op in history]
    if not partition or not history or any(key is None for key in keys) or len(set(keys)) < 2:
        return _check_one(history, spec, initial, budget)
    started, explored = time.perf_counter(), 0
    groups: dict[Hashable, list[Operation]] = {}
    for key, op in zip(keys, history, strict=True):
        groups.setdefault(key, []).append(op)
    for key, ops in groups.items():
        verdict = _check_one(ops, spec, spec.restrict(initial, key), budget)
        explored += verdict.explored
        if not verdict.linearizable:
            return _with(verdict, explored, len(groups), started, tuple(history))
    merged = tuple(op for ops in groups.values() for op in ops)
    done = Verdict(True, tuple(history), merged, "  (checked per key)")
    return _with(done, explored, len(groups), started, tuple(history))


def _with(
    verdict: Verdict, explored: int, partitions: int, started: float, history: tuple[Any, ...]
) -> Verdict:
    return Verdict(
        verdict.linearizable, history, verdict.order, verdict.state_text, verdict.conflicting,
        verdict.reasons, explored, partitions, time.perf_counter() - started,
    )  # fmt: skip
