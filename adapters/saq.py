"""saq (Redis) through the adapter protocol.

saq's claim and ack live in ``Worker.process``; the adapter makes the same calls in the
same order (internals, as there is no public claim): ``Queue.dequeue`` (``BLMOVE``
from the queued to the active list, with a 10 ms block so an empty queue answers
``None``), then ``job.started = now()``, ``job.attempts += 1`` and
``job.update(status=ACTIVE)``; ack is ``Queue.finish(job, COMPLETE)``, nack
``Queue.retry``, extend ``job.update()`` (the heartbeat touch), recovery ``Queue.sweep``.

Lease: a saq job is stuck once ``now - touched > heartbeat`` (``Job.stuck``); the
adapter sets the job's ``heartbeat`` to the lease at claim time and enqueues with
``timeout=0`` (no run-time limit) and ``ttl=0`` (finished jobs are kept, to observe).
``sweep`` runs only when its lock key (a ``SETEX`` on the server's clock) is absent; the
adapter deletes that key first, as a sweep after the lock's expiry would, and passes
``abort=0.01`` so it does not wait five seconds for an abort nobody will answer.

Keys: saq names a job's abort flag ``saq:abort:{key}`` with no queue in it, so a sweep
of job ``a`` in one queue makes ``enqueue(key="a")`` in *another* queue return ``None``
(not enqueued) until that flag expires. The adapter therefore gives saq the key
``{prefix}/{job}``, keeping stores on one server apart, and raises if an enqueue is
dropped.

Time: saq reads the client clock through ``saq.utils.now``/``now_seconds``; the adapter
patches both in every saq module, so ``clock="patched"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from leasecheck.adapters._loop import PrivateLoop
from leasecheck.adapters._patched_time import current_clock, patch_time, use_clock
from leasecheck.adapters._redis_store import (
    REDIS_EXTRA,
    drop_location,
    new_location,
    split_location,
)
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

__all__ = ["Saq"]

RETRIES = 1000
DEQUEUE_BLOCK = 0.01
_STATE: dict[str, JobState] = {
    "new": "ready", "queued": "ready", "active": "leased", "aborting": "leased",
    "complete": "done", "failed": "failed", "aborted": "failed",
}  # fmt: skip

_SRC = "saq 0.26.4"
PROMISES = Promises(
    properties={
        "queue.ack-final": Promise(
            True,
            f"{_SRC} queue/redis.py:RedisQueue._finish",
            "finish removes the job from the active list and the incomplete set in one "
            "transaction; nothing requeues a complete job",
        ),
        "queue.no-loss": Promise(
            True,
            f"{_SRC} job.py:Job.stuck and queue/redis.py:RedisQueue.sweep",
            "'Checks if an active job is passed its timeout or heartbeat'; sweep retries "
            "stuck jobs that are retryable",
        ),
        "queue.exclusive": Promise(
            False,
            "not mentioned in saq's docs",
            "sweep retries a stuck job without knowing whether its worker still runs it",
        ),
        "queue.stale-ack": Promise(
            False,
            f"{_SRC} queue/redis.py:RedisQueue._finish",
            "finish writes the job by id; the worker_id and attempt are not compared",
        ),
        "queue.server-crash": Promise(
            False,
            "not mentioned in saq's docs",
            "what survives a Redis crash is Redis' persistence setting",
        ),
        "queue.clock-skew": Promise(
            False,
            f"{_SRC} job.py:Job.stuck",
            "stuck compares the sweeping client's now() with touched, written by the "
            "worker's clock",
        ),
    },
    delivery="at-least-once",
    fencing="none: finish and retry address the job by key",
    recovery="Queue.sweep (run by every worker on a timer) retries stuck active jobs",
    ordering="FIFO (queued list)",
    durability="Redis persistence (the harness runs appendonly yes, appendfsync always)",
)


def _now_ms() -> int:
    return int(current_clock().now() * 1000)


def _now_seconds() -> float:
    return current_clock().now()


def _import_saq() -> Any:
    try:
        import saq
        import saq.queue.redis
        import saq.worker
    except ImportError as missing:
        raise AdapterError(f"saq is not installed; install it with: {REDIS_EXTRA}") from missing
    patch_time("saq", {"now": _now_ms, "now_seconds": _now_seconds})
    return saq


class Saq:
    """saq on a queue name (its key prefix) of a shared Redis server."""

    name: ClassVar[str] = "saq"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="patched", extend=True, server="redis", lease_granularity=0.001
    )
    promises: ClassVar[Promises] = PROMISES

    def version(self) -> str:
        from importlib.metadata import version

        _import_saq()
        return version("saq")

    def create(self, directory: Path, server: str | None) -> str:
        _import_saq()
        return new_location(server, self.name)

    def destroy(self, location: str) -> None:
        """Delete the store's keys (``create`` gave it a prefix of its own)."""
        drop_location(location)

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return SaqAdapter(location, clock)


