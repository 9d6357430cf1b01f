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

import functools
import itertools
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from leasecheck.models import edges, lease_model
from leasecheck.models._lease_steps import (
    Canon,
    QueueKey,
    Renaming,
    Template,
    TicketKey,
    queue_key,
    with_ticket,
)
from leasecheck.models.contracts import FAULT_POINTS, JobRow, RedriveRow, Snapshot
from leasecheck.models.explorer import Batch, Expansion, Move, Tally
from leasecheck.models.lease_ops import LeaseOp

__all__ = ["LeaseScope", "LeaseSystem", "LeaseWorld", "TicketKey", "fault_variants", "ticket_dict"]

Held = tuple[tuple[TicketKey, ...], ...]
Code = tuple[int, ...]
"""A world's held tickets as one small int per dispatcher (``LeaseSystem._tuple_code``)."""


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
    start: str | None = None
    """A start state of ``models.edges.LEASE_STARTS`` (None: the empty queue at t=100).
    A seeded part keeps times absolute (no time shift) and never moves the clock past
    MAX_NOW."""
    max_depth: int | None = None
    """Moves from the start state explored (None: until the scope is exhausted)."""
    unreached: tuple[str, ...] = ()
    """Coverage keys this part need not reach (the unseeded parts reach them)."""
    refused_args: bool = False
    """Also enqueue and claim with each invalid neighbour of the edge table (ValueError)."""

    @property
    def shift(self) -> bool:
        return self.start is None

    def describe(self) -> str:
        if self.start is not None:
            now = edges.LEASE_STARTS[self.start][0]
            rows = len(edges.LEASE_STARTS[self.start][1].jobs)
            bound = f"{self.max_depth} moves deep" if self.max_depth is not None else "exhausted"
            skipped = f"; not required here: {', '.join(self.unreached)}" if self.unreached else ""
            return (
                f"scope {self.name}: from start {self.start!r} ({rows} rows at t={now}), {bound};"
                f" new jobs {[j for j in self.jobs[rows:]]}, dispatchers {list(self.dispatchers)};"
                f" qty {list(self.qtys)}, ttl {list(self.ttls)}, max_attempts {list(self.budgets)},"
                f" lease_ms {list(self.leases)}, retry delay_ms {list(self.delays)} (the edge"
                f" table's valid ends; enqueue and claim also with each invalid neighbour:"
                f" ValueError), <= {self.max_redrives} redrive(s), <= {self.max_held}"
                f" ticket(s) kept per dispatcher; the clock moves forward (to MAX_NOW at most)"
                f" to the next instant in {{x-1, x, x+1}} of a pending or leased row's times;"
                f" a fault may raise at every hook point; times absolute; reduced by dispatcher"
                f" renaming; at most {self.max_states} states{skipped}"
            )
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


NOTE = "n"
QTY = edges.LEASE_RANGES["qty"]
ORIGIN = 100
"""Every canonical world is at t=ORIGIN: the contract only compares times with each other
(and with 0 and 10**15, far away), so shifting every time of a world by the same amount
is a symmetry. Relative times in a scope stay well above -ORIGIN (checked)."""


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
            cached = (*queue_key(self.queue), self.held, self.now)
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


