"""The JobQueue operation record: one table, both sides, one line, exact JSON."""

from __future__ import annotations

import inspect
import json
from functools import partial

import pytest

from leasecheck.models import job_model
from leasecheck.models.contracts import JobQueueLike
from leasecheck.models.job_ops import JOB_KINDS, JobOp, JobOutcome
from leasecheck.queue_impl.job_queue import JobQueue
from leasecheck.queue_impl.jobs import JobStatus, JobView, Lease, RetryPolicy

POLICY = RetryPolicy(max_attempts=2, base_backoff_millis=10, max_backoff_millis=40)


@pytest.mark.parametrize("kind", sorted(JOB_KINDS))
def test_the_table_names_the_parameters_of_the_target_and_the_protocol(kind: str) -> None:
    """job-queue.md's methods, read from the bundled JobQueue and from ``JobQueueLike``: a
    new argument that is missing from ``JOB_KINDS`` fails here."""
    for cls in (JobQueue, JobQueueLike, job_model.JobQueueModel):
        params = list(inspect.signature(getattr(cls, kind)).parameters)[1:]  # after self
        assert tuple(params) == JOB_KINDS[kind].params, cls


class Time:
    def __init__(self) -> None:
        self.now = 0

    def now_millis(self) -> int:
        return self.now


PROGRAM = [
    JobOp.of("submit", "email", "x", 1, 0, now=0),
    JobOp.of("submit", " ", None, 1, 0, now=0),
    JobOp.of("poll", "w1", 50, now=5),
    JobOp.of("complete", "J1", "not a token", now=10),
    JobOp.of("view", "J1", now=60),
    JobOp.of("poll", "w2", 50, now=200),
    JobOp.of("view", "J9", now=200),
    JobOp.of("cancel", "J1", now=200),
    JobOp.of("dead_letters", now=300),
]


def test_apply_and_step_agree_on_the_bundled_queue() -> None:
    time = Time()
    queue = JobQueue(time, POLICY)
    state = job_model.JobState()
    for op in PROGRAM:
        time.now = op.now or 0
        got = JobOutcome.running(partial(op.apply, queue))
        state, expected = op.step(state, POLICY)
        if isinstance(got.result, Lease):  # tokens are opaque: only uniqueness counts
            assert isinstance(expected.result, Lease)
            got = (
                JobOutcome(expected.result) if got.result.job_id == expected.result.job_id else got
            )
        assert got.agrees_with(expected), (op.describe(), got, expected)


def test_describe_names_the_arguments_and_the_instant() -> None:
    assert PROGRAM[2].describe() == "poll(worker_id='w1', lease_millis=50) at t=5"
    assert JobOp.of("dead_letters").describe() == "dead_letters()"


def test_ops_and_outcomes_survive_json() -> None:
    for op in PROGRAM:
        assert JobOp.from_json(json.loads(json.dumps(op.to_json()))) == op
    view = JobView("J1", "email", 1, JobStatus.DEAD, 2, 7, "lease expired")
    outcomes = [
        JobOutcome(Lease("J1", 3, "email", "x", 1, 55)),
        JobOutcome([view, view]),
        JobOutcome("J1"),
        JobOutcome(None),
        JobOutcome(error="IllegalStateError", detail="IllegalStateError: stale token"),
    ]
    for outcome in outcomes:
        back = JobOutcome.from_json(json.loads(json.dumps(outcome.to_json())))
        assert back == outcome and type(back.result) is type(outcome.result)


def test_an_error_the_contract_does_not_name_is_recorded_as_unexpected() -> None:
    def boom() -> None:
        raise ZeroDivisionError("x")

    assert JobOutcome.running(boom).error == "unexpected ZeroDivisionError"
