"""The RabbitMQ brokers (issue 26): kombu's ``pyamqp`` transport and Dramatiq's
``RabbitmqBroker``, on one real RabbitMQ started for the module.

RabbitMQ's lease is its ``consumer_timeout``: a delivery not acknowledged in time closes
its channel (``PRECONDITION_FAILED``) and the broker requeues the channel's deliveries.
The broker checks it on every channel's tick (``channel_tick_interval``, 60 s by
default), so the server here runs ``consumer_timeout = 1000`` ms with a 10 ms tick: a
lease *is* a consumer timeout and ends 1.00 to about 1.02 s after the delivery (200 ms
was tried first: on a loaded machine a step between two calls took longer than that). Every
wait below is bounded and waits for the event it needs (a delivery), never for
silence, except where a test shows that something does *not* happen: there it polls
for ``QUIET`` seconds (three timeouts) and says so.

The generic properties run on these adapters with the broker's one lease
(``adapters/_rabbitmq.py``: one broker per check, ``consumer_timeout`` = the lease the
adapters declare, ``server_lease``): ``test_the_generic_properties_take_the_broker_lease``.
These scenarios check what the properties cannot schedule on purpose (a tag reused on a
reopened channel, a consumer that reads nothing, a kill of the broker), each a finding
of ``docs/findings.md``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from leasecheck.adapters import servers
from leasecheck.adapters._rabbitmq import LEASE_MS, SLACK_MS, RabbitmqConnection, RabbitmqStore
from leasecheck.adapters.dramatiq_rabbitmq import DramatiqRabbitmq
from leasecheck.adapters.kombu_amqp import KombuAmqp, KombuAmqpAdapter
from leasecheck.adapters.protocol import Claim
from leasecheck.adapters.registry import load_library

TIMEOUT_MS, TICK_MS = 1000, 10
BOUND = 10.0
"""Seconds a redelivery is waited for (it came 1.00 to 1.02 s after the delivery)."""
START_BOUND = 120.0
"""Seconds the node may take to answer, at its start and its restart after a kill -9
(which recovers its message store): 40 s was too little on a loaded machine."""
QUIET = 3.0
"""Seconds (three consumer timeouts) a test polls to show that nothing is delivered."""

T = TypeVar("T")


@pytest.fixture(scope="module")
def rabbit() -> Iterator[servers.Server]:
    try:
        with servers.rabbitmq(
            consumer_timeout_ms=TIMEOUT_MS, tick_ms=TICK_MS, ready_timeout=START_BOUND
        ) as server:
            yield server
    except servers.ServerMissing as missing:  # pragma: no cover - CI installs it
        pytest.fail(str(missing), pytrace=False)


class Store:
    """One queue of a RabbitMQ library (kombu-amqp or dramatiq-rabbitmq) and connections
    to it (each a worker's process)."""

    def __init__(self, server: servers.Server, library: RabbitmqStore | None = None) -> None:
        self.library = library if library is not None else KombuAmqp()
        self.location = self.library.create(server.directory, server.url)
        self.connections: list[RabbitmqConnection] = []

    def connect(self) -> RabbitmqConnection:
        """A new connection: a ``KombuAmqpAdapter`` or a ``DramatiqRabbitmqAdapter``."""
        if isinstance(self.library, KombuAmqp):  # a kombu Consumer's one channel
            connection: RabbitmqConnection = KombuAmqpAdapter(self.location, one_channel=True)
        else:
            connection = self.library.open(self.location)
        self.connections.append(connection)
        return connection

    def close(self) -> None:
        for connection in self.connections:
            # A worker whose I/O loop failed (reads_nothing) may fail to close again.
            with contextlib.suppress(Exception):
                connection.close()
        self.library.destroy(self.location)


@pytest.fixture
def store(rabbit: servers.Server) -> Iterator[Store]:
    made = Store(rabbit)
    yield made
    made.close()


def _within(what: str, bound: float, attempt: Callable[[], T | None]) -> T:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        found = attempt()
        if found is not None:
            return found
        time.sleep(0.005)
    raise AssertionError(f"waited {bound:g} s for {what}")


def _nothing_for(seconds: float, attempt: Callable[[], object | None]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = attempt()
        assert found is None, f"{found!r} came within {seconds:g} s"
        time.sleep(0.01)


def _redelivered(claim: Claim) -> bool:
    message: Any = claim.handle
    return bool(message.delivery_info["redelivered"])


def _held_past_timeout(holder: RabbitmqConnection, other: RabbitmqConnection) -> Claim:
    """The holder's I/O loop runs (``recover``) until the other worker gets the message."""

    def attempt() -> Claim | None:
        holder.recover()
        return other.claim("w1", 0)

    return _within("the timed-out delivery to come back", BOUND, attempt)


def test_kombu_round_trip(store: Store) -> None:
    a, b = store.connect(), store.connect()
    a.enqueue("j0", "payload")
    claim = _within("j0", BOUND, lambda: b.claim("w0", 0))
    assert claim.job == "j0" and not _redelivered(claim)
    assert a.claim("w1", 0) is None, "a held message was delivered again"
    assert b.nack(claim)
    again = _within("j0 after the nack", BOUND, lambda: a.claim("w1", 0))
    assert again.job == "j0" and _redelivered(again)
    assert a.ack(again)
    assert a.ready_count() == 0 and b.claim("w0", 0) is None


def test_kombu_consumer_timeout_requeues_and_refuses_the_late_ack(store: Store) -> None:
    """A lease is the consumer timeout: the delivery comes back to another worker, and
    the first worker's late ack on its (reopened) channel is refused."""
    a, b = store.connect(), store.connect()
    a.enqueue("j0", "payload")
    first = _within("j0", BOUND, lambda: a.claim("w0", 0))
    started = time.monotonic()
    second = _held_past_timeout(a, b)
    waited = time.monotonic() - started
    assert second.job == "j0" and _redelivered(second)
    assert TIMEOUT_MS / 1000 <= waited < TIMEOUT_MS / 1000 + 3.0, waited  # a loaded machine
    assert not a.ack(first), "the late ack of a timed-out delivery was taken"
    assert b.ack(second)
    assert b.claim("w1", 0) is None and a.claim("w0", 0) is None


def test_kombu_late_ack_on_the_reopened_channel_acks_another_message(store: Store) -> None:
    """The finding: py-amqp reopens the channel the broker closed, under the same id, and
    its delivery tags count from 1 again. Worker w0's next delivery (j1) gets tag 1, the
    tag of its timed-out j0, so w0's late ack of j0 acknowledges j1: j1 is gone before w0
    has worked on it, and when w0 dies nothing redelivers it.

    Sometimes py-amqp's reopening ends w0's whole connection instead (the broker answers
    its ``Channel.close_ok`` with 503 ``COMMAND_INVALID``) and w0 connects again: then the
    late ack goes to a dead connection and is refused, and the run says so."""
    a = KombuAmqpAdapter(store.location, one_channel=True)
    store.connections.append(a)
    b = store.connect()
    a.enqueue("j0", "payload")
    first = _within("j0", BOUND, lambda: a.claim("w0", 0))
    before = a.workers["w0"][0]
    second = _held_past_timeout(a, b)  # w1 now holds j0
    assert second.job == "j0"
    b.enqueue("j1", "payload")
    next_one = _within("j1", BOUND, lambda: a.claim("w0", 0))
    assert next_one.job == "j1" and next_one.token == first.token == 1, "the tag changed"
    if a.workers["w0"][0] is not before:  # the reopening ended the connection
        assert not a.ack(first), "a late ack on a dead connection was taken"
        print("this run: py-amqp's reopening ended w0's connection; the late ack was refused")
        assert a.ack(next_one)
        return
    assert a.ack(first), "the stale ack was refused"  # it names tag 1: j1's delivery
    print("this run: the channel was reopened; the late ack of j0 acknowledged j1")
    a.close()  # w0 dies before it worked on j1
    store.connections.remove(a)
    b.ack(second)  # w1 finishes j0 (if its own lease ran out meanwhile, j0 comes back)

    def j1_again() -> Claim | None:
        got = b.claim("w2", 0)
        if got is not None and got.job == "j0":
            b.ack(got)  # w1's j0, timed out and redelivered: not the question here
            return None
        return got

    _nothing_for(QUIET, j1_again)  # j1 is never delivered again
    assert b.ready_count() == 0


def test_kombu_the_oldest_delivery_times_out_its_channel_with_the_younger_one(
    store: Store,
) -> None:
    """RabbitMQ times a channel out by its oldest unacknowledged delivery and then
    requeues every delivery of the channel: a worker that holds two messages on its one
    channel (a kombu Consumer with a prefetch above 1, as Celery's) loses the younger
    one's lease early. Here j1, taken 0.6 s after j0, comes back together with j0 (the
    machine's load decides when; the two returns are what is compared). (The generic
    properties give each claim its own channel, so their lease is one delivery's.)"""
    a, b = store.connect(), store.connect()
    a.enqueue("j0", "payload")
    a.enqueue("j1", "payload")
    assert _within("j0", BOUND, lambda: a.claim("w0", 0)).job == "j0"
    time.sleep(0.6 * TIMEOUT_MS / 1000)
    assert _within("j1", BOUND, lambda: a.claim("w0", 0)).job == "j1"  # the same channel
    back: dict[str, float] = {}

    def both_back() -> bool | None:
        a.recover()  # w0's I/O loop answers the close
        got = b.claim("w1", 0)
        if got is not None:
            back[got.job] = time.monotonic()
            assert b.ack(got)
        return True if sorted(back) == ["j0", "j1"] else None

    _within("j0 and j1 to come back", BOUND, both_back)
    gap = abs(back["j1"] - back["j0"])
    # Timed out one by one, j1 would come back 0.6 s after j0; together, within a claim.
    assert gap < 0.3 * TIMEOUT_MS / 1000, f"j1 came back {gap:.2f} s after j0"
    print(f"j0 and j1 came back {gap * 1000:.0f} ms apart (j1 was taken 0.6 s after j0)")


def test_kombu_a_consumer_that_reads_nothing_keeps_its_message(store: Store) -> None:
    """The broker requeues a timed-out delivery only once its consumer answers the
    channel close: a worker that reads nothing from its socket (frozen, or stuck outside
    its I/O loop) keeps its message for as long as its connection lives."""
    a, b = store.connect(), store.connect()
    a.enqueue("j0", "payload")
    _within("j0", BOUND, lambda: a.claim("w0", 0))
    _nothing_for(QUIET, lambda: b.claim("w1", 0))  # three timeouts, and nothing
    woke = "its channel reopened"
    try:
        a.recover()  # it wakes: its I/O loop reads what the broker sent meanwhile
    except Exception as error:  # the connection closed by the broker, or py-amqp failing
        woke = f"{type(error).__name__}: {str(error)[:80]}"
    again = _within("j0 to come back", BOUND, lambda: b.claim("w1", 0))
    assert again.job == "j0" and _redelivered(again)
    assert b.ack(again)
    print(f"the woken worker's I/O loop: {woke}")


@pytest.fixture
def dramatiq_store(rabbit: servers.Server) -> Iterator[Store]:
    made = Store(rabbit, DramatiqRabbitmq())
    yield made
    made.close()


def _dramatiq_redelivered(claim: Claim) -> bool:
    message: Any = claim.handle
    return bool(message.redelivered)


def test_dramatiq_round_trip_and_dead_letter(dramatiq_store: Store) -> None:
    a, b = dramatiq_store.connect(), dramatiq_store.connect()
    a.enqueue("j0", "payload")
    a.enqueue("j1", "payload")
    first = _within("j0", BOUND, lambda: b.claim("w0", 0))
    assert first.job == "j0" and b.ack(first)
    # The ack frees w0's prefetch slot and the broker pushes j1 to w0's consumer at once:
    # w0 takes it (another worker would wait for w0's channel to time out, and w0's
    # consumer then still yields j1 from pika's buffer: see docs/findings.md).
    other = _within("j1", BOUND, lambda: b.claim("w0", 0))
    assert other.job == "j1" and b.nack(other)  # dead-lettered into <queue>.XQ
    _nothing_for(0.1, lambda: a.claim("w1", 0))
    assert a.ready_count() == 0


def _timed_out_to_another(a: RabbitmqConnection, b: RabbitmqConnection) -> tuple[Claim, Claim]:
    """w0 (on ``a``) claims j0 and keeps it past consumer_timeout; w0's consumer thread
    reads the broker's close and makes a new consumer, and w1 (on ``b``) gets j0 again:
    (w0's claim, w1's claim)."""
    a.enqueue("j0", "payload")
    first = _within("j0", BOUND, lambda: a.claim("w0", 0))

    def j0_elsewhere() -> Claim | None:
        a.recover()  # w0's consumer thread: reads the close, makes a new consumer
        return b.claim("w1", 0)

    return first, _within("j0 to come back", BOUND, j0_elsewhere)


def test_dramatiq_late_ack_through_the_restarted_consumer_acks_another_message(
    dramatiq_store: Store,
) -> None:
    """The finding: after the broker closed w0's channel (consumer_timeout), w0's consumer
    thread makes a new consumer, whose delivery tags count from 1 again; the worker acks
    every finished message through its *current* consumer, whose ``known_tags`` holds
    tag 1 (its own j1), so w0's late ack of the timed-out j0 acknowledges j1."""
    a, b = dramatiq_store.connect(), dramatiq_store.connect()
    first, second = _timed_out_to_another(a, b)
    assert second.job == "j0" and _dramatiq_redelivered(second)
    b.enqueue("j1", "payload")
    next_one = _within("j1", BOUND, lambda: a.claim("w0", 0))
    assert next_one.job == "j1" and next_one.token == first.token == 1, "the tag changed"
    # Dramatiq sends it (tag 1 of the new consumer: j1); the adapter reports that j0's
    # delivery was not acknowledged (its consumer is gone), and j1 is gone all the same.
    assert not a.ack(first), "an ack through a consumer made since the claim said True"
    a.close()  # w0 dies before it worked on j1
    dramatiq_store.connections.remove(a)
    b.ack(second)

    def j1_again() -> Claim | None:
        got = b.claim("w2", 0)
        if got is not None and got.job == "j0":
            b.ack(got)  # w1's j0, timed out and redelivered: not the question here
            return None
        return got

    _nothing_for(QUIET, j1_again)  # j1 is never delivered again
    assert b.ready_count() == 0


def test_dramatiq_an_ack_its_new_consumer_does_not_know_is_not_taken(
    dramatiq_store: Store,
) -> None:
    """The ack-final flip: Dramatiq sends no frame for a tag its current consumer does not
    know (``_RabbitmqConsumer.ack`` logs "not in known tags" and returns), so an ack made
    after the consumer was made anew returned True while the message went back. The
    adapter says False, and the message is delivered again."""
    a, b = dramatiq_store.connect(), dramatiq_store.connect()
    first, second = _timed_out_to_another(a, b)
    assert second.job == "j0"
    assert not a.ack(first), "an ack Dramatiq dropped (unknown tag) said True"
    assert b.ack(second)


def test_dramatiq_an_ack_that_said_true_was_sent(dramatiq_store: Store) -> None:
    """The ack-final flip: Dramatiq queues its ``basic_ack`` for pika's I/O loop, which
    runs it only inside ``process_data_events``; an ack that returned True with the frame
    still queued was lost when its worker died before its next call. Here the worker's
    TCP link ends right after its ack (what a SIGKILL does): the message must not come
    back."""
    a, b = dramatiq_store.connect(), dramatiq_store.connect()
    a.enqueue("j0", "payload")
    first = _within("j0", BOUND, lambda: a.claim("w0", 0))
    assert a.ack(first)
    consumer: Any = a.consumers["w0"]  # type: ignore[attr-defined]
    consumer.connection._impl._transport._sock.shutdown(socket.SHUT_RDWR)
    _nothing_for(QUIET, lambda: b.claim("w1", 0))  # j0 is never delivered again


def _poll(consumer: Any, what: str) -> Any:
    """Dramatiq's ``next(consumer)`` until it yields a message (bounded)."""
    return _within(what, BOUND, lambda: next(consumer))


def _frames_sent(consumer: Any) -> None:
    """Run the consumer's pika I/O loop until the frames Dramatiq queued with
    ``add_callback_threadsafe`` have run (a marker queued after them has; bounded)."""
    ran: list[bool] = []
    consumer.connection.add_callback_threadsafe(lambda: ran.append(True))
    _within("pika to run Dramatiq's queued frame", BOUND,
            lambda: ran or consumer.connection.process_data_events(time_limit=0.01))  # fmt: skip


def test_plain_dramatiq_a_late_nack_through_the_restarted_consumer_loses_another_message(
    rabbit: servers.Server,
) -> None:
    """The cause of ``queue.no-loss`` VIOLATED, with Dramatiq and pika only (no adapter).
    Dramatiq's worker answers every message through its consumer thread's *current*
    consumer (``worker.py``, ``post_process_message``: ``self.consumer.nack(message)``)
    and ``known_tags`` holds tag numbers only. j0 is taken from consumer C1 (tag 1) and
    worked on past ``consumer_timeout``; the consumer thread meets the close and makes
    C2; another worker takes the requeued j0; C2 is delivered j1, tag 1 again; j0's
    worker thread fails and nacks j0 through C2: the broker dead-letters j1. The worker
    then dies while it works on j1, and j1 is never delivered again: it was never
    finished, nor failed by anyone who held it."""
    import uuid

    from dramatiq import Message
    from dramatiq.brokers.rabbitmq import RabbitmqBroker
    from dramatiq.errors import ConnectionClosed

    broker: Any = RabbitmqBroker(
        url=f"amqp://guest:guest@127.0.0.1:{rabbit.port}/%2F", middleware=[]
    )
    queue = f"lc-plain-{uuid.uuid4().hex[:8]}"
    broker.declare_queue(queue)
    broker._ensure_queue(queue)

    def send(job: str) -> None:
        options = {"job": job}
        message: Any = Message(
            queue_name=queue, actor_name="a", args=(), kwargs={}, options=options
        )
        broker.enqueue(message)

    consumers: list[Any] = []

    def consume() -> Any:
        consumers.append(broker.consume(queue, 1, 20))
        return consumers[-1]

    try:
        send("j0")
        c1 = consume()
        j0 = _poll(c1, "j0")
        time.sleep(1.3 * TIMEOUT_MS / 1000)  # j0's worker thread is still at it
        with pytest.raises(ConnectionClosed):  # the consumer thread's next read
            _nothing_for(QUIET, lambda: next(c1))
        w2 = consume()  # another worker process
        j0_again = _poll(w2, "j0 to come back")
        c2 = consume()  # the consumer thread's restart
        send("j1")
        j1 = _poll(c2, "j1")
        assert (j0.options["job"], j0._tag) == ("j0", 1) and j0_again.redelivered
        assert (j1.options["job"], j1._tag, j1.redelivered) == ("j1", 1, False)
        c2.nack(j0)  # j0's worker thread failed: Dramatiq nacks through the current consumer
        _frames_sent(c2)
        w2.ack(j0_again)
        _frames_sent(w2)
        c2.connection._impl._transport._sock.close()  # the worker dies, working on j1
        w3 = consume()
        _nothing_for(QUIET, lambda: next(w3))  # j1 is never delivered again
        assert tuple(broker.get_queue_message_counts(queue)) == (0, 0, 1)  # j1: dead-lettered
    finally:
        for consumer in consumers:
            with contextlib.suppress(Exception):
                consumer.close()
            with contextlib.suppress(Exception):
                consumer.connection.close()
        for name in (queue, f"{queue}.DQ", f"{queue}.XQ"):
            broker.channel.queue_delete(name)
        broker.close()


def test_kombu_a_lost_connection_records_its_claims_lost(store: Store) -> None:
    """A worker's connection ends under a live claim: RabbitMQ requeues its deliveries at
    once (long before ``consumer_timeout``). The worker's next call connects again and the
    adapter records the claim lost (``Lost``), readable from every connection to the
    store: what ``queue.exclusive`` sets aside instead of reading two live leases."""
    a = KombuAmqpAdapter(store.location)  # a channel per claim, as the engines use
    b = KombuAmqpAdapter(store.location)
    store.connections += [a, b]
    a.enqueue("j0", "payload")
    first = _within("j0", BOUND, lambda: a.claim("w0", 0))
    assert first.job == "j0" and not b.lost()
    began = time.monotonic()
    a.workers["w0"][0].connection.sock.shutdown(socket.SHUT_RDWR)  # the TCP link ends
    second = _within("j0 to come back", BOUND, lambda: b.claim("w1", 0))
    assert second.job == "j0" and time.monotonic() - began < TIMEOUT_MS / 1000
    assert a.claim("w0", 0) is None  # w0 connects again; the queue is empty
    assert [(lost.worker, lost.job) for lost in b.lost()] == [("w0", "j0")]
    assert b.ack(second)


@pytest.mark.parametrize("name", ["kombu-amqp", "dramatiq-rabbitmq"])
def test_the_generic_properties_take_the_broker_lease(name: str) -> None:
    """The generic properties load both adapters (they refused them while the lease was
    unknown), and the broker the harness starts for a check (``servers.start_for``) has
    the lease the adapters declare: a delivery comes back to another worker no sooner than
    ``server_lease`` after it was taken, and only after it (within a loose bound here: the
    engines judge only calls clear of ``[lease, lease + slack]``)."""
    library = load_library(name)
    capabilities = library.capabilities
    assert capabilities.server_lease == LEASE_MS / 1000 and capabilities.real_time
    assert capabilities.lease_slack == SLACK_MS / 1000 and capabilities.one_lease
    assert capabilities.real_lease_ms(15) == LEASE_MS, "an engine's lease is not the broker's"
    assert library.promises.of("queue.stale-ack").promised
    with servers.start_for(capabilities, durable=False) as server:
        assert isinstance(library, RabbitmqStore)
        store = Store(server, library)
        try:
            a, b = store.connect(), store.connect()
            a.enqueue("j0", "payload")
            first = _within("j0", BOUND, lambda: a.claim("w0", 0))
            started = time.monotonic()

            def attempt() -> Claim | None:
                a.recover()
                return b.claim("w1", 0)

            again = _within("j0 to come back", BOUND, attempt)
            waited = time.monotonic() - started
            assert again.job == first.job == "j0"
            assert LEASE_MS / 1000 <= waited < LEASE_MS / 1000 + 3.0, waited
            assert b.ack(again)
        finally:
            store.close()


def test_kombu_an_ack_sent_to_a_frozen_broker(store: Store, rabbit: servers.Server) -> None:
    """SIGSTOP of the broker (the node's process group, not its epmd) while a worker holds
    a delivery; the worker acks within its lease by its own clock, the broker reads the
    ack only when it wakes, past the timeout by the broker's clock. Whatever the broker
    does first (read the ack, or time the channel out), the worker's ack must say what
    happened: True and never delivered again, or False and delivered again."""
    a = KombuAmqpAdapter(store.location, one_channel=True)
    store.connections.append(a)
    b = store.connect()
    a.enqueue("j0", "payload")
    held = _within("j0", BOUND, lambda: a.claim("w0", 0))
    os.killpg(rabbit.pid, signal.SIGSTOP)
    try:
        time.sleep(0.2 * TIMEOUT_MS / 1000)
        message: Any = held.handle
        message.ack()  # a one-way frame: the node reads it when it wakes
        time.sleep(1.5 * TIMEOUT_MS / 1000)
    finally:
        os.killpg(rabbit.pid, signal.SIGCONT)
    accepted = a._answer(held, lambda _message: None)  # the round trip after the ack
    again: list[str] = []

    def settled() -> bool | None:
        a.recover()
        got = b.claim("w1", 0)
        if got is not None:
            again.append(got.job)
            assert b.ack(got)
        return True

    _nothing_for_or(QUIET, settled)
    assert accepted != ("j0" in again), (
        f"the ack answered {accepted} and j0 was delivered again: {again}"
    )
    print(f"ack sent to the frozen broker: {accepted}; delivered again: {again}")


def _nothing_for_or(seconds: float, attempt: Callable[[], object]) -> None:
    """Call ``attempt`` every 10 ms for ``seconds`` (it records what it sees)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        attempt()
        time.sleep(0.01)


def test_kombu_confirmed_messages_survive_a_kill_of_the_broker(rabbit: servers.Server) -> None:
    """Kill -9 of the node and a restart on the same data directory: every confirmed
    message (``confirm_publish``) comes back, the held one redelivered. The ack made just
    before the kill is not confirmed by anything in AMQP 0-9-1; the acknowledged j0 came
    back too in every run we made (the finding). Run last in the module: it restarts the
    module's server."""
    store = Store(rabbit)
    try:
        a = store.connect()
        for job in ("j0", "j1", "j2"):
            a.enqueue(job, "payload")
        done = _within("j0", BOUND, lambda: a.claim("w0", 0))
        assert a.ack(done)
        assert _within("j1", BOUND, lambda: a.claim("w0", 0)).job == "j1"  # held
        rabbit.kill()
        rabbit.restart()
        for dead in store.connections:  # their sockets died with the node
            with contextlib.suppress(Exception):
                dead.close()
        store.connections.clear()
        b = store.connect()
        back = []
        while (got := b.claim("w1", 0)) is not None:
            back.append(got)
        jobs = sorted(claim.job for claim in back)
        assert {"j1", "j2"} <= set(jobs), f"confirmed messages were lost: {jobs}"
        assert all(b.ack(claim) for claim in back)
        print(f"after the restart: {jobs} (j0 was acknowledged before the kill)")
    finally:
        store.close()


REQUEUED_CLAIM = '''
from leasecheck.adapters.kombu_amqp import KombuAmqp


class RequeuedClaim(KombuAmqp):
    """kombu-amqp whose claim hands its delivery back at once and still reports it
    claimed (planted): the next worker's get takes the same message."""

    name = "kombu-amqp-requeued-claim"

    def connect(self, location, clock):
        queue = super().connect(location, clock)
        claim = queue.claim

        def requeued(worker, lease):
            got = claim(worker, lease)
            if got is not None:
                got.handle.requeue()
            return got

        queue.claim = requeued
        return queue
'''


def test_queue_interleavings_runs_on_rabbitmq_and_catches_a_requeued_claim(
    tmp_path: Path,
) -> None:
    """queue.interleavings on RabbitMQ (a broker of its own, consumer_timeout past the
    scenario's leases; each process ends at the last barrier): kombu-amqp holds, and a
    claim that hands its delivery back (two live claims of one message) is VIOLATED."""
    from leasecheck.runner import HOLDS, VIOLATED, CheckOptions, run_check

    def verdict(adapter: str) -> tuple[str, int, str]:
        options = CheckOptions(
            adapter=adapter, profile="ci", seed=0, workers="0",
            properties=("queue.interleavings",),
        )  # fmt: skip
        result = run_check(options)
        row = result.properties["queue.interleavings"]
        log = "\n".join([result.log, *row.details, repr(row.figures)])
        return row.verdict, result.exit_code, log

    got, code, log = verdict("kombu-amqp")
    assert (got, code) == (HOLDS, 0), log[-3000:]
    assert "'final_read': False" in log, log[-3000:]
    planted = tmp_path / "requeued_claim.py"
    planted.write_text(REQUEUED_CLAIM)
    got, code, log = verdict(str(planted))
    assert (got, code) == (VIOLATED, 1), log[-3000:]
    assert "queue.exclusive" in log, log[-3000:]
