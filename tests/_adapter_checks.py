"""Checks every library adapter must pass, written once and called from each
``tests/test_adapter_<library>.py`` against the real library on real SQLite files.

They use only the adapter protocol, so the same check reads the same on litequeue,
persist-queue and localqueue; what differs (whether a lease can expire, which clock)
comes from the adapter's declared ``Capabilities``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from leasecheck.adapters.protocol import Claim, QueueAdapter, QueueLibrary, SharedClock
from leasecheck.crash_harness.engine import Channel, Engine

SHORT_LEASE = 0.2
"""Seconds: long enough that a real-time claim is still live when the test looks at it,
short enough that waiting it out costs little."""


@dataclass
class Store:
    """A fresh store of ``library`` in a scratch directory, and the clock its processes share."""

    library: QueueLibrary
    location: str
    clock_path: Path

    @property
    def real(self) -> bool:
        return self.library.capabilities.real_time

    @contextlib.contextmanager
    def connect(self) -> Iterator[tuple[QueueAdapter, SharedClock]]:
        """One adapter and its own view of the shared clock, both closed at the end."""
        clock = SharedClock.of(self.clock_path, self.library.capabilities)
        try:
            adapter = self.library.connect(self.location, clock)
            try:
                yield adapter, clock
            finally:
                adapter.close()
        finally:
            clock.close()


def new_store(library: QueueLibrary, scratch: Path) -> Store:
    return Store(library, library.create(scratch, None), scratch / "clock")


def states(adapter: QueueAdapter) -> dict[str, str]:
    """``{job: state}`` from ``observe()``."""
    return {view.job: view.state for view in adapter.observe()}


def claim_one(adapter: QueueAdapter, worker: str, lease: float = 60.0) -> Claim:
    claim = adapter.claim(worker, lease)
    assert claim is not None, f"{worker!r} found no job to claim: {adapter.observe()}"
    return claim


# --- the checks --------------------------------------------------------------------------


def check_roundtrip(store: Store) -> None:
    """enqueue, claim in FIFO order, ack, nack, claim again, observe at every step."""
    with store.connect() as (queue, _):
        queue.enqueue("a", "payload a")
        queue.enqueue("b", "payload b")
        assert [v.job for v in queue.observe()] == ["a", "b"]
        assert states(queue) == {"a": "ready", "b": "ready"}
        first = claim_one(queue, "w1")
        assert (first.job, first.worker) == ("a", "w1")
        assert states(queue) == {"a": "leased", "b": "ready"}
        assert queue.ack(first) is True
        second = claim_one(queue, "w1")
        assert second.job == "b"
        assert queue.nack(second) is True
        assert states(queue) == {"a": "done", "b": "ready"}
        again = claim_one(queue, "w2")
        assert again.job == "b"
        assert queue.ack(again) is True
        assert queue.claim("w2", 60.0) is None
        assert states(queue) == {"a": "done", "b": "done"}


def check_observe_is_read_only(store: Store) -> None:
    """Two observations with nothing in between are equal, and change nothing claimable."""
    with store.connect() as (queue, _):
        queue.enqueue("a", "x")
        claim_one(queue, "w1")
        queue.enqueue("b", "y")
        assert queue.observe() == queue.observe()
        assert claim_one(queue, "w2").job == "b"


def expire(store: Store, clock: SharedClock, lease: float) -> None:
    """Move past ``lease``: the shared clock where the adapter moves it, real time otherwise."""
    clock.advance(lease + (0.05 if store.real else 1.0))


def check_recover_after_expiry(store: Store) -> None:
    """A claim whose lease ran out comes back through recover() and can be claimed again."""
    lease = SHORT_LEASE if store.real else 30.0
    with store.connect() as (queue, clock):
        queue.enqueue("a", "x")
        first = claim_one(queue, "w1", lease)
        assert first.lease_until is not None
        assert first.lease_until >= clock.now() - 0.05
        expire(store, clock, lease)
        assert queue.recover() == 1
        assert states(queue) == {"a": "ready"}
        second = claim_one(queue, "w2", lease)
        assert second.job == "a"
        assert second.lease_until is not None and second.lease_until > first.lease_until


def check_live_lease_survives_recover(store: Store) -> None:
    """recover() before the lease ends returns nothing: the claim is still live."""
    with store.connect() as (queue, clock):
        queue.enqueue("a", "x")
        claim_one(queue, "w1", 60.0)
        clock.advance(SHORT_LEASE / 4)
        assert queue.recover() == 0
        assert states(queue) == {"a": "leased"}
        assert queue.claim("w2", 60.0) is None


def _child_claims_and_acks(store: Store) -> Callable[[Channel], object]:
    """A child's body: open its own connection, enqueue 'c', claim one job and ack it."""

    def body(channel: Channel) -> object:
        with store.connect() as (queue, _):
            queue.enqueue("c", "from the child")
            claim = claim_one(queue, "child")
            return [claim.job, queue.ack(claim)]

    return body


def check_two_processes(store: Store, engine: Engine) -> None:
    """A forked process opens the same location while this one holds it open: both see
    each other's writes."""
    with store.connect() as (queue, _):
        queue.enqueue("a", "from the parent")
        child = engine.fork("child", _child_claims_and_acks(store))
        outcome = child.outcome("the child's claim and ack")
        assert outcome.value == ["a", True], outcome.describe()
        assert states(queue) == {"a": "done", "c": "ready"}
        assert claim_one(queue, "parent").job == "c"


def check_closes_everything(store: Store, scratch: Path) -> None:
    """After close(), this process holds no file under the scratch directory."""
    with store.connect() as (queue, _):
        queue.enqueue("a", "x")
        queue.ack(claim_one(queue, "w1"))
        queue.observe()
        assert open_files_under(scratch), "the adapter should hold its store open while open"
    assert open_files_under(scratch) == []


def open_files_under(directory: Path) -> list[str]:
    return [f.path for f in psutil.Process().open_files() if Path(f.path).is_relative_to(directory)]
