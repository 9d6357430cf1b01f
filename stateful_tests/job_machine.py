"""``JobAgreement``: a JobQueue target and the reference model, driven side by side.

The shape follows Hypothesis' ``tests/nocover/test_database_agreement.py``: every
rule applies one queue operation (``submit``, ``poll``, ``complete``, ``fail``,
``view``, ``dead_letters``, ``retry_dead``, ``cancel``) to the target and to
``JobQueueModel`` and compares the results and exception classes; ``advance_clock``
moves the one fake clock both read; the views of all jobs and ``dead_letters()`` are
compared after every step, in one place (``views_agree``). A shrunk failure
therefore reads like a script::

    state = JobAgreement()
    state.start(policy=RetryPolicy(max_attempts=1, base_backoff_millis=1, max_backoff_millis=1))
    state.submit(type='email', payload=None, priority=0, run_at_millis=0)
    leases_0 = state.poll(worker='w1', lease_millis=1)
    state.advance_clock(to='lease_until', offset=0)
    state.teardown()

Bind the target class before running (the CLI's exported reproducers do the same)::

    JobAgreement.bind(load_jobs_target("path/to/job_queue.py"))

Readings job-queue.md leaves open are accepted, not guessed: a call that raises may
or may not have processed expired leases first (the machine continues from the
model state that matches the target); whether ``retry_dead`` clears ``last_error``
is learnt from the target at its first ``retry_dead``; tokens are opaque, so target
tokens are mapped to model tokens through a bijection built at each ``poll``.
Arguments of types the spec leaves open (bool or non-int priority, non-str worker,
...) are never generated.
"""

from __future__ import annotations

import functools
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NoReturn

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    initialize,
    multiple,
    precondition,
    rule,
)

from leasecheck.models import edges, job_model
from leasecheck.models.evidence import Recorder, attach
from leasecheck.models.job_model import JobQueueModel, JobState, ModelJob, expire
from leasecheck.models.job_ops import JobOp
from leasecheck.queue_impl.jobs import JobStatus, JobView, Lease, RetryPolicy
from leasecheck.stateful_tests.program import check
from leasecheck.targets.job_compare import SPEC_ERRORS, brief, error_kind, lease_differences, said

__all__ = [
    "MAX_ATTEMPTS", "MAX_JOBS", "MIN_STEPS", "Backlog", "JobAgreement", "ManualTime", "RetryPolicy",
    "agreement_budget",
]  # fmt: skip

START_MILLIS = 0
DEFAULT_POLICY = RetryPolicy(max_attempts=2, base_backoff_millis=10, max_backoff_millis=40)
MAX_JOBS = 12
"""Enough for ids past J9 (J10, J12) and for tie-breaks among a dozen ready jobs."""
TABLE_ROWS = MAX_JOBS
"""Jobs a failure's table shows whole; past them it shows the jobs whose views differ."""
MIN_STEPS = 40
"""The shortest step budget jobs.agreement runs: JobQueue is in memory, so a step costs
microseconds, and the deeper bugs (a capped backoff after a job's second failure, two
dead letters in order) need programs that long to be reached on every seed."""


def agreement_budget(max_examples: int, step_count: int) -> tuple[int, int]:
    """(programs, steps) jobs.agreement runs for a profile's examples and steps: 6/5 of
    the examples, at least ``MIN_STEPS`` steps (ci: 1,200 programs of up to 40 steps)."""
    return max_examples * 6 // 5, max(step_count, MIN_STEPS)


def _weighted(common: Sequence[Any], rare: Sequence[Any]) -> st.SearchStrategy[Any]:
    """One ``sampled_from`` draw: ``common`` about five draws in six, ``rare`` the rest.

    One choice per argument keeps steps cheap to shrink; the first common value is the
    simplest, which is where Hypothesis shrinks to.
    """
    copies = max(1, round(5 * len(rare) / len(common)))
    return st.sampled_from([*list(common) * copies, *rare])


