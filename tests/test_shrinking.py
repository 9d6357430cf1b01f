"""Shrinking (``models.shrinking``) and the properties that use it.

The helper is checked on plain predicates first (it finds the one-minimal sublist,
in a fixed order, within its budget, and never drops what ``keep`` protects); then
each family that now shrinks is given a planted bug of the public catalogue and its
counterexample must be short, say how long it was, still fail when it is run again,
and pass on the bundled (correct) target.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from leasecheck.counterexample import Counterexample, export
from leasecheck.crash_harness.races import check_races
from leasecheck.crash_harness.single_winner import check_single_winner
from leasecheck.models.evidence import SHRUNK_FROM, evidence_of
from leasecheck.models.lease_ops import LeaseOp
from leasecheck.models.shrinking import Budget, shrink
from leasecheck.mutants import by_name, materialize
from leasecheck.replay import ENV
from leasecheck.runner import CheckOptions, run_check
from leasecheck.stateful_tests._parallel_lease import run_lease_program
from leasecheck.stateful_tests.job_interleavings import (
    PLANS,
    InterleavingFailure,
    Scenario,
    check_scenarios,
    replay,
)
from leasecheck.stateful_tests.job_machine import JobAgreement
from leasecheck.stateful_tests.parallel import (
    Failure,
    ParallelProgram,
    check_lease_history,
    failure,
    shrink_program,
)
from leasecheck.stateful_tests.program import replay_lines, without_idle_steps
from leasecheck.targets import load_worker
from leasecheck.targets.loader import BUNDLED_JOBS, BUNDLED_WORKER, load_jobs_target

# --- the helper ----------------------------------------------------------------------------


def _needs(*wanted: int) -> Callable[[list[int]], list[int] | None]:
    """A predicate: fails (returns the sorted list) while every ``wanted`` item is there."""
    return lambda items: sorted(items) if set(wanted) <= set(items) else None


def test_shrink_finds_the_items_the_failure_needs() -> None:
    shrunk = shrink(list(range(20)), [-1], _needs(3, 17))
    assert shrunk.items == (3, 17) and shrunk.failure == [3, 17]
    assert (shrunk.before, shrunk.after, shrunk.exhausted) == (20, 2, False)
    assert "shrunk from 20 to 2 operations" in shrunk.sentence()


def test_shrink_is_deterministic() -> None:
    runs = [shrink(list(range(30)), [-1], _needs(5, 6, 29)) for _ in range(2)]
    assert runs[0].items == runs[1].items and runs[0].runs == runs[1].runs


def test_shrink_keeps_the_original_when_nothing_shorter_fails() -> None:
    shrunk = shrink([1, 2], [-1], _needs(1, 2))
    assert shrunk.items == (1, 2) and shrunk.failure == [-1]


def test_shrink_stops_at_its_budget_and_says_so() -> None:
    calls: list[int] = []

    def fails(items: list[int]) -> str | None:
        calls.append(len(items))
        return "still" if 7 in items else None

    shrunk = shrink(list(range(64)), "original", fails, Budget(runs=3, seconds=60))
    assert len(calls) == 3 and shrunk.exhausted and shrunk.runs == 3
    assert 7 in shrunk.items and "budget spent" in shrunk.sentence()


def test_shrink_never_drops_the_kept_items() -> None:
    shrunk = shrink(list(range(10)), [-1], _needs(8), keep=2)
    assert shrunk.items == (0, 1, 8)


def test_shrink_simplifies_arguments() -> None:
    def fails(items: list[int]) -> int | None:
        return sum(items) if sum(items) >= 10 else None

    simpler = lambda n: [n // 2] if n > 1 else []  # noqa: E731
    shrunk = shrink([40, 3, 90], 133, fails, simpler=simpler)
    assert shrunk.items == (11,) and shrunk.failure == 11  # 90, 45, 22, 11 (5 passes)


# --- the properties ------------------------------------------------------------------------


def _mutant(name: str, directory: Path) -> ModuleType:
    return load_worker(materialize(by_name(name), directory))


def _caught(check: object) -> AssertionError:
    with pytest.raises(AssertionError) as caught:
        check()  # type: ignore[operator]
    return caught.value


@pytest.mark.parametrize("seed", [1, 2])
def test_single_winner_double_claim_shrinks_to_three_operations(
    scratch: Path, no_leaked_children: None, seed: int
) -> None:
    module = _mutant("claim-selects-outside-lock", scratch)
    error = _caught(lambda: check_single_winner(module, scratch, 1, seed))
    evidence = evidence_of(error)
    assert evidence is not None
    assert int(evidence.extra["ops"]) <= 3  # one job row, A's claim and B's claim
    assert int(evidence.extra[SHRUNK_FROM]) > 3
    text = str(error)
    assert "while that lease was live" in text and "the same schedule on this smaller" in text
    assert text.count("  job '") == 1
    again = _caught(lambda: check_single_winner(module, scratch, 1, seed))
    assert str(again) == text, "the shrunk counterexample is the same on a re-run"
    check_single_winner(load_worker(BUNDLED_WORKER), scratch, 1, seed)


def test_races_stale_finish_shrinks_to_one_claim_and_the_finish(
    scratch: Path, no_leaked_children: None
) -> None:
    module = _mutant("finish-ignores-marker", scratch)
    error = _caught(lambda: check_races(module, scratch, 3, 20, 0))
    evidence = evidence_of(error)
    assert evidence is not None
    assert evidence.extra["ops"] == "2" and int(evidence.extra[SHRUNK_FROM]) > 2
    assert [step.kind for step in evidence.steps] == ["claim", "finish"]
    text = str(error)
    assert "a stale finish must return False" in text and "shrunk from" in text
    # The OS schedules the racers, so which racer wins may differ between runs; the
    # shrunk round must be as short on every run.
    again = evidence_of(_caught(lambda: check_races(module, scratch, 3, 20, 0)))
    assert again is not None and again.extra["ops"] == "2"
    check_races(load_worker(BUNDLED_WORKER), scratch, 3, 20, 0)


def _enqueue(job: str, now: int) -> LeaseOp:
    event = {"id": job, "qty": 1}
    return LeaseOp.of("enqueue", event=event, now_ms=now, ttl_ms=60000, max_attempts=3)


def _claim(now: int) -> LeaseOp:
    return LeaseOp.of("claim", owner="w1", now_ms=now, lease_ms=40)


HYPOTHESIS_MINIMAL = ParallelProgram(
    prefix=(_enqueue("a", 0),),
    suffixes=((_enqueue("c", 100), _claim(100)), (_enqueue("c", 100), _claim(100))),
)
"""What Hypothesis' shrink left for ``enqueue-check-before-begin`` at ci, seed 0."""