class SaqAdapter:
    """One saq ``Queue`` (its own Redis connection pool) on a private loop."""

    def __init__(self, location: str, clock: QueueClock) -> None:
        saq = _import_saq()
        use_clock(clock)
        url, self.prefix = split_location(location)
        self.loop = PrivateLoop()
        self.queue: Any = saq.Queue.from_url(url, name=self.prefix)
        self.order_key = f"leasecheck:{self.prefix}:order"
        self.run(self.queue.connect(), f"connecting to {url}")

    def run(self, coroutine: Any, what: str) -> Any:
        return self.loop.run(coroutine, what)

    def _key(self, job: str) -> str:
        return f"{self.prefix}/{job}"

    def enqueue(self, job: str, payload: str) -> None:
        queued = self.run(
            self.queue.enqueue(
                "leasecheck", key=self._key(job), timeout=0, ttl=0, retries=RETRIES,
                payload=payload,
            ),
            f"enqueue({job!r})",
        )  # fmt: skip
        if queued is None:
            raise AdapterError(f"saq did not enqueue job {job!r}: its key or abort flag exists")
        self.run(self.queue.redis.rpush(self.order_key, job), "recording enqueue order")

    def claim(self, worker: str, lease: float) -> Claim | None:
        from saq.job import Status

        job = self.run(self.queue.dequeue(timeout=DEQUEUE_BLOCK), f"claim by {worker!r}")
        if job is None:
            return None
        job.started = _now_ms()
        job.attempts += 1
        job.worker_id = worker
        self.run(job.update(status=Status.ACTIVE, heartbeat=lease), f"starting {job.key!r}")
        name = job.key.removeprefix(f"{self.prefix}/")
        return Claim(name, worker, job, job.attempts, current_clock().now() + lease)

    def adopt(self, claim: Claim) -> Claim:
        """``claim`` (made by another connection, e.g. in a parent process) with its job
        bound to this connection's queue (its Redis pool belongs to this loop)."""
        handle: Any = claim.handle
        handle.queue = self.queue
        return claim

    def ack(self, claim: Claim) -> bool:
        from saq.job import Status

        self.run(self.queue.finish(claim.handle, Status.COMPLETE), f"ack of {claim.job!r}")
        return True

    def nack(self, claim: Claim) -> bool:
        self.run(self.queue.retry(claim.handle, "leasecheck nack"), f"nack of {claim.job!r}")
        return True

    def extend(self, claim: Claim, lease: float) -> bool:
        # Through this connection's queue, as ack and nack do: ``Job.update`` would use
        # the claimer's queue, whose Redis pool belongs to another connection's loop.
        handle: Any = claim.handle
        self.run(self.queue.update(handle, heartbeat=lease), f"extend of {claim.job!r}")
        return True

    def recover(self) -> int:
        self.run(self.queue.redis.delete(self.queue._sweep), "releasing the sweep lock")
        swept = self.run(self.queue.sweep(lock=1, abort=0.01), "sweep")
        return len(swept)

    def observe(self) -> list[StoredJob]:
        keys = [raw.decode() for raw in self.run(self._order(), "reading enqueue order")]
        saq_keys = [self._key(key) for key in keys]
        jobs = self.run(self.queue.jobs(saq_keys), "reading jobs") if keys else []
        return [
            StoredJob(key, _STATE.get(str(job.status.value), "gone") if job else "gone",
                    job.attempts if job else None)
            for key, job in zip(keys, jobs, strict=True)
        ]  # fmt: skip

    async def _order(self) -> list[bytes]:
        found: list[bytes] = await self.queue.redis.lrange(self.order_key, 0, -1)
        return found

    def close(self) -> None:
        try:
            self.run(self.queue.disconnect(), "disconnecting")
        finally:
            self.loop.close()
