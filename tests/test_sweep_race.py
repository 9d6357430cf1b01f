"""queue.linearizable's set-aside of calls that ran beside the library's own sweep
(``leasecheck/properties/_sweep_race.py``): only a holder's call on a lease that ran
out, overlapping a logged sweep, loses its outcome; every other call is judged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from leasecheck.adapters.lease_worker import LeaseWorker
from leasecheck.adapters.rq import RqDefaults
from leasecheck.adapters.server_plants import AckDroppingRq
from leasecheck.crash_harness.queue_races import linear_run
from leasecheck.models import queue_model as qm
from leasecheck.models._queue_spec import QueueSpec
from leasecheck.models.linearizability import Operation, check
from leasecheck.models.queue_ops import QueueOp, QueueOutcome
from leasecheck.properties._sweep_race import logged_sweeps, read_sweeps, set_aside

SWEEP = (11, 29)
"""P2's claim [10, 30] ran the library's sweep in this window (ns)."""


def _op(
    who: str, index: int, span: tuple[int, int], name: str, value: Any, **args: Any
) -> Operation:
    return Operation(who, index, QueueOp.of(name, **args), span[0], span[1], QueueOutcome(value))


def _sweep_ack(advance_ms: int, ack_span: tuple[int, int]) -> list[Operation]:
    """P1 claims 'a' for 100 ms, the clock moves, P2's claim sweeps while P1 acks; the
    store then reads 'a' failed (rq-defaults' sweep failed the acknowledged job)."""
    return [
        _op("H", 1, (0, 1), "enqueue", None, job="a"),
        _op("P1", 2, (2, 3), "claim", "a", cid="P1#2", lease_ms=100),
        _op("H", 3, (4, 5), "advance", None, ms=advance_ms),
        _op("P2", 4, (10, 30), "claim", None, cid="P2#4", lease_ms=100),
        _op("P1", 5, ack_span, "ack", True, cid="P1#2", job="a"),
        _op("H", 6, (40, 41), "observe", (("a", "failed"),)),
    ]


def _linearizable(history: list[Operation]) -> bool:
    return check(history, QueueSpec(), qm.QueueState()).linearizable


def test_an_ack_beside_a_sweep_on_a_lease_that_ran_out_is_set_aside() -> None:
    history = _sweep_ack(200, (15, 20))
    assert not _linearizable(history)  # the breach the OS produced in some runs only
    kept, aside = set_aside(history, [SWEEP], real_time=False)
    assert aside == 1
    assert kept[4].outcome is None and "sweep" in kept[4].note
    assert [op.outcome for op in kept[:4]] == [op.outcome for op in history[:4]]
    assert _linearizable(kept)


def test_an_ack_clear_of_every_sweep_is_judged() -> None:
    """The same breach with the ack after the sweep ended: nothing raced, it fails."""
    history = _sweep_ack(200, (31, 35))
    kept, aside = set_aside(history, [SWEEP], real_time=False)
    assert aside == 0 and not _linearizable(kept)


def test_an_ack_of_a_live_lease_beside_a_sweep_is_judged() -> None:
    """A sweep takes only leases that ran out: an ack on a live one is the library's to
    keep, whatever ran beside it."""
    history = _sweep_ack(50, (15, 20))
    kept, aside = set_aside(history, [SWEEP], real_time=False)
    assert aside == 0 and not _linearizable(kept)


def test_on_a_real_clock_every_call_beside_a_sweep_is_set_aside() -> None:
    kept, aside = set_aside(_sweep_ack(50, (15, 20)), [SWEEP], real_time=True)
    assert aside == 1 and kept[4].outcome is None


def test_without_a_logged_sweep_nothing_is_set_aside() -> None:
    history = _sweep_ack(200, (15, 20))
    assert set_aside(history, [], real_time=False) == (history, 0)


def test_only_a_library_whose_verbs_sweep_logs_and_stops_afterwards(tmp_path: Path) -> None:
    library = RqDefaults()
    log = tmp_path / "sweeps.jsonl"
    seen = []
    with logged_sweeps(library, log) as path:
        seen += [path, library.sweep_log]
    seen.append(library.sweep_log)
    assert seen == [log, log, None]
    with logged_sweeps(LeaseWorker(), log) as unlogged:
        assert unlogged is None
    log.write_text(json.dumps({"started_ns": 11, "ended_ns": 29}) + "\n")
    assert read_sweeps(log) == [SWEEP]
    assert read_sweeps(None) == [] and read_sweeps(tmp_path / "absent") == []


def test_a_dropped_late_ack_on_rq_is_still_found_with_its_sweeps_set_aside(
    tmp_path: Path, redis_url: str
) -> None:
    """The planted rq whose late acks finish nothing, run as queue.linearizable runs it
    (its sweeps logged, histories of seeds 0, 1, ...): a history is still not
    linearizable once the calls beside a sweep are set aside."""
    library = AckDroppingRq()
    spec = QueueSpec(tolerate=frozenset({"queue.exclusive", "queue.stale-ack", "queue.no-loss"}))
    found = []
    with logged_sweeps(library, tmp_path / "sweeps.jsonl") as log:
        for seed in range(3):
            (tmp_path / f"history-{seed}").mkdir()
            history, _ = linear_run(library, tmp_path / f"history-{seed}", 3, 40, seed, redis_url)
            kept, _ = set_aside(history, read_sweeps(log), real_time=False)
            found.append(not check(kept, spec, qm.QueueState()).linearizable)
            if found[-1]:
                break
    assert read_sweeps(log), "rq's first claims run its maintenance: some sweep is logged"
    assert any(found), found
