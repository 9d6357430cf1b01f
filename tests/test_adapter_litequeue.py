"""The litequeue adapter (``adapters.litequeue``) against the real litequeue on real files."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from _adapter_checks import (
    Store,
    check_closes_everything,
    check_live_lease_survives_recover,
    check_observe_is_read_only,
    check_recover_after_expiry,
    check_roundtrip,
    check_two_processes,
    claim_one,
    new_store,
    states,
)

from leasecheck.adapters.litequeue import Litequeue
from leasecheck.adapters.protocol import Unsupported
from leasecheck.crash_harness.engine import Engine


@pytest.fixture
def store(scratch: Path) -> Store:
    return new_store(Litequeue(), scratch)


def test_version_is_the_installed_one() -> None:
    import litequeue

    assert Litequeue().version() == litequeue.__version__


def test_roundtrip(store: Store) -> None:
    check_roundtrip(store)


def test_observe_is_read_only(store: Store) -> None:
    check_observe_is_read_only(store)


def test_recover_after_the_clock_passes_the_lease(store: Store) -> None:
    check_recover_after_expiry(store)


def test_live_lease_survives_recover(store: Store) -> None:
    check_live_lease_survives_recover(store)


def test_lease_ends_exactly_when_litequeue_says(store: Store) -> None:
    """list_locked's test is strict (lock_time < now - threshold): at now == lease_until the
    message is not swept yet; one nanosecond later it is."""
    with store.connect() as (queue, clock):
        queue.enqueue("a", "x")
        claim = claim_one(queue, "w1", 10.0)
        assert claim.lease_until == clock.now() + 10.0
        clock.advance(10.0)
        assert queue.recover() == 0
        clock.advance(1e-6)
        assert queue.recover() == 1


def test_each_claim_is_swept_after_its_own_lease(store: Store) -> None:
    with store.connect() as (queue, clock):
        for job in "abc":
            queue.enqueue(job, "x")
        claim_one(queue, "w1", 5.0)
        claim_one(queue, "w2", 50.0)
        claim_one(queue, "w3", 500.0)
        clock.advance(60.0)
        assert queue.recover() == 2
        assert states(queue) == {"a": "ready", "b": "ready", "c": "leased"}


def test_the_clock_is_patched_only_while_an_adapter_is_open(store: Store) -> None:
    import litequeue

    with store.connect() as (_, clock):
        assert litequeue.time_ns() == round(clock.now() * 1e9)
        clock.advance(3.0)
        assert litequeue.time_ns() == round(clock.now() * 1e9)
    assert litequeue.time_ns is time.time_ns


def test_extend_is_unsupported(store: Store) -> None:
    with store.connect() as (queue, _):
        queue.enqueue("a", "x")
        with pytest.raises(Unsupported, match="litequeue has no call"):
            queue.extend(claim_one(queue, "w1"), 10.0)


def test_two_processes_share_the_file(store: Store, engine: Engine) -> None:
    check_two_processes(store, engine)


def test_close_leaves_no_open_file(store: Store, scratch: Path) -> None:
    check_closes_everything(store, scratch)
