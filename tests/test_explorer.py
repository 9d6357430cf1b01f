"""The explorer core, the two systems, conformance and the ``leasecheck explore`` CLI."""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path

import pytest

from leasecheck.cli import main as cli_main
from leasecheck.conformance import replay_lease
from leasecheck.job_conformance import probe_clear_error, probe_expiry_on_error, replay_jobs
from leasecheck.models import lease_model
from leasecheck.models._lease_system import LeaseWorld
from leasecheck.models.contracts import Snapshot
from leasecheck.models.explorer import Move, explore
from leasecheck.models.job_explorer import JOB_SCOPES, explore_jobs
from leasecheck.models.lease_explorer import SCOPES, LeaseSystem, explore_lease
from leasecheck.mutants import by_name, materialize
from leasecheck.targets import load_jobs_target, load_worker

SMALL = SCOPES["small"][0]


def test_small_scope_is_exhausted_and_reaches_every_op_and_hook() -> None:
    system, result = explore_lease(SMALL)
    assert result.ok and result.exhausted
    assert result.states > 1000 and result.transitions > result.states
    for key in system.required():
        assert result.coverage[key] > 0, key


def test_dispatcher_symmetry_maps_swapped_worlds_to_one_state() -> None:
    system = LeaseSystem(SMALL)
    queue = lease_model.enqueue(Snapshot(), {"id": "a", "qty": 1}, 100, 4, 2).state
    step = lease_model.claim(queue, "d1", 100, 2)
    ticket = tuple(
        step.result[k] for k in ("id", "qty", "owner", "token", "attempt", "lease_until")
    )
    by_d1 = LeaseWorld(step.state, ((ticket,), ()), 100)
    other = lease_model.claim(queue, "d2", 100, 2)
    swapped = tuple(
        other.result[k] for k in ("id", "qty", "owner", "token", "attempt", "lease_until")
    )
    by_d2 = LeaseWorld(other.state, ((), (swapped,)), 100)
    assert system.canonical(by_d1) == system.canonical(by_d2)


def test_time_shift_maps_later_copies_to_one_state() -> None:
    system = LeaseSystem(SMALL)
    early = lease_model.enqueue(Snapshot(), {"id": "a", "qty": 1}, 100, 4, 2).state
    late = lease_model.enqueue(Snapshot(), {"id": "b", "qty": 1}, 107, 4, 2).state
    assert system.canonical(LeaseWorld(early, ((), ()), 100)) == system.canonical(
        LeaseWorld(late, ((), ()), 107)
    )


def test_a_model_bug_gives_a_shortest_concrete_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        lease_model, "_open_at", lambda row, now: row.status in ("pending", "leased")
    )
    system, result = explore_lease(SMALL)
    assert result.violation is not None
    text = result.violation.render(system)
    assert "two live leases" in text
    assert "1. enqueue {id: 'a', qty: 1} at t=100" in text
    assert "3. d" in text and "4." not in text  # enqueue, claim, claim: three steps


class _Trap:
    """A toy system: a job that can fall into a state it never leaves (liveness bug)."""

    def initial(self) -> int:
        return 0

    def canonical(self, state: int) -> int:
        return state

    def moves(self, state: int) -> Iterable[Move[int]]:
        if state == 0:
            yield Move("finish", 1, counts=("op:finish",))
            yield Move("wedge", 2, counts=("op:wedge",))
        if state == 2:
            yield Move("spin", 2, counts=("op:spin",))

    def check_state(self, state: int) -> str | None:
        return None

    def check_move(self, source: int, move: Move[int]) -> str | None:
        return None

    def items(self, state: int) -> Sequence[str]:
        return ["j"]

    def at_goal(self, state: int, item: str) -> bool:
        return state == 1

    def required(self) -> Sequence[str]:
        return ["op:finish", "op:never"]

    def describe_op(self, op: Hashable) -> str:
        return str(op)

    def op_shape(self, op: Hashable) -> Hashable:
        return op

    def describe_state(self, state: int) -> str:
        return f"state {state}"


