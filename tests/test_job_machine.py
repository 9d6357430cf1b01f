"""Tests of the JobQueue agreement machine: it passes on the bundled queue and on other
readings the spec allows, catches every ``jobs_bugs`` mutant meant for it with a short
program, and says which comparison failed.

Mutant runs are seeded (the same verdict every time); each records its time to
detection (first failing step) and the length of the shrunk program with
``record_property`` (``--junit-xml`` shows them; ``-s`` prints them).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from _machines import Caught, Machine, mutant_settings
from hypothesis import settings
from hypothesis.stateful import MultipleResults, initialize, multiple

from leasecheck.mutants import Mutant, materialize
from leasecheck.mutants.jobs_bugs import MUTANTS
from leasecheck.profiles import PROFILES
from leasecheck.queue_impl.job_queue import JobQueue
from leasecheck.queue_impl.jobs import Lease, RetryPolicy
from leasecheck.stateful_tests.job_machine import (
    BACKLOGS,
    MIN_STEPS,
    NO_BACKLOG,
    POLICIES,
    Backlog,
    JobAgreement,
    agreement_budget,
)
from leasecheck.stateful_tests.job_threads import hammer
from leasecheck.targets import BUNDLED_JOBS, load_jobs_target

MUTANT_SETTINGS = mutant_settings(max_examples=600, step_count=40)
PASSING_SETTINGS = settings(MUTANT_SETTINGS, max_examples=150)
MAX_STEPS = 10
AGREEMENT_MUTANTS = [m for m in MUTANTS if m.caught_by == "jobs.agreement"]
JOBS = Machine(JobAgreement, load_jobs_target, invariant="views_agree")


def run_machine(target: type[Any], config: settings = MUTANT_SETTINGS) -> Caught | None:
    """Run the machine on ``target``; how it failed, or None if it passed."""
    return JOBS.run(target, config)


@pytest.fixture(scope="module")
def mutant_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jobs-mutants")


@pytest.fixture(scope="module")
def caught() -> dict[str, Caught | None]:
    """Mutant runs shared by several tests (each mutant runs once per process)."""
    return {}


def catch(name: str, mutant_dir: Path, cache: dict[str, Caught | None]) -> Caught:
    mutant = next(m for m in MUTANTS if m.name == name)
    if name not in cache:
        cache[name] = run_machine(load_jobs_target(materialize(mutant, mutant_dir)))
    result = cache[name]
    assert result is not None, f"jobs.agreement did not catch mutant {name!r}"
    return result


# --- the machine on correct queues --------------------------------------------------------


def test_machine_passes_on_the_bundled_queue() -> None:
    assert run_machine(load_jobs_target(), PASSING_SETTINGS) is None


class ClearsErrorOnRetry(JobQueue):
    """The other reading of retry_dead: last_error is cleared."""

    def retry_dead(self, job_id: object) -> None:
        super().retry_dead(job_id)
        self._jobs[str(job_id)].last_error = None


class ExpiresBeforeValidating(JobQueue):
    """The other reading of a raising call: expired leases are processed before the error."""

    def _expire_first(self) -> None:
        with self._lock:
            self._expire_leases(self._time.now_millis())

    def poll(self, worker_id: object, lease_millis: object) -> Any:
        self._expire_first()
        return super().poll(worker_id, lease_millis)

    def complete(self, job_id: object, token: object) -> None:
        self._expire_first()
        super().complete(job_id, token)

    def fail(self, job_id: object, token: object, error: object) -> None:
        self._expire_first()
        super().fail(job_id, token, error)


@pytest.mark.parametrize("target", [ClearsErrorOnRetry, ExpiresBeforeValidating])
def test_machine_accepts_the_readings_the_spec_leaves_open(target: type[Any]) -> None:
    assert run_machine(target, PASSING_SETTINGS) is None


class Reach(JobQueue):
    """The bundled queue, noting what the machine made it do (the JobQueue scope)."""

    ids: ClassVar[set[int]] = set()
    backoffs: ClassVar[set[int]] = set()
    """n for every backoff computed after the n-th attempt."""
    policies: ClassVar[set[tuple[int, bool]]] = set()
    """(max_attempts, whether the cap is base * 2**k)."""
    ready: ClassVar[list[int]] = [0]
    """The most jobs ready at one poll."""
    capped: ClassVar[set[int]] = set()
    """n for every backoff after the n-th attempt where base * 2**(n-1) passed the cap."""

    def __init__(self, time: Any, policy: RetryPolicy) -> None:
        super().__init__(time, policy)
        base, cap = policy.base_backoff_millis, policy.max_backoff_millis
        self.policies.add((policy.max_attempts, any(base * 2**k == cap for k in range(12))))

    def submit(self, type: object, payload: object, priority: object, run_at: object) -> str:
        job_id = super().submit(type, payload, priority, run_at)
        self.ids.add(int(job_id[1:]))
        return job_id

    def poll(self, worker_id: object, lease_millis: object) -> Any:
        now = self._time.now_millis()
        ready = [j for j in self._jobs.values() if j.status.name == "PENDING" and j.run_at <= now]
        self.ready[0] = max(self.ready[0], len(ready))
        return super().poll(worker_id, lease_millis)

    def _backoff(self, attempts: int) -> int:
        self.backoffs.add(attempts)
        policy = self._policy
        if policy.base_backoff_millis * 2 ** (attempts - 1) > policy.max_backoff_millis:
            self.capped.add(attempts)
        return super()._backoff(attempts)


def test_programs_reach_the_job_scope() -> None:
    """jobs.agreement's programs submit ids past J9 (to J12), poll among ten or more ready
    jobs, compute the backoff after every attempt up to the 5th, meet the cap (the spec's
    ``min(max_backoff, ...)``) after the 2nd attempt and later ones, and run policies of
    six attempts with caps that are, and are not, base * 2**k (150 seeded programs,
    an eighth of the ci profile's)."""
    assert run_machine(Reach, PASSING_SETTINGS) is None
    assert max(Reach.ids) == 12 and {10, 11, 12} <= Reach.ids
    assert Reach.ready[0] >= 10
    assert {1, 2, 3, 4, 5} <= Reach.backoffs
    assert 2 in Reach.capped and max(Reach.capped) >= 4
    assert {(6, True), (6, False)} <= Reach.policies


class BacklogLeases(JobAgreement):
    """JobAgreement, counting complete/fail calls with a lease that the backlog start handed
    out (stale by then: the start failed it)."""

    drawn: ClassVar[int] = 0

    def __init__(self) -> None:
        self.starting = False
        self.backlog_leases: list[Lease] = []
        super().__init__()

    @initialize(target=JobAgreement.leases, policy=POLICIES, backlog=BACKLOGS)
    def start(self, policy: RetryPolicy, backlog: Backlog = NO_BACKLOG) -> MultipleResults[Any]:
        self.starting = True
        try:
            handed_out = JobAgreement.start(self, policy, backlog)
        finally:
            self.starting = False
        # Hypothesis puts any other return value (a start that returns None) into the bundle.
        return handed_out if isinstance(handed_out, MultipleResults) else multiple()

    def _leased(self, worker: object, got: Lease, expected: Lease) -> None:
        if self.starting:
            self.backlog_leases.append(got)
        super()._leased(worker, got, expected)

    def _credentials(self, lease: object, job_id: str | None) -> tuple[str, object, object]:
        if not self.starting and any(lease is given for given in self.backlog_leases):
            type(self).drawn += 1
        return super()._credentials(lease, job_id)


def test_complete_and_fail_draw_the_backlogs_stale_leases() -> None:
    """A backlog start's leases are leases like any poll's: complete and fail draw them (a
    zombie's stale token from the first step). They used to stay out of the ``leases``
    bundle, and a program that drew complete/fail before its own poll was thrown away."""
    backlog = Machine(BacklogLeases, load_jobs_target, invariant="views_agree")
    assert backlog.run(load_jobs_target(), PASSING_SETTINGS) is None
    assert BacklogLeases.drawn > 0


def test_an_unbound_machine_says_how_to_bind_it() -> None:
    JobAgreement.target_class = None
    try:
        with pytest.raises(RuntimeError, match=r"JobAgreement.bind\(load_jobs_target\(path\)\)"):
            JobAgreement()
    finally:
        JobAgreement.bind(load_jobs_target())


# --- every catalogued bug is caught, with a short program ---------------------------------


@pytest.mark.parametrize("mutant", AGREEMENT_MUTANTS, ids=[m.name for m in AGREEMENT_MUTANTS])
def test_mutant_is_caught_with_a_short_program(
    mutant: Mutant,
    mutant_dir: Path,
    caught: dict[str, Caught | None],
    record_property: Callable[[str, object], None],
) -> None:
    result = catch(mutant.name, mutant_dir, caught)
    record_property("detection_seconds", round(result.detection_seconds, 2))
    record_property("shrunk_steps", len(result.steps))
    print(f"\n{mutant.name}: {result.detection_seconds:.2f}s, {len(result.steps)} steps")
    assert 1 <= len(result.steps) <= MAX_STEPS, result.notes


@pytest.mark.parametrize(
    ("profile", "programs", "steps"),
    [("quick", 120, 40), ("ci", 1200, 40), ("deep", 2400, 80)],
)
def test_the_property_runs_six_fifths_of_the_profile_s_examples_and_at_least_min_steps(
    profile: str, programs: int, steps: int
) -> None:
    chosen = PROFILES[profile]
    assert agreement_budget(chosen.max_examples, chosen.step_count) == (programs, steps)
    assert agreement_budget(5, MIN_STEPS + 1) == (6, MIN_STEPS + 1), "more steps are kept"
    assert agreement_budget(4, MIN_STEPS - 1) == (4, MIN_STEPS), "6/5 rounds down"


def test_catalogue_covers_the_spec_and_applies_to_the_bundled_queue() -> None:
    assert len(MUTANTS) >= 12
    assert {m.caught_by for m in MUTANTS} == {"jobs.agreement", "jobs.threads"}
    assert len({m.bug_class for m in MUTANTS}) == len(MUTANTS)
    assert all(m.real_world and m.target == "jobs" for m in MUTANTS)
    bundled = BUNDLED_JOBS.read_text()
    for mutant in MUTANTS:
        assert mutant.source() != bundled, mutant.name


# --- the failure report -------------------------------------------------------------------


def test_a_wrong_result_is_reported_side_by_side(
    mutant_dir: Path, caught: dict[str, Caught | None]
) -> None:
    result = catch("jobs-priority-reversed", mutant_dir, caught)
    first = result.message.splitlines()[0]
    assert first.startswith("poll(worker_id='w1', "), first
    # Which jobs depend on the shrunk program (the seed and the machine's strategies):
    # the target's poll hands out another job than the model's.
    ids = re.findall(r"\{'job_id': '(J\d+)'", first)
    assert "returned a lease with {'job_id': 'J" in first and "on the target but" in first
    assert len(ids) == 2 and ids[0] != ids[1], first
    assert first.endswith("on the model (tokens aside)")


def test_an_exception_mismatch_names_both_outcomes(
    mutant_dir: Path, caught: dict[str, Caught | None]
) -> None:
    result = catch("jobs-cancel-running", mutant_dir, caught)
    first = result.message.splitlines()[0]
    assert first.startswith("cancel(job_id='J1') at t="), first
    assert "returned None on the target but raised " in first
    assert "IllegalStateError(" in first and first.endswith("on the model")


def test_a_view_difference_prints_both_views_and_a_table(
    mutant_dir: Path, caught: dict[str, Caught | None]
) -> None:
    result = catch("jobs-fail-none-error-not-recorded", mutant_dir, caught)
    lines = result.message.splitlines()
    assert lines[0].startswith("view('J1') is DEAD"), lines[0]
    assert "last_error=None" in lines[0] and "last_error='failed'" in lines[0]
    assert lines[1].startswith("  after step ") and "fail(job_id='J1', " in lines[1]
    assert lines[2].split() == ["job", "target", "model"]


def test_a_reused_token_is_named(mutant_dir: Path, caught: dict[str, Caught | None]) -> None:
    result = catch("jobs-token-reuse-after-retry-dead", mutant_dir, caught)
    assert "which an earlier poll already handed out" in result.message
    assert any(".retry_dead(" in step for step in result.steps)


def test_expiry_processed_in_view_is_caught_right_after_the_clock_moves(
    mutant_dir: Path, caught: dict[str, Caught | None]
) -> None:
    result = catch("jobs-expiry-in-view", mutant_dir, caught)
    assert "advance_clock(" in result.steps[-1], result.notes
    assert "on the target but RUNNING" in result.message


@pytest.mark.parametrize(
    "name", ["jobs-stale-token-accepted", "jobs-backoff-uncapped", "jobs-expiry-boundary"]
)
def test_the_printed_program_replays(
    name: str, mutant_dir: Path, caught: dict[str, Caught | None]
) -> None:
    result = catch(name, mutant_dir, caught)
    mutant = next(m for m in MUTANTS if m.name == name)
    source = "\n".join(
        [
            "from leasecheck.stateful_tests.job_machine import Backlog, JobAgreement, RetryPolicy",
            "from leasecheck.targets import load_jobs_target",
            "JobAgreement.bind(load_jobs_target(path))",
            *result.program,
        ]
    )
    try:
        with pytest.raises(AssertionError) as replayed:
            exec(source, {"path": materialize(mutant, mutant_dir)})
    finally:
        JobAgreement.bind(load_jobs_target())
    assert str(replayed.value).splitlines()[0] == result.message.splitlines()[0]


THREAD_MUTANTS = [m for m in MUTANTS if m.caught_by == "jobs.threads"]


@pytest.mark.parametrize("mutant", THREAD_MUTANTS, ids=[m.name for m in THREAD_MUTANTS])
def test_thread_mutants_are_caught_by_the_hammer(mutant: Mutant, mutant_dir: Path) -> None:
    target = load_jobs_target(materialize(mutant, mutant_dir))
    with pytest.raises(AssertionError, match=r"jobs\.threads round seed"):
        hammer(target, PROFILES["ci"].thread_rounds, seed=0)
