"""The explicit-state model checker for the JobQueue model (``models.job_model``).

The same BFS core as the lease explorer (``models.explorer``), with a second
system. A world is the model ``JobState``, the leases each worker still holds (stale
ones included), the clock and the retry_dead budget left. Moves: ``submit`` (each
priority and run-at offset of the scope, up to the scope's job count), ``poll`` by
each worker with each lease length, ``complete`` / ``fail`` with each held lease
(a stale one raises IllegalStateError), ``retry_dead`` of a DEAD job, ``cancel`` of
a PENDING one, a few calls that must raise (cancel of a non-PENDING job,
retry_dead of a non-DEAD one, complete of an unknown id), and ``tick``: the clock
moves to the next instant in {x-1, x, x+1} of a PENDING job's run-at or a RUNNING
job's lease_until.

Symmetry: worker names are not stored by JobQueue at all, so worlds that differ only
by which worker holds which lease are one (the held leases are kept per worker in
sorted order of their contents). Times and tokens are kept absolute so that the path
to any state replays as-is on a target (conformance rebuilds each source state by
replaying its BFS path). Calls that raise are explored as self-loops (the reading
"expired leases are not processed before raising"); conformance accepts both readings.

Seeded parts (``JobSeed``): besides the empty queue, a part may start from a state near
the scope's bounds (a dozen jobs, ten of them ready at once, ids past J9; a job at its
4th or 6th attempt; caps on and off a doubling), reached by a setup program that the
model and the target both run, and explored ``max_depth`` moves deep. Their lease
lengths are the edge table's ends (``models.edges.JOB_RANGES``), and they also poll with
its invalid neighbour and a blank worker (ValueError, no change).

Invariants: at most one live lease per job; a poll never takes a RUNNING job and
always makes a token never issued before; attempts <= max_attempts; DEAD only with
attempts == max_attempts; RUNNING exactly when a token and lease_until are set;
SUCCEEDED and CANCELLED are final; every job can reach SUCCEEDED, DEAD or CANCELLED.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from leasecheck.models import edges
from leasecheck.models import job_model as jm
from leasecheck.models.explorer import Batch, Expansion, ExploreResult, Move, Tally, explore
from leasecheck.models.job_model import _CANCELLED, _DEAD, _PENDING, _RUNNING, _SUCCEEDED
from leasecheck.models.job_ops import JobOp
from leasecheck.queue_impl.jobs import IllegalStateError, Lease, RetryPolicy

__all__ = [
    "JOB_SCOPES",
    "JobScope",
    "JobSeed",
    "JobSystem",
    "JobWorld",
    "explore_jobs",
    "job_scope_parts",
    "seed_steps",
]

HeldLease = tuple[str, int, int]
"""(job id, model token, lease_until)."""

START = 100
FINAL = (_SUCCEEDED, _DEAD, _CANCELLED)
_UNCHANGING = (_SUCCEEDED, _CANCELLED)
_STALE_COUNTS = tuple(
    (kind, (f"op:{kind}", "error:IllegalStateError")) for kind in ("complete", "fail")
)
_UNKNOWN = "?"
"""A memo's miss (a problem is None or a sentence)."""
LEASE_RANGE = edges.JOB_RANGES["lease_millis"]
BAD_LEASES = (LEASE_RANGE.low - 1,)
"""lease_millis' invalid neighbour (the spec sets no top: 41 is valid, so not refused)."""
BLANK_WORKERS = (" ",)


@dataclass(frozen=True, kw_only=True)
class JobScope:
    """The bounds of one exploration of the JobQueue model."""

    name: str
    jobs: int
    workers: tuple[str, ...]
    priorities: tuple[int, ...]
    offsets: tuple[int, ...]
    """run_at_millis of a submit, relative to now."""
    leases: tuple[int, ...]
    max_attempts: int
    base_backoff: int
    max_backoff: int
    retries: int
    """retry_dead calls in the whole run."""
    max_states: int
    seed: JobSeed | None = None
    """The start state (None: the empty queue at t=START)."""
    max_depth: int | None = None
    """Moves from the start state explored (None: until the scope is exhausted)."""
    refused_args: bool = False
    """Also poll with each invalid argument of the edge table (a ValueError, no change)."""
    cancel_ends: bool = False
    """cancel only the first and the last PENDING job (with a dozen jobs, cancelling
    each one is a branch of its own that says nothing new about the others)."""
    unreached: tuple[str, ...] = ()
    """Coverage keys this part need not reach (another part of the scope does): a seed
    with ten ready jobs never polls nothing within a few moves."""

    @property
    def policy(self) -> RetryPolicy:
        return RetryPolicy(self.max_attempts, self.base_backoff, self.max_backoff)

    def describe(self) -> str:
        start = f"clock starts at {START}" if self.seed is None else self.seed.describe()
        bound = "" if self.max_depth is None else f" {self.max_depth} moves deep from it;"
        refused = (
            f" poll also with lease_millis {list(BAD_LEASES)} and worker {list(BLANK_WORKERS)}"
            " (ValueError);"
            if self.refused_args
            else ""
        )
        cancels = " cancel of the first and last PENDING job;" if self.cancel_ends else ""
        if self.unreached:
            bound += f" not required here: {', '.join(self.unreached)};"
        return (
            f"scope {self.name}: {self.jobs} job(s) x workers {list(self.workers)};"
            f" priority {list(self.priorities)}, run_at now+{list(self.offsets)},"
            f" lease_millis {list(self.leases)},{refused}{cancels} RetryPolicy("
            f"{self.max_attempts}, {self.base_backoff}, {self.max_backoff}){_cap_note(self)},"
            f" <= {self.retries} retry_dead; {start};{bound} the clock moves forward to the"
            f" next instant in {{x-1, x, x+1}} of every pending run-at and running"
            f" lease_until; at most {self.max_states} states"
        )


def _cap_note(scope: JobScope) -> str:
    """Whether the cap is base * 2**k (it binds exactly at a doubling) or lies between."""
    k, power = 0, scope.base_backoff
    while power < scope.max_backoff:
        k, power = k + 1, power * 2
    if power == scope.max_backoff:
        return f" (cap = base * 2**{k})"
    return f" (cap between base * 2**{k - 1} and base * 2**{k})"


