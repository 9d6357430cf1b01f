"""The localqueue adapter (``adapters.localqueue``) against the real localqueue on real files.

localqueue reads the system clock in Rust, so these tests use real time and leases of a
fraction of a second (``SHORT_LEASE``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _adapter_checks import (
    SHORT_LEASE,
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

from leasecheck.adapters.localqueue import Localqueue
from leasecheck.adapters.protocol import AdapterError, SharedClock
from leasecheck.crash_harness.engine import Engine


@pytest.fixture
def store(scratch: Path) -> Store:
    return new_store(Localqueue(), scratch)


def test_version_is_the_installed_one() -> None:
    import localqueue.localqueue

    assert Localqueue().version() == localqueue.localqueue.__version__


def test_roundtrip(store: Store) -> None:
    check_roundtrip(store)


def test_observe_is_read_only(store: Store) -> None:
    check_observe_is_read_only(store)


def test_recover_after_the_lease_runs_out(store: Store) -> None:
    check_recover_after_expiry(store)


def test_live_lease_survives_recover(store: Store) -> None:
    check_live_lease_survives_recover(store)


def test_claim_uses_the_lease_it_is_given(store: Store) -> None:
    with store.connect() as (queue, clock):
        queue.enqueue("a", "x")
        queue.enqueue("b", "y")
        short = claim_one(queue, "w1", SHORT_LEASE)
        long = claim_one(queue, "w2", 60.0)
        assert short.lease_until is not None and long.lease_until is not None
        assert short.lease_until == pytest.approx(clock.now() + SHORT_LEASE, abs=0.1)
        assert long.lease_until == pytest.approx(clock.now() + 60.0, abs=0.1)


def test_stale_receipt_is_refused(store: Store) -> None:
    """The fencing localqueue documents, seen through the adapter: False, nothing changes."""
    with store.connect() as (queue, clock):
        queue.enqueue("a", "x")
        stale = claim_one(queue, "w1", SHORT_LEASE)
        clock.advance(SHORT_LEASE + 0.05)
        current = claim_one(queue, "w2", 60.0)
        assert current.token != stale.token
        assert queue.ack(stale) is False
        assert queue.nack(stale) is False
        assert queue.extend(stale, 10.0) is False
        assert states(queue) == {"a": "leased"}
        assert queue.extend(current, 10.0) is True
        assert queue.ack(current) is True
        assert states(queue) == {"a": "done"}


def test_a_fake_clock_is_refused_with_the_fix(store: Store, scratch: Path) -> None:
    clock = SharedClock(scratch / "fake-clock")
    try:
        with pytest.raises(AdapterError, match=r"SharedClock\(path, real=True\)"):
            Localqueue().connect(store.location, clock)
    finally:
        clock.close()


def test_two_processes_share_the_store(store: Store, engine: Engine) -> None:
    check_two_processes(store, engine)


def test_close_leaves_no_open_file(store: Store, scratch: Path) -> None:
    check_closes_everything(store, scratch)
