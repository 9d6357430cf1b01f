"""The explorer's memoized fast path explores exactly the graph of the plain one.

The lease and JobQueue systems expand states from per-queue templates and intern
canonical worlds (``models._lease_steps``, ``JobSystem.expand``); the JobQueue replay
copies the target along the BFS tree. These tests pin that none of it changes what is
explored or judged: the edge sequence of the small scopes hashes to the value the
implementation before memoization (commit 1c300b1) gave, ``expand`` agrees with
``moves`` + ``canonical`` + ``check_move`` in every state, and the copying replay and
the path replay give the same report, also on a planted bug.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from leasecheck.conformance import replay_lease
from leasecheck.job_conformance import (
    NotCopyable,
    _Run,
    probe_clear_error,
    probe_expiry_on_error,
    replay_jobs,
)
from leasecheck.models import job_model as jm
from leasecheck.models._lease_system import _Block, _is_live, ticket_dict
from leasecheck.models.explorer import ExploreResult, System, _moves_expansion
from leasecheck.models.job_explorer import JOB_SCOPES, JobWorld, explore_jobs
from leasecheck.models.lease_explorer import SCOPES, LeaseWorld, explore_lease
from leasecheck.models.lease_model import holds_lease
from leasecheck.mutants import by_name, materialize
from leasecheck.queue_impl.jobs import IllegalStateError, JobStatus
from leasecheck.targets import load_jobs_target, load_worker

SMALL_LEASE, SMALL_JOBS = SCOPES["small"][0], JOB_SCOPES["small"][0]
READINGS: tuple[bool, dict[str, bool]] = (False, {"KeyError": False, "IllegalStateError": True})


def _lease_key(world: LeaseWorld) -> tuple[object, ...]:
    rows = tuple(
        (r.id, r.qty, r.status, r.attempts, r.max_attempts, r.token, r.available_at,
         r.deadline, r.owner, r.lease_until, r.reason)
        for r in world.queue.jobs
    )  # fmt: skip
    audits = tuple((r.id, r.token, r.at_ms, r.note) for r in world.queue.redrives)
    return (rows, audits, world.held, world.now)


def _jobs_key(world: JobWorld) -> tuple[object, ...]:
    jobs = tuple(
        (j.id, j.type, j.payload, j.priority, j.run_at, j.status.name, j.attempts,
         j.last_error, j.token, j.lease_until)
        for j in world.state.jobs
    )  # fmt: skip
    return (jobs, world.state.next_token, world.held, world.now, world.retries_left)


def _digest(result: ExploreResult[Any], key: Any) -> str:
    """sha256 of every edge in BFS order, written as plain tuples."""
    digest = hashlib.sha256()
    for e in result.edges:
        fields = (key(e.source), e.move.op, key(e.target), key(e.move.state), e.move.error,
                  e.move.hooks, e.move.counts)  # fmt: skip
        digest.update(repr(fields).encode())
    return digest.hexdigest()[:16]


def test_the_small_lease_graph_is_the_one_before_memoization() -> None:
    _, result = explore_lease(SMALL_LEASE)
    assert (result.states, result.transitions) == (1595, 16221)
    assert _digest(result, _lease_key) == "5ab3010622e2ef8e"  # commit 1c300b1


def test_the_small_jobs_graph_is_the_one_before_memoization() -> None:
    _, result = explore_jobs(SMALL_JOBS, *READINGS)
    assert (result.states, result.transitions) == (3022, 23130)
    assert _digest(result, _jobs_key) == "96f7d2d0b11e3a97"  # commit 1c300b1


def _agrees_in_every_state(system: Any, result: ExploreResult[Any]) -> None:
    plain: System[Any] = system
    for state in result.order:
        fast = list(system.expand(state))
        slow = list(_moves_expansion(plain, state))
        assert fast == slow, system.describe_state(state)


def test_lease_expand_is_moves_canonical_and_check_move() -> None:
    system, result = explore_lease(SMALL_LEASE)
    _agrees_in_every_state(system, result)


def test_jobs_expand_is_moves_canonical_and_check_move() -> None:
    system, result = explore_jobs(SMALL_JOBS, *READINGS)
    _agrees_in_every_state(system, result)


def test_the_lease_replay_asks_each_stored_state_and_operation_once(scratch: Path) -> None:
    system, result = explore_lease(SMALL_LEASE)
    pairs = {(e.source.queue, e.move.op) for e in result.edges if e.move.op[0] != "tick"}  # type: ignore[index]
    report = replay_lease(load_worker(), system, result, scratch / "q.db")
    assert report.failure is None
    assert report.transitions == len(pairs)
    assert report.states == len({queue for queue, _ in pairs})


@pytest.mark.parametrize("mutant", [None, "jobs-ready-boundary"])
def test_copying_and_path_replay_give_the_same_report(scratch: Path, mutant: str | None) -> None:
    cls = load_jobs_target(None if mutant is None else materialize(by_name(mutant), scratch))
    readings = probe_clear_error(cls), probe_expiry_on_error(cls)
    system, result = explore_jobs(SMALL_JOBS, *readings)
    copying = replay_jobs(cls, system, result)

    class Paths:
        """The same target, keeping a lambda (which pickle refuses): replayed by paths."""

        def __init__(self, time: Any, policy: Any) -> None:
            self.inner = cls(time, policy)
            self.hook = lambda: None

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    with pytest.raises(NotCopyable):
        _Run(Paths, system.policy, 100).frozen()
    by_paths = replay_jobs(Paths, system, result)
    assert copying.failure == by_paths.failure
    assert (copying.failure is None) == (mutant is None)
    if mutant is None:  # the path replay runs every transition, the copying one each question once
        assert by_paths.transitions == sum(
            1 for e in result.edges if system.instant(e.move.op) is None
        )
        assert copying.transitions < by_paths.transitions
        assert copying.states <= by_paths.states


_JobQueue: Any = load_jobs_target()


class _Counted(_JobQueue):  # type: ignore[misc]
    """The bundled JobQueue, counting its polls (module level: the replay pickles it)."""

    polls: ClassVar[list[tuple[object, ...]]] = []

    def poll(self, *args: Any) -> Any:
        _Counted.polls.append(args)
        return super().poll(*args)


def test_the_jobs_replay_asks_each_target_copy_and_operation_once() -> None:
    """Worlds that differ only in who holds a lease share their target copy: the copying
    replay runs each (copy, model state, operation) once, not once per explored edge."""
    system, result = explore_jobs(SMALL_JOBS, *READINGS)
    _Run(_Counted, system.policy, 100).frozen()  # copyable: no fallback to path replay
    _Counted.polls.clear()
    report = replay_jobs(_Counted, system, result)
    assert report.failure is None
    calls = [system.record(e.move.op) for e in result.edges]
    polls = sum(1 for call in calls if call is not None and call.kind == "poll")
    assert 0 < len(_Counted.polls) < polls
    assert report.transitions < sum(1 for e in result.edges if system.instant(e.move.op) is None)


def test_job_model_replace_copies_and_refuses_an_unknown_field() -> None:
    """``job_model.replace`` (the explorer's copy of a frozen model record) changes only the
    copy, and a name that is not a field is a TypeError naming it, as in dataclasses."""
    job = jm.ModelJob("J1", "t", "p", 0, 100)
    copy = jm.replace(job, attempts=1, status=JobStatus.RUNNING)
    assert (copy.attempts, copy.status, copy.run_at) == (1, JobStatus.RUNNING, 100)
    assert (job.attempts, job.status) == (0, JobStatus.PENDING)
    with pytest.raises(TypeError, match=r"ModelJob has no fields \['atempts'\]"):
        jm.replace(job, atempts=1)


def test_jobs_at_goal_memo_answers_as_the_jobs_say() -> None:
    """``JobSystem.at_goal`` remembers each model state's finished jobs; for every world of
    the small scope, and for a world on a copy of its state (not interned), it answers
    what the jobs' statuses say."""
    system, result = explore_jobs(SMALL_JOBS, *READINGS)
    final = (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED)
    for world in result.found:
        fresh = JobWorld(jm.replace(world.state), world.held, world.now, world.retries_left)
        for item in ("J1", "J2"):
            expected = any(j.id == item and j.status in final for j in world.state.jobs)
            assert system.at_goal(world, item) is expected
            assert system.at_goal(fresh, item) is expected


def _batches_agree_with_expand(
    system: Any, result: ExploreResult[Any]
) -> Iterator[tuple[Any, Sequence[Any]]]:
    """Checks, in every explored state, that ``expand_batch`` says what ``expand`` says move
    by move (the count, each move's coverage keys; each target listed at its own move, in
    move order, and every target other than the source listed at the first move reaching
    it; no batch means some move breaks an invariant); yields each state with its batch's
    blocks."""
    for world in result.order:
        batch = system.expand_batch(world)
        expansion = list(system.expand(world))
        if batch is None:
            assert any(problem is not None for _, _, problem in expansion)
            continue
        moves, blocks, targets = batch
        assert moves == len(expansion)
        assert [c for block in blocks for c in block.counts] == [c for _, c, _ in expansion]
        firsts: dict[int, int] = {}
        """Per target other than the source (by id): the first move that reaches it."""
        for index, (target, _, problem) in enumerate(expansion):
            assert problem is None
            if target is not world:
                firsts.setdefault(id(target), index)
        listed = [index for index, _ in targets]
        assert listed == sorted(set(listed)), "the batch lists moves in move order, once each"
        for index, target in targets:
            assert expansion[index][0] is target, system.describe_state(world)
        assert set(firsts.values()) <= set(listed), system.describe_state(world)
        yield world, blocks


def test_jobs_expand_batch_is_expand() -> None:
    """The bulk expansion (the search's path, where every stale lease of a worker shares
    one block) says what ``expand`` says move by move: the count, each move's coverage
    keys, and each target (a move left out leads back to its source)."""
    system, result = explore_jobs(SMALL_JOBS, *READINGS)
    leases_of: dict[int, set[object]] = {}
    """Per finish block (by id): the held leases it served."""
    for world, blocks in _batches_agree_with_expand(system, result):
        held = [lease for mine in world.held for lease in mine]
        for lease, block in zip(held, blocks[1:-1], strict=True):
            leases_of.setdefault(id(block), set()).add(lease)
    assert any(len(leases) > 1 for leases in leases_of.values())  # stale ones share a block


@pytest.mark.parametrize("scope", [SMALL_LEASE, SCOPES["ci"][0]], ids=lambda s: s.name)
def test_lease_expand_batch_is_expand(scope: Any) -> None:
    """The lease bulk expansion (held tickets as int codes, moves grouped by where they
    lead, one lookup per group) says what ``expand`` says move by move: the count, each
    move's coverage keys, and each target (a move left out leads back to its source)."""
    system, result = explore_lease(scope)
    grouped = 0
    stale_tickets: dict[int, set[object]] = {}
    """Per stale finish block (by the id of its counts): the tickets it served."""
    for world, blocks in _batches_agree_with_expand(system, result):
        lease_blocks = [block for block in blocks if isinstance(block, _Block)]
        assert len(lease_blocks) == len(blocks)
        grouped += sum(block.moving - len(block.groups) for block in lease_blocks)
        held = [ticket for mine in world.held for ticket in mine]
        for ticket, block in zip(held, lease_blocks[1:-1], strict=True):
            row = world.queue.job(ticket[0])
            if row is None or not _is_live(row, ticket, world.now):
                stale_tickets.setdefault(id(block.counts), set()).add(ticket)
    assert grouped > 0  # some moves shared a lookup
    assert any(len(tickets) > 1 for tickets in stale_tickets.values())  # stale ones share


def test_a_stale_ticket_is_what_the_lease_model_refuses() -> None:
    """``_is_live`` (the explorer's own reading of the spec's current lease, which decides
    that a stale ticket's finishes share a block without a model call) says of every
    ticket held in the ci scope what the model's ``holds_lease`` says."""
    _, result = explore_lease(SCOPES["ci"][0])
    seen = set()
    for world in result.order:
        for ticket in (t for mine in world.held for t in mine):
            row = world.queue.job(ticket[0])
            live = row is not None and _is_live(row, ticket, world.now)
            assert live is holds_lease(world.queue, ticket_dict(ticket), world.now), ticket
            seen.add(live)
    assert seen == {True, False}


def test_a_stale_lease_is_what_the_model_refuses() -> None:
    """``JobSystem._stale`` (no model call) says of every lease held in the small scope
    what the model's complete says: IllegalStateError, or not."""
    system, result = explore_jobs(SMALL_JOBS, *READINGS)
    seen = set()
    for world in result.order:
        steps = system._steps_of(world)
        for mine in world.held:
            for job_id, token, _until in mine:
                try:
                    jm.complete(world.state, system.policy, world.now, job_id, token)
                    refused = False
                except IllegalStateError:
                    refused = True
                assert system._stale(world, job_id, token, steps) is refused
                seen.add(refused)
    assert seen == {True, False}
