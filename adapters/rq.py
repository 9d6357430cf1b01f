"""rq (Redis) through the adapter protocol.

rq exposes claim and ack only inside its worker loop, so the adapter drives a
``SimpleWorker``'s own steps, in the order ``Worker.execute_job``/``perform_job`` calls
them (internals, used because there is no other way):

- claim: ``dequeue_job_and_maintain_ttl(None)`` (non-blocking ``LMOVE`` into the
  intermediate queue, plus the worker's periodic maintenance), ``prepare_execution``
  (the ``StartedJobRegistry`` entry that is the lease) and ``prepare_job_execution``;
- ack: ``handle_job_success``; nack: ``handle_job_failure`` (jobs are enqueued with
  ``Retry(max=...)``, so a failure requeues them);
- extend: ``maintain_heartbeats``; recover: ``clean_registries`` (what the worker's
  maintenance runs: ``StartedJobRegistry.cleanup`` retries or fails abandoned jobs).

Lease: rq sets a started job's registry score to ``now + get_heartbeat_ttl(job)``, which
is ``job_monitoring_interval + 60`` seconds; the adapter's worker class returns the lease
asked for instead (whole seconds: rq's timestamps are integers).

Settings: rq's defaults except three enqueue arguments. ``Retry(max=...)``: without it
(rq's default) a failed job is final, so there is no nack (the generic "give it back");
``result_ttl=-1`` and ``failure_ttl=None`` keep finished and failed jobs readable for
``observe``, where the defaults (500 s, one year) expire their keys on the server's real
clock: later than any check ends, so the verdicts are the defaults' too.

Keys: rq keeps every job under ``rq:job:{id}``, whatever its queue, so the adapter gives
rq the id ``{prefix}_{job}`` to keep stores on one server apart.

Time: rq reads the client clock through ``rq.utils.now`` and ``current_timestamp``; the
adapter patches both in every rq module (``adapters._patched_time``), so
``clock="patched"``. Redis' own key TTLs still run on the server's clock.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

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

__all__ = ["Rq"]

RETRIES = 1000
"""Retry(max=...) given to every job, so that nack and recovery requeue it."""
_STATE: dict[str, JobState] = {
    "queued": "ready", "scheduled": "ready", "deferred": "ready", "started": "leased",
    "finished": "done", "failed": "failed", "stopped": "failed", "canceled": "failed",
}  # fmt: skip

_SRC = "rq 3.0.0"
_REGISTRIES = "https://python-rq.org/docs/job_registries/"
PROMISES = Promises(
    properties={
        "queue.ack-final": Promise(
            True,
            _REGISTRIES,
            "'FinishedJobRegistry: Holds successfully completed jobs'; handle_job_success "
            "removes the job from the StartedJobRegistry and never requeues it",
        ),
        "queue.no-loss": Promise(
            True,
            f"{_SRC} registry.py:StartedJobRegistry.cleanup",
            "abandoned jobs 'retried if it has retries left, otherwise moved to the "
            "FailedJobRegistry'",
        ),
        "queue.exclusive": Promise(
            False,
            "not mentioned in rq's docs",
            "an expired StartedJobRegistry entry is requeued whether or not its worker lives",
        ),
        "queue.stale-ack": Promise(
            False,
            f"{_SRC} worker/base.py:BaseWorker.handle_job_success",
            "success is recorded for the job id; the execution is not compared with the "
            "job's current one",
        ),
        "queue.server-crash": Promise(
            False,
            "not mentioned in rq's docs",
            "what survives a Redis crash is Redis' persistence setting (appendonly/appendfsync)",
        ),
        "queue.clock-skew": Promise(
            False,
            f"{_SRC} registry.py:StartedJobRegistry.cleanup",
            "lease ends are client timestamps (current_timestamp() + ttl), compared with "
            "the cleaning client's own clock",
        ),
    },
    delivery="at-least-once",
    fencing="none: an execution id exists but acks do not check it",
    recovery="StartedJobRegistry.cleanup in the worker's maintenance (clean_registries)",
    ordering="FIFO per queue",
    durability="Redis persistence (the harness runs appendonly yes, appendfsync always)",
)


def _now() -> datetime.datetime:
    return datetime.datetime.fromtimestamp(current_clock().now(), datetime.UTC)


def _current_timestamp() -> int:
    return int(current_clock().now())


def _import_rq() -> Any:
    try:
        import rq
        import rq.worker
    except ImportError as missing:
        raise AdapterError(f"rq is not installed; install it with: {REDIS_EXTRA}") from missing
    patch_time("rq", {"now": _now, "current_timestamp": _current_timestamp})
    return rq


class Rq:
    """rq on a key prefix (its queue name) of a shared Redis server."""

    name: ClassVar[str] = "rq"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="patched", extend=True, server="redis", lease_granularity=1.0
    )
    promises: ClassVar[Promises] = PROMISES

    def version(self) -> str:
        return str(_import_rq().__version__)

    def create(self, directory: Path, server: str | None) -> str:
        _import_rq()
        return new_location(server, self.name)

    def destroy(self, location: str) -> None:
        """Delete the store's keys (``create`` gave it a prefix of its own)."""
        drop_location(location)

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return RqAdapter(location, clock)


