"""Real-clock leases sized by measured call latency (``leasecheck/properties/_real_leases.py``)."""

from __future__ import annotations

from leasecheck.adapters.lease_worker import LeaseWorker
from leasecheck.properties._real_leases import (
    CALLS_PER_LEASE,
    MAX_SCALE,
    call_latency_ms,
    real_scale,
    scaled,
)
from leasecheck.stateful_tests.queue_machine import LEASES_MS, REAL_SCALE, QueueMachine


def test_the_shortest_lease_outlasts_ten_slow_calls_within_bounds() -> None:
    assert real_scale(0.1).scale == REAL_SCALE  # a fast library keeps the printed 0.1
    wanted = real_scale(4.5)  # 10 calls of 4.5 ms: the 150 ms lease lasts 45 ms
    assert wanted.scale * min(LEASES_MS) == CALLS_PER_LEASE * 4.5
    assert real_scale(200.0).scale == MAX_SCALE  # never more than a program can afford
    assert wanted.text() == "leases at 0.3 of their printed length (call latency p90 4.5 ms)"


def test_the_probe_measures_real_calls_and_leaves_nothing_behind() -> None:
    latency = call_latency_ms(LeaseWorker(), None)
    assert 0.0 < latency < 10_000.0


def test_a_scaled_machine_leases_at_the_stretch() -> None:
    bound = QueueMachine.bound(LeaseWorker(), frozenset({"queue.no-loss"}))
    machine = scaled(bound, 0.3)()
    try:
        assert machine.scale == 0.3 and type(machine).__name__ == "QueueMachine"
        assert machine._lease(150) == 45
    finally:
        machine.teardown()