class _GoalTrap(_Trap):
    """The trap, saying its goals per state (the search's ``goals`` path)."""

    def goals(self, state: int) -> frozenset[str]:
        return frozenset({"j"}) if state == 1 else frozenset()


@pytest.mark.parametrize("system", [_Trap(), _GoalTrap()], ids=["at_goal", "goals"])
def test_liveness_and_vacuity_are_reported(system: _Trap) -> None:
    result = explore(system, 100)
    assert result.violation is not None and result.violation.kind == "liveness"
    assert "can no longer reach done or dead" in result.violation.message
    assert [op for op, _ in result.violation.trace] == ["wedge"]
    assert result.missing == ("op:never",)


def test_bundled_worker_conforms_on_the_small_scope(scratch: Path) -> None:
    system, result = explore_lease(SMALL)
    report = replay_lease(load_worker(), system, result, scratch / "q.db")
    assert report.failure is None
    assert report.transitions > 1000 and report.states > 100


def test_a_boundary_mutant_is_caught_with_a_short_run(scratch: Path) -> None:
    module = load_worker(materialize(by_name("quarantine-deadline-strict"), scratch))
    system, result = explore_lease(SCOPES["ci"][0])
    report = replay_lease(module, system, result, scratch / "q.db")
    assert report.failure is not None
    assert "claims at t=104" in report.failure
    assert "on the target but returned None on the model" in report.failure


SECOND_CONNECTION = """
import sqlite3

from leasecheck.queue_impl import worker as _bundled
from leasecheck.queue_impl.worker import *  # noqa: F403


def claim(con, *args, **kwargs):
    # Reads the file on a connection of its own first (a target may): in the exclusive
    # locking mode the replay's connection holds the file, and this raises.
    (path,) = [row[2] for row in con.execute("PRAGMA database_list") if row[1] == "main"]
    other = sqlite3.connect(path, timeout=0)
    try:
        other.execute("SELECT COUNT(*) FROM jobs").fetchone()
    finally:
        other.close()
    return _bundled.claim(con, *args, **kwargs)
"""


def test_a_target_with_a_second_connection_is_judged_in_the_normal_lock_mode(
    scratch: Path,
) -> None:
    """The replay's exclusive locking mode refuses a second connection; the normal-mode
    run it falls back to judges the target (here correct: it holds)."""
    path = scratch / "second_connection.py"
    path.write_text(SECOND_CONNECTION)
    system, result = explore_lease(SMALL)
    report = replay_lease(load_worker(path), system, result, scratch / "q.db")
    assert report.failure is None
    assert report.transitions > 1000
    assert (scratch / "q-normal.db").exists()  # the fallback ran


def test_the_exclusive_lock_mode_replay_finds_what_the_normal_one_finds(scratch: Path) -> None:
    """Same transitions and states on the bundled worker, and the same first failure on a
    mutant, whichever lock mode the replay's connection is in."""
    import leasecheck.conformance as conformance

    system, result = explore_lease(SCOPES["ci"][0])
    worker = load_worker()
    mutant = load_worker(materialize(by_name("quarantine-deadline-strict"), scratch))
    for module in (worker, mutant):
        fast = conformance._replay(module, system, result, scratch / "x.db", exclusive=True)
        slow = conformance._replay(module, system, result, scratch / "n.db", exclusive=False)
        assert (fast.transitions, fast.states, fast.failure) == (
            slow.transitions, slow.states, slow.failure,
        )  # fmt: skip
        for name in ("x.db", "n.db"):
            for end in ("", "-journal"):
                (scratch / (name + end)).unlink(missing_ok=True)


def test_jobs_explorer_and_conformance() -> None:
    cls = load_jobs_target()
    readings = probe_clear_error(cls), probe_expiry_on_error(cls)
    assert readings == (False, {"KeyError": False, "IllegalStateError": True})
    system, result = explore_jobs(JOB_SCOPES["small"][0], *readings)
    assert result.ok and result.exhausted
    assert replay_jobs(cls, system, result).failure is None


