"""Conformance of a JobQueue target with every transition the JobQueue explorer found.

JobQueue is in memory, so the target is driven along the BFS tree: the target at each
explored state is a copy of the target at its parent with the tree move applied (a
shortest path, as if replayed from a fresh instance with a settable clock), and each
explored operation runs on its own copy of the target at its source (once per distinct
copy, model state and operation: worlds that differ only in who holds what share one
copy, see ``_along_tree``); its result, error kind and the whole visible state
(``view`` of every job, ``dead_letters()``) must equal the model's successor. A target
whose state pickle cannot copy (locks are replaced by fresh ones) has each source state
rebuilt by replaying its path instead. So is every state of a target one of whose copies
behaved unlike the original: a disagreement found on a copy is reported only once the
same path, replayed on a new instance, disagrees too (a queue whose tokens are ``id()``s
of its lease records hands a copy new ids, and the learned token no longer matches);
when it does not, the whole replay starts again by paths. Target tokens are opaque: a
bijection from model tokens is learned at each poll, and a target token seen before is
a violation.
Readings left open are accepted: a call that raises may or may not have processed
expired leases first; whether ``retry_dead`` clears ``last_error`` is learned from the
target once (``probe_clear_error``).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import pickle
import threading
import time
from collections.abc import Hashable, Sequence
from typing import Any

from leasecheck.conformance import ConformanceReport
from leasecheck.models import job_model as jm
from leasecheck.models.evidence import Evidence, Recorder
from leasecheck.models.explorer import Edge, ExploreResult, Move
from leasecheck.models.job_explorer import START, JobSystem, JobWorld, seed_steps
from leasecheck.models.job_ops import JobOp
from leasecheck.queue_impl.jobs import Lease, RetryPolicy
from leasecheck.targets.job_compare import (
    error_kind,
    lease_differences,
    model_visible,
    target_visible,
)

__all__ = ["probe_clear_error", "probe_expiry_on_error", "replay_jobs"]


class SettableClock:
    """A ``TimeSource`` the replay moves by hand."""

    def __init__(self, now: int) -> None:
        self.now = now

    def now_millis(self) -> int:
        return self.now


def probe_clear_error(cls: type[Any]) -> bool:
    """Whether the target's retry_dead clears last_error (the spec leaves it open).

    A target that cannot even run the probe gets the model's default reading; the
    replay then reports what is wrong with it.
    """
    try:
        queue = cls(SettableClock(10), RetryPolicy(1, 1, 1))
        job_id = queue.submit("t", "p", 0, 0)
        lease = queue.poll("w", 5)
        queue.fail(job_id, lease.token, "e")
        queue.retry_dead(job_id)
        return bool(queue.view(job_id).last_error is None)
    except Exception:  # a broken target: the replay says how
        return False


PROBED_ERRORS = ("KeyError", "IllegalStateError")
"""The errors of complete and fail whose reading of expiry ``probe_expiry_on_error`` learns."""


def probe_expiry_on_error(cls: type[Any]) -> dict[str, bool]:
    """For complete/fail that raise KeyError or IllegalStateError: whether the target
    processed expired leases before raising (the spec leaves it open)."""
    readings = {}
    for kind, job_id in zip(PROBED_ERRORS, ("J9", "J1"), strict=True):
        try:
            clock = SettableClock(10)
            queue = cls(clock, RetryPolicy(2, 1, 1))
            queue.submit("t", "p", 0, 0)
            queue.poll("w", 5)
            clock.now = 15
            with contextlib.suppress(KeyError, RuntimeError):
                queue.complete(job_id, ("never-issued",))
            readings[kind] = queue.view("J1").status.name != "RUNNING"
        except Exception:  # a broken target: the replay says how
            readings[kind] = False
    return readings


class _Run:
    """One target instance driven by explored operations."""

    def __init__(self, cls: type[Any], policy: RetryPolicy, start: int) -> None:
        self.clock = SettableClock(start)
        self.queue = cls(self.clock, policy)
        self.tokens: dict[int, object] = {}

    def apply(self, op: Hashable) -> tuple[Any, str | None]:
        """Run an explored move on the target, as its ``JobOp`` record (a tick sets the
        clock); returns (result, error kind or None)."""
        call = JobSystem.record(op)
        if call is None:
            instant = JobSystem.instant(op)
            assert instant is not None, f"{op!r} is neither a call nor a tick"
            self.clock.now = instant
            return None, None
        return self.run(call)

    def run(self, call: JobOp) -> tuple[Any, str | None]:
        """Run ``call`` with the clock at its instant (unchanged when None) and a model
        token replaced by the target token learned for it (an unknown one by a token
        this queue never issued)."""
        if call.now is not None:
            self.clock.now = call.now
        if any(name == "token" for name, _ in call.args):
            args = tuple((name, self._real(value) if name == "token" else value)
                         for name, value in call.args)  # fmt: skip
            call = JobOp(call.kind, args, call.now)
        try:
            return call.apply(self.queue), None
        except Exception as exc:  # the error kind is compared with the model's
            return None, error_kind(exc)  # ValueError, KeyError, IllegalStateError, or raw

    def _real(self, token: object) -> object:
        assert isinstance(token, int)
        return self.tokens.get(token, ("never-issued", token))

    def learn(self, model_lease: Lease, target: object) -> str | None:
        """Record the target token for a model token; a reused target token is a bug."""
        if not isinstance(target, Lease):
            return None
        if any(target.token == seen for seen in self.tokens.values()):
            return f"poll returned token {target.token!r}, which this queue issued before"
        assert isinstance(model_lease.token, int)
        self.tokens[model_lease.token] = target.token
        return None

    def views(self, state: jm.JobState) -> tuple[list[Any], list[Any]]:
        return target_visible(self.queue, state)

    def frozen(self) -> bytes:
        """This run (clock, queue and learned tokens) as bytes that ``thaw`` copies from;
        a lock the queue keeps becomes a fresh one (none is held between two calls).
        Raises ``NotCopyable`` for a target object pickle refuses."""
        buffer = io.BytesIO()
        try:
            _Pickler(buffer, pickle.HIGHEST_PROTOCOL).dump(self)
        except Exception as error:  # lambdas, threads, sockets: the caller replays paths
            raise NotCopyable(f"{type(error).__name__}: {error}") from error
        return buffer.getvalue()


def thaw(frozen: bytes) -> _Run:
    """An independent copy of the run ``frozen`` was made from."""
    try:
        run = pickle.loads(frozen)
    except Exception as error:  # a target whose state does not unpickle
        raise NotCopyable(f"{type(error).__name__}: {error}") from error
    assert isinstance(run, _Run)
    return run


class NotCopyable(Exception):
    """The target's state cannot be copied; each state is rebuilt by replaying its path."""


