"""kombu's Redis transport (what Celery's Redis broker is) through the adapter protocol.

kombu emulates AMQP acknowledgements on Redis (``kombu/transport/redis.py``, class
``QoS``): a message taken with ``no_ack=False`` is moved out of the queue list into the
``unacked`` hash, stamped with its delivery time in the ``unacked_index`` sorted set;
``QoS.restore_visible`` puts back every unacked message older than the channel's
``visibility_timeout``. The adapter uses kombu's public objects the way a consumer does:

- enqueue: ``Producer.publish`` to a ``Queue`` (direct exchange), the job key in a header;
- claim: ``Queue.get(no_ack=False)`` (``Channel.basic_get``: ``RPOP``, then
  ``QoS.append`` into the unacked hash and index);
- ack: ``Message.ack()``; nack: ``Message.reject(requeue=True)`` (``QoS.reject``: the
  message goes back to the head of the queue);
- extend: none (kombu has no way to renew a visibility timeout), so ``Unsupported``;
- recover: ``channel.qos.restore_visible(interval=1)``, what kombu's event loop runs every
  ``unacked_restore_interval`` seconds (``interval=1`` turns the throttle off, as the
  transport's docs say to).

Lease: the visibility timeout is one transport setting of the whole deployment, read by
the channel that *restores*, compared with the delivery time: a lease that means what
the model says only when every claim uses the same (``one_lease=True``). The first
claim of a store records its lease as the store's ``visibility_timeout`` (a key beside
the queue), and every connection's channel restores with it.

Time: the transport stamps deliveries and computes the restore horizon with
``time.time`` imported by name into ``kombu.transport.redis``; the adapter replaces that
binding with the shared clock (``clock="patched"``). The restore mutex
(``unacked_mutex``, a ``SET NX`` with a 300 s expiry) runs on the server's clock and is
released by the restore that took it.

Delivery tags: kombu makes each message's tag a random ``uuid4`` at publish
(``virtual/base.py:613``, ``_next_delivery_tag``), and ``restore_visible`` restores the
messages delivered at one instant in the order of their tags (a ``ZRANGE`` whose ties are
ordered by member). On the patched clock, which stands still between moves, ties are the
rule, so which job a claim got after a restore changed from run to run, and with it the
programs Hypothesis could draw next (it draws from the claims it got): the verdict of
``queue.stale-ack`` was not fixed by the seed. The adapter gives each message a tag from
a counter in the store (``INCR``, zero-padded so tags sort as numbers), unique across
processes like kombu's, in publish order.

Keys: each store is a ``global_keyprefix`` (the transport option), so stores on one
server share nothing. Sources cited in ``promises`` are kombu 5.7.0's own files.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any, ClassVar

from leasecheck.adapters._redis_store import new_location, split_location
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
    Unsupported,
)

__all__ = ["BROKERS_EXTRA", "KombuRedis"]

BROKERS_EXTRA = "pip install 'leasecheck[brokers]'"
QUEUE = "leasecheck"
HEADER = "leasecheck-job"
_VISIBILITY_KEY = "leasecheck:visibility_timeout"
_ORDER_KEY = "leasecheck:order"
_TAG_KEY = "leasecheck:delivery_tag"

_SRC = "kombu 5.7.0 kombu/transport/redis.py"
_DOCS = "https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html"
PROMISES = Promises(
    properties={
        "queue.ack-final": Promise(
            True,
            f"{_SRC}:499 QoS.ack",
            "ack removes the delivery tag from the unacked hash and index; nothing "
            "restores a message that is in neither",
        ),
        "queue.no-loss": Promise(
            True,
            f"{_SRC}:523 QoS.restore_visible; its module docstring (visibility_timeout)",
            "'visibility_timeout': an unacknowledged message is restored to its queue "
            "once it is older than the timeout",
        ),
        "queue.exclusive": Promise(
            False,
            f"{_DOCS} (Caveats, Visibility timeout)",
            "'If a task isn't acknowledged within the Visibility Timeout the task will "
            "be redelivered to another worker and executed': a slow worker's task runs twice",
        ),
        "queue.stale-ack": Promise(
            False,
            f"{_SRC}:499 QoS.ack; kombu/transport/virtual/base.py:626 _inplace_augment_message",
            "the delivery tag is made once, at publish, and kept by a restore: a stale "
            "delivery's ack removes the current delivery's unacked entry",
        ),
        "queue.linearizable": Promise(
            False,
            "not mentioned in kombu's docs",
            "claim is two commands (virtual/base.py:668 basic_get: RPOP, then QoS.append's "
            "pipeline into the unacked hash)",
        ),
        "queue.server-crash": Promise(
            False,
            "not mentioned in kombu's docs",
            "what survives a Redis crash is Redis' persistence setting",
        ),
        "queue.clock-skew": Promise(
            False,
            f"{_SRC}:476 QoS.append and :523 QoS.restore_visible",
            "the delivery is stamped with the consumer's time() and compared with the "
            "restoring client's time() - visibility_timeout",
        ),
    },
    delivery="at-least-once",
    fencing="none: acks name the delivery tag, which every redelivery of a message shares",
    recovery="QoS.restore_visible (the consumer's event loop, every unacked_restore_interval)",
    ordering="FIFO per queue; a rejected message goes back to the head",
    durability="Redis persistence (the harness's faults run appendonly yes, appendfsync always)",
)


def _version(distribution: str) -> str:
    """The installed version (kombu replaces its module with a lazy one that has no
    ``__spec__``, so ``installed_version``'s ``find_spec`` cannot be used once imported)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise AdapterError(
            f"{distribution} is not installed; install it with: {BROKERS_EXTRA}"
        ) from None


