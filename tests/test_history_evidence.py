"""The leases of a controlled schedule's evidence (``models.history_evidence``), as data.

A lease-worker schedule (``lease.interleavings``) and a JobQueue one
(``jobs.interleavings``), written by hand: each claim or poll is a lease on its caller's
lane as the target returned it and as the model's own step of the call says (issue 24,
item 3). The axis counts schedule steps: a lease runs until the first call whose clock
passes its end, and ends early at a finish or complete of its token that its side took.
"""

from __future__ import annotations

from leasecheck.crash_harness._interleave_scenarios import NOW, by_name
from leasecheck.models._history import Operation
from leasecheck.models.evidence import Lease
from leasecheck.models.history_evidence import schedule_evidence
from leasecheck.models.job_model import JobState
from leasecheck.models.job_ops import JobOp, JobOutcome
from leasecheck.models.lease_ops import LeaseOp, LeaseOutcome
from leasecheck.queue_impl.jobs import Lease as JobLease
from leasecheck.queue_impl.jobs import RetryPolicy

STEP = 1_000_000


def _at(steps: tuple[int, int]) -> tuple[int, int]:
    return steps[0] * STEP, steps[1] * STEP


def _bars(leases: tuple[Lease, ...]) -> set[tuple[object, ...]]:
    return {(x.side, x.holder, x.job, x.token, x.start, x.until, x.ended) for x in leases}


def test_two_claims_that_both_win_j1_are_two_live_target_leases_and_the_models_own() -> None:
    """Two workers' claims both return j1 with token 1 (the two-winners bug); P1 finishes
    its ticket, and a later enqueue reads a clock past every lease's end. The target's
    leases overlap on j1; the model (stepping the calls in the order they returned) leases
    j1 to P1 and j2 to P2. A finish ends its job's lease under its token at its return, on
    the side that took it: both of the target's (one token), the model's P1 lease."""
    initial = by_name("claim-claim").initial
    claim = LeaseOp.of("claim", owner="w1", now_ms=NOW, lease_ms=1000)
    ticket = claim.expect(initial)[1].result
    assert isinstance(ticket, dict) and ticket["id"] == "j1"
    second = LeaseOp.of("claim", owner="w2", now_ms=NOW, lease_ms=1000)
    finish = LeaseOp.of("finish", ticket=ticket, outcome="ok", now_ms=NOW)
    enqueue = LeaseOp.of("enqueue", event={"id": "j9", "qty": 1}, now_ms=NOW + 5000, ttl_ms=1)
    history = [
        Operation("P1", 1, claim, *_at((0, 3)), LeaseOutcome(ticket)),
        Operation("P2", 1, second, *_at((1, 4)), LeaseOutcome({**ticket, "owner": "w2"})),
        Operation("P1", 2, finish, *_at((5, 6)), LeaseOutcome("done")),
        Operation("P3", 1, enqueue, *_at((7, 8)), LeaseOutcome(True)),
    ]
    evidence = schedule_evidence(history, "two winners", STEP, "process", initial)
    assert _bars(evidence.leases) == {
        ("target", "P1", "j1", 1, 0.0, 7.0, 6.0),
        ("target", "P2", "j1", 1, 1.0, 7.0, 6.0),
        ("model", "P1", "j1", 1, 0.0, 7.0, 6.0),
        ("model", "P2", "j2", 1, 1.0, 7.0, None),
    }
    claims = {s.actor: s.index for s in evidence.steps if s.kind == "claim"}
    assert {(x.holder, x.step) for x in evidence.leases} == set(claims.items())
    assert not schedule_evidence(history, "no model", STEP, "process").leases


def test_two_polls_that_both_lease_j1_are_two_live_target_leases_and_one_of_the_model() -> None:
    """T2's poll returns first (J1, token 1), T1's also gets J1 (token 2: the double
    lease); T1 completes with its token, which the target takes and the model refuses (in
    the model J1's lease is T2's). A view at t=200 passes both leases' end (110)."""
    submit = JobOp.of("submit", "email", "p", 1, 0, now=0)
    poll = JobOp.of("poll", "T1", 100, now=10)
    other = JobOp.of("poll", "T2", 100, now=10)
    complete = JobOp.of("complete", "J1", 2, now=20)
    view = JobOp.of("view", "J1", now=200)
    first, second = (JobLease("J1", token, "email", "p", 1, 110) for token in (2, 1))
    history = [
        Operation("prefix", 1, submit, *_at((0, 1)), JobOutcome("J1")),
        Operation("T1", 1, poll, *_at((2, 5)), JobOutcome(first)),
        Operation("T2", 1, other, *_at((3, 4)), JobOutcome(second)),
        Operation("T1", 2, complete, *_at((6, 7)), JobOutcome(None)),
        Operation("harness", 1, view, *_at((8, 9)), JobOutcome(None)),
    ]  # fmt: skip
    evidence = schedule_evidence(history, "double lease", STEP, "thread", JobState(),
                                 RetryPolicy(3, 10, 100))  # fmt: skip
    assert _bars(evidence.leases) == {
        ("target", "T1", "J1", 2, 2.0, 8.0, 7.0),
        ("target", "T2", "J1", 1, 3.0, 8.0, None),
        ("model", "T2", "J1", 1, 3.0, 8.0, None),
    }
