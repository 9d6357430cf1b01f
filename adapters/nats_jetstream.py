"""NATS JetStream through nats-py: a work-queue stream and one durable pull consumer.

The store is a stream with work-queue retention (an acknowledged message is removed)
and one durable pull consumer with explicit acks, shared by every worker, as JetStream's
docs describe a work queue. The adapter's calls are the JetStream API as nats-py speaks it:

- enqueue: ``JetStreamContext.publish`` (the stream's publish acknowledgement returns
  the message's stream sequence);
- claim: one pull request, ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`` with
  ``{"batch": 1, "no_wait": true}`` (what ``PullSubscription.fetch`` sends first), so an
  empty queue answers at once with status 404 instead of waiting;
- ack: ``Msg.ack_sync`` (``+ACK``, waiting for the server's reply, so the next call sees
  it); extend: ``+WPI`` (``Msg.in_progress``) sent as a request, likewise;
- nack: none here (``nack=False``): a ``-NAK`` puts a message back while the consumer's
  state still counts it delivered, and JetStream shows no per-message state to tell it
  from a held one (see observe);
- recover: nothing to call; the server redelivers a message whose ``AckWait`` ran out to
  the next pull, so recovery is lazy (``-1``).

Lease: ``AckWait`` is a setting of the consumer, not of a pull, so every claim of a store
must use the same (``one_lease=True``); the consumer is created by the first claim, with
that claim's lease as its ``AckWait`` (both connections may race to create it: JetStream
answers an identical create with the existing consumer). ``+WPI`` restarts the
``AckWait`` from the moment the server gets it.

Time: the server's clock, which no client can move: ``clock="real"``, and the generic
properties run with leases of tens to hundreds of milliseconds (JetStream accepts
nanosecond ``AckWait``; redelivery was observed about 1 ms after a 35 ms ``AckWait``).
``observe`` is several requests (the order stream, one ``get_msg`` per job, the
consumer's info), the slowest call the machine makes: the latency probe that sizes the
leases times it, and the pacer keeps calls a slow call's length from a lease's end.

Observation (read-only): the job's stream sequence is kept in a second stream (the
enqueue order); a message no longer in the work-queue stream was acknowledged
(``ack_deletes``); one still there is ``leased`` if the consumer has delivered it (its
sequence is at most the consumer's ``delivered.stream_seq``: with no nack, a delivered,
unacknowledged message is pending or awaiting redelivery), else ``ready``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from leasecheck.adapters._libs import BROKERS_EXTRA, envelope, installed_version, job_of
from leasecheck.adapters._loop import PrivateLoop
from leasecheck.adapters._redis_store import split_location
from leasecheck.adapters.protocol import (
    AdapterError,
    Capabilities,
    Claim,
    JobState,
    Promise,
    Promises,
    QueueAdapter,
    QueueClock,
    StoredJob,
)

__all__ = ["NatsJetstream"]

CONSUMER = "workers"
REQUEST_TIMEOUT = 5.0

_DOCS = "https://docs.nats.io/nats-concepts/jetstream/consumers"
_SERVER = "nats-server v2.9.10 server/consumer.go"
_JETSTREAM = "https://docs.nats.io/nats-concepts/jetstream"
_ACKS = "https://docs.nats.io/using-nats/jetstream/model_deep_dive (Delivery and acknowledgment)"
PROMISES = Promises(
    properties={
        "queue.ack-final": Promise(
            True,
            f"{_DOCS} (AckPolicy explicit; AckWait)",
            "'AckWait: The duration that the server will wait for an acknowledgement for "
            "any individual message once it has been delivered to a consumer. If an "
            "acknowledgement is not received in time, the message will be redelivered': "
            "an acknowledged message is not",
        ),
        "queue.no-loss": Promise(
            True,
            f"{_DOCS} (AckWait, MaxDeliver -1: redeliver without limit)",
            "an unacknowledged message is redelivered once its AckWait has passed",
        ),
        "queue.exclusive": Promise(
            False,
            f"{_DOCS} (AckWait)",
            "redelivery follows AckWait only; a slow worker's message is delivered again",
        ),
        "queue.stale-ack": Promise(
            False,
            f"{_SERVER}:processAckMsg",
            "an ack names the stream sequence; the delivery count in the ack subject is "
            "not compared with the current delivery's",
        ),
        "queue.linearizable": Promise(False, "not mentioned in the JetStream docs"),
        "queue.server-crash": Promise(
            False,
            f"{_JETSTREAM} (Syncing data to disk); {_ACKS}",
            "the file store does not fsync each write (sync_interval, 2 minutes by "
            "default) and the delivery promise is at-least-once: 'a message stays "
            "available and is redelivered until a reader confirms it'; nothing says a "
            "confirmed ack survives a crash of the server",
        ),
        "queue.clock-skew": Promise(
            True,
            f"{_DOCS} (AckWait)",
            "'the duration that the server will wait for an acknowledgement': AckWait is "
            "timed by the server; no client clock takes part",
        ),
    },
    delivery="at-least-once",
    fencing="none: a late ack of an earlier delivery acknowledges the message",
    recovery="lazy: the server redelivers after AckWait to the next pull",
    ordering="stream order; redeliveries first",
    durability="JetStream file store (the server's -sd directory)",
)


def _import_nats() -> Any:
    try:
        import nats
        import nats.js.api
    except ImportError as missing:
        raise AdapterError(
            f"nats-py is not installed; install it with: {BROKERS_EXTRA}"
        ) from missing
    return nats


class NatsJetstream:
    """A JetStream work queue: one stream and one pull consumer per store."""

    name: ClassVar[str] = "nats-jetstream"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="real", extend=True, nack=False, server="nats", ack_deletes=True,
        lease_granularity=0.001, one_lease=True,
    )  # fmt: skip
    promises: ClassVar[Promises] = PROMISES

    def version(self) -> str:
        return installed_version("nats-py", "nats", BROKERS_EXTRA)

    def create(self, directory: Path, server: str | None) -> str:
        if not server:
            raise AdapterError("nats-jetstream needs a nats-server URL (adapters.servers.nats)")
        import uuid

        location = f"{server}#lc-{uuid.uuid4().hex[:12]}"
        adapter = NatsAdapter(location)
        try:
            adapter.make_streams()
        finally:
            adapter.close()
        return location

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return NatsAdapter(location)


class NatsAdapter:
    """One NATS connection and its JetStream context, on a private loop."""

    def __init__(self, location: str) -> None:
        nats = _import_nats()
        url, self.prefix = split_location(location)
        self.stream, self.order = f"{self.prefix}-jobs", f"{self.prefix}-order"
        self.loop = PrivateLoop()
        self.nc: Any = self.loop.run(
            nats.connect(url, allow_reconnect=False, connect_timeout=5), f"connecting to {url}"
        )
        self.js: Any = self.nc.jetstream(timeout=REQUEST_TIMEOUT)
        self.consumer_made = False
        self.inbox: Any = None

    def run(self, coroutine: Any, what: str) -> Any:
        return self.loop.run(coroutine, what)

    def make_streams(self) -> None:
        from nats.js.api import RetentionPolicy, StreamConfig

        work = StreamConfig(
            name=self.stream, subjects=[f"{self.prefix}.jobs"],
            retention=RetentionPolicy.WORK_QUEUE,
        )  # fmt: skip
        order = StreamConfig(name=self.order, subjects=[f"{self.prefix}.order"])
        self.run(self.js.add_stream(work), "creating the work-queue stream")
        self.run(self.js.add_stream(order), "creating the order stream")

    def _consumer(self, lease: float) -> None:
        if self.consumer_made:
            return
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        config = ConsumerConfig(
            durable_name=CONSUMER, ack_policy=AckPolicy.EXPLICIT, ack_wait=lease,
            max_deliver=-1, deliver_policy=DeliverPolicy.ALL, max_ack_pending=-1,
        )  # fmt: skip
        self.run(self.js.add_consumer(self.stream, config), "creating the pull consumer")
        self.consumer_made = True

    def enqueue(self, job: str, payload: str) -> None:
        body = envelope(job, payload).encode()
        sent = self.run(self.js.publish(f"{self.prefix}.jobs", body), f"enqueue({job!r})")
        record = json.dumps({"job": job, "seq": sent.seq}).encode()
        self.run(self.js.publish(f"{self.prefix}.order", record), "recording enqueue order")

    def claim(self, worker: str, lease: float) -> Claim | None:
        self._consumer(lease)
        msg = self.run(self._pull(), f"claim by {worker!r}")
        if msg.headers and msg.headers.get("Status"):
            status = msg.headers["Status"]
            if status in ("404", "408"):
                return None  # no message, or the request expired: nothing to claim
            raise AdapterError(f"pull request answered {status} {msg.headers.get('Description')}")
        meta = msg.metadata
        return Claim(job_of(msg.data), worker, msg, meta.num_delivered)

    async def _pull(self) -> Any:
        """One pull request answered on this connection's own inbox, as
        ``PullSubscription.fetch`` does; ``no_wait``: one answer, a message or a 404."""
        if self.inbox is None:
            self.inbox = await self.nc.subscribe(self.nc.new_inbox())
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{CONSUMER}"
        request = json.dumps({"batch": 1, "no_wait": True}).encode()
        await self.nc.publish(subject, request, reply=self.inbox.subject)
        return await self.inbox.next_msg(timeout=REQUEST_TIMEOUT)

    def ack(self, claim: Claim) -> bool:
        msg: Any = claim.handle
        self.run(self._request(msg.reply, b"+ACK"), f"ack of {claim.job!r}")
        return True

    def nack(self, claim: Claim) -> bool:
        raise AdapterError("nats-jetstream declares nack=False")

    def extend(self, claim: Claim, lease: float) -> bool:
        msg: Any = claim.handle
        self.run(self._request(msg.reply, b"+WPI"), f"in-progress of {claim.job!r}")
        return True

    async def _request(self, subject: str, payload: bytes) -> None:
        """Publish an ack and wait for the server to have processed it: a request where
        the server answers acks (``ack_sync``), else a flush (the server's PONG)."""
        from nats.errors import TimeoutError as NatsTimeout

        try:
            await self.nc.request(subject, payload, timeout=0.5)
        except NatsTimeout:
            await self.nc.flush(timeout=REQUEST_TIMEOUT)

    def recover(self) -> int:
        return -1

    def observe(self) -> list[StoredJob]:
        return self.run(self._observe(), "observing the streams")  # type: ignore[no-any-return]

    async def _observe(self) -> list[StoredJob]:
        from nats.js.errors import NotFoundError

        order = await self.js.stream_info(self.order)
        records = []
        for seq in range(order.state.first_seq, order.state.last_seq + 1):
            if order.state.messages == 0:
                break
            found = await self.js.get_msg(self.order, seq)
            records.append(json.loads(found.data))
        delivered = 0
        try:
            info = await self.js.consumer_info(self.stream, CONSUMER)
            delivered = info.delivered.stream_seq
        except NotFoundError:
            pass  # no claim yet
        views = []
        for record in records:
            try:
                await self.js.get_msg(self.stream, record["seq"])
            except NotFoundError:
                views.append(StoredJob(record["job"], "gone"))
                continue
            state: JobState = "leased" if record["seq"] <= delivered else "ready"
            views.append(StoredJob(record["job"], state))
        return views

    def close(self) -> None:
        try:
            self.run(self.nc.close(), "closing the connection")
        finally:
            self.loop.close()
