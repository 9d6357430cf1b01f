"""The deterministic thread scheduler and jobs.interleavings, on real JobQueue files.

Each test loads a target file as a user's would be (``load_jobs_target``): the bundled
queue, a mutant of the public catalogue, or the bundled source with one edit made
here. The scheduler must find a planted race in the schedule with the fewest
preemptions, give the same schedules and verdicts on every run, hold on the bundled
queue, print the failing schedule line by line, and replay exactly that schedule
from its JSON record, also from the file ``--export`` writes.
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest

from leasecheck.counterexample import Counterexample, export
from leasecheck.mutants import Mutant, by_name, materialize
from leasecheck.report import draw
from leasecheck.stateful_tests import _thread_run, thread_scheduler
from leasecheck.stateful_tests.job_interleavings import (
    CI_SCENARIOS,
    PLANS,
    InterleavingFailure,
    Scenario,
    check_scenarios,
    replay,
)
from leasecheck.targets.loader import BUNDLED_JOBS, load_jobs_target

CANCEL = "cancel while a poll leases"
FAIL_LOCK = '        message = _optional_str("error", error)\n        with self._lock:\n'


def _scenario(name: str) -> Scenario:
    return next(s for s in CI_SCENARIOS if s.name == name)


def _mutant(mutant: Mutant, directory: Path) -> type[Any]:
    return load_jobs_target(materialize(mutant, directory))


def _edited(directory: Path, *edits: tuple[str, str]) -> type[Any]:
    """The bundled queue with ``edits`` (each ``find`` occurring once) as a target file."""
    text = BUNDLED_JOBS.read_text()
    for find, replace in edits:
        assert text.count(find) == 1, find
        text = text.replace(find, replace)
    path = directory / "job_queue.py"
    path.write_text(text)
    return load_jobs_target(path)


def _failure(cls: type[Any], scenario: str, preemptions: int = 2) -> InterleavingFailure:
    with pytest.raises(InterleavingFailure) as caught:
        check_scenarios(cls, [(_scenario(scenario), preemptions)])
    return caught.value


def test_the_bundled_queue_holds_in_every_ci_schedule() -> None:
    summary = check_scenarios(load_jobs_target(), PLANS["ci"])
    assert summary.explored > len(PLANS["ci"]) * 2  # more than the schedules without preemption
    assert summary.threads == 3 and summary.preemptions == 2
    assert summary.text().endswith(
        "16 scenarios (12 exhaustive) <=3 threads x <=3 calls, <=2 preemptions"
    )


def test_a_poll_that_picks_outside_the_lock_leases_one_job_twice(tmp_path: Path) -> None:
    cls = _mutant(by_name("jobs-poll-picks-outside-lock"), tmp_path)
    record = _failure(cls, "two polls, two ready jobs").leasecheck_replay
    assert record["violation"] == "double lease"
    assert record["preemptions"] == 1  # fewest first: no schedule without a preemption fails


def test_the_printed_schedule_names_threads_lines_and_the_preemption(tmp_path: Path) -> None:
    cls = _mutant(by_name("jobs-complete-check-then-act"), tmp_path)
    text = str(_failure(cls, "complete and fail one lease"))
    assert "preemption 1: T1 is switched out, T2 runs" in text
    assert (
        "T1 runs line" in text
        and "of JobQueue.complete: `job.status = JobStatus.SUCCEEDED`" in text
    )
    assert "-> T2#1 fail -> None" in text and "-> T1#1 complete -> None" in text
    assert "here the model raises IllegalStateError" in text


def test_exploration_is_deterministic(tmp_path: Path) -> None:
    cls = _mutant(by_name("jobs-cancel-check-then-act"), tmp_path)
    first = _failure(cls, "cancel while a poll leases").leasecheck_replay
    again = _failure(cls, "cancel while a poll leases").leasecheck_replay
    assert first == again
    bundled = load_jobs_target()
    plan = PLANS["quick"][:4]
    counts = [
        [(f.explored, f.pruned, f.steps) for _, f in check_scenarios(bundled, plan).scenarios]
        for _ in range(2)
    ]
    assert counts[0] == counts[1]


def test_replay_runs_exactly_the_recorded_schedule(tmp_path: Path) -> None:
    cls = _mutant(by_name("jobs-token-read-before-lock"), tmp_path)
    record = json.loads(json.dumps(_failure(cls, "two polls, two ready jobs").leasecheck_replay))
    replayed = replay(cls, record)
    assert replayed.failure is not None and not replayed.schedule.diverged
    assert list(replayed.schedule.choices) == record["schedule"]
    assert replayed.failure.violation.kind == record["violation"] == "token reused"
    fixed = replay(load_jobs_target(), record)
    assert fixed.failure is None, fixed.report()


def test_the_exported_file_replays_the_schedule(tmp_path: Path) -> None:
    mutant = by_name("jobs-view-without-lock")
    error = _failure(_mutant(mutant, tmp_path), "view while a poll leases")
    example = Counterexample.from_record(Counterexample.from_error(error).record())
    assert example.schedule is not None
    for target, fails in ((materialize(mutant, tmp_path), True), (BUNDLED_JOBS, False)):
        path = export(
            tmp_path / ("bad" if fails else "good"), "jobs.interleavings", example,
            target=target, option="--jobs-impl", profile="ci", seed=0, nodeid="x::y",
        )  # fmt: skip
        test = runpy.run_path(str(path))["test_jobs_interleavings_counterexample"]
        if fails:
            with pytest.raises(AssertionError, match="not linearizable"):
                test()
        else:
            test()


def test_pruning_changes_the_work_not_the_verdict(tmp_path: Path) -> None:
    plan = [(_scenario("two polls, two ready jobs"), 2), (_scenario("two submits"), 2)]
    pruned = check_scenarios(load_jobs_target(), plan)
    full = check_scenarios(load_jobs_target(), plan, prune=False)
    assert full.explored >= pruned.explored and full.pruned == 0
    cls = _mutant(by_name("jobs-submit-id-outside-lock"), tmp_path)
    found = []
    for prune in (True, False):
        with pytest.raises(InterleavingFailure) as caught:
            check_scenarios(cls, plan, prune=prune)
        found.append(caught.value.leasecheck_replay)
    assert found[0]["preemptions"] == found[1]["preemptions"] == 1


def test_two_locks_taken_in_opposite_orders_deadlock(tmp_path: Path) -> None:
    cls = _edited(
        tmp_path,
        ("        self._lock = threading.Lock()\n",
         "        self._lock = threading.Lock()\n        self._other = threading.Lock()\n"),
        ("        with self._lock:\n            now = self._time.now_millis()\n",
         "        with self._lock, self._other:\n            now = self._time.now_millis()\n"),
        (FAIL_LOCK, FAIL_LOCK.replace("self._lock", "self._other, self._lock")),
    )  # fmt: skip
    error = _failure(cls, "two workers poll and finish", preemptions=1)
    assert error.leasecheck_replay["violation"] == "deadlock"
    assert "deadlock: every unfinished thread is blocked (T1 waits for a lock at" in str(error)


@pytest.mark.parametrize("lock", ["RLock", "Condition"])
def test_a_queue_on_an_rlock_or_a_condition_holds(tmp_path: Path, lock: str) -> None:
    cls = _edited(tmp_path, ("self._lock = threading.Lock()", f"self._lock = threading.{lock}()"))
    check_scenarios(cls, PLANS["quick"][:3])


@pytest.mark.parametrize("mutex", ["BoundedSemaphore(1)", "Semaphore(1)"])
def test_a_queue_on_a_semaphore_is_scheduled_as_one_on_a_lock(tmp_path: Path, mutex: str) -> None:
    """A helper's correct queue used a BoundedSemaphore as its mutex: it read HUNG, for the
    scheduler did not control it. Now a semaphore is a cooperative primitive: the same
    schedules, the same exhaustive scenarios as on a Lock."""
    on_lock = check_scenarios(load_jobs_target(), PLANS["ci"])
    cls = _edited(tmp_path, ("self._lock = threading.Lock()", f"self._lock = threading.{mutex}"))
    on_semaphore = check_scenarios(cls, PLANS["ci"])
    assert on_semaphore.text() == on_lock.text()


def test_a_race_across_a_semaphore_is_still_found(tmp_path: Path) -> None:
    """jobs-poll-picks-outside-lock with a BoundedSemaphore for its lock: a double lease."""
    source = by_name("jobs-poll-picks-outside-lock").source()
    path = tmp_path / "job_queue.py"
    lock = "self._lock = threading.Lock()"
    assert source.count(lock) == 1
    path.write_text(source.replace(lock, "self._lock = threading.BoundedSemaphore(1)"))
    record = _failure(load_jobs_target(path), "two polls, two ready jobs").leasecheck_replay
    assert record["violation"] == "double lease"


def test_a_wait_the_scheduler_does_not_control_stops_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_thread_run, "POINT_DEADLINE_S", 0.3)
    cls = _edited(
        tmp_path,
        ("        with self._lock:\n            now = self._time.now_millis()\n",
         "        __import__('time').sleep(1.0)\n"
         "        with self._lock:\n            now = self._time.now_millis()\n"),
    )  # fmt: skip
    with pytest.raises(thread_scheduler.SchedulerStuck, match=r"does not control|did not unwind"):
        check_scenarios(cls, [(_scenario("two polls, two ready jobs"), 0)])


def test_the_report_draws_the_failing_history_as_lanes(tmp_path: Path) -> None:
    error = _failure(_mutant(by_name("jobs-cancel-check-then-act"), tmp_path), CANCEL)
    failure = Counterexample.from_record(Counterexample.from_error(error).record())
    assert failure.evidence is not None, "the failure carries its schedule as evidence"
    assert {actor.name for actor in failure.evidence.actors} >= {"T1", "T2"}
    svg = draw(failure.evidence)
    assert 'data-unit="step"' in svg and "T1" in svg and "T2" in svg and "cancel" in svg


SCAN = (
    "        with self._lock:\n            now = self._time.now_millis()\n",
    "        with self._lock:\n            now = self._time.now_millis()\n"
    "            for level in range(40):  # a scan of 40 priority levels, each read\n"
    "                self._levels_seen = level\n",
)
"""A poll that passes one visible line 40 times under its lock, as a bucket queue's scan
of its priority levels does."""


def test_a_long_loop_is_preempted_in_its_first_passes_and_then_ever_more_rarely(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each pass of a visible line used to be a point: schedules grow with the square of
    the points (806 s for a queue scanning 256 buckets). Now the first ``LOOP_POINTS``
    passes are points, then passes 16, 32, ...: far fewer schedules, the same verdict."""
    cls = _edited(tmp_path, SCAN)
    plan = [(_scenario("two polls, two ready jobs"), 2)]
    thinned = check_scenarios(cls, plan)
    monkeypatch.setattr(_thread_run, "LOOP_POINTS", 10**9)
    every = check_scenarios(cls, plan)
    assert thinned.explored * 2 < every.explored, (thinned.explored, every.explored)
    assert thinned.steps * 4 < every.steps, (thinned.steps, every.steps)
    assert every.text().endswith("(1 exhaustive) <=2 threads x <=1 calls, <=2 preemptions")
    # A scenario some of whose passes were not points is not every interleaving.
    assert thinned.text().endswith("(0 exhaustive) <=2 threads x <=1 calls, <=2 preemptions")


def test_a_race_behind_a_long_scan_is_still_found(tmp_path: Path) -> None:
    """jobs-poll-picks-outside-lock with 300 visible passes before its pick: the race needs
    a switch between the unlocked pick and the lease, which the thinning keeps."""
    source = by_name("jobs-poll-picks-outside-lock").source()
    find = '        lease_for = _exact_int("lease_millis", lease_millis)\n'
    assert source.count(find) == 1
    scan = find + "        for level in range(300):\n            self._levels_seen = level\n"
    path = tmp_path / "job_queue.py"
    path.write_text(source.replace(find, scan))
    record = _failure(load_jobs_target(path), "two polls, two ready jobs").leasecheck_replay
    assert record["violation"] == "double lease"
