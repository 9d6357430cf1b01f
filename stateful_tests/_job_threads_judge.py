"""The judge of jobs.threads: what the calls recorded in one round must satisfy.

job-queue.md: "with many threads polling at once, a job is never leased to two
workers at the same time; all methods are safe to call from many threads". The
runner (``stateful_tests.job_threads``) records every call as a ``ThreadCall`` (the
contract's ``JobOp``, who made it, what came back and the instants it read); this module
judges a finished round from those records alone, never from timing:

- poll must never raise, complete and fail only ``IllegalStateError`` (a token
  that is no longer current); no token is handed out twice;
- per job, the leases sorted by attempt must be attempts 1, 2, 3, ... and the
  job's history (each lease, then the successful complete/fail of its holder) is
  replayed on the reference model at the instants the target read: a lease the
  model would not grant then (the job still leased to someone else, or not ready)
  is a double lease; an end the model refuses is a stale token accepted;
- the final ``view`` of every job is the model's (with the last expired leases
  processed or not) and ``dead_letters()`` lists exactly the DEAD ones in order.

Jobs only meet each other in *which* job a poll picks, which is the agreement
machine's business, so per-job histories are a linearization any correct queue
admits.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from leasecheck.models import job_model
from leasecheck.models.evidence import Evidence, Recorder, attach
from leasecheck.models.evidence import Lease as Held
from leasecheck.models.job_model import JobState, ModelJob
from leasecheck.models.job_ops import JobOp
from leasecheck.queue_impl.jobs import IllegalStateError, JobStatus, JobView, Lease, RetryPolicy

__all__ = ["FinishedRound", "ThreadCall", "judge"]


@dataclass
class ThreadCall:
    """One call a worker thread made (``call``: the contract's record; the round's clock
    is shared and moves on its own, so it has no ``now``: ``reads`` are the instants the
    call read), and what came of it."""

    worker: str
    call: JobOp
    lease: Lease | None = None
    """The lease poll returned, or the one complete/fail used."""
    reads: list[int] = field(default_factory=list)
    clock: tuple[int, int] = (0, 0)
    """The clock just before and just after the call."""
    raised: BaseException | None = None

    @classmethod
    def ending(cls, worker: str, method: str, lease: Lease, error: str | None = None) -> ThreadCall:
        """A complete (or, with ``error``, a fail) of ``lease`` by ``worker``."""
        ending = (lease.job_id, lease.token) + ((error,) if method == "fail" else ())
        return cls(worker, JobOp.of(method, *ending), lease)

    @property
    def method(self) -> str:
        return self.call.kind

    def argument(self, name: str) -> Any:
        return self.call.arguments()[name]

    def describe(self) -> str:
        outcome = f"raised {type(self.raised).__name__}" if self.raised else "ok"
        if self.method == "poll" and not self.raised:
            outcome = f"-> {_show(self.lease)}"
        return f"{self.call.describe()} by {self.worker} {outcome} (clock read: {_at(self.reads)})"


def _at(reads: Sequence[int]) -> str:
    """The instants a call read, as the user would write them: t=9, or t=9,10."""
    return "t=" + ",".join(map(str, reads)) if reads else "never"


def _show(lease: Lease | None) -> str:
    if lease is None:
        return "None"
    return (
        f"lease of {lease.job_id} attempt {lease.attempt} token {lease.token!r} "
        f"until t={lease.lease_until}"
    )


@dataclass(frozen=True)
class FinishedRound:
    """What the judge reads of one round: the runner's log and the queue it hammered."""

    seed: int
    threads: int
    policy: RetryPolicy
    log: Sequence[ThreadCall]
    submitted: Sequence[tuple[str, str, str, int]]
    """(job_id, type, payload, priority) of every job, in submission order."""
    queue: Any
    """The hammered queue, read once more (``view``, ``dead_letters``) after the round."""
    final_now: int
    """The clock when the threads had finished."""


def _evidence(summary: str, calls: Sequence[ThreadCall]) -> Evidence:
    """The calls involved, each on its thread's lane at the first clock value it read,
    and the leases the polls among them got (the target's side: no model runs here)."""
    record = Recorder()
    for call in calls:
        at = float(call.reads[0] if call.reads else call.clock[0])
        lease = call.lease
        token = lease.token if lease is not None and type(lease.token) is int else None
        outcome = f"raised {type(call.raised).__name__}" if call.raised else "ok"
        if call.method == "poll" and not call.raised:
            outcome = f"returned {_show(lease)}"
        job = lease.job_id if lease is not None else None
        record.step(call.worker, call.describe(), call.method, at, job, token, target=outcome,
                    call=call.call.to_json())  # fmt: skip
        if call.method == "poll" and lease is not None and call.raised is None:
            held = Held("target", lease.job_id, token, call.worker, at, lease.lease_until)
            record.lease(replace(held, step=record.last))
    return record.evidence(summary)


