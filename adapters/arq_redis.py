"""arq (asyncio jobs on Redis) through the adapter protocol, driven through arq's own Worker.

arq has no "claim" call: its ``Worker`` polls the queue (a sorted set scored by the
time a job may run) and starts what it finds. The adapter makes the calls the worker's
poll makes, on a ``Worker`` of its own per connection (never ``run``; no signal
handlers), and maps them onto arq's job lifecycle:

- enqueue: ``ArqRedis.enqueue_job("leasecheck", payload, _job_id=...)``;
- claim: the poll's ``ZRANGEBYSCORE queue -inf now`` (``Worker._poll_iteration``), then
  ``Worker.start_jobs([id])`` for each id in turn until one starts: arq's own
  transaction (``WATCH`` the in-progress key, ``EXISTS``, ``ZSCORE``, then
  ``PSETEX in-progress <in_progress_timeout_s>``). That key with its expiry is arq's
  lease; the adapter sets the worker's ``in_progress_timeout_s`` (arq derives it as the
  longest job timeout + 10 s) to the claim's lease. ``start_jobs`` then hands the id to
  ``run_job`` in a task; the adapter's worker records it instead of calling a function
  (the job's body is the harness's, between claim and ack);
- ack: ``Worker.finish_job(id, finish=True, result)``, what ``run_job`` does after the
  function returned: the result key set, the job key, retry key and in-progress key
  deleted, the id removed from the queue (the job reads ``done``: its result stays);
- nack: ``Worker.finish_job(id, finish=False)``, what ``run_job`` does for a job that
  was cancelled or raised ``Retry`` (no defer): the in-progress key deleted, the job left
  in the queue to run again;
- extend: none (arq has no heartbeat: the in-progress key is set once per start);
- recover: none: Redis expires the in-progress key itself (``-1``);
- observe: the queue (in it with an in-progress key: ``leased``, else ``ready``), then
  the result key (``done``).

Time: the in-progress key expires by the Redis server's clock, which nothing can move
(``clock="real"``, milliseconds). How the verdicts stay put on real time: the pacer
(``adapters.timing``) keeps each call clear of the instants a lease may end and sets a
program aside past a call that ran across one, so a judged late ack came after the lease's
end with a margin; the pacer's room before a lease end follows the run's slow calls
(``adapters.timing.CallTimes``); the agreement machine times a lease out on purpose
(``lease_runs_out``) and acks with that zombie first; and on real time
``queue.stale-ack`` first runs that shape (claim, ``lease_runs_out``, ``zombie_ack``) as
a fixed program until one run of it is judged (at most 8), so it meets a stale ack in
every run instead of when the load happened to line one up (it read holds, not
promised, holds in three runs, and holds again at load 20 to 22). Not exercised:
``run_job``'s retry count and ``max_tries``, and ``job_timeout`` (the function's own
``asyncio.wait_for``), since arq's worker never runs a function here.

arq pins ``redis<6`` (``redis[hiredis]<6,>=4.2.0`` in arq 0.28.0, the newest on PyPI
on 2026-12-01), which kombu's Redis transport (``redis>=6.4``) excludes: arq is its own
extra, installed in an environment of its own (``ARQ_INSTALL``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

from leasecheck.adapters._libs import envelope, installed_version
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

__all__ = ["ARQ_INSTALL", "ArqRedis"]

ARQ_INSTALL = (
    "python3 -m venv .venv-arq && .venv-arq/bin/pip install -e '.[test,arq]' "
    "(arq pins redis<6, which the brokers extra's kombu excludes), then run "
    ".venv-arq/bin/leasecheck check --adapter arq"
)
FUNCTION = "leasecheck"

_DOCS = "https://arq-docs.helpmanual.io/ (v0.26.1 docs, index.rst)"
_SRC = "arq 0.28.0 arq/worker.py"
_RUN_AGAIN = (
    "'Jobs may be called more than once! ... jobs aren't removed from the queue until "
    "they've either succeeded or failed. If the worker shuts down, the job will be "
    "cancelled immediately and will remain in the queue to be run again'"
)
PROMISES = Promises(
    properties={
        "queue.ack-final": Promise(
            True,
            f"{_DOCS} (Simple Usage, warning): {_RUN_AGAIN}; {_SRC}:Worker.finish_job",
            "a finished job is removed from the queue and its job key deleted",
        ),
        "queue.no-loss": Promise(True, f"{_DOCS} (Simple Usage, warning): {_RUN_AGAIN}"),
        "queue.exclusive": Promise(
            False,
            f"{_DOCS} (Simple Usage, warning): 'Jobs may be called more than once!'; "
            f"{_SRC}:Worker.start_jobs ('check it's not running')",
            "the in-progress key keeps a second worker off a job only until it expires",
        ),
        "queue.stale-ack": Promise(
            False,
            f"{_DOCS} (Simple Usage, warning): 'All arq jobs should therefore be designed "
            f"to cope with being called repeatedly'; {_SRC}:Worker.finish_job",
            "finish_job deletes the in-progress key and the job whoever holds it now",
        ),
        "queue.linearizable": Promise(False, f"not mentioned in arq's docs ({_DOCS})"),
    },
    delivery="at-least-once",
    fencing="none: finishing a job deletes its keys whichever worker holds the in-progress key",
    recovery="the in-progress key expires (Redis PSETEX); the next poll starts the job again",
    ordering="by score (enqueue time, or the deferred time)",
    durability="Redis persistence (the harness's faults run appendonly yes, appendfsync always)",
)


def _import_arq() -> Any:
    try:
        import arq
        import arq.worker
    except ImportError as missing:
        raise AdapterError(f"arq is not installed; install it with: {ARQ_INSTALL}") from missing
    return arq


class ArqRedis:
    """arq 0.28 on a shared Redis server: one queue (and job-id prefix) per store."""

    name: ClassVar[str] = "arq"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="real", extend=False, nack=True, server="redis", lease_granularity=0.001,
    )  # fmt: skip
    promises: ClassVar[Promises] = PROMISES

    def version(self) -> str:
        return installed_version("arq", "arq", ARQ_INSTALL)

    def create(self, directory: Path, server: str | None) -> str:
        _import_arq()
        return new_location(server, self.name)

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return ArqAdapter(location)

    def destroy(self, location: str) -> None:
        """Delete the store's keys: its queue and order list, and each job's keys (arq's
        key prefixes are its own, ``arq:job:`` and so on, so they carry the store's
        prefix only inside the job id)."""
        import redis
        from arq.constants import (
            in_progress_key_prefix,
            job_key_prefix,
            result_key_prefix,
            retry_key_prefix,
        )

        url, prefix = split_location(location)
        client = redis.Redis.from_url(url)
        try:
            order: list[bytes] = client.lrange(f"{prefix}:order", 0, -1)  # type: ignore[assignment]
            ids = [f"{prefix}:{raw.decode()}" for raw in order]
            keys = [f"{prefix}:order", f"{prefix}:queue"]
            for jid in ids:
                keys += [key + jid for key in (in_progress_key_prefix, job_key_prefix,
                                               result_key_prefix, retry_key_prefix)]  # fmt: skip
            client.delete(*keys)
        finally:
            client.close()


class ArqAdapter:
    """One arq ``Worker`` (and its ``ArqRedis`` pool) on a store's queue, on a loop of its own."""

    def __init__(self, location: str) -> None:
        _import_arq()
        self.url, self.prefix = split_location(location)
        self.queue = f"{self.prefix}:queue"
        self.loop = asyncio.new_event_loop()
        self.started: list[str] = []
        self.worker: Any = self.loop.run_until_complete(self._worker())

    async def _worker(self) -> Any:
        from arq.connections import RedisSettings, create_pool
        from arq.worker import Worker

        settings = RedisSettings.from_dsn(self.url)
        pool = await create_pool(settings, default_queue_name=self.queue)

        async def leasecheck(ctx: dict[str, Any], payload: str) -> None:
            raise AssertionError("arq's worker never runs a job here (the adapter's claim)")

        worker = Worker([leasecheck], queue_name=self.queue, redis_pool=pool,
                        handle_signals=False, max_jobs=1)  # fmt: skip

        async def run_job(job_id: str, score: int) -> None:  # the started job, recorded
            self.started.append(job_id)

        worker.run_job = run_job
        return worker

    def _run(self, call: Any) -> Any:
        return self.loop.run_until_complete(call)

    def _id(self, job: str) -> str:
        return f"{self.prefix}:{job}"

    def enqueue(self, job: str, payload: str) -> None:
        async def put() -> None:
            pool = self.worker.pool
            body = envelope(job, payload)
            jid = self._id(job)
            done = await pool.enqueue_job(FUNCTION, body, _job_id=jid, _queue_name=self.queue)
            if done is None:
                raise AdapterError(f"arq refused job {job!r}: a job with its id exists")
            await self.worker.pool.rpush(f"{self.prefix}:order", job)

        self._run(put())

    def claim(self, worker: str, lease: float) -> Claim | None:
        from arq.utils import timestamp_ms

        async def take() -> str | None:
            self.worker.in_progress_timeout_s = lease
            ids = await self.worker.pool.zrangebyscore(
                self.queue, min=float("-inf"), start=0, num=self.worker.queue_read_limit,
                max=timestamp_ms(),
            )  # fmt: skip
            for raw in ids:
                await self.worker.start_jobs([raw])
                tasks = list(self.worker.tasks.values())
                self.worker.tasks.clear()
                await asyncio.gather(*tasks)
                if self.started:
                    return self.started.pop()
            return None

        jid = self._run(take())
        if jid is None:
            return None
        return Claim(jid.removeprefix(f"{self.prefix}:"), worker, jid)

    def ack(self, claim: Claim) -> bool:
        from arq.jobs import serialize_result
        from arq.utils import timestamp_ms

        now = timestamp_ms()
        jid, ref = str(claim.handle), f"{claim.handle}:{FUNCTION}"
        result = serialize_result(FUNCTION, (), {}, 1, now, True, "done", now, now, ref,
                                  self.queue, job_id=jid)  # fmt: skip
        keep = self.worker.keep_result_s
        self._run(self.worker.finish_job(jid, True, result, keep, False, None, None))
        return True

    def nack(self, claim: Claim) -> bool:
        self._run(self.worker.finish_job(claim.handle, False, None, None, False, None, None))
        return True

    def extend(self, claim: Claim, lease: float) -> bool:
        raise Unsupported("arq sets a job's in-progress key once, when a worker starts it")

    def recover(self) -> int:
        return -1

    def observe(self) -> list[StoredJob]:
        from arq.constants import in_progress_key_prefix, result_key_prefix

        async def read() -> list[StoredJob]:
            pool = self.worker.pool
            views = []
            for raw in await pool.lrange(f"{self.prefix}:order", 0, -1):
                job = raw.decode()
                jid = self._id(job)
                state: JobState = "gone"
                if await pool.zscore(self.queue, jid) is not None:
                    held = await pool.exists(in_progress_key_prefix + jid)
                    state = "leased" if held else "ready"
                elif await pool.exists(result_key_prefix + jid):
                    state = "done"
                views.append(StoredJob(job, state))
            return views

        return list(self._run(read()))

    def close(self) -> None:
        self._run(self.worker.pool.aclose())
        self.loop.close()
