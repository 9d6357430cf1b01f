"""kombu's RabbitMQ transport (``pyamqp``, what Celery's RabbitMQ broker is) through the
adapter protocol, with manual acknowledgements and the broker's ``consumer_timeout``.

RabbitMQ has no per-claim lease: a delivery is held by the *channel* it was delivered on
until it is acknowledged, rejected, or the channel closes (then it is requeued). The
broker's own lease is ``consumer_timeout``: a delivery not acknowledged within it closes
its channel with ``PRECONDITION_FAILED``. The adapter uses kombu's public objects the
way a worker does, one channel per worker name (a kombu ``Consumer`` has one channel):

- enqueue: ``Producer.publish`` (persistent, to a durable queue), the job in a header,
  with publisher confirms (the transport option ``confirm_publish``; kombu's default is
  off): RabbitMQ writes a persistent message to disk on a timer of its own, and only a
  confirm says it has (without it, three messages published just before a kill -9 of
  the node were all gone after its restart);
- claim: ``Queue.get(no_ack=False)`` on the worker's channel (``basic.get``);
- ack: ``Message.ack()``; nack: ``Message.reject(requeue=True)``. Both are one-way
  frames; a refusal comes back as a channel close, so each is followed by a round trip
  on its channel (``basic.qos``), and a close it reads is the refusal;
- extend: none (AMQP 0-9-1 has no way to renew a delivery), so ``Unsupported``;
- recover: the worker's I/O loop (``Connection.drain_events``), which reads the broker's
  ``Channel.Close`` for a timed-out delivery and answers it; only then does the broker
  requeue the delivery, so recovery is the holder's (``-1``);
- observe: ``Unsupported``: AMQP 0-9-1 reads a queue's messages only by taking them
  (a passive declare gives a count), so no per-job state can be read without changing it.

Lease: ``consumer_timeout`` is one setting of the whole broker (RabbitMQ 3.10 has no
per-queue value), checked on every channel's tick (``channel_tick_interval``, 60 s by
default): a delivery's lease really ends at the first tick after the timeout. The
harness starts RabbitMQ with both set small where it wants leases to end
(``servers.rabbitmq(consumer_timeout_ms=..., tick_ms=...)``): then a lease *is* a
consumer timeout, ending within one tick of it. Time is the broker's (``clock="real"``);
the granularity declared is the default tick, so the generic properties (15 ms to 105 ms
leases chosen per claim) refuse this adapter with that sentence, and it is checked by
the scenarios of ``tests/test_broker_rabbitmq.py`` instead.

py-amqp 5.4.2 answers a broker's ``Channel.Close`` and *reopens the same channel*
(``amqp/channel.py:293``, ``Channel._on_close`` calls ``_do_revive``): same channel id,
delivery tags counting from 1 again, and every ``Message`` of the closed channel still
pointing at it. ``docs/findings.md`` reports what that does to a late ack.
"""

from __future__ import annotations

import importlib.metadata
import uuid
from pathlib import Path
from typing import Any, ClassVar

from leasecheck.adapters._libs import envelope, job_of
from leasecheck.adapters.protocol import (
    AdapterError,
    Capabilities,
    Claim,
    Promise,
    Promises,
    QueueAdapter,
    QueueClock,
    StoredJob,
    Unsupported,
)

__all__ = ["KombuAmqp"]

BROKERS_EXTRA = "pip install 'leasecheck[brokers]'"
HEADER = "leasecheck-job"

_CONFIRMS = "https://www.rabbitmq.com/docs/3.10/confirms"
_CONSUMERS = "https://www.rabbitmq.com/docs/3.10/consumers"
PROMISES = Promises(
    properties={
        "queue.ack-final": Promise(
            True,
            f"{_CONFIRMS} (Consumer Acknowledgement Modes and Data Safety Considerations)",
            "'basic.ack is used for positive acknowledgements' ... 'RabbitMQ can consider "
            "it delivered': an acknowledged delivery is removed from the queue",
        ),
        "queue.no-loss": Promise(
            True,
            f"{_CONFIRMS} (Automatic Requeueing)",
            "'When a channel is closed, any unacknowledged deliveries on it are "
            "automatically requeued'",
        ),
        "queue.exclusive": Promise(
            True,
            f"{_CONSUMERS} (Delivery Acknowledgement Timeout)",
            "a delivery is redelivered only once its channel is closed: by its consumer, "
            "its connection's loss, or 'its channel will be closed with a "
            "PRECONDITION_FAILED channel exception' after consumer_timeout",
        ),
        "queue.stale-ack": Promise(
            True,
            f"{_CONFIRMS} (Delivery Identifiers: Delivery Tags)",
            "'Because delivery tags are scoped per channel, deliveries must be acknowledged "
            "on the same channel they were received on. Acknowledging on a different "
            'channel will result in an "unknown delivery tag" protocol exception\'',
        ),
        "queue.linearizable": Promise(False, "not mentioned in RabbitMQ's or kombu's docs"),
        "queue.server-crash": Promise(
            False,
            f"{_CONFIRMS} (Publisher Confirms; When Will Published Messages Be Confirmed)",
            "a persistent message routed to a durable queue is confirmed once persisted "
            "to disk; nothing confirms that a consumer's ack was persisted, so an ack just "
            "before a crash may be lost and the message delivered again",
        ),
    },
    delivery="at-least-once",
    fencing="the channel: a delivery tag names a delivery on one channel (py-amqp reopens "
    "a channel the broker closed under the same id, tags from 1 again)",
    recovery="the broker requeues a closed channel's deliveries (consumer_timeout, on the "
    "channel's tick, once the holder answers the close)",
    ordering="FIFO per queue; a requeued message goes back to its position",
    durability="durable queue, persistent messages (delivery_mode 2), publisher confirms",
)