def fault_variants(
    before: Snapshot, step: lease_model.Step
) -> Iterator[tuple[str | None, Snapshot, tuple[str, ...]]]:
    """(fault point or None, state after, hooks passed) for every fault choice of ``step``."""
    points = (*step.before_commit, *step.after_commit)
    yield None, step.state, points
    for index, point in enumerate(points):
        committed = index >= len(step.before_commit)
        yield point, step.state if committed else before, points[: index + 1]


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
        names = scope.dispatchers
        renamings = itertools.permutations(range(len(names)))
        next(renamings)  # the identity: None, so that Canon skips renaming
        self._perms: list[Renaming | None] = [None]
        self._perms += [
            Renaming(dict(zip(names, (names[i] for i in p), strict=True)), names) for p in renamings
        ]
        self._queues: dict[QueueKey, tuple[Snapshot, QueueKey]] = {}
        self._queue_keys: dict[int, QueueKey] = {}
        """Per interned queue (by id; ``_queues`` keeps it alive): its key."""
        self._worlds: dict[tuple[int, Held, int], LeaseWorld] = {}
        self._steps: dict[tuple[int, int], _Steps] = {}
        """Per (id of a queue, now): its templates; the queue is kept alive in ``_Steps``."""
        self._canons: dict[tuple[int, int], tuple[Snapshot, Canon]] = {}
        """Per (id of a raw queue, now): its canon (raw queues of equal content share one)."""
        self._canons_by_content: dict[tuple[QueueKey, int], Canon] = {}
        self._tuple_codes: dict[tuple[TicketKey, ...], int] = {}
        self._tuple_list: list[tuple[TicketKey, ...]] = []
        """The tuples of one dispatcher's tickets seen, by code: ``expand_batch`` edits and
        looks up a world's held tickets as a tuple of these small ints."""
        self._edits: dict[tuple[int, TicketKey | None, TicketKey | None], dict[int, int]] = {}
        """Per edit (dispatcher, ticket added, ticket dropped): code before -> code after."""
        self._choices: dict[tuple[object, ...], dict[Held, LeaseWorld]] = {}
        """Per canon class (its smallest renamed queues and their renamings, its clock): the
        canonical world of each normalized held-ticket tuple, shared by every canon of the
        class (deep-1job: 9,865 raw queues, 3,411 contents, 1,806 classes)."""
        self._row_problems: dict[int, tuple[Snapshot, bool]] = {}

    # --- the System protocol -------------------------------------------------------

    def initial(self) -> LeaseWorld:
        nobody = tuple(() for _ in self.scope.dispatchers)
        if self.scope.start is not None:
            now, queue = edges.LEASE_STARTS[self.scope.start]
            return LeaseWorld(queue, nobody, now)
        return LeaseWorld(Snapshot(), nobody, ORIGIN)

    def canonical(self, world: LeaseWorld) -> LeaseWorld:
        """Shift time so that now == ORIGIN, rename jobs by seq, blank write-only
        columns of done and dead rows, then take the dispatcher naming with the
        smallest key (see ``models._lease_steps.Canon``)."""
        return self._canonical(self._canon(world.queue, world.now), world.held)

    def moves(self, world: LeaseWorld) -> Iterator[Move[LeaseWorld]]:
        for template in self._templates(world):
            held = template.held_after(world.held)
            later = world.now if template.later is None else template.later
            same = template.after is world.queue and held is world.held and later == world.now
            after = world if same else LeaseWorld(template.after, held, later)
            yield Move(
                template.op, after, template.result, template.error, template.hooks,
                template.counts,
            )  # fmt: skip

    def expand(self, world: LeaseWorld) -> Iterator[Expansion[LeaseWorld]]:
        """What ``moves`` gives, canonical and checked, from the per-queue templates."""
        for template in self._templates(world):
            held = template.held_after(world.held)
            if template.after is world.queue and held is world.held and template.later is None:
                target = world
            else:
                canon = template.canon
                if canon is None:
                    later = world.now if template.later is None else template.later
                    canon = template.canon = self._canon(template.after, later)
                target = self._canonical(canon, held)
            yield target, template.counts, template.problem

    def expand_batch(self, world: LeaseWorld) -> Batch[LeaseWorld] | None:
        """What ``expand`` gives, in bulk: per run of templates (enqueues and claims, each
        held ticket's finishes, redrives and tick) its coverage once, and the canonical
        targets of the moves that change the world; None if a move breaks an invariant."""
        steps = self._steps_of(world.queue, world.now)
        blocks = [steps.first_block]
        for index, owner in enumerate(self.scope.dispatchers):
            for ticket in world.held[index]:
                block = steps.finish_blocks.get((index, ticket))
                if block is None:
                    block = self._finish_block(steps, world, index, owner, ticket)
                blocks.append(block)
        blocks.append(steps.last_block)
        targets: list[tuple[int, LeaseWorld]] = []
        offset, code = 0, world.__dict__["_code"]
        for block in blocks:
            if not block.clean:
                return None
            for position, index, edits, add, drop, canon, worlds in block.groups:
                # each target canon remembers its world per raw held-ticket code
                if index < 0:
                    after = code
                else:
                    mine = edits.get(code[index])
                    if mine is None:
                        mine = edits[code[index]] = self._edited(add, drop, code[index])
                    after = (*code[:index], mine, *code[index + 1 :])
                found = worlds.get(after)
                if found is None:
                    held = tuple(map(self._tuple_list.__getitem__, after))
                    found = worlds[after] = self._canonical(canon, held)
                targets.append((offset + position, found))  # a group's moves: one target
            offset += block.size
        return offset, blocks, targets

    def _edited(self, add: TicketKey | None, drop: TicketKey | None, mine: int) -> int:
        """The code of one dispatcher's tickets (``mine``) with ``add`` added (a claim's) or
        ``drop`` dropped (a finish's)."""
        tickets = self._tuple_list[mine]
        if add is not None:
            tickets = with_ticket(tickets, add, self.scope.max_held)
        else:
            assert drop is not None
            tickets = tuple(t for t in tickets if t != drop)
        return self._tuple_code(tickets)

    def _finish_block(
        self, steps: _Steps, world: LeaseWorld, index: int, owner: str, ticket: TicketKey
    ) -> _Block:
        """A held ticket's finish block for ``expand_batch``, kept per (queue, instant,
        dispatcher, ticket). A ticket the spec's current-lease test (``_is_live``) calls
        stale shares the block of its dispatcher's first stale ticket at this queue and
        instant, which the model computed and the transition invariant passed (each finish
        refused, the queue unchanged, no hook): the same moves but for the ticket they
        drop. So the search asks the model once per (queue, instant, dispatcher) for stale
        tickets (90% of the finish blocks of deep-2jobs); ``expand``, ``moves`` and
        conformance still ask it for each ticket, and tests/test_explorer_memo.py checks
        that the bulk and move-by-move expansions agree."""
        row = world.queue.job(ticket[0])
        stale = row is None or not _is_live(row, ticket, world.now)
        shared = steps.stale_blocks.get(index) if stale else None
        if shared is not None:
            block = shared.dropping(ticket, self._edits.setdefault((index, None, ticket), {}))
        else:
            self._finishes_of(steps, world, index, owner, ticket)
            block = steps.finish_blocks[(index, ticket)]
            if stale and block.clean and len(block.groups) == 1:
                steps.stale_blocks[index] = block
        steps.finish_blocks[(index, ticket)] = block
        return block

    def _tuple_code(self, tickets: tuple[TicketKey, ...]) -> int:
        """A small int per distinct tuple of one dispatcher's tickets."""
        found = self._tuple_codes.get(tickets)
        if found is None:
            found = self._tuple_codes[tickets] = len(self._tuple_list)
            self._tuple_list.append(tickets)
        return found

    def _target_canon(self, template: Template, now: int) -> Canon:
        """The canon of the queue and clock a template leads to (computed once)."""
        canon = template.canon
        if canon is None:
            later = now if template.later is None else template.later
            canon = template.canon = self._canon(template.after, later)
        return canon

    def distinct_moves(
        self, sources: Iterable[LeaseWorld]
    ) -> Iterator[tuple[LeaseWorld, Move[LeaseWorld]]]:
        """The first move of each distinct (queue, operation) from canonical ``sources``,
        in their order: what a target, which sees only the queue, must be asked once.

        Canonical queues are interned and each template belongs to one (queue, op), so a
        template is new exactly when its (queue, op) is."""
        seen: set[int] = set()
        for world in sources:
            for template in self._templates(world):
                if id(template) in seen:
                    continue
                seen.add(id(template))
                later = world.now if template.later is None else template.later
                after = LeaseWorld(template.after, template.held_after(world.held), later)
                yield world, Move(template.op, after, template.result, template.error,
                                  template.hooks, template.counts)  # fmt: skip

    def _canonical(self, canon: Canon, held: Held) -> LeaseWorld:
        normal = canon.normalized(held)
        found = canon.choices.get(normal)
        if found is None:
            queue, chosen = canon.choose(normal)
            key = (id(queue), chosen, canon.now)
            found = self._worlds.get(key)
            if found is None:
                found = self._worlds[key] = LeaseWorld(queue, chosen, canon.now)
                # its key from the interned queue's (``LeaseWorld.key`` would rebuild it)
                object.__setattr__(found, "_key", (*self._queue_keys[id(queue)], chosen, canon.now))
                code = tuple(map(self._tuple_code, chosen))
                object.__setattr__(found, "_code", code)
            canon.choices[normal] = found
        return found

    def _canon(self, queue: Snapshot, now: int) -> Canon:
        found = self._canons.get((id(queue), now))
        if found is None:
            content = (queue_key(queue), now)
            canon = self._canons_by_content.get(content)
            if canon is None:
                canon = Canon(queue, now, self.scope.jobs, self._perms, self._intern,
                              self.scope.shift)  # fmt: skip
                best = tuple((id(queue), id(perm)) for queue, perm in canon.best)
                canon.choices = self._choices.setdefault((best, canon.now), {})
                self._canons_by_content[content] = canon
            found = self._canons[(id(queue), now)] = (queue, canon)
        return found[1]

    def _intern(self, queue: Snapshot) -> tuple[Snapshot, QueueKey]:
        """One queue object per content, with its key (so worlds compare by identity)."""
        key = queue_key(queue)
        found = self._queues.get(key)
        if found is None:
            found = self._queues[key] = (queue, key)
            self._queue_keys[id(queue)] = key
        return found

    def _templates(self, world: LeaseWorld) -> Iterator[Template]:
        """The moves of ``world`` as templates, in the order of the System's moves."""
        steps = self._steps_of(world.queue, world.now)
        yield from steps.first
        for index, owner in enumerate(self.scope.dispatchers):
            for ticket in world.held[index]:
                finishes = steps.finishes.get((index, ticket))
                if finishes is None:
                    finishes = self._finishes_of(steps, world, index, owner, ticket)
                yield from finishes
        yield from steps.last

    def _steps_of(self, queue: Snapshot, now: int) -> _Steps:
        steps = self._steps.get((id(queue), now))
        if steps is None:
            first = [*self._enqueues(queue, now), *self._claims(queue, now)]
            last = [*self._redrives(queue, now), *self._tick(queue, now)]
            if self.scope.refused_args:
                last += list(self._refused(queue, now))
            self._checked(queue, now, first + last)
            blocks = self._block(queue, now, first), self._block(queue, now, last)
            steps = _Steps(queue, first, last, {}, *blocks, {}, {})
            self._steps[(id(queue), now)] = steps
        return steps

    def _finishes_of(
        self, steps: _Steps, world: LeaseWorld, index: int, owner: str, ticket: TicketKey
    ) -> list[Template]:
        finishes = list(self._finishes(world.queue, world.now, index, owner, ticket))
        self._checked(world.queue, world.now, finishes)
        steps.finishes[(index, ticket)] = finishes
        steps.finish_blocks[(index, ticket)] = self._block(world.queue, world.now, finishes)
        return finishes

    def _block(self, queue: Snapshot, now: int, templates: list[Template]) -> _Block:
        block = _Block(templates)
        if block.clean:
            groups: set[tuple[object, ...]] = set()
            for position, template in enumerate(templates):
                if template.after is queue and template.keep and template.later is None:
                    continue  # back to the world it leaves
                canon = self._target_canon(template, now)
                edit = None if template.keep else (template.index, template.add, template.drop)
                if (id(canon), edit) not in groups:
                    groups.add((id(canon), edit))
                    edits = {} if edit is None else self._edits.setdefault(edit, {})
                    index = -1 if edit is None else template.index
                    block.groups.append(
                        (position, index, edits, template.add, template.drop, canon, canon.worlds)
                    )
                block.moving += 1
        return block

    def _checked(self, queue: Snapshot, now: int, templates: list[Template]) -> None:
        """Each template's transition invariant (it reads the queues and the op only)."""
        for t in templates:
            t.problem = _move_problem(queue, t.after, now, t.op, t.result, t.hooks)

    def check_state(self, world: LeaseWorld) -> str | None:
        queue = world.queue
        if self.scope.shift and not self._rows_ok(queue) and any(t < 1 for t in _instants(queue)):
            raise ValueError(
                f"scope {self.scope.name!r} reaches times more than {ORIGIN - 2} ms before"
                f" now; raise ORIGIN in models/_lease_system.py or shrink the scope"
            )
        rows_ok = self._rows_ok(world.queue)
        for row in world.queue.jobs:
            problem = None if rows_ok else _row_problem(row)
            if problem is not None:
                return f"job {row.id!r}: {problem}"
            tickets = [t for held in world.held for t in held if t[0] == row.id]
            live = [t for t in tickets if _is_live(row, t, world.now)]
            if len(live) > 1:
                return f"job {row.id!r} has {len(live)} live leases at t={world.now}: {live}"
            if any(t[3] > row.token for t in tickets):
                return f"job {row.id!r}: a held ticket has a token above the job's {row.token}"
        return None

    def _rows_ok(self, queue: Snapshot) -> bool:
        found = self._row_problems.get(id(queue))
        if found is None:
            early = self.scope.shift and any(t < 1 for t in _instants(queue))
            ok = not early and all(_row_problem(row) is None for row in queue.jobs)
            found = self._row_problems[id(queue)] = (queue, ok)
        return found[1]

    def check_move(self, source: LeaseWorld, move: Move[LeaseWorld]) -> str | None:
        return _move_problem(
            source.queue, move.state.queue, source.now, move.op, move.result, move.hooks
        )

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
        return [key for key in (*ops, *hooks, *results) if key not in self.scope.unreached]

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
    def record(op: Hashable) -> LeaseOp | None:
        """The explored operation as the contract's ``LeaseOp`` (None for a clock tick, which
        calls nothing): what a move is once it leaves the explorer (replays, evidence)."""
        assert isinstance(op, tuple)
        return LeaseOp.from_move(op, NOTE)

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

    def _enqueues(self, queue: Snapshot, now: int) -> Iterator[Template]:
        fresh = [j for j in self.scope.jobs if queue.job(j) is None][:1]  # the others: symmetric
        for job_id in fresh:
            for qty, ttl, budget in itertools.product(
                self.scope.qtys, self.scope.ttls, self.scope.budgets
            ):
                step = lease_model.enqueue(queue, {"id": job_id, "qty": qty}, now, ttl, budget)
                op = ("enqueue", job_id, qty, now, ttl, budget)
                yield Template(op, step.state, step.result, None, (), ("op:enqueue",))
        for row in queue.jobs:
            ttl, budget = self.scope.ttls[0], self.scope.budgets[0]
            yield Template(
                ("enqueue", row.id, row.qty, now, ttl, budget), queue, False, None, (),
                ("op:enqueue", "result:enqueue-false"),
            )  # fmt: skip
            other = row.qty + 1 if row.qty < QTY.high else row.qty - 1  # a valid other qty
            yield Template(
                ("enqueue", row.id, other, now, ttl, budget), queue, None, "Conflict", (),
                ("op:enqueue", "error:Conflict"),
            )  # fmt: skip

    def _claims(self, queue: Snapshot, now: int) -> Iterator[Template]:
        for index, owner in enumerate(self.scope.dispatchers):
            for lease in self.scope.leases:
                step = lease_model.claim(queue, owner, now, lease)
                outcome = "result:claim-none" if step.result is None else "result:claim-ticket"
                for fault, state, hooks in fault_variants(queue, step):
                    ticket = None
                    if fault is None and step.result is not None:
                        ticket = _ticket_key(step.result)
                    yield Template(
                        ("claim", owner, now, lease, fault),
                        state,
                        None if fault else step.result,
                        "fault" if fault else None,
                        hooks,
                        _counts("claim", outcome, fault, hooks),
                        index=index, add=ticket, max_held=self.scope.max_held,
                    )  # fmt: skip

    def _finishes(
        self, queue: Snapshot, now: int, index: int, owner: str, ticket: TicketKey
    ) -> Iterator[Template]:
        for outcome, delay in self._outcomes():
            step = lease_model.finish(queue, ticket_dict(ticket), outcome, now, delay)
            label = "stale" if step.result is False else step.result
            for fault, state, hooks in fault_variants(queue, step):
                yield Template(
                    ("finish", owner, ticket, outcome, now, delay, fault),
                    state,
                    None if fault else step.result,
                    "fault" if fault else None,
                    hooks,
                    _counts("finish", f"result:finish-{label}", fault, hooks),
                    index=index, drop=None if fault else ticket,
                )  # fmt: skip

    def _outcomes(self) -> list[tuple[str, int]]:
        return [("ok", 0), ("permanent", 0)] + [("retry", d) for d in self.scope.delays]

    def _redrives(self, queue: Snapshot, now: int) -> Iterator[Template]:
        budget_left = len(queue.redrives) < self.scope.max_redrives
        for row in queue.jobs:
            if row.status != "dead":
                continue
            for ttl in self.scope.ttls if budget_left else ():
                step = lease_model.redrive(queue, row.id, now, ttl, NOTE)
                for fault, state, hooks in fault_variants(queue, step):
                    yield Template(
                        ("redrive", row.id, now, ttl, fault),
                        state,
                        None if fault else step.result,
                        "fault" if fault else None,
                        hooks,
                        _counts("redrive", "result:redrive", fault, hooks),
                    )
        alive = [row for row in queue.jobs if row.status != "dead"][:1]
        for row in alive:
            op = ("redrive", row.id, now, self.scope.ttls[0], None)
            yield Template(op, queue, None, "ValueError", (), ("op:redrive", "error:ValueError"))

    def _refused(self, queue: Snapshot, now: int) -> Iterator[Template]:
        """enqueue and claim with each invalid neighbour of the edge table's ranges, one
        argument bad at a time; the model decides (each raises ValueError, no change)."""
        job_id, owner = self.scope.jobs[-1], self.scope.dispatchers[0]
        for name in ("qty", "ttl_ms", "max_attempts", "lease_ms"):
            for bad in edges.LEASE_RANGES[name].neighbours:
                if name == "lease_ms":
                    op: tuple[Any, ...] = ("claim", owner, now, bad, None)
                else:
                    args = {"qty": QTY.low, "ttl_ms": 1, "max_attempts": 1, name: bad}
                    op = ("enqueue", job_id, args["qty"], now, args["ttl_ms"], args["max_attempts"])
                yield Template(op, queue, None, _refusal(queue, op), (),
                               (f"op:{op[0]}", "error:ValueError"))  # fmt: skip

    def _tick(self, queue: Snapshot, now: int) -> Iterator[Template]:
        later = [t for t in _instants(queue) if now < t <= lease_model.MAX_NOW]
        if later:
            step = min(later)
            yield Template(("tick", step), queue, None, None, (), ("op:tick",), later=step)


