"""The lease worker model as a ``System`` for the explorer: worlds, moves, invariants.

Invariants, each a sentence of lease-worker.md (checked in every explored state or
along every explored transition):
- at most one live lease per job: of all tickets the dispatchers hold, at most one
  per job would be accepted by finish now (status leased, whole marker equal,
  now < lease_until, now < deadline);
- a leased row has an owner and ``lease_until <= deadline``; any other row has
  neither; ``attempts <= max_attempts``; a dead row has a reason, a done row none;
- tokens never decrease along any transition, a claim makes token+1, a held
  ticket's token never exceeds its job's token; rows are never removed or
  reordered; audit rows are only appended; a done row never changes again;
- a stale ticket can never finish: finish with a ticket that is not the current
  lease returns False, changes nothing and calls no hook;
- liveness (checked by the core): from every state every job can reach done or dead.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from models import lease_model
from models.contracts import FAULT_POINTS, JobRow, RedriveRow, Snapshot
from models.explorer import Move

__all__ = ["LeaseScope", "LeaseSystem", "LeaseWorld", "TicketKey", "fault_variants", "ticket_dict"]


@dataclass(frozen=True, kw_only=True)
class LeaseScope:
    """The bounds of one exploration of the lease worker model."""

    name: str
    jobs: tuple[str, ...]
    dispatchers: tuple[str, ...]
    qtys: tuple[int, ...]
    ttls: tuple[int, ...]
    budgets: tuple[int, ...]
    """``max_attempts`` values for enqueue."""
    leases: tuple[int, ...]
    delays: tuple[int, ...]
    """``delay_ms`` values for a ``retry`` finish (ok and permanent finish with 0)."""
    max_redrives: int
    """Redrives in the whole run (the redrives table's length)."""
    max_held: int
    """Tickets one dispatcher keeps; a new claim beyond that forgets its oldest."""
    max_states: int
    """Safety valve: stop (``exhausted`` False) beyond this many states."""

    def describe(self) -> str:
        return (
            f"scope {self.name}: jobs {list(self.jobs)} x dispatchers {list(self.dispatchers)};"
            f" qty {list(self.qtys)}, ttl {list(self.ttls)}, max_attempts {list(self.budgets)},"
            f" lease_ms {list(self.leases)}, retry delay_ms {list(self.delays)},"
            f" <= {self.max_redrives} redrive(s), <= {self.max_held} ticket(s) kept per"
            f" dispatcher; the clock starts at t=100 and moves forward to the next instant in"
            f" {{x-1, x, x+1}} of a pending row's available_at/deadline or a leased row's"
            f" lease_until/deadline; a fault may raise at every hook point; reduced by"
            f" job/dispatcher renaming and time shift; at most {self.max_states} states"
        )


TicketKey = tuple[str, int, str, int, int, int]
"""A held ticket as a tuple: (id, qty, owner, token, attempt, lease_until)."""

NOTE = "n"
ORIGIN = 100
"""Every canonical world is at t=ORIGIN: the contract only compares times with each other
(and with 0 and 10**15, far away), so shifting every time of a world by the same amount
is a symmetry. Relative times in a scope stay well above -ORIGIN (checked)."""
MEMO_LIMIT = 2_000_000


def ticket_dict(key: TicketKey) -> dict[str, Any]:
    job_id, qty, owner, token, attempt, lease_until = key
    return {
        "id": job_id, "qty": qty, "owner": owner, "token": token, "attempt": attempt,
        "lease_until": lease_until,
    }  # fmt: skip


def _ticket_key(ticket: dict[str, Any]) -> TicketKey:
    return (
        ticket["id"], ticket["qty"], ticket["owner"], ticket["token"], ticket["attempt"],
        ticket["lease_until"],
    )  # fmt: skip


@dataclass(frozen=True, eq=False)
class LeaseWorld:
    """The queue, the tickets each dispatcher holds (by scope order), and the clock.

    Equality and hashing go through one cached tuple: a world is hashed many times.
    """

    queue: Snapshot
    held: tuple[tuple[TicketKey, ...], ...]
    now: int

    def key(self) -> tuple[object, ...]:
        cached: tuple[object, ...] | None = self.__dict__.get("_key")
        if cached is None:
            cached = (*_world_key(self.queue, self.held), self.now)
            object.__setattr__(self, "_key", cached)
        return cached

    def __hash__(self) -> int:
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(self.key())
            object.__setattr__(self, "_hash", cached)
        return cached

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LeaseWorld) and (self is other or self.key() == other.key())


