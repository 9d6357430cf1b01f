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
clock: later than any check ends. Both settings are checked: ``rq-defaults``
(``RqDefaults``) enqueues as rq's users do by default, with none of the three. What the
defaults change: there is no nack (``Capabilities.nack=False``), and recovery
(``StartedJobRegistry.cleanup``) moves an abandoned job to the ``FailedJobRegistry``
instead of requeueing it, so a job whose worker died is never run again: rq promises
that ("otherwise moved to the FailedJobRegistry"), not redelivery, so ``queue.no-loss``
is not promised there.

Keys: rq keeps every job under ``rq:job:{id}``, whatever its queue, so the adapter gives
rq the id ``{prefix}_{job}`` to keep stores on one server apart.

Sweeps inside claims: the dequeue runs the worker's maintenance (``clean_registries``,
the sweep ``recover`` runs) on a worker's first claim and every ``maintenance_interval``
(600 s of the shared clock) after, as rq's own worker loop does. That sweep reads the
stale registry entries, then fails or requeues them by id, so an ack by another process
in between is undone (``queue.interleavings``' ``sweep-ack``). With ``log_sweeps``
(``ReportsSweeps``) each connection logs every maintenance it runs, so the random races
of ``queue.linearizable`` can set aside the calls that ran beside one.

Time: rq reads the client clock through ``rq.utils.now`` and ``current_timestamp``; the
adapter patches both in every rq module (``adapters._patched_time``), so
``clock="patched"``. Redis' own key TTLs still run on the server's clock.
"""

from __future__ import annotations

import datetime
import json
import math
import time
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
    Unsupported,
)

__all__ = ["Rq", "RqDefaults"]

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

    sweep_log: Path | None = None
    """Where connections opened from now on log their maintenance sweeps (``log_sweeps``)."""

    def log_sweeps(self, path: Path | None) -> None:
        self.sweep_log = path

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return RqAdapter(location, clock, sweep_log=self.sweep_log)


DEFAULTS_PROMISES = replace(
    PROMISES,
    properties={
        **PROMISES.properties,
        "queue.no-loss": Promise(
            False,
            f"{_SRC} registry.py:StartedJobRegistry.cleanup",
            "abandoned jobs are 'retried if it has retries left, otherwise moved to the "
            "FailedJobRegistry': with rq's default (no Retry) a job whose worker died "
            "is failed, never run again",
        ),
    },
    recovery="StartedJobRegistry.cleanup moves an abandoned job to the FailedJobRegistry "
    "(no Retry: rq's default)",
)


class RqDefaults(Rq):
    """rq with its enqueue defaults: no ``Retry`` (a failure is final: no nack), the
    default ``result_ttl`` (500 s) and ``failure_ttl`` (a year)."""

    name: ClassVar[str] = "rq-defaults"
    capabilities: ClassVar[Capabilities] = replace(Rq.capabilities, nack=False)
    promises: ClassVar[Promises] = DEFAULTS_PROMISES

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return RqAdapter(location, clock, defaults=True, sweep_log=self.sweep_log)


class RqAdapter:
    """One Redis connection and the rq workers that claim through it (``defaults``: jobs
    enqueued with rq's defaults; ``sweep_log``: where its workers log their maintenance)."""

    def __init__(
        self, location: str, clock: QueueClock, defaults: bool = False,
        sweep_log: Path | None = None,
    ) -> None:  # fmt: skip
        rq = _import_rq()
        self.defaults = defaults
        self.sweep_log = sweep_log
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
            self.workers[name].leasecheck_sweep_log = self.sweep_log
        worker = self.workers[name]
        worker.leasecheck_lease = max(1, math.ceil(lease))
        return worker

    def _id(self, job: str) -> str:
        return f"{self.prefix}_{job}"

    def enqueue(self, job: str, payload: str) -> None:
        rq = _import_rq()
        if self.defaults:
            self.queue.enqueue("builtins.print", payload, job_id=self._id(job))
        else:
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
        if self.defaults:
            raise Unsupported("rq without Retry (its default) fails a job for good: no nack")
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
            leasecheck_sweep_log: Path | None = None

            def get_heartbeat_ttl(self, job: Any, working_time: float = 0.0) -> int:
                return int(self.leasecheck_lease)

            def run_maintenance_tasks(self) -> None:
                """rq's maintenance, its window logged (``ReportsSweeps``) when asked.
                Logged whether or not this worker won the maintenance lock: a window
                logged for nothing only sets more calls aside."""
                started = time.monotonic_ns()
                base: Any = super()
                try:
                    base.run_maintenance_tasks()
                finally:
                    if self.leasecheck_sweep_log is not None:
                        _log_sweep(self.leasecheck_sweep_log, started, time.monotonic_ns())

        _WORKER_CLASS.append(LeaseWorker)
    return _WORKER_CLASS[0]


def _log_sweep(path: Path, started_ns: int, ended_ns: int) -> None:
    """One JSON line, appended in one write (the racers share the file)."""
    line = json.dumps({"started_ns": started_ns, "ended_ns": ended_ns}) + "\n"
    with path.open("a") as log:
        log.write(line)
