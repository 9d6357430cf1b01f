"""The explorer's moves leave it as the contract's operation records (docs/operations.md).

Inside the search a move is a compact tuple; a replay, a counterexample and its
evidence carry it as a ``LeaseOp`` or a ``JobOp``. These tests pin that the record means
the same call: the model, stepped through the record, gives every explored move's state,
result, error (and hooks), and a failing replay's evidence names each step's call as the
record's JSON.
"""

from __future__ import annotations

from pathlib import Path

from leasecheck.conformance import replay_lease
from leasecheck.job_conformance import replay_jobs
from leasecheck.models import job_model as jm
from leasecheck.models.job_explorer import JOB_SCOPES, JobSystem, explore_jobs
from leasecheck.models.job_ops import JobOp
from leasecheck.models.lease_explorer import SCOPES, LeaseSystem, explore_lease
from leasecheck.models.lease_ops import LeaseOp
from leasecheck.mutants import by_name, materialize
from leasecheck.targets import load_jobs_target, load_worker

SMALL = SCOPES["small"][0]
JOB_SMALL = JOB_SCOPES["small"][0]


def test_every_explored_lease_move_is_its_record_on_the_model() -> None:
    system, result = explore_lease(SMALL)
    checked = 0
    for source, move in system.distinct_moves(result.order):
        call = LeaseSystem.record(move.op)
        if call is None:
            assert move.op[0] == "tick"  # type: ignore[index]
            continue
        after, outcome = call.expect(source.queue)
        error = "fault" if outcome.error == "InjectedFault" else outcome.error
        hooks = outcome.hooks or ()  # a refused call passes no hook
        assert (after, error, hooks) == (move.state.queue, move.error, move.hooks), call
        if move.error is None:
            assert outcome.result == move.result, call
        assert LeaseOp.from_json(call.to_json()) == call
        checked += 1
    assert checked > 1000


def test_a_failing_replay_names_each_call_as_its_record(tmp_path: Path) -> None:
    module = load_worker(materialize(by_name("expiry-off-by-one-finish"), tmp_path))
    system, result = explore_lease(SMALL)
    report = replay_lease(module, system, result, tmp_path / "q.db")
    assert report.failure is not None and report.evidence is not None
    calls = [step.call for step in report.evidence.steps]
    assert calls and all(call is not None and call["contract"] == "lease" for call in calls)
    last = LeaseOp.from_json(calls[-1])  # type: ignore[arg-type]
    assert last.kind == report.evidence.steps[-1].kind


def test_every_explored_job_move_is_its_record_on_the_model() -> None:
    system, result = explore_jobs(JOB_SMALL)
    checked = 0
    for source in result.order:
        for move in system.moves(source):
            call = JobSystem.record(move.op)
            if call is None:
                assert JobSystem.instant(move.op) == move.state.now
                continue
            after, outcome = call.step(source.state, system.policy, system.clear_error)
            # the model processes expired leases before a complete/fail raises; the
            # explorer's default reading does not (conformance accepts both)
            readings = [move.state.state, jm.expire(source.state, system.policy, source.now)]
            assert after in readings[: 1 + (move.error is not None)], call
            assert outcome.error == move.error, call
            if move.error is None:
                assert outcome.result == move.result, call
            assert JobOp.from_json(call.to_json()) == call
            assert JobOp.of(call.kind, *call.positional(), now=call.now) == call
            checked += 1
    assert checked > 1000


def test_a_failing_job_replay_names_each_call_as_its_record(tmp_path: Path) -> None:
    cls = load_jobs_target(materialize(by_name("jobs-ready-boundary"), tmp_path))
    system, result = explore_jobs(JOB_SMALL)
    report = replay_jobs(cls, system, result)
    assert report.failure is not None and report.evidence is not None
    calls = [step.call for step in report.evidence.steps]
    assert calls and all(call is not None and call["contract"] == "jobs" for call in calls)
    last = JobOp.from_json(calls[-1])  # type: ignore[arg-type]
    assert last.kind == report.evidence.steps[-1].kind