def _world(
    world: LeaseWorld, queue: Snapshot, held: tuple[tuple[TicketKey, ...], ...]
) -> LeaseWorld:
    """``world`` itself when nothing changed (the explorer skips canonicalizing it)."""
    if queue is world.queue and held is world.held:
        return world
    return LeaseWorld(queue, held, world.now)


def fault_variants(
    before: Snapshot, step: lease_model.Step
) -> Iterator[tuple[str | None, Snapshot, tuple[str, ...]]]:
    """(fault point or None, state after, hooks passed) for every fault choice of ``step``."""
    points = (*step.before_commit, *step.after_commit)
    yield None, step.state, points
    for index, point in enumerate(points):
        committed = index >= len(step.before_commit)
        yield point, step.state if committed else before, points[: index + 1]


def _row_key(row: JobRow) -> tuple[object, ...]:
    return (
        row.id, row.qty, row.status, row.attempts, row.max_attempts, row.token,
        row.available_at, row.deadline, row.owner or "", -1 if row.lease_until is None
        else row.lease_until, row.reason or "",
    )  # fmt: skip


def _world_key(queue: Snapshot, held: tuple[tuple[TicketKey, ...], ...]) -> tuple[object, ...]:
    rows = tuple(_row_key(row) for row in queue.jobs)
    audits = tuple((r.id, r.token, r.at_ms, r.note) for r in queue.redrives)
    return (rows, audits, held)


def _is_live(row: JobRow, ticket: TicketKey, now: int) -> bool:
    """The spec's 'current lease' test, written apart from the model on purpose: the explorer
    checks the model, so it must not borrow the model's own predicate."""
    _, qty, owner, token, attempt, lease_until = ticket
    return (
        row.status == "leased"
        and (row.qty, row.owner, row.token, row.attempts, row.lease_until)
        == (qty, owner, token, attempt, lease_until)
        and now < lease_until
        and now < row.deadline
    )


