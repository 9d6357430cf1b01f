"""The lease explorer's moves, computed once per distinct queue state.

A world's moves depend on its queue and clock, and only through two small edits on
what the dispatchers hold (a claim adds a ticket, a finish drops one). So each move
is first a ``Template`` of the queue alone: the operation, the model's step and its
transition invariant, computed once per (queue, now) and shared by every world with
that queue (a deep scope has 40 times more worlds than queues). A ``Canon`` is the
symmetry reduction of one queue at one instant (time shift, jobs renamed by seq,
write-only columns blanked, each dispatcher renaming with its queue key); applying
it to a held-ticket tuple (``normalized``, then ``choose``) is the only per-world work
left, and the system memoizes even that per held-ticket code and per canon class.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from leasecheck.models.contracts import JobRow, RedriveRow, Snapshot

__all__ = [
    "Canon",
    "QueueKey",
    "Renaming",
    "Template",
    "TicketKey",
    "queue_key",
    "with_ticket",
    "without",
]

TicketKey = tuple[str, int, str, int, int, int]
"""A held ticket as a tuple: (id, qty, owner, token, attempt, lease_until)."""
Held = tuple[tuple[TicketKey, ...], ...]
QueueKey = tuple[tuple[tuple[object, ...], ...], tuple[tuple[object, ...], ...]]

ORIGIN = 100


def _row_key(row: JobRow) -> tuple[object, ...]:
    return (
        row.id, row.qty, row.status, row.attempts, row.max_attempts, row.token,
        row.available_at, row.deadline, row.owner or "", -1 if row.lease_until is None
        else row.lease_until, row.reason or "",
    )  # fmt: skip


def queue_key(queue: Snapshot) -> QueueKey:
    """Every column of both tables as plain tuples: the order canonical forms are chosen by."""
    rows = tuple(_row_key(row) for row in queue.jobs)
    audits = tuple((r.id, r.token, r.at_ms, r.note) for r in queue.redrives)
    return (rows, audits)


class Template:
    """One move of every world whose queue is ``before`` at ``now``, minus the held tickets.

    ``index`` is the dispatcher whose tickets change: ``add`` is the ticket a claim gives
    it (None: unchanged), ``drop`` the ticket a finish takes back (None: kept).
    """

    __slots__ = (
        "add", "after", "canon", "counts", "drop", "error", "hooks", "index", "keep", "later",
        "max_held", "op", "problem", "result",
    )  # fmt: skip

    def __init__(
        self,
        op: Hashable,
        after: Snapshot,
        result: Any = None,
        error: str | None = None,
        hooks: tuple[str, ...] = (),
        counts: tuple[str, ...] = (),
        *,
        later: int | None = None,
        index: int = -1,
        add: TicketKey | None = None,
        drop: TicketKey | None = None,
        max_held: int = 0,
    ) -> None:
        self.op, self.after, self.result, self.error = op, after, result, error
        self.hooks, self.counts, self.later = hooks, counts, later
        self.index, self.add, self.drop, self.max_held = index, add, drop, max_held
        self.keep = add is None and drop is None
        self.problem: str | None = None
        self.canon: Canon | None = None

    def held_after(self, held: Held) -> Held:
        """What the dispatchers hold after this move (``held`` itself when unchanged)."""
        if self.keep:
            return held
        index = self.index
        if self.add is not None:
            mine = with_ticket(held[index], self.add, self.max_held)
        else:
            assert self.drop is not None
            mine = tuple(t for t in held[index] if t != self.drop)
        return (*held[:index], mine, *held[index + 1 :])


def with_ticket(
    mine: tuple[TicketKey, ...], ticket: TicketKey, max_held: int
) -> tuple[TicketKey, ...]:
    """``mine`` with ``ticket`` added, forgetting the oldest beyond ``max_held``."""
    kept = sorted({*mine, ticket})
    while len(kept) > max_held:
        kept.remove(min(kept, key=lambda t: (t[3], t[0])))  # forget the oldest
    return tuple(kept)


def without(held: Held, index: int, ticket: TicketKey) -> Held:
    mine = tuple(t for t in held[index] if t != ticket)
    return (*held[:index], mine, *held[index + 1 :])


def _normal_row(row: JobRow, name: str, delta: int) -> JobRow:
    """``row`` renamed and shifted; columns no operation reads again are blanked.

    A done row is final, and a dead row's attempts, available_at and deadline are
    overwritten by redrive before anything reads them, so worlds that differ only
    there have the same futures. (Built field by field: ``dataclasses.replace`` is
    several times slower, and this runs for every row of every new queue.)
    """
    if row.status in ("done", "dead"):
        return JobRow(name, row.qty, row.status, 0, row.max_attempts, row.token, ORIGIN, ORIGIN,
                      row.owner, row.lease_until, row.reason)  # fmt: skip
    until = None if row.lease_until is None else row.lease_until + delta
    shifted = (row.available_at + delta, row.deadline + delta)
    return JobRow(name, row.qty, row.status, row.attempts, row.max_attempts, row.token,
                  *shifted, row.owner, until, row.reason)  # fmt: skip


def _owned_by(row: JobRow, owner: str) -> JobRow:
    return JobRow(row.id, row.qty, row.status, row.attempts, row.max_attempts, row.token,
                  row.available_at, row.deadline, owner, row.lease_until, row.reason)  # fmt: skip


def _normal_ticket(ticket: TicketKey, name: str, token: int, delta: int) -> TicketKey:
    """A held ticket renamed and shifted; one whose token a newer claim superseded can
    never be current again (tokens only grow), so its lease_until no longer matters."""
    until = ORIGIN - 1 if ticket[3] < token else ticket[5] + delta
    return (name, ticket[1], ticket[2], ticket[3], ticket[4], until)


class Canon:
    """The canonical form of every world with one queue at one instant.

    ``queues`` holds, per dispatcher renaming, the renamed canonical queue (interned) and
    its key; only the renamings whose queue key is smallest can give the smallest world,
    so the held tickets are compared only among those (``best``).
    """

    __slots__ = (
        "best", "choices", "delta", "mine", "names", "normal", "now", "tokens", "worlds",
    )  # fmt: skip

    def __init__(
        self,
        queue: Snapshot,
        now: int,
        jobs: tuple[str, ...],
        perms: list[Renaming | None],
        intern: Callable[[Snapshot], tuple[Snapshot, QueueKey]],
        shift: bool = True,
    ) -> None:
        self.delta = delta = ORIGIN - now if shift else 0
        self.now = now + delta
        """The canonical world's clock: ORIGIN, or ``now`` itself when times are absolute (a
        state near the clock's top is not like one far from it)."""
        self.names = names = {row.id: jobs[i] for i, row in enumerate(queue.jobs)}
        rows = tuple(_normal_row(row, names[row.id], delta) for row in queue.jobs)
        audits = tuple(RedriveRow(names[r.id], r.token, ORIGIN, r.note) for r in queue.redrives)
        self.tokens = {row.id: row.token for row in queue.jobs}
        self.normal: dict[TicketKey, TicketKey] = {}
        candidates = []
        for perm in perms:
            renamed = (
                rows
                if perm is None
                else tuple(
                    row if row.owner is None else _owned_by(row, perm[row.owner]) for row in rows
                )
            )
            interned, key = intern(Snapshot(renamed, audits))
            candidates.append((key, interned, perm))
        smallest = min(key for key, _, _ in candidates)
        self.best = [(interned, perm) for key, interned, perm in candidates if key == smallest]
        self.mine = _Mine(self)
        self.worlds: dict[tuple[int, ...], Any] = {}
        """Per raw held tickets (as the system's code of small ints), the canonical world
        (filled by the system's ``expand_batch``)."""
        self.choices: dict[Held, Any] = {}
        """Per normalized held tickets, the canonical world: the system shares one dict
        among the canons whose ``best`` and clock are the same."""

    def ticket(self, ticket: TicketKey) -> TicketKey:
        found = self.normal.get(ticket)
        if found is None:
            name = self.names[ticket[0]]
            found = _normal_ticket(ticket, name, self.tokens[ticket[0]], self.delta)
            self.normal[ticket] = found
        return found

    def normalized(self, held: Held) -> Held:
        """Each dispatcher's tickets normalized and sorted (before any renaming)."""
        return tuple(map(self.mine.__getitem__, held))

    def choose(self, normal: Held) -> tuple[Snapshot, Held]:
        """The renaming of ``normal`` (normalized tickets) with the smallest world."""
        best = self.best
        if len(best) == 1 and best[0][1] is None:
            return best[0][0], normal
        found: tuple[Held, Snapshot] | None = None
        for queue, perm in best:
            candidate = normal if perm is None else perm.held(normal)
            if found is None or candidate < found[0]:
                found = (candidate, queue)
        assert found is not None
        return found[1], found[0]