def test_linearizable_program_loses_the_commands_hypothesis_left(scratch: Path) -> None:
    module = _mutant("enqueue-check-before-begin", scratch)

    def attempt(program: ParallelProgram) -> Failure | None:
        verdict = check_lease_history(run_lease_program(module, scratch, program))
        return None if verdict.linearizable else failure("lease.linearizable", program, verdict, 0)

    first = attempt(HYPOTHESIS_MINIMAL)
    assert first is not None, "the planted bug fails the original program"
    program, found = shrink_program(HYPOTHESIS_MINIMAL, first, attempt, Budget(30, 20.0))
    assert program.prefix == () and program.suffixes == ((_enqueue("c", 100),),) * 2
    assert "shrunk from 5 to 2 operations" in found.message
    assert found.evidence is not None and found.evidence.extra[SHRUNK_FROM] == "5"
    assert attempt(program) is not None, "the shrunk program still fails on a re-run"
    bundled = load_worker(BUNDLED_WORKER)
    assert check_lease_history(run_lease_program(bundled, scratch, program)).linearizable


def test_jobs_interleavings_scenario_shrinks_and_its_record_replays(scratch: Path) -> None:
    """jobs-dead-letters-without-lock: the 'submit while dead letters are listed' scenario
    opens with five calls that make a DEAD job; listing over one job of any status, while
    a submit adds another, is enough."""
    cls = load_jobs_target(materialize(by_name("jobs-dead-letters-without-lock"), scratch))
    with pytest.raises(InterleavingFailure) as caught:
        check_scenarios(cls, PLANS["ci"])
    record = caught.value.leasecheck_replay
    scenario = Scenario.from_record(record["scenario"])
    calls = len(scenario.prefix) + sum(map(len, scenario.threads))
    assert calls <= 3 and record["shrunk_from"] > calls and record["preemptions"] == 1
    assert f"shrunk from {record['shrunk_from']} to {calls} calls" in str(caught.value)
    evidence = evidence_of(caught.value)
    assert evidence is not None and evidence.extra["ops"] == str(calls)
    again = replay(cls, record)
    assert again.failure is not None and not again.schedule.diverged, "still fails"
    assert again.failure.violation.kind == record["violation"]
    assert replay(load_jobs_target(BUNDLED_JOBS), record).failure is None


