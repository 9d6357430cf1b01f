"""Dramatiq's RabbitMQ broker (``RabbitmqBroker``, pika) through the adapter protocol.

A Dramatiq worker process runs one consumer per queue (``_ConsumerThread``): a
``_RabbitmqConsumer``, i.e. one pika connection and channel consuming with a prefetch,
and every message the worker's threads finish is acknowledged through *that thread's
current consumer* (``worker.py:_ConsumerThread.post_process_message``:
``self.consumer.ack(message)``). When the consumer meets a closed channel or
connection it raises ``ConnectionClosed`` and the thread makes a new consumer
(``self.consumer = self.broker.consume(...)``, after ``CONSUMER_RESTART_DELAY``). The
adapter keeps one consumer per worker name and does the same:

- enqueue: ``RabbitmqBroker.enqueue`` (persistent, with Dramatiq's own queue
  declaration: a durable queue dead-lettering into ``<queue>.XQ``), the job in the
  message's options;
- claim: ``next(consumer)`` with a short inactivity timeout (prefetch 1); a
  ``ConnectionClosed`` (or the end of pika's consume generator on a closed channel)
  makes the worker's consumer anew at once, as the consumer thread
  does (without its 3 s delay), and the claim is made again, once;
- ack: ``consumer.ack(message)`` through the worker's current consumer; nack:
  ``consumer.nack(message)`` (``basic_nack`` with ``requeue=False``: dead-lettered,
  ``failed``). Both hand the frame to pika's I/O loop (``add_callback_threadsafe``); the
  adapter then runs that loop and makes a round trip on the channel (``basic_qos``), so
  the verb returns once the broker has it: a channel it closes for the frame is a refusal;
- extend: none (AMQP 0-9-1), ``Unsupported``; observe: ``Unsupported`` (as kombu-amqp's);
- recover: every consumer's I/O loop (``process_data_events``), which reads a channel
  close for a timed-out delivery (the broker requeues it only then); a consumer found
  closed is made anew. The holder's, so ``-1``.

Lease: the broker's ``consumer_timeout`` on its channel tick, shared with
``adapters/kombu_amqp.py`` (``adapters/_rabbitmq.py``).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from leasecheck.adapters._libs import installed_version
from leasecheck.adapters._rabbitmq import (
    BROKERS_EXTRA,
    CONFIRMS,
    CONSUMERS,
    RabbitmqStore,
    split_location,
)
from leasecheck.adapters.protocol import (
    AdapterError,
    Claim,
    Promise,
    Promises,
    StoredJob,
    Unsupported,
)

__all__ = ["DramatiqRabbitmq"]

INACTIVITY_MS = 20
"""How long one claim waits for a pushed message: pika's consume has no zero wait."""
FRAME_BOUND = 10.0
"""Seconds an ack or nack waits for pika to run the frame Dramatiq queued (a few ms)."""

_SRC = "dramatiq 2.2.1 dramatiq/brokers/rabbitmq.py"
_CONFIRMS = CONFIRMS
_DOCS = "https://dramatiq.io/advanced.html"
PROMISES = Promises(
    properties={
        "queue.ack-final": Promise(
            True,
            f"{_SRC}:541 _RabbitmqConsumer.ack; {_CONFIRMS} (Acknowledgement Modes)",
            "basic_ack of the delivery; RabbitMQ removes an acknowledged delivery",
        ),
        "queue.no-loss": Promise(
            True,
            f"{_DOCS} (Message Persistence); {_SRC}:576 _RabbitmqConsumer.requeue",
            "'Dramatiq has at-least-once message delivery semantics', 'any messages that "
            "are in flight while a worker is terminated (eg. via SIGKILL) are going to be "
            "redelivered later'; 'RabbitMQ automatically re-enqueues unacked messages when "
            "consumers disconnect'",
        ),
        "queue.exclusive": Promise(
            True,
            f"{CONSUMERS} (Delivery Acknowledgement Timeout)",
            "a delivery is redelivered only once its channel is closed",
        ),
        "queue.stale-ack": Promise(
            True,
            f"{_SRC}:530 _RabbitmqConsumer.__init__ (known_tags)",
            "'We need to keep track of known delivery tags so that when connection errors "
            "occur and the consumer is reset, we don't attempt to send invalid tags to "
            "Rabbit'",
        ),
        "queue.linearizable": Promise(False, "not mentioned in Dramatiq's docs"),
    },
    delivery="at-least-once",
    fencing="the delivery tag, among the tags the worker's current consumer has delivered "
    "(known_tags); a new consumer's tags count from 1 again",
    recovery="the broker requeues a closed channel's deliveries (consumer_timeout on the "
    "channel tick, or the connection's loss)",
    ordering="FIFO per queue; a requeued message goes back to its position",
    durability="durable queues, persistent messages (Dramatiq's delivery_mode 2)",
)


