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

import gc
import time
from collections import Counter, deque
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

__all__ = [
    "Batch",
    "Batching",
    "Edge",
    "Expanding",
    "Expansion",
    "ExploreResult",
    "Move",
    "System",
    "Tally",
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


Expansion = tuple[S, tuple[str, ...], str | None]
"""One move from a canonical state, as the search needs it: the canonical target, the
move's coverage keys and the transition invariant it breaks (or None)."""


class Expanding(System[S], Protocol[S]):
    """A system that expands a state without building ``Move`` objects (the fast path).

    ``expand(state)`` yields, in the order of ``moves(state)``, what ``_moves_expansion``
    would compute from each move; systems memoize it per distinct queue state.
    """

    def expand(self, state: S) -> Iterable[Expansion[S]]: ...


class Tally:
    """The coverage keys of a fixed run of moves (one per move), counted once per use.

    A system that expands many states from the same runs of moves (the templates of one
    queue) hands the search a ``Tally`` per run instead of one key tuple per move; the
    search counts each tally by identity and spreads it over its keys at the end."""

    __slots__ = ("counts",)

    def __init__(self, counts: Sequence[tuple[str, ...]]) -> None:
        self.counts = tuple(counts)


Batch = tuple[int, Sequence[Tally], Sequence[tuple[int, S]]]
"""A state's moves in bulk: how many, their coverage as tallies (in move order, one key
tuple per move), and (move index, canonical target) of the moves whose target may differ
from the state itself, in move order. A move known to lead back to its source may be left
out, and so may one whose target object an earlier listed move already has (the search
keeps which states each state reaches, not how many moves reach them)."""


class Batching(Expanding[S], Protocol[S]):
    """A system that expands a state in bulk (the fastest path).

    ``expand_batch(state)`` says what ``expand(state)`` says, minus the moves that lead
    back to ``state`` or to a target an earlier move of the batch lists, or None when
    some move may break a transition invariant (the search then takes ``expand``, which
    reports it exactly)."""

    def expand_batch(self, state: S) -> Batch[S] | None: ...


@dataclass
class ExploreResult(Generic[S]):
    """What one exploration found.

    Known states are numbered in the order they were found (BFS order): ``known`` maps a
    state to its number, ``found`` is the reverse, and ``parent``/``move_index`` give each
    number's BFS-tree parent and the index of the move (in ``moves(parent)``) that first
    reached it (-1 for the initial state). Moves are rebuilt from ``system`` on demand.
    """

    states: int = 0
    transitions: int = 0
    depth: int = 0
    exhausted: bool = False
    seconds: float = 0.0
    coverage: Counter[str] = field(default_factory=Counter)
    missing: tuple[str, ...] = ()
    violation: Violation[S] | None = None
    expanded: int = 0
    """How many states (the first ones of ``found``) had their moves explored."""
    max_depth: int | None = None
    """The depth bound the search was given (None: unbounded). States at that depth are
    checked but not expanded; ``exhausted`` then means every state within it was."""
    known: dict[S, int] = field(default_factory=dict)
    found: list[S] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    move_index: list[int] = field(default_factory=list)
    system: System[S] | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.violation is None and not self.missing

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else float(self.states)

    @property
    def order(self) -> list[S]:
        """Every expanded canonical state in BFS order."""
        return self.found[: self.expanded]

    @property
    def parents(self) -> dict[S, tuple[S, int] | None]:
        """Each known state's BFS-tree parent and the index of the move that reached it."""
        return {
            state: None if up < 0 else (self.found[up], index)
            for state, up, index in zip(self.found, self.parent, self.move_index, strict=True)
        }

    def source_moves(self) -> Iterator[tuple[S, Move[S]]]:
        """Every explored transition as (canonical source, move), in BFS order of its source."""
        assert self.system is not None
        for source in self.order:
            for move in self.system.moves(source):
                yield source, move

    @property
    def edges(self) -> list[Edge[S]]:
        """Every explored transition with its canonical target (built on demand)."""
        assert self.system is not None
        system = self.system
        return [
            Edge(source, move, source if move.state is source else system.canonical(move.state))
            for source, move in self.source_moves()
        ]

    def path_to(self, state: S) -> list[tuple[Hashable, S]]:
        """The (operation, state) steps of the BFS tree from the initial state to ``state``."""
        return [(move.op, after) for move, after in self.path_moves(state)]

    def path_moves(self, state: S) -> list[tuple[Move[S], S]]:
        """The (move, canonical state after it) steps of the BFS tree up to ``state``."""
        steps: list[tuple[Move[S], S]] = []
        number = self.known[state]
        while self.parent[number] >= 0:
            steps.append((self.tree_move(self.found[number]), self.found[number]))
            number = self.parent[number]
        steps.reverse()
        return steps

    def tree_move(self, state: S) -> Move[S]:
        """The move of the BFS tree that first reached ``state`` (not the initial state)."""
        assert self.system is not None
        number = self.known[state]
        assert self.parent[number] >= 0, "the initial state has no tree move"
        return _nth(self.system.moves(self.found[self.parent[number]]), self.move_index[number])


def _nth(moves: Iterable[Move[S]], index: int) -> Move[S]:
    for number, move in enumerate(moves):
        if number == index:
            return move
    raise IndexError(f"the system gave fewer than {index + 1} moves the second time")


def explore(
    system: System[S], max_states: int, keep_edges: bool = True, max_depth: int | None = None
) -> ExploreResult[S]:
    """Breadth-first search from ``system.initial()``, checking every state and move.

    Stops at the first safety violation (its trace is a shortest one, since states are
    dequeued in BFS order), or once ``max_states`` states are known (``exhausted`` is
    then False and liveness is judged only over the explored part, optimistically).
    With ``max_depth``, states that many moves from the initial state are checked but
    not expanded (a bounded search from a seeded start state): ``exhausted`` is True
    when every state within the bound was expanded, and liveness treats the states on
    the bound optimistically, as it treats a cut-off frontier.
    Transitions are not stored: ``edges`` and ``source_moves`` rebuild them from the
    system (``keep_edges`` is kept for callers and has no effect). The cyclic garbage
    collector is paused meanwhile: the search allocates millions of acyclic tuples that
    it would otherwise traverse again and again.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        return _search(system, max_states, max_depth)
    finally:
        if paused:
            gc.enable()


_TALLIES = 1 << 20
"""Tallies listed before they are counted (one ``Counter.update`` per million uses)."""


def _search(system: System[S], max_states: int, max_depth: int | None) -> ExploreResult[S]:
    started = time.perf_counter()
    result: ExploreResult[S] = ExploreResult(system=system, max_depth=max_depth)
    _add(result, system.canonical(system.initial()), -1, -1)
    depth = [0]
    successors: list[list[int]] = []
    tally: Counter[tuple[str, ...]] = Counter()
    tallies: list[Tally] = []
    """Every tally used, once per use (counted at the end, or when the list grows long)."""
    used: Counter[Tally] = Counter()
    expand = getattr(system, "expand", None) or (lambda s: _moves_expansion(system, s))
    batch = getattr(system, "expand_batch", None) or (lambda s: None)
    result.violation = _check_state(system, result, result.found[0])
    bounded = False
    while result.expanded < len(result.found) and result.violation is None:
        number = result.expanded
        if max_depth is not None and depth[number] >= max_depth:
            bounded = True  # BFS order: every later state is on the bound too
            break
        result.expanded += 1
        bulk = batch(result.found[number])
        if bulk is None:
            result.violation = _expand(system, expand(result.found[number]), result, number,
                                       depth, successors, tally)  # fmt: skip
        else:
            result.violation = _expand_bulk(system, bulk, result, number, depth, successors,
                                            tallies, tally)  # fmt: skip
        if len(tallies) > _TALLIES:
            used.update(tallies)
            tallies.clear()
        if len(result.found) >= max_states and result.expanded < len(result.found):
            break
    used.update(tallies)
    for block, times in used.items():
        for counts in block.counts:
            tally[counts] += times
    for counts, times in tally.items():
        for key in counts:
            result.coverage[key] += times
    cut = result.expanded < len(result.found) and not bounded
    result.exhausted = not cut and result.violation is None
    result.states = len(result.found)
    result.depth = max(depth)
    if result.violation is None:
        result.violation = _liveness(system, result, successors)
    result.missing = tuple(key for key in system.required() if result.coverage[key] == 0)
    result.seconds = time.perf_counter() - started
    return result


def _add(result: ExploreResult[S], state: S, parent: int, index: int) -> int:
    number = result.known[state] = len(result.found)
    result.found.append(state)
    result.parent.append(parent)
    result.move_index.append(index)
    return number


def _moves_expansion(system: System[S], source: S) -> Iterator[Expansion[S]]:
    """The expansion of ``source`` computed from ``system.moves`` (the plain path)."""
    for move in system.moves(source):
        target = source if move.state is source else system.canonical(move.state)
        yield target, move.counts, system.check_move(source, move)


def _expand(
    system: System[S],
    expansion: Iterable[Expansion[S]],
    result: ExploreResult[S],
    source: int,
    depth: list[int],
    successors: list[list[int]],
    tally: Counter[tuple[str, ...]],
) -> Violation[S] | None:
    nexts: list[int] = []
    known, level = result.known, depth[source] + 1
    for index, (target, counts, problem) in enumerate(expansion):
        result.transitions += 1
        tally[counts] += 1
        if problem is not None:
            state = result.found[source]
            move = _nth(system.moves(state), index)
            trace = (*_trace(result, state), (move.op, move.state))
            return Violation("transition invariant", problem, trace, _root(result))
        number = known.get(target)
        if number is None:
            number = _add(result, target, source, index)
            depth.append(level)
            violation = _check_state(system, result, target)
            if violation is not None:
                return violation
        nexts.append(number)
    successors.append(nexts)
    return None


def _expand_bulk(
    system: System[S],
    bulk: Batch[S],
    result: ExploreResult[S],
    source: int,
    depth: list[int],
    successors: list[list[int]],
    tallies: list[Tally],
    tally: Counter[tuple[str, ...]],
) -> Violation[S] | None:
    """``_expand`` from a ``Batch``: the same states, numbers, counts and violations.

    Moves back to the source are skipped (the source is known, and a self-loop changes
    no reachability), and so are repeated targets the batch leaves out: the successor
    lists serve liveness, which needs which states are reached, not how often. If a new
    state breaks an invariant, only the moves up to the one that reached it are counted,
    as ``_expand`` counts them."""
    moves, blocks, steps = bulk
    nexts: list[int] = []
    known, level = result.known, depth[source] + 1
    for index, target in steps:
        number = known.get(target)
        if number is None:
            number = _add(result, target, source, index)
            depth.append(level)
            violation = _check_state(system, result, target)
            if violation is not None:
                counts = (c for block in blocks for c in block.counts)
                for _, key in zip(range(index + 1), counts, strict=False):
                    tally[key] += 1
                result.transitions += index + 1
                return violation
        nexts.append(number)
    result.transitions += moves
    tallies.extend(blocks)
    successors.append(nexts)
    return None


def _check_state(system: System[S], result: ExploreResult[S], state: S) -> Violation[S] | None:
    problem = system.check_state(state)
    if problem is None:
        return None
    return Violation("state invariant", problem, _trace(result, state), _root(result))


def _trace(result: ExploreResult[S], state: S) -> tuple[tuple[Hashable, S], ...]:
    return tuple(result.path_to(state))


def _root(result: ExploreResult[S]) -> S:
    return result.found[0]


def _liveness(
    system: System[S], result: ExploreResult[S], successors: list[list[int]]
) -> Violation[S] | None:
    """Every item of every state can reach a state where it is at its goal.

    Backward reachability, per item, from the goal states (and, optimistically, from
    unexpanded frontier states when the search was cut off).
    """
    found, expanded = result.found, result.expanded
    predecessors: list[list[int]] = [[] for _ in found]
    for source, targets in enumerate(successors):
        for target in targets:
            predecessors[target].append(source)
    present = [_item_set(system.items(state)) for state in found]
    goals = getattr(system, "goals", None)
    """A system may say at once which items of a state are at their goal (a set per
    state) instead of ``at_goal`` per item."""
    reached = None if goals is None else [goals(state) for state in found[:expanded]]
    frontier = range(expanded, len(found))
    for item in sorted(set().union(*present)):
        if reached is None:
            seeds = [n for n, state in enumerate(found)
                     if n >= expanded or system.at_goal(state, item)]  # fmt: skip
        else:
            seeds = [n for n, done in enumerate(reached) if item in done]
            seeds.extend(frontier)
        good = _backward(predecessors, seeds, len(found))
        number = good.find(0, 0, expanded)
        while number >= 0:  # the states that cannot reach the goal, in BFS order
            if item in present[number]:
                message = f"job {item!r} can no longer reach done or dead from this state"
                trace = _trace(result, found[number])
                return Violation("liveness", message, trace, _root(result))
            number = good.find(0, number + 1, expanded)
    return None


def _item_set(items: Iterable[str]) -> frozenset[str] | set[str]:
    """``items`` as a set (a frozenset as it is: a system may hand out one per state)."""
    return items if isinstance(items, frozenset) else set(items)


def _backward(predecessors: list[list[int]], seeds: list[int], count: int) -> bytearray:
    good = bytearray(count)
    for seed in seeds:
        good[seed] = 1
    queue = deque(seeds)
    while queue:
        state = queue.popleft()
        for parent in predecessors[state]:
            if not good[parent]:
                good[parent] = 1
                queue.append(parent)
    return good
