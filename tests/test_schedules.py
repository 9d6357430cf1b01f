"""Schedules of two real dispatcher processes: enumeration, verdicts, exact replay."""

from __future__ import annotations

from pathlib import Path

from leasecheck.crash_harness.schedules import Run, Schedule, check, enumerate_schedules, replay
from leasecheck.mutants import by_name, materialize
from leasecheck.targets import load_worker


def test_every_schedule_of_the_bundled_worker_passes(
    scratch: Path, no_leaked_children: None
) -> None:
    count, failing = enumerate_schedules(load_worker(), scratch, jobs=1, kills=1)
    assert failing is None
    assert count >= 30


def test_a_schedule_replays_exactly(scratch: Path, no_leaked_children: None) -> None:
    schedule = Schedule(1, 1, ("A", "B", "kill:A"))
    first = replay(load_worker(), scratch, schedule)
    second = replay(load_worker(), scratch, Schedule.from_json(first.schedule.to_json()))
    assert first.steps == second.steps and first.final == second.final
    assert first.killed == {"A": (0, "after-claim")} and first.problem is None
    assert "A is SIGKILLed at 'after-claim'" in first.describe()


def test_the_deferred_begin_mutant_fails_and_its_saved_schedule_replays(
    scratch: Path, no_leaked_children: None
) -> None:
    module = load_worker(materialize(by_name("deferred-begin"), scratch))
    _, failing = enumerate_schedules(module, scratch, jobs=2, kills=0)
    assert failing is not None and "database is locked" in (failing.problem or "")
    again = replay(module, scratch, Schedule.from_json(failing.schedule.to_json()))
    assert again.problem == failing.problem


def test_two_tickets_for_one_job_have_no_serial_explanation() -> None:
    ticket = {"id": "j1", "qty": 1, "owner": "A", "token": 1, "attempt": 1, "lease_until": 2000}
    run = Run(Schedule(1, 0, ()), seen={"A": [ticket], "B": [dict(ticket, owner="B")]})
    assert "no serial execution" in (check(run) or "")