def _import_dramatiq() -> Any:
    for distribution, module in DramatiqRabbitmq.distributions:
        installed_version(distribution, module, BROKERS_EXTRA)
    import dramatiq
    import dramatiq.brokers.rabbitmq

    return dramatiq


class DramatiqRabbitmq(RabbitmqStore):
    """Dramatiq's ``RabbitmqBroker``: one queue per store on a shared RabbitMQ."""

    name: ClassVar[str] = "dramatiq-rabbitmq"
    promises: ClassVar[Promises] = PROMISES
    distributions = (("dramatiq", "dramatiq"), ("pika", "pika"))  # pika: its AMQP client
    prefix = "lc"  # Dramatiq adds ".DQ" and ".XQ" queues beside it

    def open(self, location: str) -> DramatiqRabbitmqAdapter:
        return DramatiqRabbitmqAdapter(location)

    def destroy(self, location: str) -> None:
        adapter = DramatiqRabbitmqAdapter(location)
        try:
            channel = adapter.broker.channel
            for name in (adapter.queue, f"{adapter.queue}.DQ", f"{adapter.queue}.XQ"):
                channel.queue_delete(name)
        finally:
            adapter.close()


class DramatiqRabbitmqAdapter:
    """One ``RabbitmqBroker`` (its publishing connection) and one consumer per worker."""

    def __init__(self, location: str) -> None:
        _import_dramatiq()
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        url, self.queue = split_location(location)
        # pika reads the kombu-style default vhost ``//`` as the vhost "": spell it out.
        self.url = url[:-2] + "/%2F" if url.endswith("//") else url
        broker: Any = RabbitmqBroker(url=self.url, middleware=[])
        broker.declare_queue(self.queue)
        broker._ensure_queue(self.queue)  # declare it now, not at the first enqueue
        self.broker = broker
        self.consumers: dict[str, Any] = {}
        self.delivered: dict[int, Any] = {}
        """``id(message)`` -> the consumer that delivered it, for claims not yet answered."""

    def consumer(self, worker: str, anew: bool = False) -> Any:
        """Worker ``worker``'s current consumer; ``anew``: the consumer thread's restart."""
        if anew and worker in self.consumers:
            self._close(self.consumers.pop(worker))
        if worker not in self.consumers:
            self.consumers[worker] = self.broker.consume(self.queue, 1, INACTIVITY_MS)
        return self.consumers[worker]

    def enqueue(self, job: str, payload: str) -> None:
        from dramatiq import Message

        message: Any = Message(
            queue_name=self.queue, actor_name="leasecheck", args=(payload,), kwargs={},
            options={"leasecheck_job": job},
        )  # fmt: skip
        self.broker.enqueue(message)

    def claim(self, worker: str, lease: float) -> Claim | None:
        from dramatiq.errors import ConnectionClosed

        try:
            message = next(self.consumer(worker))
        except (ConnectionClosed, StopIteration):
            # A closed channel: pika's consume generator raises, or just ends (the
            # consumer thread's ``for message in self.consumer`` then ends too, and the
            # thread makes a new consumer).
            message = next(self.consumer(worker, anew=True))
        if message is None:
            return None
        job = str(message.options["leasecheck_job"])
        self.delivered[id(message)] = self.consumers[worker]
        return Claim(job, worker, message, message._tag)

    def ack(self, claim: Claim) -> bool:
        return self._answer(claim, "ack")

    def nack(self, claim: Claim) -> bool:
        return self._answer(claim, "nack")

    def _answer(self, claim: Claim, verb: str) -> bool:
        """Dramatiq's ``ack`` / ``nack`` through the worker's current consumer, as its
        consumer thread sends them; True only if that was the consumer that delivered the
        claim's message, Dramatiq sent the frame, and the broker then took a round trip.

        Dramatiq sends nothing for a tag its consumer does not know: ``_RabbitmqConsumer.ack``
        catches the ``KeyError`` of ``known_tags.remove`` and only logs "Failed to ack
        message: not in known tags" (``dramatiq/brokers/rabbitmq.py:541``), so the call
        returns as if it acked. And a consumer made anew since the claim holds none of its
        delivery: RabbitMQ requeued it with the old channel (CONFIRMS, "Automatic
        Requeueing"), and a tag the new consumer knows names another message (the late
        ack acknowledges that one: ``docs/findings.md``). Either way this claim's delivery
        was not answered, whatever Dramatiq's call did, so the verb reports False."""
        message: Any = claim.handle
        consumer = self.consumer(claim.worker)
        own = self.delivered.pop(id(message), None) is consumer
        sent = message._tag in consumer.known_tags  # Dramatiq removes it when it sends
        getattr(consumer, verb)(message)
        applied = self._applied(claim.worker, sent)
        return own and sent and applied

    def _applied(self, worker: str, sent: bool) -> bool:
        """Run the consumer's I/O loop until it has sent the frame Dramatiq queued (if it
        queued one), then a round trip: False if the broker closed the channel for it.

        Dramatiq queues its ack with ``add_callback_threadsafe``, which pika runs only
        inside ``process_data_events`` (as a 0-delay timer), never while a blocking call
        such as ``basic_qos`` waits: one ``process_data_events(time_limit=0)`` may return
        before it ran, and the round trip then passed with the ack unsent (the worker's
        next ``next(consumer)`` sent it, and a SIGKILL before that lost it: the
        ``queue.ack-final`` flip of ``docs/findings.md``). So a marker queued after it
        (pika runs these callbacks in order) says when Dramatiq's ``basic_ack`` has run;
        its frame then precedes ``basic.qos`` on the channel, answered in order."""
        import pika.exceptions

        consumer = self.consumers[worker]
        try:
            ran: list[bool] = []
            if sent:
                consumer.connection.add_callback_threadsafe(lambda: ran.append(True))
            deadline = time.monotonic() + FRAME_BOUND
            while sent and not ran:
                if time.monotonic() > deadline:
                    raise AdapterError(
                        f"pika did not run Dramatiq's queued frame within {FRAME_BOUND:g} s"
                    )
                consumer.connection.process_data_events(time_limit=0.005)
            consumer.connection.process_data_events(time_limit=0)
            consumer.channel.basic_qos(prefetch_count=1)
        except (pika.exceptions.AMQPChannelError, pika.exceptions.AMQPConnectionError):
            self.consumer(worker, anew=True)
            return False
        return True

    def extend(self, claim: Claim, lease: float) -> bool:
        raise Unsupported("AMQP 0-9-1 has no way to renew a delivery")

    def recover(self) -> int:
        import pika.exceptions

        for worker, consumer in list(self.consumers.items()):
            try:
                consumer.connection.process_data_events(time_limit=0)
            except (pika.exceptions.AMQPChannelError, pika.exceptions.AMQPConnectionError):
                self.consumer(worker, anew=True)
                continue
            if consumer.channel.is_closed:  # the close was read without an error
                self.consumer(worker, anew=True)
        return -1

    def observe(self) -> list[StoredJob]:
        raise Unsupported(
            "AMQP 0-9-1 reads a queue's messages only by taking them: no read-only "
            "per-job view (a passive queue.declare gives only the ready count)"
        )

    def ready_count(self) -> int:
        declared = self.broker.channel.queue_declare(self.queue, passive=True)
        count: int = declared.method.message_count
        return count

    def _close(self, consumer: Any) -> None:
        from dramatiq.errors import ConnectionClosed

        try:
            consumer.close()
        except ConnectionClosed:
            # Its channel was closed by the broker: ``close`` raised at ``channel.close()``
            # and never reached ``connection.close()`` (Dramatiq leaves that connection
            # open at every consumer restart); the adapter closes it.
            if consumer.connection.is_open:
                consumer.connection.close()

    def close(self) -> None:
        for consumer in self.consumers.values():
            self._close(consumer)
        self.broker.close()