def _import_kombu() -> Any:
    try:
        import kombu
        import kombu.transport.redis
        import redis  # noqa: F401  (the transport's client)
    except ImportError as missing:
        raise AdapterError(f"kombu is not installed; install it with: {BROKERS_EXTRA}") from missing

    _patch_time(kombu.transport.redis)
    return kombu


_CLOCK: list[QueueClock] = []


def _now() -> float:
    return _CLOCK[0].now()


def _patch_time(module: Any) -> None:
    """The transport's ``time`` (``from time import time``) reads the shared clock."""
    if module.time is not _now:
        module.time = _now


class KombuRedis:
    """kombu's Redis transport, one ``global_keyprefix`` per store on a shared server."""

    name: ClassVar[str] = "kombu-redis"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="patched", extend=False, server="redis", ack_deletes=True,
        lease_granularity=0.001, one_lease=True,
    )  # fmt: skip
    promises: ClassVar[Promises] = PROMISES

    def version(self) -> str:
        return _version("kombu")

    def create(self, directory: Path, server: str | None) -> str:
        _import_kombu()
        return new_location(server, self.name)

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return KombuRedisAdapter(location, clock)


class KombuRedisAdapter:
    """One kombu ``Connection`` and channel on a store's key prefix."""

    def __init__(self, location: str, clock: QueueClock) -> None:
        kombu = _import_kombu()
        import redis

        _CLOCK[:] = [clock]
        url, prefix = split_location(location)
        self.connection: Any = kombu.Connection(
            url, transport_options={"global_keyprefix": f"{prefix}:", "socket_timeout": 30}
        )
        self.channel: Any = self.connection.channel()
        exchange = kombu.Exchange(QUEUE, type="direct")
        self.queue: Any = kombu.Queue(QUEUE, exchange, routing_key=QUEUE)(self.channel)
        self.queue.declare()
        self.producer: Any = kombu.Producer(self.channel, exchange=exchange, routing_key=QUEUE)
        # The adapter's own reads and bookkeeping: a plain client, the prefix spelled out
        # (the transport's client prefixes only the commands kombu itself sends).
        self.prefix = f"{prefix}:"
        self.client: Any = redis.Redis.from_url(url, socket_timeout=30)
        self.channel._next_delivery_tag = self._next_delivery_tag

    def _next_delivery_tag(self) -> str:
        """A tag from the store's counter instead of kombu's random ``uuid4``."""
        return f"{int(self.client.incr(self.prefix + _TAG_KEY)):020d}"

    def enqueue(self, job: str, payload: str) -> None:
        self.producer.publish(payload, headers={HEADER: job}, serializer="json")
        self.client.rpush(self.prefix + _ORDER_KEY, job)

    def claim(self, worker: str, lease: float) -> Claim | None:
        self.client.set(self.prefix + _VISIBILITY_KEY, repr(lease), nx=True)
        message = self.queue.get(no_ack=False)
        if message is None:
            return None
        job = str(message.headers[HEADER])
        return Claim(job, worker, message, message.delivery_tag, _now() + lease)

    def ack(self, claim: Claim) -> bool:
        message: Any = claim.handle
        message.ack()
        return True

    def nack(self, claim: Claim) -> bool:
        message: Any = claim.handle
        message.reject(requeue=True)
        return True

    def extend(self, claim: Claim, lease: float) -> bool:
        raise Unsupported("kombu's Redis transport cannot renew a visibility timeout")

    def recover(self) -> int:
        recorded = self.client.get(self.prefix + _VISIBILITY_KEY)
        if recorded is None:
            return 0  # nothing was ever claimed
        qos = self.channel.qos
        self.channel.visibility_timeout = float(recorded)
        qos.__dict__.pop("visibility_timeout", None)  # a cached_property of the channel's
        index = self.prefix + self.channel.unacked_index_key
        before = int(self.client.zcard(index))
        qos.restore_visible(num=None, interval=1)
        return before - int(self.client.zcard(index))

    def observe(self) -> list[StoredJob]:
        order = [raw.decode() for raw in self.client.lrange(self.prefix + _ORDER_KEY, 0, -1)]
        ready = {_job(json.loads(raw)) for raw in self._queued()}
        unacked = self.client.hvals(self.prefix + self.channel.unacked_key)
        leased = {_job(json.loads(raw)[0]) for raw in unacked}
        views = []
        for job in order:
            state: JobState = "leased" if job in leased else "ready" if job in ready else "gone"
            views.append(StoredJob(job, state))
        return views

    def _queued(self) -> list[bytes]:
        found: list[bytes] = []
        for priority in self.channel.priority_steps:
            key = self.prefix + self.channel._q_for_pri(QUEUE, priority)
            found += self.client.lrange(key, 0, -1)
        return found

    def close(self) -> None:
        # A closed connection keeps its claims until their visibility timeout, as the
        # model holds them: kombu's clean shutdown would put its delivered, unacked
        # messages back at once (``QoS.restore_unacked_once``), which made a finished
        # racer's claim look taken twice (``queue.interleavings``' claim-claim schedule,
        # where the first process closes before the second claims). ``do_restore`` is the
        # channel's switch for it.
        self.channel.do_restore = False
        try:
            self.channel.close()
        finally:
            self.connection.release()
            self.client.close()


def _job(payload: dict[str, Any]) -> str:
    return str(payload["headers"][HEADER])