@dataclass
class _Steps:
    """The templates of one queue at one instant (``queue`` keeps its id valid)."""

    queue: Snapshot
    first: list[Template]
    """enqueue and claim moves (they come before the finishes)."""
    last: list[Template]
    """redrive and tick moves."""
    finishes: dict[tuple[int, TicketKey], list[Template]]
    first_block: _Block
    last_block: _Block
    finish_blocks: dict[tuple[int, TicketKey], _Block]
    stale_blocks: dict[int, _Block]
    """Per dispatcher: the finish block of its first stale ticket (``_finish_block``)."""


_Group = tuple[
    int, int, dict[int, int], TicketKey | None, TicketKey | None, Canon, dict[Code, LeaseWorld]
]
"""One group of a ``_Block`` (see ``_Block.groups``)."""


class _Block(Tally):
    """A run of templates of one queue for ``expand_batch``: their coverage, their count,
    whether none breaks a transition invariant, and the moves that may change the world
    grouped by where they lead (``LeaseSystem._block``; a template that keeps the queue,
    the tickets and the clock leads back to the world it leaves). The moves of one group
    (a claim whose fault hook raises after COMMIT and the same claim with a longer lease,
    ...) reach the same world from every world of the queue, which ``expand_batch`` then
    looks up once: a deep scope has 3 moves per group."""

    __slots__ = ("clean", "groups", "moving", "size")

    def __init__(self, templates: list[Template]) -> None:
        super().__init__([template.counts for template in templates])
        self.size = len(templates)
        self.clean = all(template.problem is None for template in templates)
        self.groups: list[_Group] = []
        """Per distinct (target canon, edit of the held tickets), in the order of their first
        move: that move's position, the dispatcher whose tickets change or -1, their code
        before -> after (shared by every template with that edit), the ticket added or
        dropped, the target canon and the canon's worlds per held-ticket code. The batch
        lists a group's target once, at its first move: the search keeps reachability."""
        self.moving = 0
        """The templates that may change the world (those of every group)."""

    def dropping(self, ticket: TicketKey, edits: dict[int, int]) -> _Block:
        """This block of a stale ticket's finishes (one group: each drops the ticket and
        keeps the queue) for another stale ticket of the same dispatcher."""
        (position, index, _, _, _, canon, worlds) = self.groups[0]
        block = _Block.__new__(_Block)
        block.counts, block.size, block.clean, block.moving = (
            self.counts, self.size, self.clean, self.moving,
        )  # fmt: skip
        block.groups = [(position, index, edits, None, ticket, canon, worlds)]
        return block