class LeaseSystem:
    """Moves and invariants of the lease worker model within one ``LeaseScope``."""

    def __init__(self, scope: LeaseScope) -> None:
        self.scope = scope
        count = len(scope.dispatchers)
        self._perms = [
            dict(zip(scope.dispatchers, (scope.dispatchers[i] for i in perm), strict=True))
            for perm in itertools.permutations(range(count))
        ]
        self._memo: dict[LeaseWorld, LeaseWorld] = {}

    # --- the System protocol -------------------------------------------------------

    def initial(self) -> LeaseWorld:
        return LeaseWorld(Snapshot(), tuple(() for _ in self.scope.dispatchers), ORIGIN)

    def canonical(self, world: LeaseWorld) -> LeaseWorld:
        """Shift time so that now == ORIGIN, rename jobs by seq, blank write-only
        columns of done and dead rows, then take the dispatcher naming with the
        smallest key."""
        found = self._memo.get(world)
        if found is not None:
            return found
        delta = ORIGIN - world.now
        names = {row.id: self.scope.jobs[i] for i, row in enumerate(world.queue.jobs)}
        rows = tuple(_normal_row(row, names[row.id], delta) for row in world.queue.jobs)
        audits = tuple(replace(r, id=names[r.id], at_ms=ORIGIN) for r in world.queue.redrives)
        tokens = {row.id: row.token for row in world.queue.jobs}
        held = tuple(
            tuple(sorted(_normal_ticket(t, names[t[0]], tokens[t[0]], delta) for t in mine))
            for mine in world.held
        )
        best = LeaseWorld(Snapshot(rows, audits), held, ORIGIN)
        for perm in self._perms[1:]:
            candidate = _rename_owners(best, perm, self.scope.dispatchers)
            if candidate.key() < best.key():
                best = candidate
        if len(self._memo) < MEMO_LIMIT:
            self._memo[world] = best
        return best

    def moves(self, world: LeaseWorld) -> Iterator[Move[LeaseWorld]]:
        yield from self._enqueues(world)
        yield from self._claims(world)
        yield from self._finishes(world)
        yield from self._redrives(world)
        yield from self._tick(world)

    def check_state(self, world: LeaseWorld) -> str | None:
        if any(t < 1 for t in _instants(world.queue)):
            raise ValueError(
                f"scope {self.scope.name!r} reaches times more than {ORIGIN - 2} ms before"
                f" now; raise ORIGIN in models/_lease_system.py or shrink the scope"
            )
        for row in world.queue.jobs:
            problem = _row_problem(row)
            if problem is not None:
                return f"job {row.id!r}: {problem}"
            tickets = [t for held in world.held for t in held if t[0] == row.id]
            live = [t for t in tickets if _is_live(row, t, world.now)]
            if len(live) > 1:
                return f"job {row.id!r} has {len(live)} live leases at t={world.now}: {live}"
            if any(t[3] > row.token for t in tickets):
                return f"job {row.id!r}: a held ticket has a token above the job's {row.token}"
        return None

    def check_move(self, source: LeaseWorld, move: Move[LeaseWorld]) -> str | None:
        before, after = source.queue, move.state.queue
        if [r.id for r in after.jobs[: len(before.jobs)]] != [r.id for r in before.jobs]:
            return "a job row was removed or reordered"
        if after.redrives[: len(before.redrives)] != before.redrives:
            return "an audit row was removed or changed"
        for old, new in zip(before.jobs, after.jobs, strict=False):
            if new.token < old.token:
                return f"job {old.id!r}: token went down from {old.token} to {new.token}"
            if old.status == "done" and new != old:
                return f"job {old.id!r} was done and changed to {new.status}"
        return _op_problem(source, move)

    def items(self, world: LeaseWorld) -> Sequence[str]:
        return [row.id for row in world.queue.jobs]

    def at_goal(self, world: LeaseWorld, item: str) -> bool:
        row = world.queue.job(item)
        return row is not None and row.status in ("done", "dead")

    def required(self) -> Sequence[str]:
        ops = [f"op:{name}" for name in ("enqueue", "claim", "finish", "redrive", "tick")]
        redrive_only = ("after-audit", "after-redrive")
        points = [p for p in FAULT_POINTS if self.scope.max_redrives or p not in redrive_only]
        hooks = [f"{kind}:{point}" for kind in ("hook", "crash") for point in points]
        results = [
            "result:claim-ticket", "result:claim-none", "result:finish-stale",
            "result:finish-done", "result:finish-dead", "result:enqueue-false",
            "error:Conflict", "error:ValueError",
        ]  # fmt: skip
        if max(self.scope.budgets) > 1:
            results.append("result:finish-pending")  # a retry needs attempts left
        if self.scope.max_redrives:
            results.append("result:redrive")
        return [*ops, *hooks, *results]

    def describe_op(self, op: Hashable) -> str:
        return self.describe_op_label(op)

    def op_shape(self, op: Hashable) -> Hashable:
        assert isinstance(op, tuple)
        if op[0] == "finish":
            return ("finish", op[3], op[5], op[6])
        if op[0] == "enqueue":
            return ("enqueue", op[2], op[4], op[5])
        if op[0] == "claim":
            return ("claim", op[3], op[4])
        if op[0] == "redrive":
            return ("redrive", op[3], op[4])
        return ("tick",)

    @staticmethod
    def describe_op_label(op: Hashable) -> str:
        assert isinstance(op, tuple)
        kind, *args = op
        crash = f"; the fault hook raises at {args[-1]!r}" if kind != "tick" and args[-1] else ""
        if kind == "enqueue":
            job_id, qty, now, ttl, budget = args
            event = f"{{id: {job_id!r}, qty: {qty}}}"
            return f"enqueue {event} at t={now}, ttl {ttl}, max_attempts {budget}"
        if kind == "claim":
            owner, now, lease, _ = args
            return f"{owner} claims at t={now} with lease_ms={lease}{crash}"
        if kind == "finish":
            owner, ticket, outcome, now, delay, _ = args
            _, _, _, token, attempt, until = ticket
            return (
                f"{owner} finishes job {ticket[0]!r} (ticket token {token}, attempt {attempt},"
                f" lease_until {until}) with {outcome!r} at t={now}, delay_ms={delay}{crash}"
            )
        if kind == "redrive":
            job_id, now, ttl, _ = args
            return f"redrive job {job_id!r} at t={now} with ttl {ttl}{crash}"
        return f"the clock moves to t={args[0]}"

    def describe_state(self, world: LeaseWorld) -> str:
        held = "; ".join(
            f"{name} holds tokens {[(t[0], t[3]) for t in tickets]}"
            for name, tickets in zip(self.scope.dispatchers, world.held, strict=True)
        )
        return f"     state at t={world.now}:\n{world.queue.describe()}\n  {held}"

    # --- moves ---------------------------------------------------------------------------

    def _enqueues(self, world: LeaseWorld) -> Iterator[Move[LeaseWorld]]:
        queue, now = world.queue, world.now
        fresh = [j for j in self.scope.jobs if queue.job(j) is None][:1]  # the others: symmetric
        for job_id in fresh:
            for qty, ttl, budget in itertools.product(
                self.scope.qtys, self.scope.ttls, self.scope.budgets
            ):
                step = lease_model.enqueue(queue, {"id": job_id, "qty": qty}, now, ttl, budget)
                op = ("enqueue", job_id, qty, now, ttl, budget)
                yield Move(
                    op, replace(world, queue=step.state), step.result, None, (), ("op:enqueue",)
                )
        for row in queue.jobs:
            ttl, budget = self.scope.ttls[0], self.scope.budgets[0]
            yield Move(
                ("enqueue", row.id, row.qty, now, ttl, budget), world, False, None, (),
                ("op:enqueue", "result:enqueue-false"),
            )  # fmt: skip
            yield Move(
                ("enqueue", row.id, row.qty + 1, now, ttl, budget), world, None, "Conflict", (),
                ("op:enqueue", "error:Conflict"),
            )  # fmt: skip

    def _claims(self, world: LeaseWorld) -> Iterator[Move[LeaseWorld]]:
        for index, owner in enumerate(self.scope.dispatchers):
            for lease in self.scope.leases:
                step = lease_model.claim(world.queue, owner, world.now, lease)
                outcome = "result:claim-none" if step.result is None else "result:claim-ticket"
                for fault, state, hooks in fault_variants(world.queue, step):
                    held = world.held
                    if fault is None and step.result is not None:
                        held = self._with_ticket(world.held, index, _ticket_key(step.result))
                    yield Move(
                        ("claim", owner, world.now, lease, fault),
                        _world(world, state, held),
                        None if fault else step.result,
                        "fault" if fault else None,
                        hooks,
                        _counts("claim", outcome, fault, hooks),
                    )

    def _finishes(self, world: LeaseWorld) -> Iterator[Move[LeaseWorld]]:
        for index, owner in enumerate(self.scope.dispatchers):
            for ticket in world.held[index]:
                for outcome, delay in self._outcomes():
                    step = lease_model.finish(
                        world.queue, ticket_dict(ticket), outcome, world.now, delay
                    )
                    label = "stale" if step.result is False else step.result
                    for fault, state, hooks in fault_variants(world.queue, step):
                        held = world.held if fault else _without(world.held, index, ticket)
                        yield Move(
                            ("finish", owner, ticket, outcome, world.now, delay, fault),
                            _world(world, state, held),
                            None if fault else step.result,
                            "fault" if fault else None,
                            hooks,
                            _counts("finish", f"result:finish-{label}", fault, hooks),
                        )

    def _outcomes(self) -> list[tuple[str, int]]:
        return [("ok", 0), ("permanent", 0)] + [("retry", d) for d in self.scope.delays]

    def _redrives(self, world: LeaseWorld) -> Iterator[Move[LeaseWorld]]:
        queue, now = world.queue, world.now
        budget_left = len(queue.redrives) < self.scope.max_redrives
        for row in queue.jobs:
            if row.status != "dead":
                continue
            for ttl in self.scope.ttls if budget_left else ():
                step = lease_model.redrive(queue, row.id, now, ttl, NOTE)
                for fault, state, hooks in fault_variants(queue, step):
                    yield Move(
                        ("redrive", row.id, now, ttl, fault),
                        _world(world, state, world.held),
                        None if fault else step.result,
                        "fault" if fault else None,
                        hooks,
                        _counts("redrive", "result:redrive", fault, hooks),
                    )
        alive = [row for row in queue.jobs if row.status != "dead"][:1]
        for row in alive:
            op = ("redrive", row.id, now, self.scope.ttls[0], None)
            yield Move(op, world, None, "ValueError", (), ("op:redrive", "error:ValueError"))

    def _tick(self, world: LeaseWorld) -> Iterator[Move[LeaseWorld]]:
        later = [t for t in _instants(world.queue) if t > world.now]
        if later:
            step = min(later)
            yield Move(("tick", step), replace(world, now=step), None, None, (), ("op:tick",))

    def _with_ticket(
        self, held: tuple[tuple[TicketKey, ...], ...], index: int, ticket: TicketKey
    ) -> tuple[tuple[TicketKey, ...], ...]:
        mine = sorted({*held[index], ticket})
        while len(mine) > self.scope.max_held:
            mine.remove(min(mine, key=lambda t: (t[3], t[0])))  # forget the oldest
        return (*held[:index], tuple(mine), *held[index + 1 :])


