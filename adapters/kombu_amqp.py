"""kombu's RabbitMQ transport (``pyamqp``, what Celery's RabbitMQ broker is) through the
adapter protocol, with manual acknowledgements and the broker's ``consumer_timeout``.

RabbitMQ has no per-claim lease: a delivery is held by the *channel* it was delivered on
until it is acknowledged, rejected, or the channel closes (then it is requeued). The
broker's own lease is ``consumer_timeout``: a delivery not acknowledged within it closes
its channel with ``PRECONDITION_FAILED``. The adapter uses kombu's public objects the
way a worker does, one connection per worker name (each claim on a channel of its own, see
``KombuAmqpAdapter``):

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

Lease: ``consumer_timeout``, one setting of the whole broker, checked on every channel's
tick (``adapters/_rabbitmq.py``): the generic properties run on one broker per check
started with ``consumer_timeout = 300`` ms and a 10 ms tick, and lease for exactly that
(``Capabilities.server_lease``), treating 300 to 340 ms after a claim as its end.
Publishing has a connection of its own, and each worker name a consumer connection
with its one channel (Celery's producer pool and consumer); a worker whose connection
the broker ended connects again, as kombu's consumers do.

py-amqp 5.4.2 answers a broker's ``Channel.Close`` and *reopens the same channel*
(``amqp/channel.py:293``, ``Channel._on_close`` calls ``_do_revive``): same channel id,
delivery tags counting from 1 again, and every ``Message`` of the closed channel still
pointing at it. ``docs/findings.md`` reports what that does to a late ack.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, ClassVar

from leasecheck.adapters._libs import envelope, installed_version, job_of
from leasecheck.adapters._rabbitmq import (
    BROKERS_EXTRA,
    CONFIRMS,
    CONSUMERS,
    RabbitmqStore,
    losses_path,
    read_lost,
    record_lost,
    split_location,
)
from leasecheck.adapters.protocol import Claim, Lost, Promise, Promises, StoredJob, Unsupported

__all__ = ["KombuAmqp"]

HEADER = "leasecheck-job"

_CONFIRMS, _CONSUMERS = CONFIRMS, CONSUMERS
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
    for distribution, module in KombuAmqp.distributions:
        installed_version(distribution, module, BROKERS_EXTRA)
    import kombu

    return kombu


def _channel_error() -> type[Exception]:
    import amqp.exceptions

    error: type[Exception] = amqp.exceptions.ChannelError
    return error


def _connection_errors() -> tuple[type[Exception], ...]:
    """A lost connection: the broker ended it (py-amqp's ``ConnectionError``, e.g. 503
    ``COMMAND_INVALID`` for a ``Channel.close_ok`` it no longer expected) or its socket."""
    import amqp.exceptions

    # RecursionError: py-amqp's reading of a socket that the broker wrote several channel
    # closes to while nobody read it (docs/findings.md, "a frozen consumer"): the client
    # is broken, and the worker connects again.
    return (amqp.exceptions.ConnectionError, OSError, RecursionError)


class KombuAmqp(RabbitmqStore):
    """kombu's ``pyamqp`` transport: one durable queue per store on a shared RabbitMQ."""

    name: ClassVar[str] = "kombu-amqp"
    promises: ClassVar[Promises] = PROMISES
    distributions = (("kombu", "kombu"), ("amqp", "amqp"))  # amqp: the pyamqp client
    prefix = "lc-"

    def open(self, location: str) -> KombuAmqpAdapter:
        return KombuAmqpAdapter(location)

    def destroy(self, location: str) -> None:
        adapter = KombuAmqpAdapter(location)
        try:
            adapter.queue(adapter.connection.default_channel).delete()
        finally:
            adapter.close()
            losses_path(adapter.name).unlink(missing_ok=True)


