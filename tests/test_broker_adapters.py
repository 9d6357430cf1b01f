"""The broker adapters (issue 26) against their real servers, started once per module.

Each library's own behaviour is checked here through its adapter, on a real server (no
mock): a round trip, and the behaviour ``docs/findings.md`` reports for it, as a fixed
scenario that reads the store. The generic properties themselves run through
``leasecheck check --adapter NAME`` (``test_a_broker_gets_the_generic_properties``).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leasecheck.adapters import servers
from leasecheck.adapters.protocol import QueueAdapter, QueueLibrary, SharedClock
from leasecheck.adapters.registry import load_library
from leasecheck.runner import HOLDS, NOT_CHECKED, NOT_PROMISED, CheckOptions, run_check


def _started(kind: servers.ServerKind) -> Iterator[servers.Server]:
    try:
        with servers.start(kind, durable=False) as server:
            yield server
    except servers.ServerMissing as missing:  # pragma: no cover - CI installs them
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[servers.Server]:
    yield from _started("redis")


class Store:
    """One store of a library on a running server, and two connections to it."""

    def __init__(self, library: QueueLibrary, server: servers.Server, directory: Path) -> None:
        self.clock = SharedClock.of(directory / "clock", library.capabilities)
        location = library.create(directory, server.url)
        self.a: QueueAdapter = library.connect(location, self.clock)
        self.b: QueueAdapter = library.connect(location, self.clock)

    def states(self) -> dict[str, str]:
        return {view.job: view.state for view in self.a.observe()}

    def close(self) -> None:
        self.a.close()
        self.b.close()
        self.clock.close()


@pytest.fixture
def kombu_store(redis_server: servers.Server) -> Iterator[Store]:
    with tempfile.TemporaryDirectory(prefix="leasecheck-broker-") as directory:
        store = Store(load_library("kombu-redis"), redis_server, Path(directory))
        yield store
        store.close()


def test_kombu_round_trip(kombu_store: Store) -> None:
    store = kombu_store
    store.a.enqueue("j0", "payload")
    claim = store.b.claim("w", 0.35)
    assert claim is not None and claim.job == "j0"
    assert store.states() == {"j0": "leased"}
    assert store.a.claim("w", 0.35) is None, "a leased message was delivered again"
    assert store.b.nack(claim)
    assert store.states() == {"j0": "ready"}
    again = store.a.claim("w", 0.35)
    assert again is not None and store.a.ack(again)
    assert store.states() == {"j0": "gone"}, "kombu deletes an acknowledged message"
    assert store.b.claim("w", 0.35) is None


def test_kombu_restores_only_past_the_visibility_timeout(kombu_store: Store) -> None:
    store = kombu_store
    store.a.enqueue("j0", "payload")
    assert store.a.claim("w", 0.35) is not None
    store.clock.advance(0.3)
    assert store.b.recover() == 0 and store.states() == {"j0": "leased"}
    store.clock.advance(0.1)
    assert store.b.recover() == 1 and store.states() == {"j0": "ready"}


def test_kombu_stale_ack_deletes_the_redelivered_message(kombu_store: Store) -> None:
    """The finding: the delivery tag is made at publish and kept by a restore, so the first
    delivery's late ack removes the second delivery's unacked entry. Nothing will restore
    the message if its second worker dies now: it is gone while still being worked on."""
    store = kombu_store
    store.a.enqueue("j0", "payload")
    first = store.a.claim("w0", 0.35)
    assert first is not None
    store.clock.advance(0.5)
    assert store.b.recover() == 1
    second = store.b.claim("w1", 0.35)
    assert second is not None and second.token == first.token, "the tag changed"
    assert store.a.ack(first), "kombu refused the stale ack"
    assert store.states() == {"j0": "gone"}
    store.clock.advance(10.0)
    assert store.b.recover() == 0 and store.a.claim("w2", 0.35) is None


@pytest.fixture(scope="module")
def nats_server() -> Iterator[servers.Server]:
    yield from _started("nats")


@pytest.fixture
def nats_store(nats_server: servers.Server) -> Iterator[Store]:
    with tempfile.TemporaryDirectory(prefix="leasecheck-broker-") as directory:
        store = Store(load_library("nats-jetstream"), nats_server, Path(directory))
        yield store
        store.close()


ACK_WAIT = 0.2
"""A real AckWait: long beside a call (about 1 ms), short enough to wait out."""


def test_nats_round_trip_and_in_progress(nats_store: Store) -> None:
    store = nats_store
    store.a.enqueue("j0", "payload")
    assert store.states() == {"j0": "ready"}
    claim = store.b.claim("w", ACK_WAIT)
    assert claim is not None and claim.job == "j0" and claim.token == 1
    assert store.states() == {"j0": "leased"}
    for _ in range(3):  # +WPI restarts AckWait: 0.45 s held on a 0.2 s AckWait
        time.sleep(ACK_WAIT * 0.75)
        assert store.b.extend(claim, ACK_WAIT)
    assert store.a.claim("w", ACK_WAIT) is None, "a message in progress was redelivered"
    assert store.b.ack(claim)
    assert store.states() == {"j0": "gone"}, "a work-queue stream removes an acked message"
    time.sleep(ACK_WAIT * 1.5)
    assert store.a.claim("w", ACK_WAIT) is None


def test_nats_late_ack_of_an_earlier_delivery_acks_the_message(nats_store: Store) -> None:
    """The finding: after AckWait the message is delivered again (delivery 2); the first
    delivery's ack, sent late, is taken for the message and removes it while delivery 2
    is being worked on."""
    store = nats_store
    store.a.enqueue("j0", "payload")
    first = store.a.claim("w0", ACK_WAIT)
    assert first is not None
    time.sleep(ACK_WAIT * 1.5)
    second = store.b.claim("w1", ACK_WAIT)
    assert second is not None and (first.token, second.token) == (1, 2)
    assert store.a.ack(first)
    assert store.states() == {"j0": "gone"}
    time.sleep(ACK_WAIT * 1.5)
    assert store.b.claim("w2", ACK_WAIT) is None, "the message came back"


@pytest.fixture
def dramatiq_store(redis_server: servers.Server) -> Iterator[Store]:
    with tempfile.TemporaryDirectory(prefix="leasecheck-broker-") as directory:
        store = Store(load_library("dramatiq-redis"), redis_server, Path(directory))
        yield store
        store.close()


def test_dramatiq_round_trip_and_dead_letter(dramatiq_store: Store) -> None:
    store = dramatiq_store
    store.a.enqueue("j0", "payload")
    store.a.enqueue("j1", "payload")
    claim = store.b.claim("w", 0.35)
    assert claim is not None and claim.job == "j0"
    assert store.states() == {"j0": "leased", "j1": "ready"}
    assert store.b.ack(claim)
    other = store.a.claim("w", 0.35)
    assert other is not None and store.a.nack(other)
    assert store.states() == {"j0": "gone", "j1": "failed"}, "nack dead-letters"


def test_dramatiq_maintenance_requeues_only_silent_workers(dramatiq_store: Store) -> None:
    store = dramatiq_store
    store.a.enqueue("j0", "payload")
    claim = store.a.claim("w", 0.35)
    assert claim is not None
    store.clock.advance(0.3)
    assert store.a.extend(claim, 0.35)  # a heartbeat at t=0.3 s
    store.clock.advance(0.3)
    store.b.recover()
    assert store.states() == {"j0": "leased"}, "a worker that heartbeats kept its message"
    store.clock.advance(0.1)
    store.b.recover()
    assert store.states() == {"j0": "ready"}


def test_dramatiq_acks_are_fenced_by_worker(dramatiq_store: Store) -> None:
    """The finding: a dead worker's acks set goes when its messages are requeued, so its
    late ack removes nothing; the new holder's ack still counts."""
    store = dramatiq_store
    store.a.enqueue("j0", "payload")
    first = store.a.claim("w0", 0.35)
    assert first is not None
    store.clock.advance(0.5)
    store.b.recover()
    second = store.b.claim("w1", 0.35)
    assert second is not None and second.job == "j0"
    store.a.ack(first)
    assert store.states() == {"j0": "leased"}, "the stale ack completed the message"
    store.b.ack(second)
    assert store.states() == {"j0": "gone"}