def _pytest_on(path: Path, env: dict[str, str] | None = None) -> int:
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)]
    environ = {**os.environ, **(env or {})}
    return subprocess.run(run, capture_output=True, text=True, timeout=120, env=environ).returncode


HYPOTHESIS_PROGRAM = """\
state.start(policy=RetryPolicy(max_attempts=2, base_backoff_millis=1, max_backoff_millis=1), backlog=Backlog(0, 0))
state.views_agree()
state.submit(payload='to=a@b.c', priority=0, run_at_millis=0, type='email')
state.views_agree()
leases_0 = state.poll(lease_millis=1, worker='w1')
state.views_agree()
state.poll(lease_millis=1, worker='w1')
state.views_agree()
state.poll(lease_millis=1, worker='w1')
state.views_agree()
state.poll(lease_millis=1, worker='w1')
state.views_agree()
state.poll(lease_millis=1, worker='w1')
state.views_agree()
state.fail(error='boom', job_id=None, lease=leases_0)
state.views_agree()
state.submit(payload='to=a@b.c', priority=0, run_at_millis=0, type='email')
state.views_agree()
leases_1 = state.poll(lease_millis=1, worker='w1')
state.views_agree()
state.advance_clock(offset=0, to='lease_until')
state.views_agree()
leases_2 = state.poll(lease_millis=1, worker='w1')
state.views_agree()
state.complete(job_id=None, lease=leases_0)
state.teardown()
"""  # noqa: E501
"""What Hypothesis printed for jobs-stale-token-accepted at ci, seed 0 (on one run): four
polls of a queue with nothing ready, that change nothing."""


def test_agreement_program_loses_the_steps_that_change_nothing(scratch: Path) -> None:
    """Without the idle polls the program fails with the same error; the message, the
    evidence and the export describe the shorter program, whose export fails on the
    mutant and passes on the bundled queue."""
    path = materialize(by_name("jobs-stale-token-accepted"), scratch)
    JobAgreement.bind(load_jobs_target(path))
    lines = HYPOTHESIS_PROGRAM.splitlines()
    error = replay_lines(JobAgreement, lines[:-1])
    assert isinstance(error, AssertionError) and "after step 12:" in str(error)
    error.add_note("\n".join(["state = JobAgreement()", *lines]))
    assert without_idle_steps(JobAgreement, error) is error
    example = Counterexample.from_error(error)
    assert example.steps == 9
    assert "after step 8:" in str(error), "the message is the shorter program's"
    assert example.evidence is not None and example.evidence.extra[SHRUNK_FROM] == "13"
    assert example.evidence.extra["ops"] == "9"
    exported = export(
        scratch / "export", "jobs.agreement", example, target=path, option="--jobs-impl",
        profile="ci", seed=0, nodeid="test_job_agreement.py::TestJobAgreement::runTest",
    )  # fmt: skip
    assert exported.read_text().count("state.poll(") == 3
    assert _pytest_on(exported) == 1, "the shrunk program still fails on the mutant"
    assert _pytest_on(exported, {ENV["jobs"]: str(BUNDLED_JOBS)}) == 0


def test_queue_linearizable_history_shrinks(scratch: Path) -> None:
    """planted:lease-truncated-to-minutes: a history of a few hundred operations shrinks to a
    few claims and the reads between them, still not linearizable when the racers run it
    again (the OS interleaves them, so the exact program may differ between runs)."""
    options = CheckOptions(
        adapter="planted:lease-truncated-to-minutes", properties=("queue.linearizable",),
        workers="0", examples=scratch / "examples",
    )  # fmt: skip
    found = run_check(options).properties["queue.linearizable"]
    example = found.counterexample
    assert found.verdict == "VIOLATED" and example is not None and example.evidence is not None
    extra = example.evidence.extra
    assert int(extra["ops"]) <= 40 < int(extra[SHRUNK_FROM]), extra
    assert any("fails too" in line for line in example.message)
    assert "two live leases on one job" in "\n".join(example.message)
