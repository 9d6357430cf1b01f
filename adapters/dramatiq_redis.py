"""Dramatiq's Redis broker through the adapter protocol.

Every broker operation is one call of Dramatiq's Lua script (``dramatiq/brokers/redis/
dispatch.lua``), which first records the calling broker's heartbeat (``ZADD
__heartbeats__ <now> <broker_id>``). The adapter makes the calls Dramatiq's own
``_RedisConsumer`` makes, one broker (one ``broker_id``, one worker process) per
worker name (its ``broker_id`` derived from the name):

- enqueue: ``RedisBroker.enqueue`` (the message in the ``.msgs`` hash, its id on the
  queue list);
- claim: ``do_fetch(queue, 1)`` (``LPOP`` the id into this worker's
  ``__acks__.<broker_id>.<queue>`` set), what the consumer's prefetch does;
- ack: ``do_ack`` (only if the id is in *this* worker's acks set, then the message is
  deleted: ``ack_deletes``); nack: ``do_nack`` (to the dead-letter queue, ``failed``);
- extend: the worker's heartbeat, which any call of its broker renews: ``do_fetch(queue,
  0)``, the fetch its consumer thread repeats while idle, taking nothing. The lease is
  the *worker's*: renewing it renews every message that worker holds;
- recover: the maintenance pass (``do_maintenance``, which Dramatiq runs on a random
  ``maintenance_chance`` of calls), made by a broker of its own (another worker
  process, so no held message's worker is renewed by it): every worker whose heartbeat is
  older than ``heartbeat_timeout`` has its acks set moved back to the queue. It cannot
  say which messages came back, so it returns ``-1``.

Lease: ``heartbeat_timeout`` is a broker setting, passed by every call and used by the
call that maintains: the first claim of a store records its lease as the store's
timeout (a key beside the queue), and the maintenance broker uses it (``one_lease``).

Time: the script's ``timestamp`` is the client's ``current_millis()``, imported by name
into ``dramatiq.brokers.redis``; the adapter replaces that binding with the shared
clock (``clock="patched"``). Keys: one Dramatiq ``namespace`` per store.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import uuid
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
)

__all__ = ["DramatiqRedis"]

BROKERS_EXTRA = "pip install 'leasecheck[brokers]'"
QUEUE = "leasecheck"
_TIMEOUT_KEY = "leasecheck:heartbeat_timeout"
_ORDER_KEY = "leasecheck:order"

_SRC = "dramatiq 2.2.1 dramatiq/brokers/redis"
_DOCS = "https://dramatiq.io/cookbook.html"
PROMISES = Promises(
    properties={
        "queue.ack-final": Promise(
            False,
            f"{_SRC}/dispatch.lua:191 (ack) and :110 (maintenance); {_DOCS}",
            "ack deletes the message only 'if redis.call(\"srem\", queue_acks, message_id) > 0': "
            "once maintenance has moved a dead worker's unacked messages back to their "
            "queue (and deleted its acks set) a late ack does nothing and returns as usual, "
            "and the message is delivered again; Dramatiq promises at-least-once delivery, "
            "not a final late ack",
        ),
        "queue.no-loss": Promise(
            True,
            f"{_SRC}/dispatch.lua:110 (maintenance) and redis.py:79 (heartbeat_timeout)",
            "'Maintenance moves any unacked messages belonging to dead workers back to "
            "their queues'",
        ),
        "queue.exclusive": Promise(
            False,
            f"{_SRC}.py:79 RedisBroker(heartbeat_timeout)",
            "a worker is 'considered offline' after heartbeat_timeout without a heartbeat, "
            "whether or not it still runs the message",
        ),
        "queue.stale-ack": Promise(
            False,
            f"not mentioned in Dramatiq's docs; {_SRC}/dispatch.lua:191 (ack)",
            "an ack counts only for a message in the acking worker's own acks set (a dead "
            "worker's set is deleted when its messages are requeued), so the fence is the "
            "worker: two deliveries of one message to one worker share it",
        ),
        "queue.linearizable": Promise(False, f"not mentioned in Dramatiq's docs ({_DOCS})"),
    },
    delivery="at-least-once",
    fencing="per worker, not per delivery: an ack must come from the worker whose acks set "
    "holds the message",
    recovery="the maintenance pass (maintenance_chance of calls) requeues dead workers' acks",
    ordering="FIFO per queue; a requeued message goes to the tail",
    durability="Redis persistence (the harness's faults run appendonly yes, appendfsync always)",
)


_CLOCK: list[QueueClock] = []


def _now_ms() -> int:
    return int(_CLOCK[0].now() * 1000)


def _import_dramatiq() -> Any:
    try:
        import dramatiq
        import dramatiq.brokers.redis
    except ImportError as missing:
        raise AdapterError(
            f"dramatiq is not installed; install it with: {BROKERS_EXTRA}"
        ) from missing
    redis_broker: Any = sys.modules["dramatiq.brokers.redis"]
    if redis_broker.current_millis is not _now_ms:
        redis_broker.current_millis = _now_ms
    return dramatiq


class DramatiqRedis:
    """Dramatiq's ``RedisBroker``, one namespace per store on a shared server."""

    name: ClassVar[str] = "dramatiq-redis"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="patched", extend=True, server="redis", ack_deletes=True,
        lease_granularity=0.001, one_lease=True,
    )  # fmt: skip
    promises: ClassVar[Promises] = PROMISES

    def version(self) -> str:
        _import_dramatiq()
        return importlib.metadata.version("dramatiq")

    def create(self, directory: Path, server: str | None) -> str:
        _import_dramatiq()
        return new_location(server, self.name)

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return DramatiqAdapter(location, clock)