def _mostly(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> Any:
    """``common`` about five draws in six, ``rare`` the rest (for strategies, not values)."""
    return st.integers(min_value=0, max_value=5).flatmap(lambda i: rare if i == 5 else common)


JOB_TYPES = _weighted(["email", "invoice"], edges.BLANK_TEXTS)
PAYLOADS = _weighted(["to=a@b.c", ""], [None])
PRIORITIES = _weighted([0, 1], [-1, 2, 3])
RUN_ATS = _weighted([0, 0, 5, 10], range(0, 151, 3))
WORKERS = _weighted(["w1", "w2"], [None, "", " "])
LEASE_MILLIS = _weighted(range(1, 41), [0, -5])
JOB_IDS = _weighted(["J1", "J2", "J3"], ["J0", "J9", "j1", "", "J10", "J12", "J13"])
OTHER_JOB = _weighted([None], ["J1", "J2", "J3", "J0", "j1"])
"""``None``: the lease's own job; else complete/fail names this job with the lease's token."""
MADE_UP_TOKENS = st.sampled_from([0, 1, 2, -1, "1", "forged", None])
ERRORS = st.sampled_from(["boom", None, "timeout"])


MAX_ATTEMPTS = edges.JOB_RANGES["max_attempts"].high
ATTEMPTS = _weighted([1, 2, 3, MAX_ATTEMPTS], range(4, MAX_ATTEMPTS))
"""max_attempts: mostly small (jobs die within a program), and often the top of the
range, 6 (backoff reaches base * 2**4 before the last attempt)."""


BASES = _weighted([1, 5, 10], range(1, 51))
POWERS = {attempts: st.integers(0, max(0, attempts - 2)) for attempts in range(1, MAX_ATTEMPTS + 1)}
"""k for a policy of ``attempts``: the cap base * 2**k is met by the backoff after
attempt k + 1, which a policy has only when k + 1 <= attempts - 1."""


@functools.cache
def _caps(base: int, power: int) -> st.SearchStrategy[int]:
    """The three caps of ``_policies`` for ``base`` and ``power``, built once per pair."""
    return st.sampled_from([power, power + max(1, power // 2), base * 2**6])


@st.composite
def _policies(draw: st.DrawFn) -> RetryPolicy:
    """Policies whose cap is exactly base * 2**k (the cap binds at attempt k + 1), lies
    between two powers (it binds mid-way), or is never reached within 6 attempts; k is
    drawn among the attempts that have a backoff, so the cap binds (the spec's
    ``min(max_backoff, ...)``) before the last attempt of most policies that retry.
    (The strategies are built once: a new ``sampled_from`` of 150 values per example
    cost more than the rest of the example's start, and even one of three values is
    validated before its first draw.)"""
    attempts = draw(ATTEMPTS)
    base = draw(BASES)
    power = base * 2 ** draw(POWERS[attempts])
    cap = draw(_caps(base, power))
    return RetryPolicy(attempts, base, cap)


POLICIES = _policies()


@dataclass(frozen=True)
class Backlog:
    """A start state: ``jobs`` jobs submitted first, then the best job polled and failed
    ``failures`` times (at most max_attempts - 1), the clock moved to its retry each time.
    Of a dozen jobs ten are ready at t=0, all but two (J5, J10) of one priority, so the
    first polls break ties among ten ready jobs, ids past J9 among them; J4 and J9 get
    ready later. Prints as a constructor call."""

    jobs: int = 0
    failures: int = 0

    def __repr__(self) -> str:
        return f"Backlog({self.jobs}, {self.failures})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


NO_BACKLOG = Backlog()
BACKLOGS = _weighted([Backlog(), Backlog(1, 5)], [Backlog(MAX_JOBS), Backlog(MAX_JOBS, 5)])
"""Often a job already at its last attempt (a state near the attempt bound, where the
backoff has met the cap): a program seldom fails one job five times by itself."""
LEASES = Bundle("leases")
"""Every lease the target ever handed out (current and stale), for complete/fail."""
BOUNDARIES = st.sampled_from(["lease_until", "lease_until", "run_at", "now"])
OFFSETS = _weighted([0, 0, -1, 1], range(2, 151, 4))


def travelled(token: object) -> object:
    """``token`` as a worker may hand it back after it crossed a process or a wire: an equal
    object of the same type that is not the same object (a pickled copy), where there is
    one; else ``token`` itself. job-queue.md: of a token "only uniqueness and equality
    count", so a queue that compares tokens with ``is`` refuses the copy (for ints, once
    they pass CPython's cached small ones)."""
    try:
        copy = pickle.loads(pickle.dumps(token))
        equal = type(copy) is type(token) and bool(copy == token)
    except Exception:
        return token
    return copy if equal else token


class ManualTime:
    """The shared fake ``TimeSource``: ``now`` is set by ``advance_clock``, never by reading."""

    def __init__(self, now: int = START_MILLIS) -> None:
        self.now = now

    def now_millis(self) -> int:
        return self.now


class _NeverIssued:
    """The model-side stand-in for a made-up token that no poll of the target issued."""

    def __repr__(self) -> str:
        return "<a token never issued>"


NEVER_ISSUED = _NeverIssued()


def _has_jobs(machine: JobAgreement) -> bool:
    """Rules other than submit start once a job exists (so examples do not idle on nothing)."""
    return bool(machine.model.state.jobs)


def _has_room(machine: JobAgreement) -> bool:
    """At most ``MAX_JOBS`` jobs: a few jobs meet each other far more often than many."""
    return len(machine.model.state.jobs) < MAX_JOBS


def _has_live_jobs(machine: JobAgreement) -> bool:
    """cancel waits for a PENDING or RUNNING job (its ids still hit every other state)."""
    live = (JobStatus.PENDING, JobStatus.RUNNING)
    return any(job.status in live for job in machine.model.state.jobs)


def _has_dead_jobs(machine: JobAgreement) -> bool:
    """retry_dead and dead_letters wait for a dead letter (views_agree checks [] every step)."""
    return any(job.status is JobStatus.DEAD for job in machine.model.state.jobs)


def _has_leases(machine: JobAgreement) -> bool:
    return bool(machine.tokens)


class JobAgreement(RuleBasedStateMachine):
    """Run the same JobQueue operations on a bound target class and on the model."""

    target_class: ClassVar[type[Any] | None] = None
    first_failure_at: ClassVar[float | None] = None
    """``time.perf_counter()`` at the first disagreement seen (time to detection)."""
    leases = LEASES
    observers = Bundle("observers")
    """Never filled. Hypothesis draws the rules it orders first more often, orders rules
    with a target after those without, and shrinks steps towards the first rule;
    targeting this moves advance_clock, view, dead_letters, retry_dead and cancel
    behind poll, so examples spend their steps on leases and shrunk programs do not
    fill up with no-op clock moves."""

    @classmethod
    def bind(cls, target_class: type[Any]) -> None:
        """Check ``target_class`` (a ``JobQueue`` from ``load_jobs_target``) from now on."""
        cls.target_class = target_class

    def __init__(self) -> None:
        super().__init__()
        if self.target_class is None:
            raise RuntimeError(
                "JobAgreement has no target; call "
                "JobAgreement.bind(load_jobs_target(path)) before running it"
            )
        self.time = ManualTime()
        self.step = 0
        self.last_call = "JobAgreement()"
        self.tokens: list[tuple[object, int]] = []
        """(target token, model token) for every lease handed out, in poll order."""
        self.error_reading_learnt = False
        self.record = Recorder()
        """What each step did on both sides, attached to a failure as its evidence."""
        self.doing: tuple[str, str | None, object] | None = None
        """(who runs it, job, model token) of the step about to be recorded."""
        self.held: dict[str, tuple[int | None, str, int]] = {}
        """job -> (model token, worker, lease_until) of the lease the target handed out."""
        self.holders: dict[object, str] = {}
        """model token -> the worker whose poll got it (stale tokens too)."""
        self._views: dict[int, tuple[ModelJob, JobView]] = {}
        """id(model job) -> (that job, its view): ``_model_views``' cache."""
        self.backlog_calls: list[str] = []
        """The calls a ``Backlog`` start made, which its program shows only as
        ``Backlog(jobs, failures)``: every failure lists them."""
        self._starting = False
        self._open(DEFAULT_POLICY)

    def _open(self, policy: RetryPolicy) -> None:
        assert self.target_class is not None
        self.policy = policy
        beside = self._another_queue(policy)
        self.target = self.target_class(self.time, policy)
        self.model = JobQueueModel(self.time, policy)
        if beside:
            self._check_apart()

    def _another_queue(self, policy: RetryPolicy) -> bool:
        """A queue beside the target, with one job: whether its submit worked."""
        assert self.target_class is not None
        try:
            self.target_class(ManualTime(), policy).submit("email", "another queue's", 0, 0)
        except Exception:  # a broken submit: the rules compare it
            return False
        return True

    def _check_apart(self) -> None:
        """The target was made after another queue got a job, and holds none: each
        JobQueue holds only the jobs submitted to it, its ids start at "J1" and an unknown
        id is a ``KeyError`` (job-queue.md). A job table that every queue shares (a class
        attribute, a module global) fails here, in every program alike, and so as a
        finding: left to a later program, it would read as Hypothesis' complaint that the
        same program ran differently twice."""
        try:
            first = self.target.view("J1")
        except KeyError:
            first = None
        except Exception:  # any other error: the invariant compares every view anyway
            return
        dead = self._target_dead_letters()
        if first is not None or dead:
            self._fail(
                f"a new JobQueue holds another queue's job: after JobQueue(...).submit("
                f"'email', \"another queue's\", 0, 0) on a second queue, view('J1') is "
                f"{brief(first)} and dead_letters() lists "
                f"{[getattr(view, 'id', view) for view in dead]} on the target, before any "
                f"call to it; each JobQueue holds only the jobs submitted to it (ids start at "
                f"'J1'): state shared between queues (a class attribute, a module global) "
                f"would do this"
            )

    # --- the rules: one queue operation each ---------------------------------------------

    @initialize(target=leases, policy=POLICIES, backlog=BACKLOGS)
    def start(self, policy: RetryPolicy, backlog: Backlog = NO_BACKLOG) -> MultipleResults[Any]:
        """A fresh target and model with this retry policy, and the ``backlog`` start.

        The backlog's leases (stale once failed) go into ``leases`` like any poll's, so
        complete/fail can draw them from the first step (``_has_leases`` holds from then:
        an empty bundle there would abort the program).
        """
        self._open(policy)
        self._starting = True
        try:
            return self._backlog(policy, backlog)
        finally:
            self._starting = False

    def _backlog(self, policy: RetryPolicy, backlog: Backlog) -> MultipleResults[Any]:
        for n in range(backlog.jobs):
            self.submit("email", f"p{n}", int(n % 5 == 4), 5 + n if n % 5 == 3 else 0)
        handed_out: list[Lease] = []
        for _ in range(min(backlog.failures, policy.max_attempts - 1)):
            lease = self.poll("w1", 5)
            if not isinstance(lease, Lease):
                break
            handed_out.append(lease)
            self.fail(lease, None, "boom")
            retry = next(job for job in self.model.state.jobs if job.id == lease.job_id)
            self.time.now = max(self.time.now, retry.run_at)
        return multiple(*handed_out)

    @precondition(_has_room)
    @rule(
        target=observers,
        type=JOB_TYPES,
        payload=PAYLOADS,
        priority=PRIORITIES,
        run_at_millis=RUN_ATS,
    )
    def submit(
        self, type: str | None, payload: str | None, priority: int, run_at_millis: int
    ) -> MultipleResults[Any]:
        op = self._op("submit", type, payload, priority, run_at_millis)
        self.doing = ("queue", None, None)
        outcome = self._both(op)
        if outcome is not None and outcome[0] != outcome[1]:
            self._fail(
                f"{op.describe()} returned job id {outcome[0]!r} on the target but {outcome[1]!r} "
                f"on the model (ids are J1, J2, ... in submission order)"
            )
        return multiple()

    @precondition(_has_jobs)
    @rule(target=leases, worker=WORKERS, lease_millis=LEASE_MILLIS)
    def poll(self, worker: str | None, lease_millis: int) -> object:
        op = self._op("poll", worker, lease_millis)
        call = op.describe()
        self.doing = (worker if isinstance(worker, str) else "?", None, None)
        outcome = self._both(op, expiring=True)
        if outcome is None or (outcome[0] is None and outcome[1] is None):
            return multiple()
        target_lease, model_lease = outcome
        if target_lease is None or model_lease is None:
            self._fail(
                f"{call} returned {target_lease!r} on the target but {model_lease!r} on the model"
            )
        self._check_lease(call, target_lease, model_lease)
        self._leased(worker, target_lease, model_lease)
        return target_lease

    @precondition(_has_leases)
    @rule(target=observers, lease=_mostly(LEASES, MADE_UP_TOKENS), job_id=OTHER_JOB)
    def complete(self, lease: object, job_id: str | None) -> MultipleResults[Any]:
        """Complete with ``lease``'s token (current or stale) or a made-up token.

        ``job_id`` None means the lease's own job (J1 for a made-up token).
        """
        job, token, model_token = self._credentials(lease, job_id)
        self._finishing(job, model_token, token)
        op = self._op("complete", job, token)
        self._both(op, op.replaced(token=model_token), expiring=True)
        return multiple()

    @precondition(_has_leases)
    @rule(target=observers, lease=_mostly(LEASES, MADE_UP_TOKENS), job_id=OTHER_JOB, error=ERRORS)
    def fail(self, lease: object, job_id: str | None, error: str | None) -> MultipleResults[Any]:
        """Fail with ``lease``'s token (current or stale) or a made-up token, like ``complete``."""
        job, token, model_token = self._credentials(lease, job_id)
        self._finishing(job, model_token, token)
        op = self._op("fail", job, token, error)
        self._both(op, op.replaced(token=model_token), expiring=True)
        return multiple()

    @precondition(_has_jobs)
    @rule(target=observers, job_id=JOB_IDS)
    def view(self, job_id: str) -> MultipleResults[Any]:
        op = self._op("view", job_id)
        self.doing = ("queue", job_id, None)
        outcome = self._both(op)
        if outcome is not None and outcome[0] != outcome[1]:
            self._fail(
                f"{op.describe()} returned {brief(outcome[0])} on the target but "
                f"{brief(outcome[1])} on the model"
            )
        return multiple()

    @precondition(_has_dead_jobs)
    @rule(target=observers)
    def dead_letters(self) -> MultipleResults[Any]:
        op = self._op("dead_letters")
        self.doing = ("queue", None, None)
        returned: list[object] = []

        def on_target() -> list[Any]:
            result = op.apply(self.target)
            returned.append(result)
            return list(result)

        outcome = self._both(op, target=on_target)
        if outcome is not None:
            self._compare_dead_letters(op.describe(), outcome[0], outcome[1])
        if returned and isinstance(returned[0], list) and returned[0]:
            # The list is the caller's now, and a caller may empty it: the next call must
            # list every DEAD job again (a queue that hands out a list it keeps lists none).
            returned[0].clear()
            self._compare_dead_letters(
                "dead_letters(), called again after its caller emptied the list the first call "
                "returned,", self._target_dead_letters(), self.model.dead_letters(),
            )  # fmt: skip
        return multiple()

    @precondition(_has_dead_jobs)
    @rule(target=observers, job_id=JOB_IDS)
    def retry_dead(self, job_id: str) -> MultipleResults[Any]:
        self.doing = ("queue", job_id, None)
        self._both(self._op("retry_dead", job_id), lambda: self._model_retry_dead(job_id))
        return multiple()

    @precondition(_has_live_jobs)
    @rule(target=observers, job_id=JOB_IDS)
    def cancel(self, job_id: str) -> MultipleResults[Any]:
        self.doing = ("queue", job_id, None)
        self._both(self._op("cancel", job_id))
        return multiple()

    @precondition(_has_jobs)
    @rule(target=observers, to=BOUNDARIES, offset=OFFSETS)
    def advance_clock(self, to: str, offset: int) -> MultipleResults[Any]:
        """Move the clock to ``offset`` ms after the next ``lease_until``/``run_at``, or ``now``.

        "Next" is the earliest boundary of a RUNNING (lease_until) or PENDING (run_at)
        job that still lies ahead once ``offset`` is added; time never moves backwards.
        """
        self._record(f"advance_clock(to={to!r}, offset={offset!r})", None)
        now, jobs = self.time.now, self.model.state.jobs
        ahead: list[int | None] = [now]
        if to == "lease_until":
            ahead = [job.lease_until for job in jobs if job.status is JobStatus.RUNNING]
        elif to == "run_at":
            ahead = [job.run_at for job in jobs if job.status is JobStatus.PENDING]
        later = sorted(at + offset for at in ahead if at is not None and at + offset > now)
        if later:
            self.time.now = later[0]
        self.record.event(
            "clock", "clock", self.time.now, f"to {to} {offset:+d}: t={self.time.now}"
        )
        return multiple()

    def teardown(self) -> None:
        """Nothing to remove: the target and model live in memory and die with the machine."""

    # --- agreement, checked in one place -------------------------------------------------

    @check
    def views_agree(self) -> None:
        """After every step the views of all jobs and ``dead_letters()`` agree."""
        self._note_leases()
        for expected in self._model_views():
            try:
                got = self.target.view(expected.id)
            except Exception as error:
                self._fail(
                    f"view({expected.id!r}) raised {type(error).__name__}({error}) on the "
                    f"target but returned {brief(expected)} on the model"
                )
            if got != expected:
                self._fail(
                    f"view({expected.id!r}) is {brief(got)} on the target but "
                    f"{brief(expected)} on the model"
                )
        dead = self._target_dead_letters()
        self._compare_dead_letters("dead_letters()", dead, self.model.dead_letters())

    def _target_dead_letters(self) -> list[Any]:
        """The target's ``dead_letters()`` as a list; its raising is a failure."""
        try:
            return list(self.target.dead_letters())
        except Exception as error:
            self._fail(f"dead_letters() raised {type(error).__name__}({error}) on the target")

    def _model_views(self) -> list[JobView]:
        """``job_model.views`` of the model's state, each job's view made once: a step
        changes a job or two, and the invariant reads every job's view after each step.
        The model's jobs are immutable; each is kept with its view, so a cached view's
        job is never garbage that a new job could take the ``id`` of."""
        views = []
        for job in self.model.state.jobs:
            cached = self._views.get(id(job))
            if cached is None or cached[0] is not job:
                cached = self._views[id(job)] = (job, job.view())
            views.append(cached[1])
        return views

    # --- helpers ----------------------------------------------------------------------------

    def _op(self, kind: str, *args: object) -> JobOp:
        """The contract's record of this call, with the clock where the machine set it."""
        return JobOp.of(kind, *args, now=self.time.now)

    def _record(self, call: str, op: JobOp | None) -> None:
        self.step += 1
        self.last_call = call
        if self._starting:
            self.backlog_calls.append(call)
        if self.doing is not None and op is not None:
            who, job, token = self.doing
            tok = token if type(token) is int else None
            self.record.step(who, call, op.kind, self.time.now, job, tok, call=op.to_json())
        self.doing = None

    def _finishing(self, job: str, model_token: object, token: object) -> None:
        """The step about to run hands in a lease: its holder runs it. Its token is the
        model's name for it, or the made-up token itself (one no poll handed out)."""
        who = self.holders.get(model_token, "made-up token")
        self.doing = (who, job, model_token if type(model_token) is int else token)

    def _leased(self, worker: object, got: Lease, expected: Lease) -> None:
        """The target handed out ``got`` (the model's ``expected``) to ``worker``."""
        token = expected.token if isinstance(expected.token, int) else None
        who = worker if isinstance(worker, str) else "?"
        self.holders[expected.token] = who
        self.held[got.job_id] = (token, who, got.lease_until)
        last = self.record.steps[-1]
        self.record.answered(last.target, last.model, got.job_id, token)

    def _note_leases(self) -> None:
        """The leases each side holds now: the target's as it handed them out (until its
        view of the job stops RUNNING), the model's from its state."""
        for job in list(self.held):
            try:
                running = self.target.view(job).status is JobStatus.RUNNING
            except Exception:
                running = False  # views_agree reports it
            if not running:
                del self.held[job]
        target = [(job, t, w, until) for job, (t, w, until) in self.held.items()]
        model = [
            (j.id, j.token, self.holders.get(j.token, "?"), j.lease_until)
            for j in self.model.state.jobs
            if j.status is JobStatus.RUNNING and j.lease_until is not None
        ]
        self.record.held("target", target, self.time.now)
        self.record.held("model", model, self.time.now)

    def _both(
        self,
        op: JobOp,
        model: JobOp | Callable[[], Any] | None = None,
        *,
        target: Callable[[], Any] | None = None,
        expiring: bool = False,
    ) -> tuple[Any, Any] | None:
        """Run the call ``op`` on both; the two results, or None when both raised alike.

        ``model`` is the model's call where it differs (its own tokens, or a function);
        ``target`` runs the target's where it needs more than ``op.apply``.
        ``expiring``: the operation processes expired leases (poll, complete, fail);
        when it raises, the target may have done that first or not (spec: left open),
        so the machine continues from whichever model state the target matches.
        """
        call = op.describe()
        self._record(call, op)
        before, now = self.model.state, self.time.now
        target_result, target_error = _run(target or (lambda: op.apply(self.target)))
        model_call = model if model is not None else op
        try:
            if isinstance(model_call, JobOp):
                model_result, model_error = model_call.apply(self.model), None
            else:
                model_result, model_error = model_call(), None
        except SPEC_ERRORS as error:
            model_result, model_error = None, error
        self.record.answered(said(target_result, target_error), said(model_result, model_error))
        if error_kind(target_error) != error_kind(model_error):
            self._fail(
                f"{call} {said(target_result, target_error)} on the target but "
                f"{said(model_result, model_error)} on the model"
            )
        if model_error is None:
            return target_result, model_result
        if expiring:
            self._settle(before, now)
        return None

    def _settle(self, before: JobState, now: int) -> None:
        """Continue from the reading of a raising call (expiry processed or not) the target took."""
        try:
            target = [self.target.view(view.id) for view in job_model.views(before)]
        except Exception:
            return  # views_agree reports it
        for candidate in (self.model.state, before, expire(before, self.policy, now)):
            if job_model.views(candidate) == target:
                self.model.state = candidate
                return

    def _model_retry_dead(self, job_id: str) -> None:
        """The model's retry_dead, reading "clears last_error" off the target the first time."""
        if not self.error_reading_learnt and any(
            job.id == job_id and job.status is JobStatus.DEAD for job in self.model.state.jobs
        ):
            try:
                cleared = self.target.view(job_id).last_error is None
            except Exception:
                cleared = False  # views_agree reports it
            self.model.clear_error_on_retry = cleared
            self.error_reading_learnt = True
        self.model.retry_dead(job_id)

    def _credentials(self, lease: object, job_id: str | None) -> tuple[str, object, object]:
        """(job id, target token, model token) for a complete/fail call. A lease's token
        goes back as a worker's may after it travelled: an equal copy (``travelled``)."""
        if isinstance(lease, Lease):
            token = travelled(lease.token)
            return job_id or lease.job_id, token, self._model_token(lease.token)
        return job_id or "J1", lease, self._model_token(lease)

    def _model_token(self, target_token: object) -> object:
        for issued, model_token in self.tokens:
            if issued == target_token:
                return model_token
        return NEVER_ISSUED

    def _check_lease(self, call: str, got: object, expected: Lease) -> None:
        if not isinstance(got, Lease):
            self._fail(
                f"{call} returned {got!r} ({type(got).__name__}) on the target, not a "
                f"leasecheck.queue_impl.jobs.Lease; the model returned {expected!r}"
            )
        for issued, model_token in self.tokens:
            if issued == got.token:
                self._fail(
                    f"{call} returned token {got.token!r} on the target, which an earlier "
                    f"poll already handed out (model token {model_token}); every poll "
                    f"must make a token never issued before"
                )
        shown, wanted = lease_differences(got, expected)
        if shown:
            self._fail(
                f"{call} returned a lease with {shown} on the target but {wanted} "
                f"on the model (tokens aside)"
            )
        assert isinstance(expected.token, int)
        self.tokens.append((got.token, expected.token))

    def _compare_dead_letters(
        self, call: str, got: Sequence[object], expected: Sequence[JobView]
    ) -> None:
        if list(got) != list(expected):
            shown = [getattr(view, "id", view) for view in got]
            wanted = [view.id for view in expected]
            self._fail(
                f"{call} lists {shown} on the target but {wanted} on the model "
                f"(all DEAD jobs in submission order); target: {list(got)!r}"
            )

    def _fail(self, comparison: str) -> NoReturn:
        if JobAgreement.first_failure_at is None:
            JobAgreement.first_failure_at = time.perf_counter()
        calls = "".join(f"\n  {n}. {call}" for n, call in enumerate(self.backlog_calls, 1))
        made = (
            f"\nthe program's start (its Backlog) made these calls first:{calls}" if calls else ""
        )
        counted = f" (its Backlog's {len(self.backlog_calls)} calls counted)" if calls else ""
        error = AssertionError(
            f"{comparison}\n  after step {self.step}{counted}: {self.last_call}; the clock reads "
            f"{self.time.now}; {self.policy}\n{self._table()}{made}"
        )
        raise attach(error, self.record.evidence(comparison.splitlines()[0]))

    def _table(self) -> str:
        """Every job's view on both sides; past ``TABLE_ROWS`` jobs (an edge program's
        seventy), only the jobs whose views differ, and a count of the rest."""
        rows = [f"  {'job':<4} {'target':<66} model"]
        views = job_model.views(self.model.state)
        alike = 0
        for expected in views:
            try:
                got = brief(self.target.view(expected.id))
            except Exception as error:
                got = f"view raised {type(error).__name__}"
            wanted = brief(expected)
            if len(views) > TABLE_ROWS and got == wanted:
                alike += 1
                continue
            rows.append(f"  {expected.id:<4} {got:<66} {wanted}")
        if alike:
            rows.append(f"  ({alike} more jobs, each the same on both sides)")
        return "\n".join(rows)


def _run(op: Callable[[], Any]) -> tuple[Any, Exception | None]:
    try:
        return op(), None
    except Exception as error:  # a target may raise anything; the comparison names it
        return None, error