_LOCKS = ((type(threading.Lock()), threading.Lock), (type(threading.RLock()), threading.RLock))


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        for kind, make in _LOCKS:
            if isinstance(obj, kind):
                return make, ()
        return NotImplemented


def _compare_result(model: object, target: object) -> str | None:
    if isinstance(model, Lease) and isinstance(target, Lease):
        if lease_differences(target, model) == ({}, {}):
            return None
    elif model == target and type(model) is type(target):
        return None
    return f"it returned {target!r} on the target but {model!r} on the model"


_Visible = tuple[list[Any], list[Any]]


class _ModelViews:
    """``model_visible`` of each model state, computed once per replay (a state is the
    successor of many explored edges), found by the state object's id first (the explorer
    interns its states; each entry keeps its state alive, so no other object takes the id),
    then by its value."""

    def __init__(self) -> None:
        self._known: dict[jm.JobState, _Visible] = {}
        self._by_id: dict[int, tuple[jm.JobState, _Visible]] = {}

    def __call__(self, state: jm.JobState) -> _Visible:
        seen = self._by_id.get(id(state))
        if seen is not None and seen[0] is state:
            return seen[1]
        visible = self._known.get(state)
        if visible is None:
            visible = self._known[state] = model_visible(state)
        self._by_id[id(state)] = (state, visible)
        return visible