@pytest.mark.parametrize("name", ["kombu-redis", "nats-jetstream", "dramatiq-redis"])
def test_a_broker_gets_the_generic_properties(name: str) -> None:
    """``leasecheck check --adapter NAME`` starts the broker's server for the run and keeps
    every promise (quick profile: the ci figures are in docs/findings.md). The quick
    profile may draw too few programs to meet a zombie ack, or a loaded machine cut most
    real-time programs short: such a property honestly reads "not checked" (exit 2), which
    is no broken promise; nothing may read VIOLATED."""
    result = run_check(CheckOptions(adapter=name, profile="quick", workers="0"))
    library = load_library(name)
    verdicts = {prop: outcome.verdict for prop, outcome in result.properties.items()}
    assert len(verdicts) == 6, verdicts  # the five generic properties and interleavings
    for prop, verdict in verdicts.items():
        promised = library.promises.of(prop).promised
        allowed = (HOLDS, NOT_CHECKED) if promised else (HOLDS, NOT_PROMISED, NOT_CHECKED)
        assert verdict in allowed, (prop, verdict)
    unchecked = NOT_CHECKED in verdicts.values()
    assert result.exit_code == (2 if unchecked else 0), (verdicts, result.problem)


def test_dramatiq_fence_is_the_worker_not_the_delivery(dramatiq_store: Store) -> None:
    """The same worker fetching the message again after maintenance requeued it: its first
    delivery's late ack counts for the second (seen in a queue.linearizable history)."""
    store = dramatiq_store
    store.a.enqueue("j0", "payload")
    first = store.a.claim("w0", 0.35)
    assert first is not None
    store.clock.advance(0.5)
    store.b.recover()
    second = store.a.claim("w0", 0.35)
    assert second is not None and second.token == first.token
    store.a.ack(first)
    assert store.states() == {"j0": "gone"}, "the stale ack was fenced"