def test_jobs_boundary_mutant_is_caught(scratch: Path) -> None:
    cls = load_jobs_target(materialize(by_name("jobs-ready-boundary"), scratch))
    system, result = explore_jobs(JOB_SCOPES["small"][0])
    failure = replay_jobs(cls, system, result).failure
    assert failure is not None and "w1 polls at t=100" in failure


def test_a_queue_of_both_readings_of_expiry_is_caught_at_the_call(scratch: Path) -> None:
    """A complete that checks the token before it processes expired leases: a token it
    never issued is refused at once (the probe's reading: not processed), the job's own
    lapsed token after processing them. Each call alone is a reading the replay accepts;
    the failure is named at the call that took the other one, not at a later call that
    only shows the state it left (a helper's blind bug: the report printed the model's
    reading as if the spec required it)."""
    cls = load_jobs_target(materialize(by_name("jobs-token-checked-before-expiry"), scratch))
    readings = _readings(cls)
    assert readings[1] == {"KeyError": False, "IllegalStateError": False}
    system, result = explore_jobs(JOB_SCOPES["ci"][0], *readings)
    failure = replay_jobs(cls, system, result).failure
    assert failure is not None
    assert "complete raised IllegalStateError and processed the expired leases first" in failure
    assert "raised IllegalStateError and did not process them" in failure
    assert "but not both in one queue" in failure
    steps = [line for line in failure.splitlines() if line.strip()[:3] in ("1. ", "4. ", "5. ")]
    assert [s.strip()[:2] for s in steps] == ["1.", "4."], failure


def test_a_refused_cancel_that_processes_expired_leases_is_caught(scratch: Path) -> None:
    """job-queue.md: "the other methods do not process them". A call that raised was
    accepted in either reading of expiry, a cancel's too; only poll, complete and fail
    may process expired leases before raising."""
    cls = load_jobs_target(materialize(by_name("jobs-cancel-refusal-expires"), scratch))
    system, result = explore_jobs(JOB_SCOPES["ci"][0], *_readings(cls))
    failure = replay_jobs(cls, system, result).failure
    assert failure is not None
    assert "4. cancel('J1') at t=101" in failure and "5. " not in failure, failure