def _check(
    run: _Run,
    system: JobSystem,
    edge: Edge[JobWorld],
    result: object,
    error: str | None,
    visible: _ModelViews,
) -> list[str]:
    move = edge.move
    problems = []
    if error != move.error:
        problems.append(f"it raised {error or 'nothing'} on the target but "
                        f"{move.error or 'nothing'} on the model")  # fmt: skip
    else:
        problem = _compare_result(move.result, result)
        if problem:
            problems.append(problem)
    assert isinstance(move.op, tuple), move.op
    kind = move.op[0]
    readings = [move.state.state]
    if move.error is not None and kind in EXPIRING_CALLS:
        readings.append(jm.expire(edge.source.state, system.policy, edge.source.now))
    seen, wanted = run.views(move.state.state), visible(readings[0])
    if all(seen != visible(state) for state in readings):
        problems.append(f"the visible state differs; {_difference(seen, wanted)}")
    elif seen != wanted and kind in ("complete", "fail") and error in system.expire_on_error:
        problems.append(_other_reading(system, kind, error, seen, wanted))
    return problems


EXPIRING_CALLS = ("poll", "complete", "fail")
"""The calls that process expired leases (job-queue.md: "at the start of every poll,
complete and fail ...; the other methods do not process them"): only one of them that
raised may have processed them first, a reading left open."""


def _other_reading(system: JobSystem, kind: str, error: str, seen: Any, wanted: Any) -> str:
    """A complete or fail raised, and the target kept the other reading of expiry than the
    one the model follows (``probe_expiry_on_error``, which also judges a reading by what
    it sees). job-queue.md processes expired leases "at the start of every poll, complete
    and fail, before their own work"; whether a call that then raises keeps that is left
    open, but one queue keeps to one reading: a queue that checks the token before it
    processes expired leases does both (it raises at once on a token it never issued, and
    processes first when the token is the job's own but its lease has lapsed). Reported at
    this call, not at a later one that only shows the state it left. Only where the model's
    reading was learned from the target (an exploration given no readings takes both)."""
    probed = system.expire_on_error[error]
    here, there = ("did not process", "processed") if probed else ("processed", "did not process")
    return (
        f"{kind} raised {error} and {here} the expired leases first; at the start "
        f"of the run, a complete with a token this queue never issued, on a lapsed lease, "
        f'raised {error} and {there} them. job-queue.md processes expired leases "at the start '
        f'of every poll, complete and fail, before their own work"; whether a call that '
        f"then raises keeps that is left open, but not both in one queue; "
        f"{_difference(seen, wanted)}"
    )


def _difference(seen: tuple[list[Any], list[Any]], wanted: tuple[list[Any], list[Any]]) -> str:
    """The part of the visible state that differs: the views, else ``dead_letters()``."""
    if seen[0] != wanted[0]:
        return f"target views: {seen[0]}\n  model views: {wanted[0]}"
    return f"target dead_letters(): {seen[1]}\n  model dead_letters(): {wanted[1]}"


def replay_jobs(
    cls: type[Any], system: JobSystem, explored: ExploreResult[JobWorld]
) -> ConformanceReport:
    """Replay every explored JobQueue transition on ``cls`` (BFS order of the sources)."""
    started = time.perf_counter()
    report = ConformanceReport()
    try:
        run, problem = _fresh(cls, system)
        if problem is not None:
            report.failure = problem
        else:
            _along_tree(cls, system, explored, run, report)
    except NotCopyable as why:
        report = ConformanceReport(rebuilt=str(why))
        _by_paths(cls, system, explored, report)
    report.seconds = time.perf_counter() - started
    return report


def _fresh(cls: type[Any], system: JobSystem) -> tuple[_Run, str | None]:
    """A target at the scope's start state: a new queue, brought to the seed (if any) by
    its setup program, each call's result compared with the model's; then its visible
    state. The failure names the setup call where the two parted."""
    scope = system.scope
    if scope.seed is None:
        return _Run(cls, system.policy, START), None
    run = _Run(cls, system.policy, START)
    steps, world = seed_steps(scope)
    for number, (op, expected) in enumerate(steps, 1):
        result, error = run.apply(op)
        problem = f"it raised {error}" if error else _compare_result(expected, result)
        if problem is None and isinstance(expected, Lease):
            problem = run.learn(expected, result)
        if problem is not None:
            return run, _setup_failure(system, steps[:number], problem)
    seen, wanted = run.views(world.state), model_visible(world.state)
    if seen != wanted:
        problem = f"after the setup the visible state differs; {_difference(seen, wanted)}"
        return run, _setup_failure(system, steps, problem)
    return run, None


