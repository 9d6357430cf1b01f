"""The interleavings engine: deterministic, replayable, blocked observed, bugs found shortest.

Each test runs real forked processes on a SQLite file in a scratch directory through
``crash_harness.interleavings``, on the bundled worker or on a catalogue mutant loaded
as a user's target.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import time
from pathlib import Path
from types import ModuleType

import pytest

from leasecheck.counterexample import Counterexample, ScheduleFailure, export
from leasecheck.crash_harness import _lock_view
from leasecheck.crash_harness._interleave_scenarios import BOUNDS, SCENARIOS, by_name
from leasecheck.crash_harness.engine import Channel, Engine
from leasecheck.crash_harness.interleavings import Schedule, ScheduleMismatch, explore, replay
from leasecheck.mutants import by_name as mutant
from leasecheck.mutants import materialize
from leasecheck.targets.loader import BUNDLED_WORKER, load_worker

pytestmark = pytest.mark.usefixtures("no_leaked_children")


@pytest.fixture(scope="module")
def bundled() -> ModuleType:
    return load_worker(BUNDLED_WORKER)


def _mutant(name: str, directory: Path) -> ModuleType:
    return load_worker(materialize(mutant(name), directory))


def test_schedule_is_json_data() -> None:
    schedule = Schedule("claim-claim", ("P2", "P1", "P1"))
    assert Schedule.from_json(schedule.to_json()) == schedule
    assert schedule.record() == {"scenario": "claim-claim", "choices": ["P2", "P1", "P1"]}


def test_every_scenario_of_the_profiles_exists() -> None:
    names = {s.name for s in SCENARIOS}
    for bounds in BOUNDS.values():
        assert {name for name, _ in bounds} <= names
    written = {call.kind for s in SCENARIOS for program in s.programs for call in program}
    assert written == {"enqueue", "claim", "finish", "redrive", "run_once", "run_file"}


def test_bundled_worker_holds_and_the_search_is_deterministic(
    bundled: ModuleType, scratch: Path
) -> None:
    first = explore(bundled, by_name("claim-claim"), scratch, None)
    again = explore(bundled, by_name("claim-claim"), scratch, None)
    assert first.failure is None
    assert first.explored > 1 and first.pruned + first.cut > 0
    assert (first.explored, first.pruned, first.cut, first.points) == (
        again.explored, again.pruned, again.cut, again.points,
    )  # fmt: skip


def test_a_waiting_process_is_seen_blocked_and_resumed(bundled: ModuleType, scratch: Path) -> None:
    # P1 opens its transaction (BEGIN IMMEDIATE, QUARANTINE), then P2 asks for the lock.
    schedule = Schedule("claim-claim", ("P1", "P1", "P2"))
    run = replay(bundled, schedule, scratch)
    actions = [(step.process, step.action) for step in run.steps]
    blocked = actions.index(("P2", "blocked"))
    assert ("P2", "resumed") in actions[blocked:]
    assert run.problem is None
    assert "busy handler" in run.steps[blocked].describe()


def test_replay_runs_exactly_the_recorded_schedule(bundled: ModuleType, scratch: Path) -> None:
    schedule = Schedule("finish-finish", ("P2", "P1", "P2", "P2", "P2", "P2", "P1"))
    first, second = replay(bundled, schedule, scratch), replay(bundled, schedule, scratch)
    assert first.schedule == second.schedule
    assert first.schedule.choices[: len(schedule.choices)] == schedule.choices
    assert [s.describe() for s in first.steps] == [s.describe() for s in second.steps]
    assert first.final == second.final


def test_a_choice_that_cannot_run_is_refused(bundled: ModuleType, scratch: Path) -> None:
    with pytest.raises(ScheduleMismatch, match="cannot run here"):
        replay(bundled, Schedule("claim-claim", ("P3",)), scratch)


@pytest.mark.parametrize(
    ("name", "scenario", "says"),
    [
        ("claim-select-then-update-by-id", "claim-claim", "two winners of job 'j1'"),
        ("enqueue-begins-deferred", "enqueue-enqueue", "raised 'database is locked'"),
        ("deferred-begin", "finish-finish", "raised 'database is locked'"),
        ("finish-checks-then-commits-before-update", "finish-finish", "not linearizable"),
        ("redrive-checks-dead-before-begin", "redrive-redrive", "here the model raises"),
    ],
)
def test_planted_race_is_found_with_one_forced_switch(
    name: str, scenario: str, says: str, scratch: Path
) -> None:
    module = _mutant(name, scratch)
    found = explore(module, by_name(scenario), scratch, None)
    assert found.failure is not None, f"{name} survived {scenario}"
    assert found.failure.preemptions == 1
    text = found.failure.describe(found.scenario)
    assert says in text
    assert "P1 ran `BEGIN" in text or "P2 ran `BEGIN" in text
    again = replay(module, found.failure.schedule, scratch)
    assert again.problem == found.failure.problem


def test_export_replays_the_schedule(scratch: Path) -> None:
    target = materialize(mutant("redrive-checks-dead-before-begin"), scratch)
    found = explore(load_worker(target), by_name("redrive-redrive"), scratch, None)
    assert found.failure is not None
    error = ScheduleFailure("lease.interleavings: ...", found.failure.schedule.record())
    example = Counterexample.from_error(error)
    assert Counterexample.from_record(example.record()).schedule == example.schedule
    path = export(
        scratch / "export", "lease.interleavings", example, target=target, option="--impl",
        profile="ci", seed=0, nodeid="test_interleavings.py::test_interleavings",
    )  # fmt: skip
    spec = importlib.util.spec_from_file_location("exported_interleaving", path)
    assert spec is not None and spec.loader is not None
    exported = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exported)
    assert found.failure.schedule.record() == exported.SCHEDULE
    with pytest.raises(AssertionError, match="P2 ran `INSERT INTO redrives"):
        exported.test_lease_interleavings_counterexample()


def test_lock_view_sees_the_holder_and_the_sleeping_waiter(scratch: Path) -> None:
    path = scratch / "locks.db"
    sqlite3.connect(path).close()

    def holder(channel: Channel) -> None:
        con = sqlite3.connect(path, isolation_level=None, timeout=1)
        con.execute("BEGIN IMMEDIATE")
        channel.ask("holding")
        con.execute("COMMIT")
        con.close()

    def waiter(channel: Channel) -> str:
        con = sqlite3.connect(path, isolation_level=None, timeout=1)
        con.execute("BEGIN IMMEDIATE")  # waits in the busy handler until the holder commits
        con.execute("COMMIT")
        con.close()
        return "got it"

    with Engine(10.0) as engine:
        first = engine.fork("holder", holder)
        assert first.next("the holder's BEGIN IMMEDIATE").kind == "holding"
        locks = _lock_view.file_locks(path)
        assert any(lock.pid == first.pid and lock.write for lock in locks)
        second = engine.fork("waiter", waiter)
        deadline = time.monotonic() + 10
        while not _lock_view.asleep(second.pid):
            assert time.monotonic() < deadline, "the waiter never slept in the busy handler"
        while True:  # a stop may catch it between two sleeps: then it runs on and sleeps again
            _lock_view.stop(second.pid, 5.0)
            if _lock_view.stopped_asleep(second.pid):
                break
            _lock_view.resume(second.pid)
        assert not any(lock.pid == second.pid for lock in _lock_view.file_locks(path))
        first.answer()
        first.outcome("the holder's commit")
        _lock_view.resume(second.pid)
        assert second.outcome("the waiter's turn").value == "got it"


def test_next_or_blocked_tells_a_waiter_from_a_slow_child(scratch: Path) -> None:
    """The schedulers of forked SQLite children (schedules, lease linearizability) ask
    ``next_or_blocked``: a child asleep in the busy handler behind another's lock is
    blocked (None, at once, not after a silence); a child busy for longer than any
    silence the old schedulers waited (50 ms) is not, and its message is returned."""
    path = scratch / "locks.db"
    sqlite3.connect(path).close()

    def holder(channel: Channel) -> None:
        con = sqlite3.connect(path, isolation_level=None, timeout=1)
        con.execute("BEGIN IMMEDIATE")
        channel.ask("holding")
        con.execute("COMMIT")
        con.close()

    def waiter(channel: Channel) -> None:
        con = sqlite3.connect(path, isolation_level=None, timeout=5)
        channel.ask("ready")
        con.execute("BEGIN IMMEDIATE")
        channel.send("locked")
        con.execute("COMMIT")
        con.close()

    def slow(channel: Channel) -> None:
        deadline = time.monotonic() + 0.2
        while time.monotonic() < deadline:  # busy, never asleep: not blocked
            pass
        channel.send("done")

    with Engine(10.0) as engine:
        first = engine.fork("holder", holder)
        assert first.next("the holder's BEGIN IMMEDIATE").kind == "holding"
        second = engine.fork("waiter", waiter)
        assert second.next("the waiter's connection").kind == "ready"
        second.answer()
        started = time.monotonic()
        assert _lock_view.next_or_blocked([second], path, "the waiter", 5.0) is None
        assert time.monotonic() - started < 1.0  # well inside its 5 s busy timeout
        third = engine.fork("slow", slow)  # while the lock is still held
        got = _lock_view.next_or_blocked([third], path, "the slow child", 5.0)
        assert got is not None and got[1].kind == "done"
        third.outcome("the slow child's end")
        first.answer()
        first.outcome("the holder's commit")
        got = _lock_view.next_or_blocked([second], path, "the waiter", 5.0)
        assert got is not None and got[1].kind == "locked"
        second.outcome("the waiter's commit")