def judge(finished: FinishedRound) -> None:
    """Check one finished round against the spec; raise AssertionError on the first violation."""
    _Judge(finished).check()


class _Judge:
    """Checks one finished round against the spec; the first violation raises."""

    def __init__(self, finished: FinishedRound) -> None:
        self.round = finished
        self.policy = finished.policy
        self.leases: dict[str, list[ThreadCall]] = defaultdict(list)
        self.ends: dict[str, list[ThreadCall]] = defaultdict(list)
        self.refused: list[ThreadCall] = []
        for call in finished.log:
            if call.method == "poll" and call.lease is not None and call.raised is None:
                self.leases[call.lease.job_id].append(call)
            elif call.method != "poll" and call.raised is None:
                self.ends[call.lease.job_id if call.lease else "?"].append(call)
            elif call.method != "poll":
                self.refused.append(call)

    def check(self) -> None:
        self._errors_allowed()
        self._tokens_unique()
        final_now = self.round.final_now
        views: list[JobView] = []
        for job_id, job_type, payload, priority in self.round.submitted:
            job = ModelJob(job_id, job_type, payload, priority, 0)
            state = self._replay(job_id, JobState(jobs=(job,)))
            views.append(self._final_view(job_id, state, final_now))
        self._refusals()
        self._dead_letters(views)

    def fail(self, what: str, calls: Sequence[ThreadCall] = ()) -> None:
        steps = "\n".join(f"  {n}. {c.describe()}" for n, c in enumerate(calls, 1))
        error = AssertionError(
            f"{what}\n  (jobs.threads round seed {self.round.seed}, "
            f"{self.round.threads} threads, {len(self.round.log)} calls, {self.policy})"
            + (f"\n  the calls involved:\n{steps}" if steps else "")
        )
        raise attach(error, _evidence(what.splitlines()[0], calls))

    def _errors_allowed(self) -> None:
        for call in self.round.log:
            if call.raised is None:
                continue
            if call.method != "poll" and isinstance(call.raised, IllegalStateError):
                continue
            allowed = "nothing" if call.method == "poll" else "only IllegalStateError"
            self.fail(
                f"{call.method} raised {type(call.raised).__name__}({call.raised}) under "
                f"concurrency; with valid arguments the spec allows {allowed} here",
                [call],
            )

    def _tokens_unique(self) -> None:
        seen: dict[Any, ThreadCall] = {}
        unhashable: list[ThreadCall] = []
        for calls in self.leases.values():
            for call in calls:
                assert call.lease is not None
                token = call.lease.token
                try:
                    earlier = seen.get(token) or seen.setdefault(token, call)
                except TypeError:
                    earlier = next(
                        (c for c in unhashable if c.lease and c.lease.token == token), call
                    )
                    unhashable.append(call)
                if earlier is not call:
                    self.fail(
                        f"token {token!r} was handed out twice: every poll must make a "
                        f"token never issued before",
                        [earlier, call],
                    )

    def _replay(self, job_id: str, state: JobState) -> JobState:
        """Replay one job's leases (by attempt) and their holders' ends on the model."""
        polls = sorted(self.leases.get(job_id, []), key=lambda c: _attempt(c))
        attempts = [_attempt(c) for c in polls]
        if attempts != list(range(1, len(polls) + 1)):
            doubled = [c for c in polls if attempts.count(_attempt(c)) > 1]
            self.fail(
                f"job {job_id} was leased with attempts {attempts}; a correct queue "
                f"leases a job to one worker at a time, attempts 1, 2, 3, ...",
                doubled or polls,
            )
        ends = self.ends.get(job_id, [])
        for n, poll in enumerate(polls):
            state = self._grant(job_id, state, poll, polls[:n])
            assert poll.lease is not None
            mine = [c for c in ends if c.lease is not None and c.lease.token == poll.lease.token]
            if len(mine) > 1:
                self.fail(
                    f"job {job_id}'s lease {poll.lease.token!r} was ended twice "
                    f"successfully; only the current lease may end a job",
                    [poll, *mine],
                )
            if mine:
                state = self._end(job_id, state, mine[0], [*polls[: n + 1], mine[0]])
        stray = [c for c in ends if not any(_same_token(c, p) for p in polls)]
        if stray:
            self.fail(
                f"{stray[0].method} of job {job_id} succeeded with a token no poll of "
                f"that job handed out",
                stray,
            )
        return state

    def _grant(
        self, job_id: str, state: JobState, poll: ThreadCall, before: list[ThreadCall]
    ) -> JobState:
        assert poll.lease is not None
        for now in poll.reads or [poll.clock[0]]:
            millis = poll.argument("lease_millis")
            after, lease = job_model.poll(state, self.policy, now, poll.worker, millis)
            if lease is not None and (lease.attempt, lease.lease_until) == (
                poll.lease.attempt,
                poll.lease.lease_until,
            ):
                return after
        job = job_model.expire(state, self.policy, max(poll.reads or [0])).jobs[0]
        verdict = "not ready"
        if job.status is JobStatus.RUNNING:
            verdict = "the same job leased to two workers at the same time"
        self.fail(
            f"job {job_id} was leased to {poll.worker} (attempt {poll.lease.attempt}, until "
            f"t={poll.lease.lease_until}) at {_at(poll.reads)}, but per the spec it was "
            f"{_state(job)} then: {verdict}",
            [*before[-2:], poll],
        )
        raise AssertionError  # unreachable: fail raises

    def _end(
        self, job_id: str, state: JobState, end: ThreadCall, calls: list[ThreadCall]
    ) -> JobState:
        assert end.lease is not None
        token = state.jobs[0].token
        for now in end.reads or [end.clock[0]]:
            try:
                if end.method == "complete":
                    return job_model.complete(state, self.policy, now, job_id, token)
                error = end.argument("error")
                return job_model.fail(state, self.policy, now, job_id, token, error)
            except IllegalStateError:
                continue
        job = job_model.expire(state, self.policy, max(end.reads or [end.clock[0]])).jobs[0]
        self.fail(
            f"{end.method} of job {job_id} by {end.worker} with token {end.lease.token!r} "
            f"succeeded at {_at(end.reads)}, but per the spec that lease was over: {_state(job)}",
            calls[-3:],
        )
        raise AssertionError  # unreachable: fail raises

    def _final_view(self, job_id: str, state: JobState, now: int) -> JobView:
        try:
            got = self.round.queue.view(job_id)
        except Exception as error:
            self.fail(f"view({job_id!r}) raised {type(error).__name__}({error}) after the round")
        readings = [
            job_model.view(state, job_id),
            job_model.view(job_model.expire(state, self.policy, now), job_id),
        ]
        if got not in readings:
            calls = self.leases.get(job_id, []) + self.ends.get(job_id, [])
            self.fail(
                f"after the round view({job_id!r}) is {got} on the target, but replaying its "
                f"calls on the model gives {readings[0]}",
                calls[-4:],
            )
        assert isinstance(got, JobView)
        return got

    def _refusals(self) -> None:
        """A refused complete/fail of a job's last lease, unexpired and never ended, is wrong."""
        for call in self.refused:
            assert call.lease is not None
            polls = self.leases.get(call.lease.job_id, [])
            last = max(polls, key=_attempt, default=None)
            ended = any(_same_token(c, call) for c in self.ends.get(call.lease.job_id, []))
            # The clock *after* the call returned bounds every time any thread read, so
            # this holds even for a target that reads the clock outside its lock.
            if (
                last is not None
                and _same_token(last, call)
                and not ended
                and call.clock[1] < call.lease.lease_until
            ):
                self.fail(
                    f"{call.method} of job {call.lease.job_id} by {call.worker} was refused "
                    f"before t={call.clock[1] + 1} although its lease (until "
                    f"t={call.lease.lease_until}) was the job's current one and had not ended",
                    [last, call],
                )

    def _dead_letters(self, views: list[JobView]) -> None:
        try:
            dead = list(self.round.queue.dead_letters())
        except Exception as error:
            self.fail(f"dead_letters() raised {type(error).__name__}({error}) after the round")
        expected = [view for view in views if view.status is JobStatus.DEAD]
        if dead != expected:
            self.fail(
                f"after the round dead_letters() lists {[getattr(v, 'id', v) for v in dead]}"
                f" but the DEAD jobs in submission order are "
                f"{[v.id for v in expected]}"
            )


def _attempt(call: ThreadCall) -> int:
    assert call.lease is not None
    return call.lease.attempt


def _same_token(a: ThreadCall, b: ThreadCall) -> bool:
    return a.lease is not None and b.lease is not None and a.lease.token == b.lease.token


def _state(job: ModelJob) -> str:
    if job.status is JobStatus.RUNNING:
        return f"RUNNING under an earlier lease until t={job.lease_until}"
    return f"{job.status.name} (attempts {job.attempts}, next run at t={job.run_at})"