class KombuAmqpAdapter:
    """A producer connection, and per worker name a consumer connection.

    Celery publishes through a producer pool and consumes on a connection of its own; so
    does the adapter, so that a channel the broker closes (``consumer_timeout``) is read by
    its worker's calls only, never by a publish waiting for its confirm.

    Each claim takes its delivery on a channel of its own (``one_channel=False``, what the
    generic properties use): RabbitMQ times a channel out by its *oldest* delivery and
    then requeues every delivery of the channel, and a refused (unknown-tag) ack closes
    the channel with all its deliveries too, so on a shared channel one delivery's lease
    ends with another's. With a channel per claim a lease is that delivery's own
    ``consumer_timeout``, which is the lease the generic model has. ``one_channel=True``
    gives each worker one channel for all its claims, as a kombu ``Consumer`` has: the
    scenarios of ``tests/test_broker_rabbitmq.py`` show what that does."""

    def __init__(self, location: str, one_channel: bool = False) -> None:
        kombu = _import_kombu()
        self.url, self.name = split_location(location)
        self.one_channel = one_channel
        self.connection: Any = self._connect()
        self.exchange = kombu.Exchange(self.name, type="direct", durable=True)
        self.producer: Any = kombu.Producer(
            self.connection.default_channel, exchange=self.exchange, routing_key=self.name
        )
        self.queue(self.connection.default_channel).declare()
        self.workers: dict[str, tuple[Any, Any]] = {}
        """worker -> (its connection, its shared channel)."""
        self.held: dict[str, dict[int, str]] = {}
        """worker -> its claims not yet answered, as ``id(message)`` -> job: the deliveries
        its connection's loss sends back (recorded, ``lost``)."""

    def _connect(self) -> Any:
        kombu = _import_kombu()
        return kombu.Connection(
            self.url, connect_timeout=10, transport_options={"confirm_publish": True}
        )

    def queue(self, channel: Any) -> Any:
        kombu = _import_kombu()
        return kombu.Queue(self.name, self.exchange, routing_key=self.name, durable=True)(channel)

    def channel(self, worker: str, lost: str | None = None) -> Any:
        """The channel worker ``worker``'s next claim takes its delivery on: its one
        channel (``one_channel``), else a fresh one on its connection. ``lost``: its
        connection was lost (why), and the worker connects again (as kombu's consumers do);
        the broker requeued the lost connection's deliveries, so the worker's claims not
        yet answered are recorded lost (``lost()``)."""
        if lost is not None and worker in self.workers:
            self._release(self.workers.pop(worker)[0])
            record_lost(self.name, worker, list(self.held.pop(worker, {}).values()), lost)
        if worker not in self.workers:
            connection = self._connect()
            self.workers[worker] = (connection, connection.channel())
        connection, shared = self.workers[worker]
        return shared if self.one_channel else connection.channel()

    def enqueue(self, job: str, payload: str) -> None:
        self.producer.publish(
            envelope(job, payload), headers={HEADER: job}, delivery_mode=2, serializer="raw"
        )

    def claim(self, worker: str, lease: float) -> Claim | None:
        message, lost = None, None
        for attempt in range(3):
            try:
                channel = self.channel(worker, lost)
                message = self.queue(channel).get(no_ack=False)
                break
            except _channel_error():
                # The broker closed this channel (a timed-out delivery) and py-amqp
                # reopened it: what a worker's next get meets. The get is made again.
                if attempt == 2:
                    raise
                lost = None
            except _connection_errors() as error:
                # The broker ended the connection (py-amqp's reopening answered with a
                # Channel.close_ok it did not expect: 503): the worker connects again.
                if attempt == 2:
                    raise
                lost = type(error).__name__
        if message is None:
            self._done_with(channel, worker)
            return None
        job = job_of(message.body)
        self.held.setdefault(worker, {})[id(message)] = job
        return Claim(job, worker, message, message.delivery_tag)

    def _done_with(self, channel: Any, worker: str) -> None:
        """Close a claim's own channel once its delivery is answered (not a shared one).
        A lost connection met here (a 503 for the close crossing the broker's own) is
        recorded at once: the broker has requeued the worker's other deliveries already,
        and another worker may take one in this same step."""
        if self.one_channel or any(channel is c for _, c in self.workers.values()):
            return
        connection = channel.connection  # py-amqp clears it as the channel closes
        try:
            channel.close()
        except _connection_errors() as error:
            current = self.workers.get(worker)
            if current is not None and current[0].connection is connection:
                self.channel(worker, type(error).__name__)
        except Exception:
            pass  # a channel the broker closed may fail to close: it is gone either way

    def ack(self, claim: Claim) -> bool:
        return self._answer(claim, lambda message: message.ack())

    def nack(self, claim: Claim) -> bool:
        return self._answer(claim, lambda message: message.reject(requeue=True))

    def _answer(self, claim: Claim, send: Callable[[Any], None]) -> bool:
        """Send a one-way frame for ``claim``'s delivery, then make a round trip on its
        channel (``basic.qos``): False if the broker closed the channel for it (an unknown
        delivery tag) or the worker's connection is gone (its deliveries went back)."""
        message: Any = claim.handle
        self.held.get(claim.worker, {}).pop(id(message), None)  # answered, whatever comes
        connection = message.channel.connection  # py-amqp clears it as the channel closes
        try:
            send(message)
            message.channel.basic_qos(0, 0, False)
        except _channel_error():
            return False  # the broker closed the channel for it (py-amqp reopened it)
        except _connection_errors() as error:
            current = self.workers.get(claim.worker)
            if current is not None and current[0].connection is connection:
                self.channel(claim.worker, type(error).__name__)  # its own connection is gone
            return False  # else: an earlier connection of the worker's, gone already
        self._done_with(message.channel, claim.worker)
        return True

    def extend(self, claim: Claim, lease: float) -> bool:
        raise Unsupported("AMQP 0-9-1 has no way to renew a delivery")

    def recover(self) -> int:
        """Every worker's I/O loop: read and answer what the broker sent (a channel close
        for a timed-out delivery), without waiting for more."""
        for worker, (connection, _channel) in list(self.workers.items()):
            for _ in range(100):
                try:
                    connection.drain_events(timeout=0.001)
                except TimeoutError:
                    break
                except _channel_error():
                    continue  # a channel closed by consumer_timeout, answered and reopened
                except _connection_errors() as error:
                    self.channel(worker, type(error).__name__)
                    break
        return -1

    def observe(self) -> list[StoredJob]:
        raise Unsupported(
            "AMQP 0-9-1 reads a queue's messages only by taking them: no read-only "
            "per-job view (a passive queue.declare gives only the ready count)"
        )

    def lost(self) -> list[Lost]:
        return read_lost(self.name)

    def ready_count(self) -> int:
        """How many messages the queue holds ready (``queue.declare`` passive)."""
        declared = self.connection.default_channel.queue_declare(self.name, passive=True)
        count: int = declared.message_count
        return count

    def close(self) -> None:
        for connection, _channel in self.workers.values():
            self._release(connection)
        self.workers.clear()
        self.connection.release()

    @staticmethod
    def _release(connection: Any) -> None:
        """Close a worker's connection; one the broker already ended may fail to."""
        with contextlib.suppress(Exception):
            connection.release()
