"""queue.interleavings: the lease worker's scheduler on real libraries' SQL statements.

Each test runs real processes on a real store through ``crash_harness.queue_interleavings``
and checks what a user would read: the property the schedule breaks, whether the library
promises it, the statements each process ran, and that the schedule replays.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import litequeue  # noqa: F401  (the .[dev] install brings both: missing, the tests fail)
import persistqueue  # noqa: F401
import pytest

from leasecheck.adapters.registry import load_library
from leasecheck.crash_harness._queue_scenarios import (
    BOUNDS,
    SCENARIOS,
    VERB_BOUNDS,
    queue_scenario,
)
from leasecheck.crash_harness.interleavings import STEP_NS, Schedule
from leasecheck.crash_harness.queue_interleavings import explore_queue, replay_queue
from leasecheck.models.history_evidence import queue_schedule_evidence
from leasecheck.models.queue_ops import QueueOp
from leasecheck.report import draw


def test_a_sweep_that_re_readies_by_id_after_an_ack_is_an_ack_final_violation(
    tmp_path: Path,
) -> None:
    """litequeue's sweep is list_locked then retry(message_id); an ack between the two is
    undone (retry updates by id whatever the status), and litequeue promises ack-final."""
    found = explore_queue(load_library("litequeue"), queue_scenario("sweep-ack"), tmp_path, 2)
    assert found.violated is not None and found.violated.prop == "queue.ack-final"
    steps = found.violated.run.interleaving().splitlines()
    selects = next(n for n, line in enumerate(steps) if "P2 ran `SELECT * FROM" in line)
    acks = next(
        n for n, line in enumerate(steps) if "P1 ran `UPDATE [Queue] SET status = 2" in line
    )
    retries = next(
        n for n, line in enumerate(steps) if "P2 ran `UPDATE [Queue] SET status = 0" in line
    )
    assert selects < acks < retries, steps
    assert "ack(cid='ca', job='a') -> True" in found.violated.run.interleaving()
    again = replay_queue(
        load_library("litequeue"), queue_scenario("sweep-ack"), found.violated.run.schedule,
        tmp_path / "replay",
    )  # fmt: skip
    assert again.violated is not None and again.violated.prop == "queue.ack-final"
    assert again.violated.run.schedule == found.violated.run.schedule


def test_the_same_schedules_are_explored_every_time(tmp_path: Path) -> None:
    library = load_library("litequeue")
    runs = [explore_queue(library, queue_scenario("claim-sweep"), tmp_path / str(n), 2)
            for n in range(2)]  # fmt: skip
    assert runs[0].exploration.explored == runs[1].exploration.explored > 1
    assert runs[0].violated is None and runs[1].violated is None


def test_the_lease_worker_holds_every_ci_scenario(tmp_path: Path) -> None:
    library = load_library("lease-worker")
    for name, bound in BOUNDS["ci"]:
        scenario = queue_scenario(name)
        if not scenario.runs_on(library.capabilities):
            continue
        found = explore_queue(library, scenario, tmp_path, bound)
        assert found.violated is None and found.unpromised is None, name
        assert found.exploration.explored >= 1, name


def test_a_true_ack_after_the_lease_ran_out_that_is_dropped_is_caught(tmp_path: Path) -> None:
    library = load_library("planted:ack-after-expiry-dropped")
    found = explore_queue(library, queue_scenario("sweep-ack"), tmp_path, 2)
    assert found.violated is not None and found.violated.prop == "queue.ack-final"
    # The finding keeps the history it judged, every entry the generic queue's record,
    # and that history is the failure's evidence: a lane per process, a record per step.
    history = found.violated.history
    assert history and all(isinstance(op.call, QueueOp) for op in history)
    evidence = queue_schedule_evidence(history, "queue.ack-final", STEP_NS, found.violated.origin)
    assert {"P1", "P2"} <= {step.actor for step in evidence.steps}
    assert all(step.call is not None for step in evidence.steps)
    assert "ack(cid='ca', job='a')" in [step.operation.split(" ", 1)[1] for step in evidence.steps]
    svg = ET.fromstring(draw(evidence))
    lanes = {e.get("data-lane") for e in svg.iter() if e.get("data-kind") == "step"}
    assert {"P1", "P2"} <= lanes
    # The seeded claim 'ca' (the harness's, lane H) leased job 'a' for 50 ms; the clock's
    # move of 200 ms (step 3) ran it out, on both sides, before the processes started.
    claim, advance = (s for s in evidence.steps if s.kind in ("claim", "advance"))
    assert {(x.side, x.job, x.holder, x.start, x.until, x.step) for x in evidence.leases} == {
        (side, "a", "H", claim.start, advance.start, claim.index) for side in ("target", "model")
    }
    bars = [e for e in svg.iter() if e.get("data-kind") == "lease"]
    assert [(e.get("data-lane"), e.get("data-job"), e.get("data-side")) for e in bars] == [
        ("H", "a", "both")
    ]


def test_two_claims_that_take_one_job_are_two_live_leases_in_two_lanes(tmp_path: Path) -> None:
    """persist-queue's claim-claim finding (not promised): each process's claim is a lease
    on its own lane, as the library reported it (persist-queue says no lease end: the
    lease asked for) and as the model expects it; the two overlap."""
    found = explore_queue(load_library("persist-queue"), queue_scenario("claim-claim"),
                          tmp_path, 2)  # fmt: skip
    assert found.unpromised is not None and found.unpromised.prop == "queue.exclusive"
    finding = found.unpromised
    evidence = queue_schedule_evidence(finding.history, "two claims", STEP_NS, finding.origin)
    claims = [s for s in evidence.steps if s.kind == "claim"]
    assert {s.actor for s in claims} == {"P1", "P2"}
    assert {(x.side, x.holder, x.job) for x in evidence.leases} == {
        (side, process, claims[0].job) for side in ("target", "model") for process in ("P1", "P2")
    }
    svg = ET.fromstring(draw(evidence))
    bars = {e.get("data-lane") for e in svg.iter() if e.get("data-kind") == "lease"}
    assert bars == {"P1", "P2"}
    assert any(e.get("data-kind") == "overlap" for e in svg.iter())


def test_two_claims_of_persist_queue_can_take_one_job_not_promised(tmp_path: Path) -> None:
    """persist-queue's get runs its SELECT and UPDATE outside a transaction: a schedule
    that runs both SELECTs first gives both processes row 1 (queue.exclusive, which
    persist-queue does not promise for processes)."""
    found = explore_queue(load_library("persist-queue"), queue_scenario("claim-claim"),
                          tmp_path, 2)  # fmt: skip
    assert found.violated is None
    assert found.unpromised is not None and found.unpromised.prop == "queue.exclusive"
    assert not found.unpromised.promised


def test_a_schedule_names_a_process_that_cannot_run(tmp_path: Path) -> None:
    from leasecheck.crash_harness.interleavings import ScheduleMismatch

    schedule = Schedule("sweep-ack", ("P3",))
    with pytest.raises(ScheduleMismatch, match="cannot run here"):
        replay_queue(load_library("lease-worker"), queue_scenario("sweep-ack"), schedule,
                     tmp_path)  # fmt: skip


def test_every_scenario_is_named_in_some_profile() -> None:
    named = {name for bounds in (BOUNDS, VERB_BOUNDS) for scope in bounds.values()
             for name, _ in scope}  # fmt: skip
    assert named == {scenario.name for scenario in SCENARIOS}
    with pytest.raises(KeyError, match="known: sweep-ack"):
        queue_scenario("sweep-ack-typo")