class RqAdapter:
    """One Redis connection and the rq workers that claim through it."""

    def __init__(self, location: str, clock: QueueClock) -> None:
        rq = _import_rq()
        import redis

        use_clock(clock)
        url, self.prefix = split_location(location)
        self.redis: Any = redis.Redis.from_url(url, socket_timeout=30)
        self.queue: Any = rq.Queue(self.prefix, connection=self.redis)
        self.order_key = f"leasecheck:{self.prefix}:order"
        self.workers: dict[str, Any] = {}

    def _worker(self, name: str, lease: float) -> Any:
        if name not in self.workers:
            self.workers[name] = _lease_worker_class()([self.queue], connection=self.redis)
        worker = self.workers[name]
        worker.leasecheck_lease = max(1, math.ceil(lease))
        return worker

    def _id(self, job: str) -> str:
        return f"{self.prefix}_{job}"

    def enqueue(self, job: str, payload: str) -> None:
        rq = _import_rq()
        self.queue.enqueue(
            "builtins.print", payload, job_id=self._id(job), retry=rq.Retry(max=RETRIES),
            result_ttl=-1, failure_ttl=None,
        )  # fmt: skip
        self.redis.rpush(self.order_key, job)

    def claim(self, worker: str, lease: float) -> Claim | None:
        rq_worker = self._worker(worker, lease)
        found = rq_worker.dequeue_job_and_maintain_ttl(None)
        if found is None:
            return None
        job, queue = found
        execution = rq_worker.prepare_execution(job)
        rq_worker.prepare_job_execution(job, remove_from_intermediate_queue=True)
        job.started_at = _now()
        until = current_clock().now() + rq_worker.leasecheck_lease
        name = job.id.removeprefix(f"{self.prefix}_")
        return Claim(name, worker, (job, queue, execution), execution.id, until)

    def adopt(self, claim: Claim) -> Claim:
        """``claim`` (made by another connection, e.g. in a parent process) with its job,
        queue and execution bound to this connection's client."""
        handle: Any = claim.handle
        job, _queue, execution = handle
        job.connection = execution.connection = self.redis
        return replace(claim, handle=(job, self.queue, execution))

    def ack(self, claim: Claim) -> bool:
        handle: Any = claim.handle
        job, queue, execution = handle
        job.ended_at = _now()
        rq_worker = self._worker(claim.worker, 1)
        rq_worker.handle_job_success(job, queue, queue.started_job_registry, execution)
        return True

    def nack(self, claim: Claim) -> bool:
        handle: Any = claim.handle
        job, queue, execution = handle
        job.ended_at = _now()
        rq_worker = self._worker(claim.worker, 1)
        rq_worker.handle_job_failure(
            job, queue, queue.started_job_registry, "leasecheck nack", execution
        )
        return True

    def extend(self, claim: Claim, lease: float) -> bool:
        handle: Any = claim.handle
        job, _queue, execution = handle
        self._worker(claim.worker, lease).maintain_heartbeats(job, execution)
        return True

    def recover(self) -> int:
        before = self.queue.started_job_registry.get_job_count(cleanup=False)
        self._worker("leasecheck-recover", 1).clean_registries()
        after = self.queue.started_job_registry.get_job_count(cleanup=False)
        return int(before - after)

    def observe(self) -> list[StoredJob]:
        rq = _import_rq()
        views = []
        for raw in self.redis.lrange(self.order_key, 0, -1):
            key = raw.decode()
            found = self._exists(self._id(key))
            job = rq.job.Job.fetch(self._id(key), connection=self.redis) if found else None
            status = job.get_status(refresh=False) if job else None
            state = _STATE.get(str(getattr(status, "value", status)), "gone")
            views.append(StoredJob(key, state))
        return views

    def _exists(self, key: str) -> bool:
        return bool(self.redis.exists(f"rq:job:{key}"))

    def close(self) -> None:
        self.redis.close()


_WORKER_CLASS: list[type[Any]] = []


def _lease_worker_class() -> type[Any]:
    """``SimpleWorker`` whose heartbeat TTL (the lease) is the one leasecheck asked for."""
    if not _WORKER_CLASS:
        from rq.worker import SimpleWorker

        class LeaseWorker(SimpleWorker):
            leasecheck_lease = 1

            def get_heartbeat_ttl(self, job: Any, working_time: float = 0.0) -> int:
                return int(self.leasecheck_lease)

        _WORKER_CLASS.append(LeaseWorker)
    return _WORKER_CLASS[0]
