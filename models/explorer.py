"""The generic explicit-state explorer: breadth-first search over a ``System``.

A system (the lease worker model, the JobQueue model) says what its start state is,
which moves leave a state, how a state is reduced to its canonical representative
(symmetry), what must hold in every state and along every move, and which items
(jobs) must always be able to reach a goal. The core does the rest, once for both:
hashing, the BFS with parent pointers (so the first violation found has a shortest
trace), per-operation and per-hook coverage counts (an unreached operation is a
vacuous pass and fails the run), and liveness by backward reachability over the
explored graph.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

__all__ = [
    "Edge",
    "ExploreResult",
    "Move",
    "System",
    "Violation",
    "concretize",
    "explore",
]

S = TypeVar("S", bound=Hashable)


@dataclass(frozen=True)
class Move(Generic[S]):
    """One operation from a state: its label, the successor (not yet canonical), what it did.

    ``result`` is the operation's return value (or None), ``error`` the contract's name of
    the error it raised (``"fault"`` for an injected fault), ``hooks`` the hook points it
    passed, in order, and ``counts`` the coverage keys it reaches ("op:claim",
    "hook:after-claim", "result:claim-none", ...).
    """

    op: Hashable
    state: S
    result: Any = None
    error: str | None = None
    hooks: tuple[str, ...] = ()
    counts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Edge(Generic[S]):
    """An explored transition: canonical source, the move taken from it, canonical target."""

    source: S
    move: Move[S]
    target: S


class System(Protocol[S]):
    """What the explorer needs to know about a model."""

    def initial(self) -> S: ...

    def canonical(self, state: S) -> S:
        """The representative of ``state``'s symmetry class (must commute with moves)."""
        ...

    def moves(self, state: S) -> Iterable[Move[S]]: ...

    def check_state(self, state: S) -> str | None:
        """None, or a sentence saying which invariant ``state`` breaks."""
        ...

    def check_move(self, source: S, move: Move[S]) -> str | None:
        """None, or a sentence saying which transition invariant ``move`` breaks."""
        ...

    def items(self, state: S) -> Iterable[str]:
        """The items (job ids) present in ``state`` that must be able to reach their goal."""
        ...

    def at_goal(self, state: S, item: str) -> bool:
        """Whether ``item`` is in a final state (done or dead) in ``state``."""
        ...

    def required(self) -> Sequence[str]:
        """Coverage keys that must each be reached at least once."""
        ...

    def describe_op(self, op: Hashable) -> str: ...

    def op_shape(self, op: Hashable) -> Hashable:
        """What an operation is up to symmetry (its kind, outcome, fault), for traces."""
        ...

    def describe_state(self, state: S) -> str: ...


@dataclass(frozen=True)
class Violation(Generic[S]):
    """A broken invariant and the shortest path of operations that leads to it."""

    kind: str
    message: str
    trace: tuple[tuple[Hashable, S], ...]
    """(operation, state after it) from the initial state; the last state is the bad one."""
    initial: S

    def render(self, system: System[S]) -> str:
        """The message and the trace with concrete names and times (see ``concretize``)."""
        steps = concretize(system, self.trace, self.kind == "transition invariant")
        lines = [f"{self.kind}: {self.message}", "shortest trace from the initial state:"]
        for number, move in enumerate(steps, 1):
            lines.append(f"  {number}. {system.describe_op(move.op)}")
        lines.append(system.describe_state(steps[-1].state if steps else self.initial))
        return "\n".join(lines)


def concretize(
    system: System[S], trace: Sequence[tuple[Hashable, S]], last_breaks_move: bool = False
) -> list[Move[S]]:
    """Replay ``trace`` from the initial state without symmetry reduction.

    Each step of a trace starts from a canonical state, so names and times jump from
    one step to the next; here each step is matched by a move of the same shape from the
    concrete state whose successor has the same canonical form, so the printed trace is
    one run with consistent names and an absolute clock. Falls back to ``trace``.
    """
    state, steps = system.initial(), []
    for number, (op, after) in enumerate(trace, 1):
        wanted, shape = system.canonical(after), system.op_shape(op)
        breaks = last_breaks_move and number == len(trace)
        for move in system.moves(state):
            if system.op_shape(move.op) != shape or system.canonical(move.state) != wanted:
                continue
            if breaks and system.check_move(state, move) is None:
                continue
            steps.append(move)
            state = move.state
            break
        else:
            return [Move(op, after) for op, after in trace]
    return steps