def _instants(queue: Snapshot) -> set[int]:
    """x-1, x, x+1 for every time some operation still compares now with."""
    found: set[int] = set()
    for row in queue.jobs:
        if row.status == "pending":
            times: tuple[int | None, ...] = (row.available_at, row.deadline)
        elif row.status == "leased":
            times = (row.lease_until, row.deadline)
        else:
            continue
        for x in times:
            if x is not None:
                found.update((x - 1, x, x + 1))
    return found


def _without(
    held: tuple[tuple[TicketKey, ...], ...], index: int, ticket: TicketKey
) -> tuple[tuple[TicketKey, ...], ...]:
    mine = tuple(t for t in held[index] if t != ticket)
    return (*held[:index], mine, *held[index + 1 :])


def _counts(op: str, outcome: str, fault: str | None, hooks: tuple[str, ...]) -> tuple[str, ...]:
    counts = [f"op:{op}", *(f"hook:{point}" for point in hooks)]
    counts.append(f"crash:{fault}" if fault else outcome)
    return tuple(counts)


def _normal_row(row: JobRow, name: str, delta: int) -> JobRow:
    """``row`` renamed and shifted; columns no operation reads again are blanked.

    A done row is final, and a dead row's attempts, available_at and deadline are
    overwritten by redrive before anything reads them, so worlds that differ only
    there have the same futures.
    """
    if row.status in ("done", "dead"):
        return replace(row, id=name, attempts=0, available_at=ORIGIN, deadline=ORIGIN)
    until = None if row.lease_until is None else row.lease_until + delta
    return replace(
        row, id=name, available_at=row.available_at + delta, deadline=row.deadline + delta,
        lease_until=until,
    )  # fmt: skip