def _refusal(queue: Snapshot, op: tuple[Any, ...]) -> str:
    """The error kind the model raises for an enqueue or claim with one invalid argument."""
    try:
        if op[0] == "claim":
            lease_model.claim(queue, op[1], op[2], op[3])
        else:
            lease_model.enqueue(queue, {"id": op[1], "qty": op[2]}, op[3], op[4], op[5])
    except ValueError:
        return "ValueError"
    raise AssertionError(f"the model accepted {op}, which the edge table says is invalid")


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


@functools.cache
def _counts(op: str, outcome: str, fault: str | None, hooks: tuple[str, ...]) -> tuple[str, ...]:
    counts = [f"op:{op}", *(f"hook:{point}" for point in hooks)]
    counts.append(f"crash:{fault}" if fault else outcome)
    return tuple(counts)


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


def _move_problem(
    before: Snapshot, after: Snapshot, now: int, op: Hashable, result: Any, hooks: tuple[str, ...]
) -> str | None:
    """The transition invariants of one move from ``before`` at ``now`` to ``after``."""
    if after is not before:  # an unchanged queue keeps its rows, audits and tokens
        if [r.id for r in after.jobs[: len(before.jobs)]] != [r.id for r in before.jobs]:
            return "a job row was removed or reordered"
        if after.redrives[: len(before.redrives)] != before.redrives:
            return "an audit row was removed or changed"
        for old, new in zip(before.jobs, after.jobs, strict=False):
            if new.token < old.token:
                return f"job {old.id!r}: token went down from {old.token} to {new.token}"
            if old.status == "done" and new != old:
                return f"job {old.id!r} was done and changed to {new.status}"
    return _op_problem(before, after, now, op, result, hooks)


def _op_problem(
    before: Snapshot, after: Snapshot, now: int, op: Hashable, result: Any, hooks: tuple[str, ...]
) -> str | None:
    assert isinstance(op, tuple)
    kind = op[0]
    if kind == "claim" and isinstance(result, dict):
        old = before.job(result["id"])
        if old is None or result["token"] != old.token + 1:
            return f"claim of {result['id']!r} did not make token+1"
        if old.status == "leased" and old.lease_until is not None and now < old.lease_until:
            return (
                f"claim took job {old.id!r} at t={now} while {old.owner!r}'s lease"
                f" (token {old.token}) runs until {old.lease_until}: two live leases"
            )
    if kind == "finish":
        ticket: TicketKey = op[2]
        row = before.job(ticket[0])
        stale = row is None or not _is_live(row, ticket, now)
        if stale and (result is not False or after != before or hooks):
            return f"a stale ticket (token {ticket[3]}) finished: result {result!r}"
    if kind == "redrive" and len(after.redrives) > len(before.redrives):
        audit: RedriveRow = after.redrives[-1]
        row = before.job(audit.id)
        if row is None or audit.token != row.token:
            return f"the audit row of {audit.id!r} does not keep the job's token"
    return None