@dataclass
class ExploreResult(Generic[S]):
    """What one exploration found."""

    states: int = 0
    transitions: int = 0
    depth: int = 0
    exhausted: bool = False
    seconds: float = 0.0
    coverage: Counter[str] = field(default_factory=Counter)
    missing: tuple[str, ...] = ()
    violation: Violation[S] | None = None
    edges: list[Edge[S]] = field(default_factory=list)
    """Every explored transition, in BFS order of its source (for conformance replay)."""
    order: list[S] = field(default_factory=list)
    """Every canonical state in BFS order."""
    parents: dict[S, tuple[S, Move[S]] | None] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.violation is None and not self.missing

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else float(self.states)

    def path_to(self, state: S) -> list[tuple[Hashable, S]]:
        """The (operation, state) steps of the BFS tree from the initial state to ``state``."""
        return [(move.op, after) for move, after in self.path_moves(state)]

    def path_moves(self, state: S) -> list[tuple[Move[S], S]]:
        """The (move, canonical state after it) steps of the BFS tree up to ``state``."""
        steps: list[tuple[Move[S], S]] = []
        current: S = state
        link = self.parents[current]
        while link is not None:
            parent, move = link
            steps.append((move, current))
            current = parent
            link = self.parents[current]
        steps.reverse()
        return steps


def explore(system: System[S], max_states: int, keep_edges: bool = True) -> ExploreResult[S]:
    """Breadth-first search from ``system.initial()``, checking every state and move.

    Stops at the first safety violation (its trace is a shortest one, since states are
    dequeued in BFS order), or once ``max_states`` states are known (``exhausted`` is
    then False and liveness is judged only over the explored part, optimistically).
    """
    started = time.perf_counter()
    result: ExploreResult[S] = ExploreResult()
    start = system.canonical(system.initial())
    result.parents[start] = None
    depth: dict[S, int] = {start: 0}
    queue: deque[S] = deque([start])
    successors: dict[S, list[S]] = {}
    result.violation = _check_state(system, result, start)
    while queue and result.violation is None:
        source = queue.popleft()
        result.order.append(source)
        result.violation = _expand(system, result, source, queue, depth, successors, keep_edges)
        if len(result.parents) >= max_states and queue:
            break
    result.exhausted = not queue and result.violation is None
    result.states = len(result.parents)
    result.depth = max(depth.values())
    if result.violation is None:
        result.violation = _liveness(system, result, successors, set(queue))
    result.missing = tuple(key for key in system.required() if result.coverage[key] == 0)
    result.seconds = time.perf_counter() - started
    return result


def _expand(
    system: System[S],
    result: ExploreResult[S],
    source: S,
    queue: deque[S],
    depth: dict[S, int],
    successors: dict[S, list[S]],
    keep_edges: bool,
) -> Violation[S] | None:
    nexts: list[S] = []
    for move in system.moves(source):
        result.transitions += 1
        result.coverage.update(move.counts)
        target = source if move.state is source else system.canonical(move.state)
        nexts.append(target)
        if keep_edges:
            result.edges.append(Edge(source, move, target))
        problem = system.check_move(source, move)
        if problem is not None:
            trace = (*_trace(result, source), (move.op, move.state))
            return Violation("transition invariant", problem, trace, _root(result))
        if target not in result.parents:
            result.parents[target] = (source, move)
            depth[target] = depth[source] + 1
            queue.append(target)
            violation = _check_state(system, result, target)
            if violation is not None:
                return violation
    successors[source] = nexts
    return None


def _check_state(system: System[S], result: ExploreResult[S], state: S) -> Violation[S] | None:
    problem = system.check_state(state)
    if problem is None:
        return None
    return Violation("state invariant", problem, _trace(result, state), _root(result))


def _trace(result: ExploreResult[S], state: S) -> tuple[tuple[Hashable, S], ...]:
    return tuple(result.path_to(state))


def _root(result: ExploreResult[S]) -> S:
    return next(iter(result.parents))


def _liveness(
    system: System[S],
    result: ExploreResult[S],
    successors: dict[S, list[S]],
    frontier: set[S],
) -> Violation[S] | None:
    """Every item of every state can reach a state where it is at its goal.

    Backward reachability, per item, from the goal states (and, optimistically, from
    unexpanded frontier states when the search was cut off).
    """
    predecessors: dict[S, list[S]] = {}
    for source, targets in successors.items():
        for target in targets:
            predecessors.setdefault(target, []).append(source)
    items = sorted({item for state in result.parents for item in system.items(state)})
    for item in items:
        good = _backward(
            predecessors,
            (s for s in result.parents if s in frontier or system.at_goal(s, item)),
        )
        for state in result.order:
            if item in system.items(state) and state not in good:
                message = f"job {item!r} can no longer reach done or dead from this state"
                return Violation("liveness", message, _trace(result, state), _root(result))
    return None


def _backward(predecessors: dict[S, list[S]], seeds: Iterator[S]) -> set[S]:
    good = set(seeds)
    queue = deque(good)
    while queue:
        state = queue.popleft()
        for parent in predecessors.get(state, ()):
            if parent not in good:
                good.add(parent)
                queue.append(parent)
    return good