class DramatiqAdapter:
    """One ``RedisBroker`` (one worker id, one connection pool) on a store's namespace."""

    def __init__(self, location: str, clock: QueueClock) -> None:
        _import_dramatiq()
        import redis

        _CLOCK[:] = [clock]
        self.url, self.namespace = split_location(location)
        self.brokers: dict[str, Any] = {}
        self.client: Any = redis.Redis.from_url(self.url, socket_timeout=30)

    def _worker(self, name: str) -> Any:
        """The broker of worker ``name``: its ``broker_id`` is derived from the name, so a
        claim is acked by the worker that fetched it whichever connection sends the ack
        (a Dramatiq worker acks through its own broker)."""
        if name not in self.brokers:
            broker = self._broker()
            broker.broker_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.namespace}/{name}"))
            self.brokers[name] = broker
        return self.brokers[name]

    def _broker(self, heartbeat_timeout: int = 60_000, maintenance: bool = False) -> Any:
        from dramatiq.brokers.redis import MAINTENANCE_SCALE, RedisBroker

        broker: Any = RedisBroker(  # type: ignore[no-untyped-call]
            url=self.url, namespace=self.namespace, middleware=[],
            heartbeat_timeout=heartbeat_timeout,
            maintenance_chance=MAINTENANCE_SCALE if maintenance else 0,
        )  # fmt: skip
        broker.declare_queue(QUEUE)
        return broker

    def _key(self, name: str) -> str:
        return f"{self.namespace}:{name}"

    def enqueue(self, job: str, payload: str) -> None:
        from dramatiq import Message

        message: Any = Message(
            queue_name=QUEUE, actor_name="leasecheck", args=(payload,), kwargs={},
            options={"leasecheck_job": job},
        )  # fmt: skip
        self._worker("leasecheck-producer").enqueue(message)
        self.client.rpush(self._key(_ORDER_KEY), job)

    def claim(self, worker: str, lease: float) -> Claim | None:
        from dramatiq import Message

        self.client.set(self._key(_TIMEOUT_KEY), str(round(lease * 1000)), nx=True)
        found = self._worker(worker).do_fetch(QUEUE, 1)
        if not found:
            return None
        message = Message.decode(found[0])
        job = str(message.options["leasecheck_job"])
        return Claim(job, worker, message, message.options["redis_message_id"])

    def ack(self, claim: Claim) -> bool:
        self._worker(claim.worker).do_ack(QUEUE, claim.token)
        return True

    def nack(self, claim: Claim) -> bool:
        self._worker(claim.worker).do_nack(QUEUE, claim.token)
        return True

    def extend(self, claim: Claim, lease: float) -> bool:
        self._worker(claim.worker).do_fetch(QUEUE, 0)  # a heartbeat: every call records one
        return True

    def recover(self) -> int:
        recorded = self.client.get(self._key(_TIMEOUT_KEY))
        if recorded is None:
            return 0  # nothing was ever claimed
        sweeper = self._broker(int(recorded), maintenance=True)
        try:
            sweeper.do_fetch(QUEUE, 0)  # maintenance first, then a fetch of nothing
        finally:
            sweeper.client.close()
        return -1

    def observe(self) -> list[StoredJob]:
        order = [raw.decode() for raw in self.client.lrange(self._key(_ORDER_KEY), 0, -1)]
        live = _jobs(self.client.hgetall(self._key(f"{QUEUE}.msgs")))
        dead = _jobs(self.client.hgetall(self._key(f"{QUEUE}.XQ.msgs")))
        queued = {raw.decode() for raw in self.client.lrange(self._key(QUEUE), 0, -1)}
        held: set[str] = set()
        # Every worker with an acks set is in the heartbeats set (maintenance removes a
        # worker only once its acks sets are gone): no scan of the server's keyspace.
        for raw in self.client.zrange(self._key("__heartbeats__"), 0, -1):
            members = self.client.smembers(self._key(f"__acks__.{raw.decode()}.{QUEUE}"))
            held |= {member.decode() for member in members}
        views = []
        for job in order:
            state: JobState = "gone"
            if job in dead:
                state = "failed"
            elif job in live:
                rid = live[job]
                state = "leased" if rid in held else "ready" if rid in queued else "gone"
            views.append(StoredJob(job, state))
        return views

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.client.close()
        self.client.close()


def _jobs(messages: dict[bytes, bytes]) -> dict[str, str]:
    """leasecheck's job key -> Dramatiq's ``redis_message_id``, from a ``.msgs`` hash."""
    found = {}
    for rid, data in messages.items():
        options = json.loads(data)["options"]
        found[str(options["leasecheck_job"])] = rid.decode()
    return found