def _setup_failure(
    system: JobSystem, steps: Sequence[tuple[Hashable, object]], problem: str
) -> str:
    seed = system.scope.seed
    assert seed is not None
    lines = [
        f"the JobQueue target disagrees with the model while reaching the seed"
        f" {seed.name!r} ({seed.summary}), RetryPolicy({system.policy.max_attempts},"
        f" {system.policy.base_backoff_millis}, {system.policy.max_backoff_millis}):"
    ]
    lines += [f"  {n}. {system.describe_op(op)}" for n, (op, _) in enumerate(steps, 1)]
    lines.append(f"  -> step {len(steps)}: {problem}")
    return "\n".join(lines)


def _along_tree(
    cls: type[Any],
    system: JobSystem,
    explored: ExploreResult[JobWorld],
    fresh: _Run,
    report: ConformanceReport,
) -> None:
    """Each state's target is its parent's with the tree move applied; kept until the
    state's own moves have run (the BFS frontier).

    An operation runs once per distinct (target copy, model state and instant, operation):
    worlds that differ only in what the workers hold share their target's bytes (the
    queue never learns who holds a lease), and the call, the model's answer and the
    successor's views are then the same, so a repeat is already judged. The key holds a
    digest of the copy's bytes (the clock, the queue, the learned tokens), never the bytes,
    and the model state as its object's id (a state's hash walks every job's fields): every
    source world stays alive in ``explored.order`` for the whole replay, so an id names one
    state, and the explorer interns its states, so equal states are one object.
    """
    at: dict[int, _Run] = {0: fresh}
    known, parent, index_of = explored.known, explored.parent, explored.move_index
    visible = _ModelViews()
    judged: set[tuple[bytes, Hashable, int, int]] = set()
    copies: set[bytes] = set()
    for number, source in enumerate(explored.order):
        base = at.pop(number).frozen()
        digest = hashlib.blake2b(base, digest_size=16).digest()
        pairs = zip(system.moves(source), system.expand(source), strict=True)
        for index, (move, (target, _, _)) in enumerate(pairs):
            after = known[target]
            tree = parent[after] == number and index_of[after] == index
            if JobSystem.instant(move.op) is not None:
                if tree:
                    at[after] = run = thaw(base)
                    run.apply(move.op)
                continue
            key = (digest, move.op, id(source.state), source.now)
            first = key not in judged
            if not (first or tree):
                continue
            if first:
                judged.add(key)
                report.transitions += 1
                if digest not in copies:
                    copies.add(digest)
                    report.states += 1
            run = thaw(base)
            edge = Edge(source, move, target)
            problems = _step(run, system, edge, visible)
            if problems:
                path = explored.path_moves(source)
                problems = _confirmed(cls, system, path, edge, visible, problems)
                report.failure = _explain(system, path, edge, problems)
                report.evidence = _evidence(system, path, edge, problems[0])
                return
            if tree:
                at[after] = run


def _confirmed(
    cls: type[Any],
    system: JobSystem,
    path: list[tuple[Move[JobWorld], JobWorld]],
    edge: Edge[JobWorld],
    visible: _ModelViews,
    on_copy: list[str],
) -> list[str]:
    """The disagreement ``on_copy`` (found on a copied target) as a new instance driven
    along the same path shows it; raises ``NotCopyable`` when the new instance agrees with
    the model: the copy, not the target, was wrong."""
    problems = _replay_one(cls, system, path, edge, visible)
    if not problems:
        raise NotCopyable(
            f"a copy of the target behaved unlike a new instance driven along the same path "
            f"(the copy: {on_copy[0].splitlines()[0][:160]})"
        )
    return problems


def _by_paths(
    cls: type[Any], system: JobSystem, explored: ExploreResult[JobWorld], report: ConformanceReport
) -> None:
    """Each source state rebuilt by replaying its BFS path on a fresh target."""
    visible = _ModelViews()
    for source in explored.order:
        path = explored.path_moves(source)
        report.states += 1
        for move in system.moves(source):
            if JobSystem.instant(move.op) is not None:
                continue
            report.transitions += 1
            edge = Edge(source, move, source)
            problems = _replay_one(cls, system, path, edge, visible)
            if problems:
                report.failure = _explain(system, path, edge, problems)
                report.evidence = _evidence(system, path, edge, problems[0])
                return


