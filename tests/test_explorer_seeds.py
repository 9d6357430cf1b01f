"""Seeded start states and the depth bound: what the explorer's bigger scope reaches.

The seeded parts of ``JOB_SCOPES`` and ``SCOPES`` (``docs/explorer.md``) start near the
bounds and are explored to a bounded depth. These tests pin what that proves: the
seeds are the states their docs describe, a depth bound is honoured and still counts
as exhausted, lease seeds keep their absolute times, and the JOB_SCOPE and LEASE_SCOPE
mutants are caught by a seeded part and survive every exhaustive one (the kill table,
``tests/test_mutant_catalogue.py``, checks the whole ``leasecheck check`` run).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from leasecheck.explore import check_jobs_part, check_lease_part
from leasecheck.models import edges
from leasecheck.models.job_explorer import JOB_SCOPES, explore_jobs, seed_steps
from leasecheck.models.lease_explorer import SCOPES, explore_lease
from leasecheck.models.lease_model import MAX_NOW
from leasecheck.mutants import by_name, materialize
from leasecheck.mutants.spec_bugs import JOB_SCOPE, LEASE_SCOPE
from leasecheck.queue_impl.jobs import JobStatus
from leasecheck.targets import load_jobs_target, load_worker

JOB_PARTS = {part.name: part for part in JOB_SCOPES["ci"]}
CROWD, LAST = JOB_PARTS["jobs-ci-crowd"], JOB_PARTS["jobs-ci-last-attempt"]
LEASE_PARTS = {part.name: part for part in SCOPES["ci"]}


def test_the_crowd_seed_is_a_dozen_jobs_ten_of_them_ready() -> None:
    _, world = seed_steps(CROWD)
    jobs = {job.id: job for job in world.state.jobs}
    assert list(jobs) == [f"J{n}" for n in range(1, 13)]
    assert (jobs["J1"].status, jobs["J1"].attempts) == (JobStatus.RUNNING, 4)
    assert (jobs["J2"].status, jobs["J2"].attempts) == (JobStatus.PENDING, 2)
    ready = [
        j.id for j in world.state.jobs if j.status is JobStatus.PENDING and j.run_at <= world.now
    ]
    assert ready == [f"J{n}" for n in range(3, 13)]
    policy = CROWD.policy
    assert policy.max_attempts == edges.JOB_RANGES["max_attempts"].high
    assert all(policy.base_backoff_millis * 2**k != policy.max_backoff_millis for k in range(8))
    assert world.held == ((("J1", jobs["J1"].token, jobs["J1"].lease_until),), ())


def test_the_last_attempt_seed_has_a_power_of_two_cap() -> None:
    _, world = seed_steps(LAST)
    first = world.state.jobs[0]
    assert (first.status, first.attempts) == (JobStatus.RUNNING, LAST.max_attempts)
    base, cap = LAST.base_backoff, LAST.max_backoff
    assert base == edges.JOB_RANGES["base_backoff_millis"].high and cap == base * 2**3


def test_a_depth_bound_is_honoured_and_counts_as_exhausted() -> None:
    _, result = explore_jobs(replace(CROWD, max_depth=2))
    assert result.violation is None and result.exhausted and result.depth == 2
    assert result.expanded < result.states  # the states at depth 2 are checked, not expanded
    _, deeper = explore_jobs(replace(CROWD, max_depth=3))
    assert deeper.states > result.states and deeper.depth == 3


def test_the_seeded_parts_reach_the_scope_they_describe() -> None:
    _, result = explore_jobs(CROWD)
    assert result.ok, result.missing
    assert result.coverage["error:ValueError"] > 0 and result.coverage["result:expired"] > 0
    assert "J13" in {job.id for world in result.found for job in world.state.jobs}
    assert "12 jobs" in CROWD.describe() and "4 moves deep" in CROWD.describe()
    assert "cap between base * 2**2 and base * 2**3" in CROWD.describe()
    assert "cap = base * 2**3" in LAST.describe()
    _, last = explore_jobs(LAST)
    dead = [w for w in last.found if w.state.jobs[0].status is JobStatus.DEAD]
    assert last.ok and dead and all(w.state.jobs[0].attempts == 6 for w in dead)


def test_lease_seeds_keep_absolute_times_and_never_pass_the_clock_top() -> None:
    part = LEASE_PARTS["seed-near-clock-top"]
    _, result = explore_lease(part)
    assert result.ok and result.exhausted
    now, queue = edges.LEASE_STARTS["near-clock-top"]
    start = result.found[0]  # canonical: the dispatchers may be renamed, times are kept
    times = [(r.available_at, r.deadline, r.lease_until) for r in start.queue.jobs]
    assert start.now == now == MAX_NOW
    assert times == [(r.available_at, r.deadline, r.lease_until) for r in queue.jobs]
    assert all(world.now <= MAX_NOW for world in result.found)
    assert result.coverage["error:ValueError"] > 0
    assert "times absolute" in part.describe()


@pytest.mark.parametrize("mutant", JOB_SCOPE, ids=lambda m: m.name)
def test_job_scope_mutants_are_caught_by_a_seeded_part(mutant: object, scratch: Path) -> None:
    target = load_jobs_target(materialize(mutant, scratch))  # type: ignore[arg-type]
    problems = {name: check_jobs_part(target, part).problem for name, part in JOB_PARTS.items()
                if part.seed is not None}  # fmt: skip
    assert any(problems.values()), problems


@pytest.mark.parametrize("name", ["jobs-cap-as-last-doubling", "jobs-ids-compared-as-strings"])
def test_job_scope_mutants_survive_the_exhaustive_parts(name: str, scratch: Path) -> None:
    target = load_jobs_target(materialize(by_name(name), scratch))
    for part in JOB_PARTS.values():
        if part.seed is None:
            assert check_jobs_part(target, part).problem is None, part.name


def test_a_disagreement_while_reaching_a_seed_names_the_setup_step(scratch: Path) -> None:
    target = load_jobs_target(materialize(by_name("jobs-attempts-capped-at-five"), scratch))
    problem = check_jobs_part(target, LAST).problem
    assert problem is not None
    assert "while reaching the seed 'last-attempt'" in problem
    assert problem.splitlines()[-1].startswith("  -> step 17: it returned None on the target")


@pytest.mark.parametrize("mutant", LEASE_SCOPE, ids=lambda m: m.name)
def test_lease_scope_mutants_are_caught_only_from_a_seed(mutant: object, scratch: Path) -> None:
    module = load_worker(materialize(mutant, scratch))  # type: ignore[arg-type]
    verdicts = {name: check_lease_part(module, part, scratch).problem is None
                for name, part in LEASE_PARTS.items()}  # fmt: skip
    assert verdicts["ci-1job"] and verdicts["ci-2jobs"], verdicts
    assert not verdicts["seed-one-below-budget"], verdicts
