"""The femtoqueue adapter (``adapters.femtoqueue``) against the real femtoqueue on real files.

femtoqueue has no nack and no recovery call, so the shared round trip (which nacks) does
not apply; the checks here use only what femtoqueue has: push, pop, done, and the stale
timeout that a later pop applies.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _adapter_checks import (
    Store,
    check_closes_everything,
    check_observe_is_read_only,
    check_two_processes,
    claim_one,
    new_store,
    states,
)

from leasecheck.adapters.femtoqueue import Femtoqueue
from leasecheck.adapters.protocol import Unsupported
from leasecheck.crash_harness.engine import Engine


@pytest.fixture
def store(scratch: Path) -> Store:
    return new_store(Femtoqueue(), scratch)


def test_version_is_the_installed_one() -> None:
    from importlib.metadata import version

    assert Femtoqueue().version() == version("femtoqueue")


def test_a_job_goes_round_trip(store: Store) -> None:
    with store.connect() as (queue, clock):
        queue.enqueue("a", "payload a")
        clock.advance(0.001)  # femtoqueue names a task by its push microsecond
        queue.enqueue("b", "payload b")
        assert states(queue) == {"a": "ready", "b": "ready"}
        first = claim_one(queue, "w1")
        assert first.job == "a" and states(queue) == {"a": "leased", "b": "ready"}
        assert queue.ack(first) is True
        assert claim_one(queue, "w1").job == "b"  # a new node per claim: no re-delivery
        assert queue.claim("w1", 60.0) is None
        assert states(queue) == {"a": "done", "b": "leased"}
        with pytest.raises(Unsupported):
            queue.nack(first)
        assert queue.recover() == -1


def test_a_stale_claims_ack_is_refused_once_another_node_took_the_task(store: Store) -> None:
    with store.connect() as (queue, clock):
        queue.enqueue("a", "x")
        first = claim_one(queue, "w1", 10.0)
        clock.advance(11.0)
        second = claim_one(queue, "w2", 10.0)
        assert second.job == "a"
        with pytest.raises(Exception, match="not in progress"):
            queue.ack(first)
        assert queue.ack(second) is True
        assert states(queue) == {"a": "done"}


def test_observe_is_read_only(store: Store) -> None:
    check_observe_is_read_only(store)


def test_two_processes_share_one_store(store: Store) -> None:
    with Engine() as engine:
        check_two_processes(store, engine)


def test_close_leaves_nothing_open(store: Store, scratch: Path) -> None:
    check_closes_everything(store, scratch)


@pytest.mark.parametrize("now", [0.0, 1.0, 2.55, 100.25])
def test_each_clock_reading_names_the_next_microsecond(now: float) -> None:
    """femtoqueue names a task ``int(reading * 1_000_000)``: on a standing clock every
    reading (``monotonic`` or ``time``) must name a microsecond of its own, the next one,
    whatever the number of readings before it (float truncation once made two readings
    name one microsecond after some counts and not others: a FlakyFailure of
    queue.no-loss, issue 27)."""
    from types import SimpleNamespace

    from leasecheck.adapters.femtoqueue import _clock_module

    clock = SimpleNamespace(now=lambda: now)
    module = _clock_module(lambda: clock)
    names = [int(read() * 1_000_000) for read in [module.monotonic, module.time] * 10_000]
    start = round(now * 1_000_000)
    assert names == list(range(start, start + 20_000))
