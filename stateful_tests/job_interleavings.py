"""jobs.interleavings: every interleaving of small JobQueue scenarios, judged by the model.

job-queue.md: "with many threads polling at once, a job is never leased to two
workers at the same time; all methods are safe to call from many threads". A
``Scenario`` is a few opening calls run alone (the seeded queue state: jobs
submitted, some RUNNING under a lease) and then 2-3 threads of 1-3 calls each.
``stateful_tests.thread_scheduler`` runs the threads on a copy of the target whose
locks are cooperative, switching at every line of the target's file and at every
acquire and release, through every schedule up to a preemption bound. Each
finished schedule is judged from its history (every call with the step at which it
started and returned, and its outcome), followed by a view of every job:

- token uniqueness: no two polls returned equal tokens;
- exclusive leases: no two polls leased one job while neither lease had ended
  (no complete or fail of it had even started) and both were still valid;
- linearizable: ``stateful_tests.parallel.check_jobs_history``, the one JobQueue
  linearizability check (``models.linearizability`` over ``models.job_model``).

The clock is the scenario's: each call reads the ``now`` written in it. A failing
schedule is a list of thread choices; ``replay`` runs exactly that list again, and
``Failure.record`` is it as JSON.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from leasecheck.models.evidence import attach, shrunk_evidence
from leasecheck.models.history_evidence import schedule_evidence
from leasecheck.models.job_model import JobState
from leasecheck.models.job_ops import JobOp, JobOutcome
from leasecheck.models.linearizability import Operation
from leasecheck.models.shrinking import Budget, shrink
from leasecheck.queue_impl.jobs import Lease, RetryPolicy
from leasecheck.stateful_tests._coop_threading import instrument
from leasecheck.stateful_tests._job_scenarios import (
    CI_SCENARIOS,
    DEEP_SCENARIOS,
    EXCLUSIVE,
    NOW,
    PLANS,
    Scenario,
    call,
)
from leasecheck.stateful_tests._parallel_jobs import ThreadClock
from leasecheck.stateful_tests._state_key import state_key
from leasecheck.stateful_tests.parallel import JOB_POLICY, check_jobs_history
from leasecheck.stateful_tests.thread_scheduler import (
    Bound,
    Exploration,
    Run,
    Schedule,
    Step,
    active_run,
    explore,
    follow,
)
from leasecheck.targets.lease_compare import error_kind

__all__ = [
    "CI_SCENARIOS",
    "DEEP_SCENARIOS",
    "PLANS",
    "Failure",
    "InterleavingFailure",
    "Replayed",
    "Scenario",
    "Summary",
    "Violation",
    "check_scenarios",
    "replay",
    "shrunk",
]

TICK_NS = 1_000_000
"""A history's instants are event numbers (call and return in order), written as if
milliseconds so that a printed interval reads ``[3.000 ms .. 6.000 ms]``: event 3 to 6."""


@dataclass(frozen=True)
class Violation:
    """What a finished schedule broke: ``kind`` and the sentence a user reads."""

    kind: str
    message: str
    history: tuple[Operation, ...] = ()
    returned_at: tuple[tuple[tuple[str, int], int], ...] = ()
    """((thread, call number), step): the step during which each call returned."""


class _JobWorld:
    """One fresh queue in the scenario's opening state, and the threads' bodies."""

    def __init__(
        self, cls: type[Any], target_file: str, scenario: Scenario, policy: RetryPolicy,
        verdicts: dict[bytes | None, Violation | None],
    ) -> None:  # fmt: skip
        self.target_file = target_file
        self.scenario = scenario
        self.policy = policy
        self.verdicts = verdicts
        self.clock = ThreadClock()
        self.queue = cls(self.clock, policy)
        self.ticks = itertools.count(1)
        self.ops: list[Operation] = []
        self.events: list[object] = []
        self.returned_at: dict[tuple[str, int], int] = {}
        """(thread, call number) -> the step during which that call returned."""
        self.position: dict[str, int] = {}
        held: list[Lease] = []
        for index, command in enumerate(scenario.prefix, 1):
            self._run(("prefix", index), command, held)
        self.opening = list(held)

    def bodies(self) -> list[tuple[str, Callable[[], None]]]:
        return [
            (f"T{n}", self._body(f"T{n}", calls))
            for n, calls in enumerate(self.scenario.threads, 1)
        ]

    def _body(self, name: str, calls: tuple[JobOp, ...]) -> Callable[[], None]:
        def body() -> None:
            held = list(self.opening)
            run = active_run()
            assert run is not None
            for index, command in enumerate(calls, 1):
                self.position[name] = index
                self._run((name, index), command, held, run)
                self.returned_at[(name, index)] = run.taken
            self.position[name] = len(calls) + 1

        return body

    def _run(
        self, where: tuple[str, int], command: JobOp, held: list[Lease], run: Run | None = None
    ) -> None:
        op = command.resolve(held)
        if op is None:  # a call on a lease the thread never got: not made
            return
        self.clock.set(op.now or 0)
        invoked: list[int] = []

        def invoke() -> None:
            invoked.append(next(self.ticks) * TICK_NS)
            self.events.append((where, "call"))

        if run is None:
            invoke()
        else:
            run.on_next_grant(invoke)
        try:
            outcome = JobOutcome(op.apply(self.queue))
        except Exception as error:
            outcome = JobOutcome(error=error_kind(error), detail=str(error))
        if run is not None:
            run.granted_pending()
        returned = next(self.ticks) * TICK_NS
        self.events.append((where, outcome))
        if outcome.error is None and isinstance(outcome.result, Lease):
            held.append(outcome.result)
        self.ops.append(Operation(where[0], where[1], op, invoked[0], returned, outcome))

    # -- World --
    def roots(self) -> tuple[object, ...]:
        return (self.queue,)

    def atoms(self) -> tuple[type, ...]:
        return (ThreadClock,)

    def thread_key(self, name: str) -> object:
        return self.position.get(name, 0)

    def history_key(self) -> object:
        return self.events

    def judge(self, steps: Sequence[Step], problem: str | None) -> Violation | None:
        if problem is not None:
            kind = "deadlock" if problem.startswith("deadlock") else "runaway"
            return Violation(kind, problem, tuple(self.ops), self._returns())
        self._final_views()
        key = state_key(self.events)
        found = self.verdicts[key] if key in self.verdicts else _judge(self.ops, self.policy)
        if key is not None:
            self.verdicts[key] = found
        return None if found is None else replace(found, returned_at=self._returns())

    def _returns(self) -> tuple[tuple[tuple[str, int], int], ...]:
        return tuple(self.returned_at.items())

    def _final_views(self) -> None:
        submitted = sum(1 for op in self.ops if op.name == "submit" and op.ok)
        for number in range(1, submitted + 1):
            self._run(("harness", number), call("view", job_id=f"J{number}", now=NOW), [])
        self._run(("harness", submitted + 1), call("dead_letters", now=NOW), [])


def _judge(history: Sequence[Operation], policy: RetryPolicy) -> Violation | None:
    found = _reused_token(history) or _double_lease(history)
    if found is not None:
        return Violation(found[0], found[1], tuple(history))
    verdict = check_jobs_history(history, policy)
    if verdict.linearizable:
        return None
    return Violation("not linearizable", verdict.report(), tuple(history))


def _leases(history: Sequence[Operation]) -> list[tuple[Operation, Lease]]:
    return [(op, op.result) for op in history if op.name == "poll" and isinstance(op.result, Lease)]


def _reused_token(history: Sequence[Operation]) -> tuple[str, str] | None:
    for (a, first), (b, second) in itertools.combinations(_leases(history), 2):
        if first.token == second.token:
            return "token reused", (
                f"{a.label()} and {b.label()} both got token {first.token!r} (jobs "
                f"{first.job_id} and {second.job_id}); job-queue.md: every successful poll "
                f"makes a token never issued before"
            )
    return None


def _now(op: Operation) -> int:
    """The instant the thread set its clock to before the call (its ``JobOp``'s ``now``)."""
    return (op.call.now or 0) if isinstance(op.call, JobOp) else 0


def _double_lease(history: Sequence[Operation]) -> tuple[str, str] | None:
    """Two leases of one job, both valid at the later poll's instant, neither ended by a
    complete or fail that had started before the later poll returned."""
    for (a, first), (b, second) in itertools.combinations(_leases(history), 2):
        if first.job_id != second.job_id:
            continue
        later = max(a.returned_ns or 0, b.returned_ns or 0)
        tokens = (first.token, second.token)
        ended = any(
            op.name in ("complete", "fail") and op.invoked_ns < later
            and op.ok and op.args.get("token") in tokens
            for op in history
        )  # fmt: skip
        now = max(_now(a), _now(b))
        if not ended and now < min(first.lease_until, second.lease_until):
            return "double lease", (
                f"job {first.job_id} was leased to {a.args['worker_id']} (token {first.token!r}, "
                f"until t={first.lease_until}) and to {b.args['worker_id']} (token "
                f"{second.token!r}, until t={second.lease_until}) at the same time; "
                f"job-queue.md: {EXCLUSIVE}"
            )
    return None


# --- exploring, reporting, replaying ------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """A failing schedule of a scenario, and what it broke."""

    scenario: Scenario
    schedule: Schedule
    violation: Violation
    policy: RetryPolicy = JOB_POLICY
    shrunk_from: int = 0
    """How many calls the scenario had before it was shrunk (0: not shrunk)."""

    def record(self) -> dict[str, Any]:
        """The schedule as JSON: everything ``replay`` needs."""
        return {
            "property": "jobs.interleavings",
            "scenario": self.scenario.record(),
            "policy": [
                self.policy.max_attempts,
                self.policy.base_backoff_millis,
                self.policy.max_backoff_millis,
            ],
            "schedule": list(self.schedule.choices),
            "preemptions": len(self.schedule.preempted),
            "violation": self.violation.kind,
            "shrunk_from": self.shrunk_from,
        }

    def report(self) -> str:
        count = len(self.schedule.preempted)
        lines = [
            f"jobs.interleavings: {self.violation.kind} in a schedule with {count} "
            f"preemption{'s' * (count != 1)} (no schedule with fewer fails)",
            *self.scenario.describe(),
            "the schedule, one scheduling point a line (T1, T2 take turns; '>>' marks a "
            "preemption, the thread switched out while it could go on):",
            *interleaving(self.schedule, self.violation),
            "what went wrong:",
            *(f"  {line}" for line in self.violation.message.splitlines()),
        ]
        if self.shrunk_from:
            lines.append(
                f"shrunk from {self.shrunk_from} to {_calls(self.scenario)} calls: every schedule "
                f"of this smaller scenario was explored again, fewest preemptions first"
            )
        return "\n".join(lines)


class InterleavingFailure(AssertionError):
    """A failing schedule; ``leasecheck_replay`` is its JSON record (for ``--export``)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.report())
        self.leasecheck_replay = failure.record()
        summary = f"jobs.interleavings: {failure.violation.kind} ({failure.scenario.name})"
        evidence = schedule_evidence(
            failure.violation.history, summary, TICK_NS, "thread", JobState(), failure.policy
        )
        if failure.shrunk_from:
            evidence = shrunk_evidence(evidence, failure.shrunk_from, _calls(failure.scenario))
        attach(self, evidence)


def interleaving(schedule: Schedule, violation: Violation, keep: int = 3) -> list[str]:
    """The steps in order. Of each run of one thread longer than ``keep + 2`` steps, its
    first and last ``keep`` steps,
    every lock acquire and release, and every step in which a call returned (with that
    call's outcome under it) are shown; the other lines are counted."""
    returned = dict(violation.returned_at)
    returns: dict[int, list[str]] = {}
    for op in violation.history:
        step = returned.get((op.process, op.index))
        if step is not None:
            returns.setdefault(step, []).append(
                f"        -> {op.label()} {op.name} {op.outcome_text()}"
            )
    lines: list[str] = []
    preemptions = 0
    for run in _runs(schedule):
        thread = schedule.steps[run[0]].thread
        if run[0] in schedule.preempted:
            preemptions += 1
            before = schedule.steps[run[0] - 1].thread
            lines.append(f"  >> preemption {preemptions}: {before} is switched out, {thread} runs")
        shown = {run[0], *run[-keep:]} | {
            i for i in run if schedule.steps[i].kind != "line" or i + 1 in returns
        }
        if len(run) <= keep + 2:
            shown = set(run)
        hidden = 0
        for index in run:
            if index not in shown:
                hidden += 1
                continue
            if hidden:
                lines.append(f"        ... {hidden} more lines of {thread}")
                hidden = 0
            lines.append(f"  {index + 1:>4}. {schedule.steps[index].describe()}")
            lines += returns.get(index + 1, [])
    return lines


def _runs(schedule: Schedule) -> list[list[int]]:
    runs: list[list[int]] = []
    for index, step in enumerate(schedule.steps):
        if runs and schedule.steps[runs[-1][-1]].thread == step.thread:
            runs[-1].append(index)
        else:
            runs.append([index])
    return runs


@dataclass
class Summary:
    """What ``check_scenarios`` explored, per scenario and in total."""

    preemptions: int
    threads: int = 0
    operations: int = 0
    explored: int = 0
    pruned: int = 0
    steps: int = 0
    seconds: float = 0.0
    scenarios: list[tuple[str, Exploration[Violation]]] = field(default_factory=list)

    @property
    def exhaustive(self) -> int:
        """Scenarios whose every interleaving was explored (the bound left none out)."""
        return sum(1 for _, found in self.scenarios if found.complete)

    def text(self) -> str:
        return (
            f"{self.explored} schedules, {self.pruned} pruned; {len(self.scenarios)} scenarios "
            f"({self.exhaustive} exhaustive) <={self.threads} threads x <={self.operations} calls, "
            f"<={self.preemptions} preemptions"
        )


def _factory(cls: type[Any], scenario: Scenario, policy: RetryPolicy) -> Callable[[], _JobWorld]:
    copy, target_file = instrument(cls)
    verdicts: dict[bytes | None, Violation | None] = {}
    return lambda: _JobWorld(copy, target_file, scenario, policy, verdicts)


def check_scenarios(
    cls: type[Any],
    plan: Iterable[tuple[Scenario, int]],
    policy: RetryPolicy = JOB_POLICY,
    prune: bool = True,
) -> Summary:
    """Explore every scenario of ``plan`` on ``cls`` to its bound; raise
    ``InterleavingFailure`` on the first failure."""
    started = time.perf_counter()
    summary = Summary(0)
    for scenario, preemptions in plan:
        summary.preemptions = max(summary.preemptions, preemptions)
        found = explore(_factory(cls, scenario, policy), Bound(preemptions, prune=prune))
        summary.scenarios.append((scenario.name, found))
        summary.threads = max(summary.threads, len(scenario.threads))
        summary.operations = max([summary.operations, *map(len, scenario.threads)])
        summary.explored += found.explored
        summary.pruned += found.pruned
        summary.steps += found.steps
        if found.failure is not None:
            schedule, violation = found.failure
            first = Failure(scenario, schedule, violation, policy)
            raise InterleavingFailure(shrunk(cls, first, prune))
    summary.seconds = time.perf_counter() - started
    return summary


SHRINK = Budget(runs=20, seconds=6.0)
"""What shrinking a failing scenario may spend (each try explores a whole smaller scenario)."""


def _calls(scenario: Scenario) -> int:
    return len(scenario.prefix) + sum(map(len, scenario.threads))


def _without(scenario: Scenario, kept: list[tuple[int, JobOp]]) -> Scenario:
    """``scenario`` with only the ``kept`` calls (0: the opening; n: thread Tn); a thread
    left without calls is dropped."""
    threads = [tuple(c for n, c in kept if n == t) for t in range(1, len(scenario.threads) + 1)]
    prefix = tuple(c for n, c in kept if n == 0)
    return replace(scenario, prefix=prefix, threads=tuple(t for t in threads if t))


def shrunk(
    cls: type[Any], failure: Failure, prune: bool = True, budget: Budget = SHRINK
) -> Failure:
    """The failure of the smallest scenario (``models.shrinking``: drop opening and thread
    calls) that still breaks the same rule, each candidate explored again to the original
    schedule's preemptions, fewest first: so the result has the fewest calls found and,
    for them, the fewest preemptions. Deterministic (the scheduler is)."""
    scenario = failure.scenario
    items = [(0, c) for c in scenario.prefix]
    items += [(n, c) for n, calls in enumerate(scenario.threads, 1) for c in calls]
    bound = Bound(len(failure.schedule.preempted), prune=prune)

    def fails(kept: list[tuple[int, JobOp]]) -> Failure | None:
        smaller = _without(scenario, kept)
        if len(smaller.threads) < 2:
            return None  # no longer concurrent
        found = explore(_factory(cls, smaller, failure.policy), bound)
        if found.failure is None or found.failure[1].kind != failure.violation.kind:
            return None
        return Failure(smaller, *found.failure, failure.policy)

    result = shrink(items, failure, fails, budget)
    if result.failure is failure:
        return failure
    return replace(result.failure, shrunk_from=len(items))


@dataclass(frozen=True)
class Replayed:
    """A replayed schedule: what it broke (None: nothing) and whether it still applied."""

    failure: Failure | None
    schedule: Schedule

    def report(self) -> str:
        if self.failure is None:
            return "the schedule ran and broke nothing"
        return self.failure.report()


def replay(cls: type[Any], record: dict[str, Any]) -> Replayed:
    """Run exactly the schedule of ``record`` (``Failure.record``) on ``cls``."""
    scenario = Scenario.from_record(record["scenario"])
    policy = RetryPolicy(*record["policy"])
    world = _factory(cls, scenario, policy)()
    schedule, violation = follow(world, record["schedule"])
    failure = None if violation is None else Failure(scenario, schedule, violation, policy)
    return Replayed(failure, schedule)