SetupOp = tuple[Any, ...]
"""One setup operation, in the explorer's own labels (``submit``, ``poll``, ``fail``,
``tick``): a target is brought to a seed by running them."""


@dataclass(frozen=True)
class JobSeed:
    """A start state near the scope's bounds, reached by a setup program.

    JobQueue is in memory, so a seed cannot be written into a file: both the model and
    the target run ``setup`` (each result compared) before the exploration starts.
    """

    name: str
    summary: str
    setup: tuple[SetupOp, ...]

    def describe(self) -> str:
        return f"starts from seed {self.name!r} ({self.summary}; {len(self.setup)} setup calls)"


class _Setup:
    """Writes a setup program while running it on the model, so that its tokens, ids and
    times are the model's own (a seed is a program, never a hand-typed state)."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy, self.state, self.now = policy, jm.JobState(), START
        self.ops: list[SetupOp] = []
        self.last = Lease("", 0, "", "", 0, 0)
        """The lease of the last poll."""

    def submit(self, priority: int, count: int = 1) -> None:
        for _ in range(count):
            self.state, _id = jm.submit(self.state, "t", "p", priority, self.now)
            self.ops.append(("submit", priority, self.now))

    def poll(self, lease_ms: int) -> int:
        """Poll as w1; the model token of the lease (the setup knows a job is ready)."""
        self.state, lease = jm.poll(self.state, self.policy, self.now, "w1", lease_ms)
        assert lease is not None and isinstance(lease.token, int), "the setup polled nothing"
        self.ops.append(("poll", "w1", lease_ms, self.now))
        self.last = lease
        return lease.token

    def fail_last(self) -> None:
        """Fail the lease just polled, now; then the clock moves to its retry time."""
        job_id, token = self.last.job_id, self.last.token
        assert isinstance(token, int)
        self.state = jm.fail(self.state, self.policy, self.now, job_id, token, "e")
        self.ops.append(("fail", "w1", job_id, token, self.now))

    def tick_to_retry(self, job_id: str) -> None:
        job = next(j for j in self.state.jobs if j.id == job_id)
        self.now = job.run_at
        self.ops.append(("tick", self.now))

    def retries(self, job_id: str, failures: int, lease_ms: int) -> None:
        """``failures`` polls of ``job_id``, each failed, the clock moved to each retry but
        the last (the job is then PENDING, not ready, with that many attempts)."""
        for number in range(failures):
            self.poll(lease_ms)
            assert self.last.job_id == job_id, f"the setup leased {self.last.job_id}"
            self.fail_last()
            if number < failures - 1:
                self.tick_to_retry(job_id)


def _crowd(policy: RetryPolicy) -> JobSeed:
    """J1 RUNNING at attempt 4 (its failure computes the 4th backoff, where a cap that is
    not base * 2**k binds), J2 PENDING after 2 failures, and ten jobs ready at once:
    J3..J11 of one priority and run-at (submission order decides, ids past J9 among
    them) and J12 of a higher priority, submitted last."""
    lease_ms = LEASE_RANGE.high
    setup = _Setup(policy)
    setup.submit(1)
    setup.retries("J1", 3, lease_ms)
    setup.tick_to_retry("J1")
    setup.poll(lease_ms)
    setup.submit(0)
    setup.retries("J2", 2, lease_ms)
    setup.submit(0, 9)
    setup.submit(1)
    summary = ("12 jobs: J1 RUNNING at attempt 4, J2 PENDING after 2 failures, J3..J11 and"
               " J12 (higher priority) ready at once")  # fmt: skip
    return JobSeed("crowd", summary, tuple(setup.ops))


def _last_attempt(policy: RetryPolicy) -> JobSeed:
    """J1 RUNNING at its last attempt (max_attempts), after five failures that computed
    every backoff up to and past the cap; J2 and J3 ready at once."""
    setup = _Setup(policy)
    setup.submit(1)
    setup.retries("J1", policy.max_attempts - 1, LEASE_RANGE.high)
    setup.tick_to_retry("J1")
    setup.poll(LEASE_RANGE.high)
    setup.submit(0, 2)
    summary = f"J1 RUNNING at attempt {policy.max_attempts} of {policy.max_attempts}, J2, J3 ready"
    return JobSeed("last-attempt", summary, tuple(setup.ops))


CROWD_POLICY = RetryPolicy(edges.JOB_RANGES["max_attempts"].high, 3, 20)
"""Six attempts (the edge table's top); backoffs 3, 6, 12, then the cap 20, which lies
between base * 2**2 and base * 2**3."""
LAST_POLICY = RetryPolicy(
    edges.JOB_RANGES["max_attempts"].high, edges.JOB_RANGES["base_backoff_millis"].high, 400
)
"""Six attempts, base 50 (the edge table's top), cap 400 = base * 2**3 exactly."""


def _seeded(name: str, seed: JobSeed, policy: RetryPolicy, jobs: int, depth: int,
            max_states: int, retries: int = 0, unreached: tuple[str, ...] = ()
            ) -> JobScope:  # fmt: skip
    return JobScope(
        name=name, jobs=jobs, workers=("w1", "w2"), priorities=(0,), offsets=(0,),
        leases=LEASE_RANGE.ends, max_attempts=policy.max_attempts,
        base_backoff=policy.base_backoff_millis, max_backoff=policy.max_backoff_millis,
        retries=retries, max_states=max_states, seed=seed, max_depth=depth,
        refused_args=True, cancel_ends=True, unreached=unreached,
    )  # fmt: skip


CROWD = _crowd(CROWD_POLICY)
CROWD_UNREACHED = ("result:poll-none", "result:fail-dead")
"""Ten jobs are ready and J1 has two attempts left: the last-attempt part reaches both."""
LAST_ATTEMPT = _last_attempt(LAST_POLICY)


JOB_SCOPES: dict[str, tuple[JobScope, ...]] = {
    "small": (
        JobScope(
            name="jobs-small", jobs=1, workers=("w1", "w2"), priorities=(0,), offsets=(0,),
            leases=(2,), max_attempts=2, base_backoff=1, max_backoff=2, retries=1,
            max_states=100_000,
        ),
    ),
    "ci": (
        # leases (1, 2) since the replay asks each distinct question once (3,871 -> 5,924
        # states; 28,447 replayed edges before, 13,058 target calls now): a lease that
        # ends on the next millisecond.
        JobScope(
            name="jobs-ci-1job", jobs=1, workers=("w1", "w2"), priorities=(0,), offsets=(0, 1),
            leases=(1, 2), max_attempts=2, base_backoff=1, max_backoff=2, retries=1,
            max_states=100_000,
        ),
        JobScope(
            name="jobs-ci-2jobs", jobs=2, workers=("w1", "w2"), priorities=(0, 1), offsets=(0,),
            leases=(2,), max_attempts=1, base_backoff=1, max_backoff=1, retries=0,
            max_states=100_000,
        ),
        # Measured (explore only, loaded machine): 2,275 states, 6,600 transitions, 0.7 s.
        _seeded("jobs-ci-crowd", CROWD, CROWD_POLICY, jobs=13, depth=4, max_states=200_000,
                unreached=CROWD_UNREACHED),
        # Measured: 1,159 states, 4,212 transitions, 0.2 s.
        _seeded("jobs-ci-last-attempt", LAST_ATTEMPT, LAST_POLICY, jobs=4, depth=4,
                max_states=200_000, retries=1),
    ),
    "deep": (
        # Measured (explore only): 387,191 states, 3,967,962 transitions, 106 s.
        JobScope(
            name="jobs-deep-1job", jobs=1, workers=("w1", "w2"), priorities=(0,),
            offsets=(0, 2), leases=(1, 3), max_attempts=3, base_backoff=1, max_backoff=2,
            retries=2, max_states=3_000_000,
        ),
        # Measured (explore only): 223,759 states, 1,697,685 transitions, 48 s. With a
        # second run-at offset and a retry_dead it did not finish within 400 s.
        JobScope(
            name="jobs-deep-2jobs", jobs=2, workers=("w1", "w2"), priorities=(0, 1),
            offsets=(0,), leases=(2,), max_attempts=2, base_backoff=1, max_backoff=2,
            retries=0, max_states=3_000_000,
        ),
        # Three jobs since the explorer's memo and the replay's dedupe: 308,973 states,
        # 1,483,941 target calls, 403 s with its replay on a slow 2-core machine (explore
        # only: 45 s).
        JobScope(
            name="jobs-deep-3jobs", jobs=3, workers=("w1", "w2"), priorities=(0, 1),
            offsets=(0,), leases=(2,), max_attempts=1, base_backoff=1, max_backoff=1,
            retries=0, max_states=3_000_000,
        ),
        # Measured (a heavily loaded machine): 55,584 states, 176,118 transitions, explored
        # in 46 s and replayed on the bundled queue in 288 s.
        _seeded("jobs-deep-crowd", CROWD, CROWD_POLICY, jobs=13, depth=6,
                max_states=3_000_000, unreached=CROWD_UNREACHED),
        # Measured: 14,654 states, 58,889 transitions, explored in 2.6 s (depth 8: 145,970
        # states, replayed in 482 s on a loaded machine, too long even for deep).
        _seeded("jobs-deep-last-attempt", LAST_ATTEMPT, LAST_POLICY, jobs=4, depth=6,
                max_states=3_000_000, retries=1),
    ),
}  # fmt: skip


def job_scope_parts(name: str) -> tuple[JobScope, ...]:
    if name not in JOB_SCOPES:
        raise ValueError(f"unknown scope {name!r}; use one of {', '.join(JOB_SCOPES)}")
    return JOB_SCOPES[name]


Held = tuple[tuple[HeldLease, ...], ...]


@dataclass(frozen=True, eq=False)
class JobWorld:
    """The model state, the leases each worker holds, the clock, retry_dead calls left.

    Equality and hashing go through one cached tuple of plain values: a world is hashed
    many times, and a dataclass of enums hashes slowly.
    """

    state: jm.JobState
    held: Held
    now: int
    retries_left: int

    def key(self) -> tuple[object, ...]:
        cached: tuple[object, ...] | None = self.__dict__.get("_key")
        if cached is None:
            cached = (state_key(self.state), self.held, self.now, self.retries_left)
            object.__setattr__(self, "_key", cached)
        return cached

    def keyed(self, key: tuple[object, ...]) -> None:
        """Set the key (and the hash) that ``key()`` would compute, given by the system
        that interned this world's state (it knows the state's key already)."""
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        try:
            return self._hash  # type: ignore[no-any-return,attr-defined]
        except AttributeError:
            object.__setattr__(self, "_hash", hash(self.key()))
            return self._hash  # type: ignore[no-any-return,attr-defined]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobWorld) and (self is other or self.key() == other.key())


def state_key(state: jm.JobState) -> tuple[object, ...]:
    """Every field of ``state`` as plain values (statuses by ``_value_``, a plain attribute:
    ``.value`` is a property and an enum member hashes in Python, both slow here)."""
    jobs = tuple(
        (j.id, j.type, j.payload, j.priority, j.run_at, j.status._value_, j.attempts,
         j.last_error, j.token, j.lease_until)
        for j in state.jobs
    )  # fmt: skip
    return (jobs, state.next_token)


class _Template:
    """One move of every world with one model state, clock and retry budget, minus the
    held leases: ``index`` is the worker whose leases become ``mine`` (None: unchanged)."""

    __slots__ = ("after", "counts", "error", "index", "later", "mine", "op", "problem",
                 "result", "retried", "target", "token")  # fmt: skip

    def __init__(
        self,
        op: Hashable,
        after: jm.JobState,
        result: object = None,
        error: str | None = None,
        counts: tuple[str, ...] = (),
        *,
        index: int = -1,
        mine: tuple[HeldLease, ...] | None = None,
        later: int | None = None,
        retried: bool = False,
    ) -> None:
        self.op, self.after, self.result, self.error, self.counts = op, after, result, error, counts
        self.index, self.mine, self.later, self.retried = index, mine, later, retried
        self.problem: str | None = None
        self.token: int | None = None
        """A poll's new token, which no lease a worker holds may carry (checked per world)."""
        self.target: jm.JobState | None = None
        """``after`` interned (one object per content), once a world needed it."""

    def held_after(self, held: Held) -> Held:
        if self.mine is None:
            return held
        return (*held[: self.index], self.mine, *held[self.index + 1 :])


class JobSystem:
    """Moves and invariants of the JobQueue model within one ``JobScope``."""

    def __init__(
        self,
        scope: JobScope,
        clear_error_on_retry: bool = False,
        expire_on_error: dict[str, bool] | None = None,
    ) -> None:
        self.scope = scope
        self.policy = scope.policy
        self.clear_error = clear_error_on_retry
        self.expire_on_error = expire_on_error or {}
        """Per error kind of complete/fail: whether expired leases were processed first."""
        self._states: dict[tuple[object, ...], jm.JobState] = {}
        self._interned: dict[int, jm.JobState] = {}
        self._state_keys: dict[int, tuple[object, ...]] = {}
        """Per id of an interned model state: its ``state_key``."""
        self._worlds: dict[tuple[int, Held, int, int], JobWorld] = {}
        self._unknown = "J9" if scope.jobs < 9 else f"J{scope.jobs + 1}"
        """An id no submit of the scope makes (J9 for small scopes, as it always was)."""
        self._steps: dict[tuple[int, int, bool], _Steps] = {}
        """Per (id of a model state, now, any retry_dead left): its templates."""
        self._cancels: dict[tuple[int, str], tuple[jm.JobState, jm.JobState]] = {}
        """Per (id of a model state, job id): the state and its cancel's state (interned)."""
        self._goals: dict[int, tuple[jm.JobState, frozenset[str]]] = {}
        """Per id of a model state (kept alive here): the ids of its jobs at their goal."""
        self._ids: dict[int, tuple[jm.JobState, frozenset[str]]] = {}
        """Per id of a model state (kept alive here): the ids of its jobs."""
        self._state_problems: dict[int, str | None] = {}
        """Per id of an interned model state: its own state invariant's problem."""
        self._targets: dict[tuple[int, int], list[dict[Held, JobWorld]]] = {}
        """Per (id of an interned model state, now): per retry_dead calls left, the
        canonical world of each (raw) tuple of held leases."""

    def initial(self) -> JobWorld:
        if self.scope.seed is not None:
            return seed_steps(self.scope)[1]
        return JobWorld(
            jm.JobState(), tuple(() for _ in self.scope.workers), START, self.scope.retries
        )

    def canonical(self, world: JobWorld) -> JobWorld:
        return self._world(self._intern(world.state), world.held, world.now, world.retries_left)

    def moves(self, world: JobWorld) -> Iterator[Move[JobWorld]]:
        for template in self._templates(world):
            held = template.held_after(world.held)
            retries = world.retries_left - template.retried
            later = world.now if template.later is None else template.later
            if template.after is world.state and held is world.held and later == world.now:
                after = world if not template.retried else replace(world, retries_left=retries)
            else:
                after = JobWorld(template.after, held, later, retries)
            yield Move(template.op, after, template.result, template.error,
                       counts=template.counts)  # fmt: skip

    def expand(self, world: JobWorld) -> Iterator[Expansion[JobWorld]]:
        """What ``moves`` gives, canonical and checked, from the per-state templates."""
        tokens: set[int] | None = None
        for template in self._templates(world):
            held = template.held_after(world.held)
            retries = world.retries_left - template.retried
            same = template.after is world.state and template.later is None
            if same and held is world.held and not template.retried:
                target = world
            else:
                state = template.target
                if state is None:
                    state = template.target = self._intern(template.after)
                later = world.now if template.later is None else template.later
                target = self._world(state, held, later, retries)
            problem = template.problem
            if problem is None and template.token is not None:
                if tokens is None:
                    tokens = {h[1] for mine in world.held for h in mine}
                if template.token in tokens:
                    problem = f"poll issued token {template.token!r} again"
            yield target, template.counts, problem

    def _intern(self, state: jm.JobState) -> jm.JobState:
        """One object per content; an already interned object is known by its id (it is
        kept alive by ``_states``, so no other object can have that id meanwhile)."""
        if self._interned.get(id(state)) is state:
            return state
        key = state_key(state)
        found = self._states.setdefault(key, state)
        if self._interned.get(id(found)) is not found:
            self._interned[id(found)] = found
            self._state_keys[id(found)] = key
        return found

    def _world(self, state: jm.JobState, held: Held, now: int, retries: int) -> JobWorld:
        """The canonical world (``state`` interned; worker names are not stored by
        JobQueue, so the held leases are kept per worker in sorted order)."""
        ordered = tuple(sorted(held))
        key = (id(state), ordered, now, retries)
        found = self._worlds.get(key)
        if found is None:
            found = self._worlds[key] = JobWorld(state, ordered, now, retries)
            found.keyed((self._state_keys[id(state)], ordered, now, retries))
        return found

    def _templates(self, world: JobWorld) -> Iterator[_Template]:
        """The moves of ``world`` as templates, in the order of the System's moves."""
        steps = self._steps_of(world)
        yield from steps.first
        for index, mine in enumerate(world.held):
            for lease in mine:
                yield from self._finishes_of(steps, world, index, lease)[0]
        yield from steps.last

    def expand_batch(self, world: JobWorld) -> Batch[JobWorld] | None:
        """What ``expand`` gives, in bulk: per run of templates (submits and polls, each
        held lease's finishes, the admin calls and tick) its coverage once, and the
        canonical targets of the moves that may change the world; None if a move breaks
        a transition invariant (``expand`` then reports it)."""
        steps = self._steps_of(world)
        held, retries = world.held, world.retries_left
        blocks = [steps.first_block]
        for index, mine in enumerate(held):
            for lease in mine:
                finishes = steps.finishes.get((index, lease))
                if finishes is None:
                    finishes = self._finish_block(steps, world, index, lease)
                blocks.append(finishes[1])
                if lease[1] in steps.first_block.tokens:
                    return None  # a poll would issue a token this world still holds
        blocks.append(steps.last_block)
        targets: list[tuple[int, JobWorld]] = []
        offset = 0
        for block in blocks:
            if not block.clean:
                return None
            for position, template, worlds in block.moving:
                after = held if template.mine is None else template.held_after(held)
                left = retries - template.retried
                by_held = worlds[left]
                found = by_held.get(after)
                if found is None:
                    state = template.target
                    assert state is not None
                    later = world.now if template.later is None else template.later
                    found = by_held[after] = self._world(state, after, later, left)
                targets.append((offset + position, found))
            offset += block.size
        return offset, blocks, targets

    def _steps_of(self, world: JobWorld) -> _Steps:
        key = (id(world.state), world.now, world.retries_left > 0)
        steps = self._steps.get(key)
        if steps is None:
            first = [*self._submits(world), *self._polls(world)]
            last = [*self._admin(world), *self._tick(world)]
            self._checked(world, first + last)
            blocks = self._block(world, first), self._block(world, last)
            steps = self._steps[key] = _Steps(world.state, first, last, {}, *blocks)
        return steps

    def _finish_block(
        self, steps: _Steps, world: JobWorld, index: int, lease: HeldLease
    ) -> tuple[list[_Template] | None, _Block]:
        """The memo of ``_finishes_of`` for ``expand_batch``, which needs only the block: a
        stale lease's is its worker's stale block, and its templates (for ``moves``, whose
        labels name the lease) are made when asked for."""
        stale = steps.stale.get(index)
        if stale is not None and self._stale(world, lease[0], lease[1], steps):
            found: tuple[list[_Template] | None, _Block] = (None, stale)
            steps.finishes[(index, lease)] = found
            return found
        return self._finishes_of(steps, world, index, lease)

    def _finishes_of(
        self, steps: _Steps, world: JobWorld, index: int, lease: HeldLease
    ) -> tuple[list[_Template], _Block]:
        known = steps.finishes.get((index, lease))
        if known is not None and known[0] is not None:
            return known[0], known[1]
        finishes = self._finishes(world, index, lease, steps)
        if known is not None:  # a stale lease whose block ``_finish_block`` shared
            found = steps.finishes[(index, lease)] = finishes, known[1]
            return found
        # stale: the model refused the lease (``jm.holds`` false is the one IllegalStateError
        # complete and fail raise; another error is no stale lease and shares no block)
        stale = finishes[0].error == "IllegalStateError"
        shared = steps.stale.get(index) if stale else None
        if shared is not None:  # an earlier stale lease of this worker's block: the same
            # moves but their labels, none breaking a transition invariant (a stale block
            # is kept only if clean)
            found = finishes, shared
        else:
            self._checked(world, finishes)
            found = finishes, self._block(world, finishes)
            if stale and found[1].clean:
                steps.stale[index] = found[1]
        steps.finishes[(index, lease)] = found
        return found

    def _block(self, world: JobWorld, templates: list[_Template]) -> _Block:
        """A run of templates for ``expand_batch``; a template that keeps the state, the
        held leases, the clock and the retry budget leads back to the world it leaves."""
        block = _Block(templates)
        if not block.clean:
            return block
        state, now, targets, moving = world.state, world.now, self._targets, block.moving
        for position, template in enumerate(templates):
            later = template.later
            keeps = template.mine is None and later is None and not template.retried
            if keeps and template.after is state:
                continue
            target = template.target
            if target is None:
                target = template.target = self._intern(template.after)
            if later is None:
                later = now
            worlds = targets.get((id(target), later))
            if worlds is None:
                worlds = targets[(id(target), later)] = [{} for _ in range(self.scope.retries + 1)]
            moving.append((position, template, worlds))
        return block

    def _checked(self, world: JobWorld, templates: list[_Template]) -> None:
        """Each template's transition invariant, with no lease held (the tokens held are
        the one part of it that depends on the world: ``expand`` checks them)."""
        state, now = world.state, world.now
        for template in templates:
            result = template.result
            template.problem = _move_problem(state, now, (), template.after, result)
            if isinstance(result, Lease) and isinstance(result.token, int):
                template.token = result.token

    # --- invariants ----------------------------------------------------------------

    def check_state(self, world: JobWorld) -> str | None:
        state = world.state
        problem = self._state_problems.get(id(state), _UNKNOWN)
        if problem is _UNKNOWN:
            problem = self._state_problem(state)
            if self._interned.get(id(state)) is state:  # the state's own part, once per state
                self._state_problems[id(state)] = problem
        elif self._interned.get(id(state)) is not state:  # an id reused by another object
            problem = self._state_problem(state)
        if problem is not None or not any(world.held):
            return problem
        for job in state.jobs:
            if job.status is not _RUNNING:
                continue
            live = [
                h for mine in world.held for h in mine
                if h[0] == job.id and h[1] == job.token and world.now < h[2]
            ]  # fmt: skip
            if len(live) > 1:
                return f"job {job.id} has {len(live)} live leases at t={world.now}"
        return None

    def _state_problem(self, state: jm.JobState) -> str | None:
        """The state invariants that read no held lease."""
        for job in state.jobs:
            if job.attempts > self.policy.max_attempts:
                return f"job {job.id}: attempts {job.attempts} > max_attempts"
            if job.status is _DEAD and job.attempts != self.policy.max_attempts:
                return f"job {job.id} is DEAD after only {job.attempts} attempt(s)"
            running = job.status is _RUNNING
            if running != (job.token is not None and job.lease_until is not None):
                return f"job {job.id} is {job.status.name} with token {job.token}"
        return None

    def check_move(self, source: JobWorld, move: Move[JobWorld]) -> str | None:
        return _move_problem(source.state, source.now, source.held, move.state.state, move.result)

    def items(self, world: JobWorld) -> frozenset[str]:
        """The ids of ``world``'s jobs, one frozenset per model state (liveness asks every
        state; the memo keeps the state alive, so its id stays valid)."""
        state = world.state
        found = self._ids.get(id(state))
        if found is None or found[0] is not state:
            found = self._ids[id(state)] = (state, frozenset(job.id for job in state.jobs))
        return found[1]

    def at_goal(self, world: JobWorld, item: str) -> bool:
        return item in self.goals(world)

    def goals(self, world: JobWorld) -> frozenset[str]:
        """The ids of ``world``'s jobs at their goal (what ``at_goal`` says of each)."""
        state = world.state
        found = self._goals.get(id(state))
        if found is None or found[0] is not state:  # once per model state (liveness asks
            # every state); the memo keeps the state alive, so its id is valid
            final = frozenset(job.id for job in state.jobs if job.status in FINAL)
            found = self._goals[id(state)] = (state, final)
        return found[1]

    def required(self) -> Sequence[str]:
        ops = ["submit", "poll", "complete", "fail", "retry_dead", "cancel", "tick"]
        results = [
            "result:poll-lease", "result:poll-none", "error:IllegalStateError", "error:KeyError",
            "result:fail-dead", "result:expired",
        ]  # fmt: skip
        if self.policy.max_attempts > 1:
            results.append("result:fail-pending")
        if self.scope.retries:
            results.append("result:retried")
        if self.scope.refused_args:
            results.append("error:ValueError")
        keys = [f"op:{op}" for op in ops] + results
        return [key for key in keys if key not in self.scope.unreached]

    @staticmethod
    def record(op: Hashable) -> JobOp | None:
        """The explored operation as the contract's ``JobOp`` (None for a clock tick, which
        calls nothing): what a move is once it leaves the explorer (replays, evidence).
        The worker of a complete or fail is not an argument (JobQueue stores no worker
        name): ``actor`` gives it."""
        assert isinstance(op, tuple)
        kind = op[0]
        # built field by field (JobOp.of checks names against JOB_KINDS, slower): a
        # replay makes one per transition; tests/test_explorer_records.py pins the shape
        if kind == "submit":
            _, priority, run_at = op
            args: tuple[tuple[str, Any], ...] = (
                ("type", "t"), ("payload", "p"), ("priority", priority),
                ("run_at_millis", run_at),
            )  # fmt: skip
            return JobOp("submit", args)
        if kind == "poll":
            _, worker, lease_ms, now = op
            return JobOp("poll", (("worker_id", worker), ("lease_millis", lease_ms)), now)
        if kind == "complete":
            _, _, job_id, token, now = op
            return JobOp("complete", (("job_id", job_id), ("token", token)), now)
        if kind == "fail":
            _, _, job_id, token, now = op
            return JobOp("fail", (("job_id", job_id), ("token", token), ("error", "e")), now)
        if kind in ("retry_dead", "cancel"):
            _, job_id, now = op
            return JobOp(kind, (("job_id", job_id),), now)
        return None

    @staticmethod
    def actor(op: Hashable) -> str:
        """Who calls ``op``: the worker of a poll, complete or fail, else ``queue`` (an
        administrator's call), or ``clock`` for a tick."""
        assert isinstance(op, tuple)
        if op[0] in ("poll", "complete", "fail"):
            return str(op[1])
        return "clock" if op[0] == "tick" else "queue"

    @staticmethod
    def instant(op: Hashable) -> int | None:
        """The instant a tick moves the clock to (None for any other move)."""
        assert isinstance(op, tuple)
        return int(op[1]) if op[0] == "tick" else None

    def describe_op(self, op: Hashable) -> str:
        assert isinstance(op, tuple)
        kind, *args = op
        if kind == "tick":
            return f"the clock moves to t={args[0]}"
        if kind == "submit":
            return f"submit(type='t', payload='p', priority={args[0]}, run_at={args[1]})"
        if kind == "poll":
            return f"{args[0]} polls at t={args[2]} with lease_millis={args[1]}"
        if kind in ("complete", "fail"):
            who, job_id, token, now = args
            error = ", error 'e'" if kind == "fail" else ""  # the error every explored fail gives
            return f"{who} calls {kind}({job_id!r}, token {token}{error}) at t={now}"
        return f"{kind}({args[0]!r}) at t={args[1]}"

    def op_shape(self, op: Hashable) -> Hashable:
        return op

    def describe_state(self, world: JobWorld) -> str:
        lines = [f"     state at t={world.now}:"]
        for job in world.state.jobs:
            lines.append(
                f"  {job.id}: {job.status.name} priority={job.priority} run_at={job.run_at}"
                f" attempts={job.attempts} token={job.token} lease_until={job.lease_until}"
                f" last_error={job.last_error!r}"
            )
        return "\n".join(lines)

    # --- moves ---------------------------------------------------------------------

    def _submits(self, world: JobWorld) -> Iterator[_Template]:
        if len(world.state.jobs) >= self.scope.jobs:
            return
        for priority, offset in itertools.product(self.scope.priorities, self.scope.offsets):
            run_at = world.now + offset
            state, job_id = jm.submit(world.state, "t", "p", priority, run_at)
            yield _Template(("submit", priority, run_at), state, job_id, counts=("op:submit",))

    def _polls(self, world: JobWorld) -> Iterator[_Template]:
        # JobQueue stores no worker name, so each lease length has one outcome for all.
        outcomes = []
        for lease_ms in self.scope.leases:
            state, lease = jm.poll(world.state, self.policy, world.now, self.scope.workers[0],
                                   lease_ms)  # fmt: skip
            mine = None
            if lease is not None:
                assert isinstance(lease.token, int)
                mine = ((lease.job_id, lease.token, lease.lease_until),)
            outcome = "result:poll-none" if lease is None else "result:poll-lease"
            counts = ("op:poll", outcome, *_expiry_count(world.state, state))
            outcomes.append((lease_ms, state, lease, mine, counts))
        for index, worker in enumerate(self.scope.workers):
            for lease_ms, state, lease, mine, counts in outcomes:
                op = ("poll", worker, lease_ms, world.now)
                yield _Template(op, state, lease, counts=counts, index=index, mine=mine)
        if self.scope.refused_args:
            yield from self._refused_polls(world)

    def _refused_polls(self, world: JobWorld) -> Iterator[_Template]:
        """poll with each invalid argument of the edge table: ValueError, nothing changes
        (the model checks arguments first; conformance also accepts a target that
        processed expired leases before raising, a reading the spec leaves open)."""
        counts = ("op:poll", "error:ValueError")
        worker = self.scope.workers[0]
        for lease_ms in BAD_LEASES:
            op = ("poll", worker, lease_ms, world.now)
            yield _Template(op, world.state, None, "ValueError", counts)
        for blank in BLANK_WORKERS:
            op = ("poll", blank, self.scope.leases[0], world.now)
            yield _Template(op, world.state, None, "ValueError", counts)

    def _finishes(
        self, world: JobWorld, index: int, lease: HeldLease, steps: _Steps
    ) -> list[_Template]:
        worker, (job_id, token, _until) = self.scope.workers[index], lease
        if self._stale(world, job_id, token, steps):
            # both raise IllegalStateError into one state (asked of the model once per
            # steps, by ``_after_error``), whatever the lease: no call, no raise here
            state = self._after_error(world, "IllegalStateError", steps)
            return [
                _Template((kind, worker, job_id, token, world.now), state, None,
                          "IllegalStateError", counts, index=index, mine=())
                for kind, counts in _STALE_COUNTS
            ]  # fmt: skip
        finishes = []
        for kind in ("complete", "fail"):
            op = (kind, worker, job_id, token, world.now)
            found = steps.outcomes.get((kind, job_id, token))
            if found is None:
                state, error = self._finish(world, kind, job_id, token, steps)
                if error is not None:
                    counts: tuple[str, ...] = (f"op:{kind}", "error:IllegalStateError")
                else:
                    counts = (f"op:{kind}", *_fail_count(kind, state, job_id))
                found = steps.outcomes[(kind, job_id, token)] = (state, error, counts)
            state, error, counts = found
            finishes.append(_Template(op, state, None, error, counts, index=index, mine=()))
        return finishes

    def _stale(self, world: JobWorld, job_id: str, token: int, steps: _Steps) -> bool:
        """Whether complete and fail of this lease raise IllegalStateError: after the
        leases lapsed at ``now`` expire, ``token`` is not the job's current lease
        (``jm.holds``, the model's own rule)."""
        for job in self._expired(world, steps).jobs:
            if job.id == job_id:
                return not jm.holds(job, token)
        return False  # no such job: the model's call says what happens

    def _finish(
        self, world: JobWorld, kind: str, job_id: str, token: int, steps: _Steps
    ) -> tuple[jm.JobState, str | None]:
        """The model's complete or fail (the same for every worker: none is stored)."""
        try:
            if kind == "complete":
                return jm.complete(world.state, self.policy, world.now, job_id, token), None
            return jm.fail(world.state, self.policy, world.now, job_id, token, "e"), None
        except IllegalStateError:
            return self._after_error(world, "IllegalStateError", steps), "IllegalStateError"

    def _admin(self, world: JobWorld) -> Iterator[_Template]:
        now = world.now
        pending = [j.id for j in world.state.jobs if j.status is _PENDING]
        cancellable = {*pending[:1], *pending[-1:]} if self.scope.cancel_ends else set(pending)
        for job in world.state.jobs:
            if job.status is _DEAD and world.retries_left:
                state = jm.retry_dead(world.state, now, job.id, self.clear_error)
                counts = ("op:retry_dead", "result:retried")
                yield _Template(("retry_dead", job.id, now), state, counts=counts, retried=True)
            if job.id in cancellable:
                state = self._cancelled(world.state, job.id)
                yield _Template(("cancel", job.id, now), state, counts=("op:cancel",))
        refused = [j for j in world.state.jobs if j.status is not _PENDING][:1]
        for job in refused:
            yield _Template(("cancel", job.id, now), world.state, None, "IllegalStateError",
                            ("op:cancel", "error:IllegalStateError"))  # fmt: skip
        alive = [j for j in world.state.jobs if j.status is not _DEAD][:1]
        for job in alive:
            yield _Template(("retry_dead", job.id, now), world.state, None, "IllegalStateError",
                            ("op:retry_dead", "error:IllegalStateError"))  # fmt: skip
        state = self._after_error(world, "KeyError")
        yield _Template(("complete", self.scope.workers[0], self._unknown, 1, now), state, None,
                        "KeyError", ("op:complete", "error:KeyError"))  # fmt: skip

    def _cancelled(self, state: jm.JobState, job_id: str) -> jm.JobState:
        """The model's cancel of ``job_id`` in ``state``, interned, once per interned state
        (cancel reads no clock; the memo keeps ``state`` alive, so its id stays valid)."""
        found = self._cancels.get((id(state), job_id))
        if found is None or found[0] is not state:
            found = self._cancels[(id(state), job_id)] = (
                state,
                self._intern(jm.cancel(state, job_id)),
            )
        return found[1]

    def _after_error(self, world: JobWorld, kind: str, steps: _Steps | None = None) -> jm.JobState:
        """The state after a complete/fail that raised ``kind``, in the target's reading
        (once per ``steps``: every stale lease of a state raises into the same state)."""
        if not self.expire_on_error.get(kind, False):
            return world.state
        if steps is None:
            return jm.expire(world.state, self.policy, world.now)
        return self._expired(world, steps)

    def _expired(self, world: JobWorld, steps: _Steps) -> jm.JobState:
        """``jm.expire`` of ``steps``' state at its instant, once per ``steps``."""
        if steps.expired is None:
            steps.expired = jm.expire(world.state, self.policy, world.now)
        return steps.expired

    def _tick(self, world: JobWorld) -> Iterator[_Template]:
        instants: set[int] = set()
        for job in world.state.jobs:
            if job.status is _PENDING:
                instants.update((job.run_at - 1, job.run_at, job.run_at + 1))
            elif job.status is _RUNNING and job.lease_until is not None:
                instants.update((job.lease_until - 1, job.lease_until, job.lease_until + 1))
        later = [t for t in instants if t > world.now]
        if later:
            step = min(later)
            yield _Template(("tick", step), world.state, counts=("op:tick",), later=step)


@dataclass
class _Steps:
    """The templates of one model state at one instant (``state`` keeps its id valid)."""

    state: jm.JobState
    first: list[_Template]
    """submit and poll moves (they come before the finishes)."""
    last: list[_Template]
    """retry_dead, cancel, refused calls and tick."""
    finishes: dict[tuple[int, HeldLease], tuple[list[_Template] | None, _Block]]
    """Per (worker index, held lease): its finishes and their block (templates None: a
    stale lease's, made when ``moves`` asks)."""
    first_block: _Block
    last_block: _Block
    outcomes: dict[tuple[str, str, int], tuple[jm.JobState, str | None, tuple[str, ...]]] = field(
        default_factory=dict
    )
    """complete/fail by (kind, job id, token): the model state after it, the error and the
    coverage keys."""
    expired: jm.JobState | None = None
    """``jm.expire`` of ``state`` at its instant, once asked for."""
    stale: dict[int, _Block] = field(default_factory=dict)
    """Per worker index: the (clean) block of the finishes of a stale lease it holds
    (complete and fail raise into one state whichever stale lease it is: one block
    serves all)."""


class _Block(Tally):
    """A run of templates of one state for ``expand_batch``: their coverage, their count,
    whether none breaks a transition invariant (held tokens aside: ``tokens`` are the
    ones its polls issue), and (position, template, target worlds) of each that may
    change the world."""

    __slots__ = ("clean", "moving", "size", "tokens")

    def __init__(self, templates: list[_Template]) -> None:
        super().__init__([template.counts for template in templates])
        self.size = len(templates)
        clean, tokens = True, []
        for template in templates:  # one pass: a block is built for every new state
            if template.problem is not None:
                clean = False
            if template.token is not None:
                tokens.append(template.token)
        self.clean, self.tokens = clean, frozenset(tokens)
        self.moving: list[tuple[int, _Template, list[dict[Held, JobWorld]]]] = []


def _move_problem(
    source: jm.JobState, now: int, held: Held, target: jm.JobState, result: object
) -> str | None:
    """The transition invariants of one move from ``source`` at ``now`` to ``target``."""
    is_lease = isinstance(result, Lease)
    if target is source and not is_lease:
        return None  # a refused call: every job is itself, unchanged
    before, after = source.jobs, target.jobs
    for old, new in zip(before, after, strict=False):
        if new is not old and old.status in _UNCHANGING and new != old:
            return f"job {old.id} was {old.status.name} and changed"
    if is_lease:
        assert isinstance(result, Lease)
        old_job = next(j for j in before if j.id == result.job_id)
        if old_job.status is not _PENDING and not _expired(old_job, now):
            return f"poll leased job {old_job.id} while it was {old_job.status.name}"
        issued = {h[1] for mine in held for h in mine}
        issued |= {j.token for j in before if j.token is not None}
        token = result.token
        if not isinstance(token, int) or token < source.next_token or token in issued:
            return f"poll issued token {token!r} again"
    return None


def _expired(job: jm.ModelJob, now: int) -> bool:
    return job.status is _RUNNING and job.lease_until is not None and now >= job.lease_until


def _expiry_count(before: jm.JobState, after: jm.JobState) -> tuple[str, ...]:
    expired = any(
        old.status is _RUNNING and new.last_error == jm.LEASE_EXPIRED and new.token is None
        for old, new in zip(before.jobs, after.jobs, strict=False)
    )
    return ("result:expired",) if expired else ()


def _fail_count(kind: str, state: jm.JobState, job_id: str) -> tuple[str, ...]:
    if kind != "fail":
        return ()
    status = next(job.status for job in state.jobs if job.id == job_id)
    return (f"result:fail-{status.name.lower()}",)


def _put(
    held: tuple[tuple[HeldLease, ...], ...], index: int, mine: tuple[HeldLease, ...]
) -> tuple[tuple[HeldLease, ...], ...]:
    return (*held[:index], mine, *held[index + 1 :])


def seed_steps(scope: JobScope) -> tuple[list[tuple[SetupOp, object]], JobWorld]:
    """The setup program of ``scope``'s seed with the model's result of each call, and the
    world it leaves: the leases its polls handed out and no call took back are held by
    the worker that polled them."""
    assert scope.seed is not None
    policy, state, now = scope.policy, jm.JobState(), START
    held: list[list[HeldLease]] = [[] for _ in scope.workers]
    steps: list[tuple[SetupOp, object]] = []
    for op in scope.seed.setup:
        kind, *args = op
        result: object = None
        if kind == "submit":
            state, result = jm.submit(state, "t", "p", args[0], args[1])
        elif kind == "poll":
            state, lease = jm.poll(state, policy, args[2], args[0], args[1])
            assert lease is not None and isinstance(lease.token, int)
            mine = held[scope.workers.index(args[0])]
            mine.append((lease.job_id, lease.token, lease.lease_until))
            result = lease
        elif kind == "fail":
            state = jm.fail(state, policy, args[3], args[1], args[2], "e")
            held = [[h for h in mine if h[1] != args[2]] for mine in held]
        now = args[0] if kind == "tick" else now
        steps.append((op, result))
    world = JobWorld(state, tuple(tuple(sorted(mine)) for mine in held), now, scope.retries)
    return steps, world


def explore_jobs(
    scope: JobScope,
    clear_error_on_retry: bool = False,
    expire_on_error: dict[str, bool] | None = None,
    keep_edges: bool = True,
) -> tuple[JobSystem, ExploreResult[JobWorld]]:
    """Explore the JobQueue model within one scope part, in the target's readings."""
    system = JobSystem(scope, clear_error_on_retry, expire_on_error)
    return system, explore(system, scope.max_states, keep_edges, scope.max_depth)
