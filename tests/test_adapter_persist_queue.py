"""The persist-queue adapter (``adapters.persist_queue``) against the real ``SQLiteAckQueue``.

persist-queue has no lease: a claim never expires, and recover() is
``resume_unack_tasks()``, which takes back every unacknowledged job, live or not. The
tests below pin that mapping, as the adapter's docstring states it.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from _adapter_checks import (
    Store,
    check_closes_everything,
    check_observe_is_read_only,
    check_roundtrip,
    check_two_processes,
    claim_one,
    new_store,
    states,
)

from leasecheck.adapters.persist_queue import PersistQueue
from leasecheck.adapters.protocol import Unsupported
from leasecheck.crash_harness.engine import Engine


@pytest.fixture
def store(scratch: Path) -> Store:
    return new_store(PersistQueue(), scratch)


def test_version_is_the_installed_one() -> None:
    assert PersistQueue().version() == importlib.metadata.version("persist-queue")


def test_roundtrip(store: Store) -> None:
    check_roundtrip(store)


def test_observe_is_read_only(store: Store) -> None:
    check_observe_is_read_only(store)


def test_a_claim_never_expires_by_the_clock(store: Store) -> None:
    with store.connect() as (queue, clock):
        queue.enqueue("a", "x")
        claim = claim_one(queue, "w1", 0.001)
        assert claim.lease_until is None
        clock.advance(3600.0)
        assert queue.claim("w2", 1.0) is None
        assert states(queue) == {"a": "leased"}


def test_recover_takes_back_every_unacked_job(store: Store) -> None:
    """resume_unack_tasks() does not look at leases: a live claim comes back too."""
    with store.connect() as (queue, _):
        queue.enqueue("a", "x")
        queue.enqueue("b", "y")
        claim_one(queue, "w1", 3600.0)
        assert queue.recover() == 1
        assert states(queue) == {"a": "ready", "b": "ready"}
        assert claim_one(queue, "w2").job == "a"


def test_opening_does_not_resume(store: Store) -> None:
    """connect() passes auto_resume=False: opening a second connection leaves claims alone."""
    with store.connect() as (first, _):
        first.enqueue("a", "x")
        claim_one(first, "w1")
        with store.connect() as (second, _):
            assert states(second) == {"a": "leased"}


def test_put_timestamp_follows_the_clock(store: Store) -> None:
    with store.connect() as (queue, clock):
        clock.advance(42.0)
        queue.enqueue("a", "x")
        adapter_queue = queue.queue  # type: ignore[attr-defined]
        assert [row["timestamp"] for row in adapter_queue.queue()] == [clock.now()]


def test_extend_is_unsupported(store: Store) -> None:
    with store.connect() as (queue, _):
        queue.enqueue("a", "x")
        with pytest.raises(Unsupported, match="no lease"):
            queue.extend(claim_one(queue, "w1"), 10.0)


def test_two_processes_share_the_store(store: Store, engine: Engine) -> None:
    check_two_processes(store, engine)


def test_close_leaves_no_open_file(store: Store, scratch: Path) -> None:
    check_closes_everything(store, scratch)


def test_with_its_defaults_opening_the_queue_takes_back_a_live_claim(scratch: Path) -> None:
    """persist-queue-defaults opens ``SQLiteAckQueue(path)`` as users do (auto_resume=True):
    a second process that only opens the queue makes another's live claim claimable; the
    adapter's own reads (``reader``) change nothing."""
    from leasecheck.adapters.persist_queue import PersistQueueDefaults

    library = PersistQueueDefaults()
    store = new_store(library, scratch)
    with store.connect() as (queue, clock):
        queue.enqueue("a", "x")
        claim_one(queue, "w1")
        reader = library.reader(store.location, clock)
        try:
            assert states(reader) == {"a": "leased"}
        finally:
            reader.close()
        with store.connect() as (other, _):
            assert states(other) == {"a": "ready"}
            assert claim_one(other, "w2").job == "a"