def _import_kombu() -> Any:
    try:
        import amqp  # noqa: F401  (the pyamqp transport's client)
        import kombu
    except ImportError as missing:
        raise AdapterError(f"kombu is not installed; install it with: {BROKERS_EXTRA}") from missing
    return kombu


def _channel_error() -> type[Exception]:
    import amqp.exceptions

    error: type[Exception] = amqp.exceptions.ChannelError
    return error


class KombuAmqp:
    """kombu's ``pyamqp`` transport: one durable queue per store on a shared RabbitMQ."""

    name: ClassVar[str] = "kombu-amqp"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="real", extend=False, server="rabbitmq", ack_deletes=True,
        lease_granularity=60.0, one_lease=True,
    )  # fmt: skip
    promises: ClassVar[Promises] = PROMISES

    def version(self) -> str:
        _import_kombu()
        return importlib.metadata.version("kombu")

    def create(self, directory: Path, server: str | None) -> str:
        if not server:
            raise AdapterError("kombu-amqp needs a RabbitMQ URL (adapters.servers.rabbitmq)")
        location = f"{server}#lc-{uuid.uuid4().hex[:12]}"
        adapter = KombuAmqpAdapter(location)
        adapter.close()  # connecting declared the queue
        return location

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return KombuAmqpAdapter(location)

    def destroy(self, location: str) -> None:
        adapter = KombuAmqpAdapter(location)
        try:
            adapter.queue(adapter.connection.default_channel).delete()
        finally:
            adapter.close()


class KombuAmqpAdapter:
    """One kombu ``Connection``; one channel per worker name, and one for publishing."""

    def __init__(self, location: str) -> None:
        kombu = _import_kombu()
        self.url, _, self.name = location.partition("#")
        self.connection: Any = kombu.Connection(
            self.url, connect_timeout=10, transport_options={"confirm_publish": True}
        )
        self.exchange = kombu.Exchange(self.name, type="direct", durable=True)
        self.producer: Any = kombu.Producer(
            self.connection.default_channel, exchange=self.exchange, routing_key=self.name
        )
        self.queue(self.connection.default_channel).declare()
        self.channels: dict[str, Any] = {}

    def queue(self, channel: Any) -> Any:
        kombu = _import_kombu()
        return kombu.Queue(self.name, self.exchange, routing_key=self.name, durable=True)(channel)

    def channel(self, worker: str) -> Any:
        """Worker ``worker``'s channel (a kombu consumer's one channel), opened on first use."""
        if worker not in self.channels:
            self.channels[worker] = self.connection.channel()
        return self.channels[worker]

    def enqueue(self, job: str, payload: str) -> None:
        self.producer.publish(
            envelope(job, payload), headers={HEADER: job}, delivery_mode=2, serializer="raw"
        )

    def claim(self, worker: str, lease: float) -> Claim | None:
        channel = self.channel(worker)
        try:
            message = self.queue(channel).get(no_ack=False)
        except _channel_error():
            # The broker closed this channel (a timed-out delivery) and py-amqp reopened
            # it: what a worker's next get meets. The get is made again, once.
            message = self.queue(channel).get(no_ack=False)
        if message is None:
            return None
        return Claim(job_of(message.body), worker, message, message.delivery_tag)

    def ack(self, claim: Claim) -> bool:
        message: Any = claim.handle
        message.ack()
        return self._applied(message.channel)

    def nack(self, claim: Claim) -> bool:
        message: Any = claim.handle
        message.reject(requeue=True)
        return self._applied(message.channel)

    def _applied(self, channel: Any) -> bool:
        """A round trip on ``channel`` after a one-way frame: False if the broker closed
        the channel for it (an unknown delivery tag), True if it took it."""
        try:
            channel.basic_qos(0, 0, False)
        except _channel_error():
            return False
        return True

    def extend(self, claim: Claim, lease: float) -> bool:
        raise Unsupported("AMQP 0-9-1 has no way to renew a delivery")

    def recover(self) -> int:
        """The worker's I/O loop: read and answer what the broker sent (a channel close
        for a timed-out delivery), without waiting for more."""
        for _ in range(100):
            try:
                self.connection.drain_events(timeout=0.001)
            except TimeoutError:
                break
            except _channel_error():
                continue  # a channel closed by consumer_timeout, answered and reopened
        return -1

    def observe(self) -> list[StoredJob]:
        raise Unsupported(
            "AMQP 0-9-1 reads a queue's messages only by taking them: no read-only "
            "per-job view (a passive queue.declare gives only the ready count)"
        )

    def ready_count(self) -> int:
        """How many messages the queue holds ready (``queue.declare`` passive)."""
        declared = self.connection.default_channel.queue_declare(self.name, passive=True)
        count: int = declared.message_count
        return count

    def close(self) -> None:
        self.connection.release()
