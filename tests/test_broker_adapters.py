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
from leasecheck.adapters.protocol import (
    AdapterError,
    DestroysStores,
    QueueAdapter,
    QueueLibrary,
    SharedClock,
)
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

    def __init__(
        self, library: QueueLibrary, server: servers.Server | None, directory: Path
    ) -> None:
        self.clock = SharedClock.of(directory / "clock", library.capabilities)
        location = library.create(directory, None if server is None else server.url)
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


@pytest.mark.parametrize("name", ["kombu-redis", "nats-jetstream", "dramatiq-redis", "beanstalkd"])
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
        if prop == "queue.exclusive" and not library.promises.of("queue.stale-ack").promised:
            promised = False  # two live leases through a stale nack: stale-ack's promise
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


@pytest.fixture
def beanstalkd_store() -> Iterator[Store]:
    """A store of the beanstalkd adapter: its own server, on the shared clock."""
    library = load_library("beanstalkd")
    with tempfile.TemporaryDirectory(prefix="leasecheck-broker-") as directory:
        store = Store(library, None, Path(directory))
        try:
            yield store
        finally:
            store.close()
            assert isinstance(library, DestroysStores)
            library.destroy(directory)


LEASE = 0.35
"""The beanstalkd store's one lease: ``TTR`` server seconds (adapters/beanstalkd.py)."""


def test_beanstalkd_round_trip(beanstalkd_store: Store) -> None:
    store = beanstalkd_store
    store.a.enqueue("j0", "payload")
    assert store.states() == {"j0": "ready"}
    claim = store.b.claim("w", LEASE)
    assert claim is not None and claim.job == "j0"
    assert store.states() == {"j0": "leased"}
    assert store.a.claim("w", LEASE) is None, "a reserved job was reserved again"
    assert store.b.nack(claim), "release of its own reservation was refused"
    assert store.states() == {"j0": "ready"}
    again = store.a.claim("w", LEASE)
    assert again is not None and store.a.ack(again)
    assert store.states() == {}, "beanstalkd deletes an acknowledged job"
    assert store.b.claim("w", LEASE) is None


def test_beanstalkd_ttr_runs_on_the_shared_clock(beanstalkd_store: Store) -> None:
    """The job's TTR (fixed at put) is the first claim's lease of the shared clock: live
    just before it ends, timed out by the server just after; touch restarts it."""
    store = beanstalkd_store
    store.a.enqueue("j0", "payload")
    first = store.a.claim("w0", LEASE)
    assert first is not None
    store.clock.advance(LEASE - 0.05)
    assert store.b.claim("w1", LEASE) is None, "reserved again before its TTR"
    assert store.a.extend(first, LEASE), "touch of its own reservation was refused"
    store.clock.advance(LEASE - 0.05)
    assert store.b.claim("w1", LEASE) is None, "touch did not restart the TTR"
    store.clock.advance(0.1)
    second = store.b.claim("w1", LEASE)
    assert second is not None and second.job == "j0", "the TTR did not time it out"
    with pytest.raises(AdapterError, match="TTR is fixed at put"):
        store.a.claim("w0", LEASE * 2)


def test_beanstalkd_a_stale_delete_from_another_connection_is_refused(
    beanstalkd_store: Store,
) -> None:
    """The fenced case: a's reservation timed out and b reserved the job; a's late
    delete, release and touch answer NOT_FOUND and the job stays b's."""
    store = beanstalkd_store
    store.a.enqueue("j0", "payload")
    first = store.a.claim("w0", LEASE)
    store.clock.advance(LEASE + 0.05)
    second = store.b.claim("w1", LEASE)
    assert first is not None and second is not None and second.job == "j0"
    assert not store.a.ack(first) and not store.a.nack(first) and not store.a.extend(first, LEASE)
    assert store.states() == {"j0": "leased"}
    assert store.b.ack(second) and store.states() == {}


def test_beanstalkd_fence_is_the_connection_not_the_reservation(beanstalkd_store: Store) -> None:
    """The queue.stale-ack counterexample: a connection whose reservation timed out
    reserves the job again; the first claim's delete (same job id, same connection)
    deletes the job the second claim holds."""
    store = beanstalkd_store
    store.a.enqueue("j0", "payload")
    first = store.a.claim("w0", LEASE)
    store.clock.advance(LEASE + 0.15)
    second = store.a.claim("w0", LEASE)
    assert first is not None and second is not None and second.token == first.token
    assert store.a.ack(first), "the stale delete was fenced"
    assert store.states() == {}, "the stale delete did not delete the held job"


def test_beanstalkd_anyone_deletes_a_ready_job(beanstalkd_store: Store) -> None:
    """b reserved the job after a's timed out and released it; a's stale delete of the
    now ready job is taken ('A client can delete ... ready jobs')."""
    store = beanstalkd_store
    store.a.enqueue("j0", "payload")
    first = store.a.claim("w0", LEASE)
    store.clock.advance(LEASE + 0.05)
    second = store.b.claim("w1", LEASE)
    assert first is not None and second is not None and store.b.nack(second)
    assert store.a.ack(first) and store.states() == {}


def test_beanstalkd_a_ttr_that_ends_at_a_tick_never_times_out(beanstalkd_store: Store) -> None:
    """beanstalkd 1.12's lost timeout: when the server's tick reads the clock exactly at
    a reservation's deadline, ``conn_timeout`` (prot.c) finds the job not yet expired
    (``deadline_at >= nanoseconds()``) after ``prottick`` took the connection out of its
    timeout heap, and nothing puts it back: the job stays reserved past its TTR, for as
    long as the reserving connection sends nothing. On real time this is a tick landing on
    the deadline's microsecond (the 'not timed out at all' of docs/findings.md)."""
    store = beanstalkd_store
    store.a.enqueue("j0", "payload")
    assert store.a.claim("w0", LEASE) is not None
    store.clock.advance(LEASE)  # the server's clock reads the deadline exactly
    assert store.b.claim("w1", LEASE) is None
    store.clock.advance(10 * LEASE)
    assert store.b.claim("w1", LEASE) is None, "the lost timeout was found after all"
    assert {view.job: view.state for view in store.b.observe()} == {"j0": "leased"}
    # Any command of the holder puts its connection back in the heap: a's read (the
    # adapter's first command is list-tube-used) finds the job timed out.
    assert store.states() == {"j0": "ready"}, "a command of the holder did not revive it"
    late = store.b.claim("w1", LEASE)
    assert late is not None and late.job == "j0"