def _normal_ticket(ticket: TicketKey, name: str, token: int, delta: int) -> TicketKey:
    """A held ticket renamed and shifted; one whose token a newer claim superseded can
    never be current again (tokens only grow), so its lease_until no longer matters."""
    until = ORIGIN - 1 if ticket[3] < token else ticket[5] + delta
    return (name, ticket[1], ticket[2], ticket[3], ticket[4], until)


def _rename_owners(world: LeaseWorld, owners: dict[str, str], names: tuple[str, ...]) -> LeaseWorld:
    """``world`` with dispatcher names permuted (a symmetry of the system)."""
    rows = tuple(
        row if row.owner is None else replace(row, owner=owners[row.owner])
        for row in world.queue.jobs
    )
    inverse = {new: old for old, new in owners.items()}
    by_name = dict(zip(names, world.held, strict=True))
    held = tuple(
        tuple(sorted((t[0], t[1], owners[t[2]], *t[3:]) for t in by_name[inverse[name]]))
        for name in names
    )
    return LeaseWorld(Snapshot(rows, world.queue.redrives), held, world.now)


def _row_problem(row: JobRow) -> str | None:
    if row.status == "leased":
        if row.owner is None or row.lease_until is None:
            return "is leased without an owner or lease_until"
        if row.lease_until > row.deadline:
            return f"lease_until {row.lease_until} is past its deadline {row.deadline}"
    elif row.owner is not None or row.lease_until is not None:
        return f"is {row.status} but keeps owner {row.owner!r} / lease_until {row.lease_until}"
    if row.attempts > row.max_attempts:
        return f"attempts {row.attempts} exceed max_attempts {row.max_attempts}"
    if (row.status == "dead") != (row.reason in ("deadline", "exhausted", "permanent")):
        return f"is {row.status} with reason {row.reason!r}"
    return None


def _op_problem(source: LeaseWorld, move: Move[LeaseWorld]) -> str | None:
    assert isinstance(move.op, tuple)
    kind = move.op[0]
    before, after = source.queue, move.state.queue
    if kind == "claim" and isinstance(move.result, dict):
        old = before.job(move.result["id"])
        if old is None or move.result["token"] != old.token + 1:
            return f"claim of {move.result['id']!r} did not make token+1"
        if old.status == "leased" and old.lease_until is not None and source.now < old.lease_until:
            return (
                f"claim took job {old.id!r} at t={source.now} while {old.owner!r}'s lease"
                f" (token {old.token}) runs until {old.lease_until}: two live leases"
            )
    if kind == "finish":
        ticket: TicketKey = move.op[2]
        row = before.job(ticket[0])
        stale = row is None or not _is_live(row, ticket, source.now)
        if stale and (move.result is not False or after != before or move.hooks):
            return f"a stale ticket (token {ticket[3]}) finished: result {move.result!r}"
    if kind == "redrive" and len(after.redrives) > len(before.redrives):
        audit: RedriveRow = after.redrives[-1]
        row = before.job(audit.id)
        if row is None or audit.token != row.token:
            return f"the audit row of {audit.id!r} does not keep the job's token"
    return None
