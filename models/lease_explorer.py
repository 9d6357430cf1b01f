"""The lease worker model explored: its scopes, and ``explore_lease`` on the engine.

Within a declared ``LeaseScope`` (which job ids, dispatchers, ttls, leases, delays,
budgets), ``explore_lease`` visits every reachable state of ``models.lease_model``
breadth-first and checks the invariants of ``models._lease_system`` in every state
and along every transition. A *world* is the queue (the model ``Snapshot``), the
tickets each dispatcher still holds (stale ones included, so finishing with an old
ticket is an explored move) and the clock.

Moves from a world, each with every fault choice (none, or a raising fault at each
hook point the operation passes: before ``COMMIT`` the state is unchanged, after it
the state is committed):
- ``enqueue`` of a new id (every qty, ttl, budget of the scope), and of an existing id
  again (same qty: False; other qty: Conflict);
- ``claim`` by each dispatcher with each lease length; a claim that raises gives its
  dispatcher no ticket (a crash after COMMIT loses the ticket, the lease stays);
- ``finish`` by each dispatcher with each ticket it holds, each outcome, each delay
  (for ``retry``); a finish that returns drops the ticket, one that raises keeps it
  (the dispatcher does not know whether it committed, and may try again);
- ``redrive`` of each dead job (while the redrive budget lasts), and of a job that is
  not dead (ValueError);
- ``tick``: the clock moves forward to the next *interesting instant*: the smallest
  value above now in {x-1, x, x+1} for x any job's available_at, deadline or
  lease_until. Every other instant is reached by ticking again, so this single move
  reaches the same states as any jump, and every boundary (now == lease_until,
  now == deadline, ...) is visited exactly, one before and one after.

Seeded parts start from a queue of ``models.edges.LEASE_STARTS`` (a job one attempt
below a budget of 16, times at the clock's top, a dozen rows), written into the target's
file directly, and are explored ``max_depth`` moves deep with the edge table's valid
ends for every argument and each invalid neighbour (ValueError). They keep times
absolute (no time shift) and never move the clock past MAX_NOW.

Symmetry reduction (``canonical``): job ids are relabelled by seq position (the first
row is always the scope's first id) and dispatcher names by the permutation with the
smallest description. Both are sound because the contract compares ids and owners
only for equality: claim orders by seq, never by name; so a relabelled world has
relabelled successors, and every invariant is name-blind. Seq order itself is never
permuted: it decides which job a claim takes, so jobs are not interchangeable.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from leasecheck.models import edges
from leasecheck.models._lease_system import LeaseScope, LeaseSystem, LeaseWorld
from leasecheck.models.explorer import ExploreResult, Violation, explore

__all__ = [
    "SCOPES",
    "LeaseScope",
    "LeaseSystem",
    "LeaseWorld",
    "Violation",
    "explore_lease",
    "scope_parts",
]


def _seeded(start: str, depth: int, **bounds: Any) -> LeaseScope:
    """A part from one of ``models.edges.LEASE_STARTS``, explored ``depth`` moves deep with
    the edge table's valid ends for every argument (ids: the start's rows, then 'z')."""
    rows = tuple(row.id for row in edges.LEASE_STARTS[start][1].jobs)
    r = edges.LEASE_RANGES
    values: dict[str, Any] = dict(
        qtys=r["qty"].ends, ttls=r["ttl_ms"].ends, budgets=r["max_attempts"].ends,
        leases=r["lease_ms"].ends, delays=r["delay_ms"].ends,
    )  # fmt: skip
    return LeaseScope(
        name=f"seed-{start}", jobs=(*rows, "z"), dispatchers=("w1", "w2"), max_redrives=1,
        max_held=1, max_states=3_000_000, start=start, max_depth=depth, refused_args=True,
        **{**values, **bounds},
    )  # fmt: skip


SCOPES: dict[str, tuple[LeaseScope, ...]] = {
    "small": (
        LeaseScope(
            name="small", jobs=("a",), dispatchers=("d1", "d2"), qtys=(1,), ttls=(4,),
            budgets=(2,), leases=(2,), delays=(1,), max_redrives=1, max_held=1,
            max_states=100_000,
        ),
    ),
    "ci": (
        # budgets (1, 2) and leases (1, 2) since the explorer's memo (2,956 -> 5,033
        # states, 4,618 -> 9,025 target calls): a job that dies at its first expiry, and
        # a lease that ends on the next millisecond.
        LeaseScope(
            name="ci-1job", jobs=("a",), dispatchers=("d1", "d2"), qtys=(1,), ttls=(4,),
            budgets=(1, 2), leases=(1, 2), delays=(1,), max_redrives=1, max_held=2,
            max_states=100_000,
        ),
        # max_held 2 since the per-queue memo (1,437 -> 1,788 states): a dispatcher keeps a
        # stale ticket next to a current one; the target is asked the same 5,357 questions.
        LeaseScope(
            name="ci-2jobs", jobs=("a", "b"), dispatchers=("d1", "d2"), qtys=(1,), ttls=(3,),
            budgets=(1,), leases=(2,), delays=(1,), max_redrives=0, max_held=2,
            max_states=100_000,
        ),
        # Seeded parts (times absolute, the edge table's valid ends for every argument).
        # Measured (loaded machine, explore only): 1,310 states in 0.9 s; 687 in 0.4 s.
        _seeded("one-below-budget", 3, unreached=("result:finish-pending",)),
        _seeded("near-clock-top", 3, unreached=("op:tick",)),
        _seeded("many-rows", 2, unreached=("result:claim-none", "result:finish-stale")),
    ),
    "deep": (
        # Measured: 60,141 states, 1,184,853 transitions, exhausted in 45 s (explore only)
        # before the per-queue memo, 7.5x the states/s since (benchmarks/bench_explorer.py).
        LeaseScope(
            name="deep-1job", jobs=("a",), dispatchers=("d1", "d2"), qtys=(1,), ttls=(3, 5),
            budgets=(1, 3), leases=(1, 3), delays=(0, 2), max_redrives=1, max_held=2,
            max_states=3_000_000,
        ),
        # Measured: 285,230 states, 3,794,101 transitions, exhausted in 151 s (explore only)
        # before the per-queue memo.
        LeaseScope(
            name="deep-2jobs", jobs=("a", "b"), dispatchers=("d1", "d2"), qtys=(1,), ttls=(3,),
            budgets=(1, 2), leases=(2,), delays=(1,), max_redrives=1, max_held=1,
            max_states=3_000_000,
        ),
        # Three jobs since the explorer's memo: 73,734 states, 96,915 target calls, 49 s
        # with the replay on a slow 2-core machine (explore only: 8 s).
        LeaseScope(
            name="deep-3jobs", jobs=("a", "b", "c"), dispatchers=("d1", "d2"), qtys=(1,),
            ttls=(3,), budgets=(1,), leases=(2,), delays=(1,), max_redrives=0, max_held=2,
            max_states=3_000_000,
        ),
        # Measured (loaded machine, explore only): 8,223 states, 11 s; 3,577 states, 2 s;
        # 2,510 states, 3.6 s. The bundled worker holds on all three.
        _seeded("one-below-budget", 4, unreached=("result:finish-pending",)),
        _seeded("near-clock-top", 4, unreached=("op:tick",)),
        _seeded("many-rows", 3, unreached=("result:claim-none",)),
    ),
}  # fmt: skip
"""Each scope is explored as one or more parts; each part must be exhausted and reach
every operation and hook it enables (a part without redrives does not need redrive hooks)."""


def scope_parts(name: str) -> tuple[LeaseScope, ...]:
    if name not in SCOPES:
        raise ValueError(f"unknown scope {name!r}; use one of {', '.join(SCOPES)}")
    return SCOPES[name]


def explore_lease(
    scope: LeaseScope, keep_edges: bool = True
) -> tuple[LeaseSystem, ExploreResult[LeaseWorld]]:
    """Explore the lease model within one scope part; the system renders traces and ops."""
    system = LeaseSystem(scope)
    return system, explore(system, scope.max_states, keep_edges, scope.max_depth)


def describe_op(op: Hashable) -> str:
    """A readable sentence for an explored operation label."""
    return LeaseSystem.describe_op_label(op)