class _Mine(dict[tuple[TicketKey, ...], tuple[TicketKey, ...]]):
    """One dispatcher's tickets -> normalized and sorted, computed on the first lookup."""

    __slots__ = ("canon",)

    def __init__(self, canon: Canon) -> None:
        super().__init__()
        self.canon = canon

    def __missing__(self, mine: tuple[TicketKey, ...]) -> tuple[TicketKey, ...]:
        found = self[mine] = tuple(sorted(self.canon.ticket(t) for t in mine))
        return found


class Renaming(dict[str, str]):
    """A permutation of the dispatcher names (old -> new), a symmetry of the system.

    ``held`` renames a world's held tickets: each dispatcher's tuple moves to its new
    name's place with its owners renamed and sorted again, computed once per distinct
    tuple of one dispatcher's tickets (these repeat across worlds and queues far more
    than whole held-ticket tuples do).
    """

    __slots__ = ("sources", "tickets")

    def __init__(self, owners: dict[str, str], names: tuple[str, ...]) -> None:
        super().__init__(owners)
        inverse = {new: old for old, new in owners.items()}
        self.sources = tuple(names.index(inverse[name]) for name in names)
        """Per position of the renamed tuple, the position it takes its tickets from."""
        self.tickets: dict[tuple[TicketKey, ...], tuple[TicketKey, ...]] = {}

    def held(self, held: Held) -> Held:
        tickets, renamed = self.tickets, []
        for source in self.sources:
            mine = held[source]
            found = tickets.get(mine)
            if found is None:
                found = tickets[mine] = tuple(
                    sorted((t[0], t[1], self[t[2]], *t[3:]) for t in mine)
                )
            renamed.append(found)
        return tuple(renamed)