def _step(run: _Run, system: JobSystem, edge: Edge[JobWorld], visible: _ModelViews) -> list[str]:
    """Run ``edge``'s operation on ``run`` and compare with the model."""
    result, error = run.apply(edge.move.op)
    problems = _check(run, system, edge, result, error, visible)
    if not problems and isinstance(edge.move.result, Lease):
        problem = run.learn(edge.move.result, result)
        problems += [problem] if problem else []
    return problems


def _replay_one(
    cls: type[Any],
    system: JobSystem,
    path: list[tuple[Move[JobWorld], JobWorld]],
    edge: Edge[JobWorld],
    visible: _ModelViews,
) -> list[str]:
    run, problem = _fresh(cls, system)
    if problem is not None:
        return [problem]
    for expected, after in path:
        op = expected.op
        result, error = run.apply(op)
        if error != expected.error:
            return [f"replaying the path, {system.describe_op(op)} raised {error or 'nothing'}"
                    f" on the target but {expected.error or 'nothing'} on the model"]  # fmt: skip
        if isinstance(result, Lease):
            model_lease = Lease(result.job_id, _token_of(after, result.job_id), "", "", 0, 0)
            problem = run.learn(model_lease, result)
            if problem:
                return [problem]
    return _step(run, system, edge, visible)


def _token_of(world: JobWorld, job_id: str) -> int:
    job = next(j for j in world.state.jobs if j.id == job_id)
    assert job.token is not None
    return job.token


def _evidence(
    system: JobSystem,
    path: list[tuple[Move[JobWorld], JobWorld]],
    edge: Edge[JobWorld],
    said: str,
) -> Evidence:
    """The shortest run as evidence: each step on its worker's lane at the model's clock,
    the model's leases after it (the target agreed with every step but the last)."""
    record = Recorder()
    holders: dict[object, str] = {}
    moves = [*path, (edge.move, edge.move.state)]
    for number, (move, after) in enumerate(moves, 1):
        call = JobSystem.record(move.op)
        if call is None:  # the clock moved
            record.event("clock", "clock", after.now, f"t={after.now}")
            continue
        who, arguments = JobSystem.actor(move.op), call.arguments()
        job, token = arguments.get("job_id"), arguments.get("token")
        if isinstance(move.result, Lease):
            job, token = move.result.job_id, move.result.token
            holders[token] = who
        said_here = said if number == len(moves) else None
        expected = f"raises {move.error}" if move.error else f"returns {move.result!r}"
        record.step(
            who, system.describe_op(move.op), call.kind, after.now,
            None if job is None else str(job), token if type(token) is int else None,
            target=said_here, model=expected, call=call.to_json(),
        )  # fmt: skip
        leases = [
            (j.id, j.token, holders.get(j.token, "?"), j.lease_until)
            for j in after.state.jobs
            if j.status.name == "RUNNING" and j.lease_until is not None
        ]
        record.held("model", leases, after.now)
    return record.evidence(said)


def _explain(
    system: JobSystem,
    path: list[tuple[Move[JobWorld], JobWorld]],
    edge: Edge[JobWorld],
    problems: list[str],
) -> str:
    seed = system.scope.seed
    start = "an empty queue" if seed is None else f"the seed {seed.name!r} ({seed.summary})"
    lines = ["the JobQueue target disagrees with the model on an explored transition;",
             f"a shortest run from {start} (RetryPolicy"
             f"({system.policy.max_attempts}, {system.policy.base_backoff_millis},"
             f" {system.policy.max_backoff_millis})):"]  # fmt: skip
    setup = [op for op, _ in seed_steps(system.scope)[0]] if seed is not None else []
    lines += [f"  setup {n}. {system.describe_op(op)}" for n, op in enumerate(setup, 1)]
    ops = [move.op for move, _ in path] + [edge.move.op]
    lines += [f"  {n}. {system.describe_op(op)}" for n, op in enumerate(ops, 1)]
    lines.append(f"step {len(ops)} starts from")
    lines.append(system.describe_state(edge.source))
    lines += [f"  -> {problem}" for problem in problems]
    return "\n".join(lines)