def test_cli_usage_error_and_bad_target(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as usage:
        cli_main(["explore", "--scope", "huge"])
    assert usage.value.code == 2
    assert cli_main(["explore", "--impl", "/nonexistent/worker.py"]) == 2
    assert "is not a file" in capsys.readouterr().err


def test_cli_json_on_the_small_jobs_scope(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["explore", "--jobs-impl", str(load_jobs_target.__globals__["BUNDLED_JOBS"]),
                 "--scope", "small", "--json"]) == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and data["parts"][0]["exhausted"] and data["parts"][0]["states"] > 0


def test_a_failure_only_from_the_explorers_form_shows_the_state_its_run_reaches(
    scratch: Path,
) -> None:
    """A redrive that audits ``attempts`` where the contract says the token: equal on the
    state the printed run reaches, different on the explorer's form of it, which blanks a
    dead row's attempts. The report shows both, so that the run it prints is honest."""
    from leasecheck.targets import BUNDLED_WORKER

    source = BUNDLED_WORKER.read_text()
    audit = 'con.execute(AUDIT, (job_id, row["token"], now_ms, note))'
    assert source.count(audit) == 1
    path = scratch / "worker.py"
    path.write_text(source.replace(audit, audit.replace('row["token"]', 'row["attempts"]')))
    system, result = explore_lease(SCOPES["ci"][0])
    report = replay_lease(load_worker(path), system, result, scratch / "q.db")
    assert report.failure is not None
    assert "reach this state, and from it the target agrees with the model" in report.failure
    assert "blanks the columns no operation of the contract reads again" in report.failure


def test_a_jobs_difference_in_dead_letters_alone_shows_dead_letters(scratch: Path) -> None:
    cls = load_jobs_target(materialize(by_name("jobs-dead-letters-newest-first"), scratch))
    system, result = explore_jobs(JOB_SCOPES["ci"][1])
    failure = replay_jobs(cls, system, result).failure
    assert failure is not None
    assert "target dead_letters(): [" in failure and "model dead_letters(): [" in failure, failure


ID_TOKENS = (
    "            self._last_token += 1",
    "            self._kept = [*getattr(self, '_kept', []), object()]  # alive: ids never reused\n"
    "            self._last_token = id(self._kept[-1])",
)
"""Tokens that are ``id()``s of objects the queue keeps: unique for the queue's life, a
correct reading of job-queue.md; a copy of the queue holds new objects with new ids."""


def _id_tokens(source: str, scratch: Path, name: str) -> type:
    assert source.count(ID_TOKENS[0]) == 1
    path = scratch / f"{name}.py"
    path.write_text(source.replace(*ID_TOKENS))
    return load_jobs_target(path)


def _readings(cls: type) -> tuple[bool, dict[str, bool]]:
    return probe_clear_error(cls), probe_expiry_on_error(cls)


def test_a_queue_whose_copies_differ_is_replayed_by_paths_and_holds(scratch: Path) -> None:
    """A helper's correct queue (id() tokens) failed jobs.model-check: its pickled copies
    refused the token learned from the original. A failure on a copy is now confirmed on
    a new instance first; unconfirmed, the replay starts again by paths."""
    from leasecheck.targets.loader import BUNDLED_JOBS

    cls = _id_tokens(BUNDLED_JOBS.read_text(), scratch, "id_tokens")
    system, result = explore_jobs(JOB_SCOPES["small"][0], *_readings(cls))
    report = replay_jobs(cls, system, result)
    assert report.failure is None, report.failure
    assert report.rebuilt.startswith("a copy of the target behaved unlike a new instance")
    assert report.transitions > 0


def test_a_real_bug_of_such_a_queue_is_still_reported(scratch: Path) -> None:
    source = by_name("jobs-ready-boundary").source()
    cls = _id_tokens(source, scratch, "id_tokens_ready_boundary")
    system, result = explore_jobs(JOB_SCOPES["small"][0], *_readings(cls))
    failure = replay_jobs(cls, system, result).failure
    assert failure is not None and "w1 polls at t=100" in failure


def test_a_failure_that_needs_a_module_cache_says_so(scratch: Path) -> None:
    """A helper's worker kept tickets in a module-level cache: the printed shortest run
    failed only after earlier runs had filled it, and did not replay in a new process. The
    report now says that, having run the steps again on a new file and a new import."""
    from leasecheck.targets import BUNDLED_WORKER

    source = BUNDLED_WORKER.read_text()
    stale = "        if row is None or _is_stale(row, ticket, now_ms):\n"
    assert source.count(stale) == 1
    cached = (
        "        if (ticket['id'], ticket['token']) in _FINISHED:\n            return False\n"
        "        _FINISHED.add((ticket['id'], ticket['token']))\n" + stale
    )
    path = scratch / "worker.py"
    path.write_text(source.replace(stale, cached) + "\n_FINISHED: set[object] = set()\n")
    module = load_worker(path)
    system, result = explore_lease(SCOPES["ci"][0])
    report = replay_lease(module, system, result, scratch / "queue.db")
    assert report.failure is not None
    assert "Run from the start on a new queue file, with the target imported again" in (
        report.failure
    )
    assert not list(scratch.glob("*-from-scratch*"))
    # The bundled worker's failures (a mutant) replay from scratch: no such note.
    mutant = load_worker(materialize(by_name("quarantine-deadline-strict"), scratch))
    failure = replay_lease(mutant, system, result, scratch / "mutant.db").failure
    assert failure is not None and "imported again" not in failure
