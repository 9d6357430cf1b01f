"""Did concurrent calls behave like *some* serial order? (The model decides each order.)

Processes that ran at the same time may have taken the lock in any order, so the
check accepts every order: it tries each permutation of the calls on the model and
asks for one in which every call gets the result it got and the end state is the
stored one. A call that gave up on the lock (SQLite busy after ``timeout=1``) did
nothing, which the spec allows, so it takes no part in the order.
"""

from __future__ import annotations

from dataclasses import dataclass

from leasecheck.crash_harness._ops import agrees, expect
from leasecheck.crash_harness.engine import ChildResult
from leasecheck.models.contracts import Snapshot
from leasecheck.models.lease_ops import LeaseOp

__all__ = ["Call", "double_leases", "double_wins", "explain", "unexplained"]


@dataclass(frozen=True)
class Call:
    """What one process called and what it got."""

    who: str
    op: LeaseOp
    outcome: ChildResult

    def describe(self) -> str:
        return f"{self.who}: {self.op.describe()} {self.outcome.describe()}"


def explain(before: Snapshot, calls: list[Call], stored: Snapshot) -> list[Call] | None:
    """A serial order of the calls that were not busy that gives every result and ``stored``.

    A depth-first search over orders, pruned at the first call whose result the model
    does not give, and memoised on (state, calls left): commuting calls cost 2**n, not n!.
    """
    done = tuple(call for call in calls if not call.outcome.busy)
    dead_ends: set[tuple[Snapshot, frozenset[int]]] = set()

    def search(state: Snapshot, left: frozenset[int]) -> list[Call] | None:
        if not left:
            return [] if state == stored else None
        if (state, left) in dead_ends:
            return None
        for index in sorted(left):
            expected = expect(done[index].op, state)
            if agrees(done[index].outcome, expected):
                rest = search(expected.state, left - {index})
                if rest is not None:
                    return [done[index], *rest]
        dead_ends.add((state, left))
        return None

    return search(before, frozenset(range(len(done))))


def double_wins(calls: list[Call]) -> list[str]:
    """Sentences for every (job, token) that more than one call returned as its ticket."""
    owners: dict[tuple[object, object], list[str]] = {}
    for call in calls:
        ticket = call.outcome.value
        if call.op.kind == "claim" and isinstance(ticket, dict):
            owners.setdefault((ticket.get("id"), ticket.get("token")), []).append(call.who)
    return [
        f"job {job!r} with token {token} was won by {' and '.join(who)}"
        for (job, token), who in owners.items()
        if len(who) > 1
    ]


def double_leases(calls: list[Call]) -> list[str]:
    """Sentences for every job leased to two claimers at once (the later claim came before
    the earlier lease ran out)."""
    tickets = [
        (call.who, call.op.value("now_ms"), call.outcome.value)
        for call in calls
        if call.op.kind == "claim" and isinstance(call.outcome.value, dict)
    ]
    found = []
    for who, _, first in tickets:
        for other, now, second in tickets:
            same_job = first.get("id") == second.get("id")
            newer = second.get("token", 0) > first.get("token", 0)
            if same_job and newer and now < first.get("lease_until", 0):
                found.append(
                    f"job {first['id']!r} was leased to {who} (token {first['token']}, "
                    f"until {first['lease_until']}) and, while that lease was live, to "
                    f"{other} at t={now} (token {second['token']})"
                )
    return found


def unexplained(before: Snapshot, calls: list[Call], stored: Snapshot) -> str:
    """The failure text when no serial order explains the calls."""
    lines = [f"  {call.describe()}" for call in calls]
    return (
        "no serial order of these concurrent calls gives their results and the stored state "
        "(busy calls left out):\n"
        + "\n".join(lines)
        + f"\nstate before:\n{before.describe()}\nstored after:\n{stored.describe()}"
    )
