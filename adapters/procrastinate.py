"""procrastinate (PostgreSQL) through the adapter protocol.

Real paths, all public ``JobManager`` methods the worker itself calls:
``defer_job_async`` (enqueue), ``fetch_job`` (claim: ``procrastinate_fetch_job_v2``,
``FOR UPDATE SKIP LOCKED``), ``finish_job`` with ``succeeded`` (ack), ``retry_job``
(nack), ``update_heartbeat`` (extend) and, for recovery, the recipe of the library's
"Retry stalled jobs" how-to: ``get_stalled_jobs`` then ``retry_job`` on each.

Leases: procrastinate has no per-job lease. A worker registers ("Register a newly
started worker (with a initial heartbeat)", ``JobManager.register_worker``) and sends
heartbeats; ``get_stalled_jobs`` returns the ``doing`` jobs of "workers that have not sent
a heartbeat for longer than" ``seconds_since_heartbeat``. So a worker's heartbeat is the
lease of every job it holds. procrastinate's worker runs one job at a time by default
(``worker.py``: ``WORKER_CONCURRENCY = 1  # maximum number of parallel jobs``), so its
heartbeat is the lease of its one job. The adapter keeps that: each claim that gets a
job is held by a procrastinate worker of its own, which holds nothing else until that
claim's ack or nack (then it fetches the next job of its leasecheck worker, as a worker
does after finishing one). A leasecheck worker that holds several claims at once is
several procrastinate workers, one per claim, so a later claim or extend never beats
for another claim's job (with one procrastinate worker per leasecheck worker it did,
and a lease the model saw run out was still live; ``queue.linearizable`` then read
"not promised" or held depending on how long the calls took). The worker's heartbeat
is sent at every claim and extend; the lease asked for goes into a side table
``leasecheck_workers``, so that ``recover()`` passes each worker's own lease as
``seconds_since_heartbeat``.

Concurrency: ``procrastinate_fetch_job_v2`` picks its job ``FOR UPDATE OF jobs SKIP
LOCKED ... LIMIT 1`` and takes the row it locked, so a fetch beside another one passes
over only the job that one takes: unlike pgqueuer's dequeue it never holds a ready row
it does not take, and the adapter does not ask the model for ``skips_locked``.

Time: every comparison is against the server's ``NOW()``, so ``clock="real"`` (very
short real leases; the adapter's clock is not read).

Settings: the library's defaults. ``PsycopgConnector(conninfo=url)`` opens psycopg's
default pool (4 connections; until issue 27 the adapter asked for a pool of one, which no
user configures by default), and jobs are deferred with no lock and no queueing lock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from leasecheck.adapters._libs import installed_version
from leasecheck.adapters._postgres import PG_EXTRA, PgSession, drop_database, new_database
from leasecheck.adapters.protocol import (
    Capabilities,
    Claim,
    JobState,
    Promise,
    Promises,
    QueueAdapter,
    QueueClock,
    StoredJob,
)

__all__ = ["Procrastinate"]

TASK, QUEUE = "leasecheck_job", "leasecheck"
_SIDE_TABLE = (
    "CREATE TABLE IF NOT EXISTS leasecheck_workers (worker_id bigint PRIMARY KEY, lease float8)"
)
_OBSERVE = "SELECT args->>'job', status, attempts FROM procrastinate_jobs ORDER BY id"
_STATE: dict[str, JobState] = {
    "todo": "ready", "doing": "leased", "succeeded": "done",
    "failed": "failed", "cancelled": "failed", "aborted": "failed",
}  # fmt: skip

_SRC = "procrastinate 3.10.0"
_HOWTO = "https://procrastinate.readthedocs.io/en/stable/howto/production/retry_stalled_jobs.html"
PROMISES = Promises(
    properties={
        "queue.ack-final": Promise(
            True,
            f"{_SRC} sql/schema.sql:procrastinate_finish_job_v1",
            "a finished job leaves 'todo'/'doing'; fetch_job only takes 'todo' jobs",
        ),
        "queue.no-loss": Promise(
            True,
            _HOWTO,
            "stalled jobs of a killed worker 'can be fetched' with get_stalled_jobs and retried",
        ),
        "queue.exclusive": Promise(
            False,
            _HOWTO,
            "'if a task is considered stalled, it will be retried, but if it's actually "
            "running, then you may have your task running twice'",
        ),
        "queue.stale-ack": Promise(
            False,
            f"{_SRC} sql/schema.sql:procrastinate_finish_job_v1",
            "finish matches 'id = job_id AND status IN (todo, doing)'; the worker is not compared",
        ),
        "queue.server-crash": Promise(
            True,
            "https://procrastinate.readthedocs.io/en/stable/howto/advanced/retry.html",
            "'a job waiting to be retried lives in the database. It will persist across app "
            "/ machine reboots'",
        ),
        "queue.clock-skew": Promise(
            True,
            f"{_SRC} sql/queries.sql:select_stalled_jobs_by_heartbeat",
            "heartbeats are compared with the server's NOW(), never a client clock",
        ),
    },
    delivery="at-least-once",
    fencing="none: finish_job and retry_job address the job by id only",
    recovery="explicit: get_stalled_jobs(seconds_since_heartbeat) then retry_job (the how-to)",
    ordering="priority DESC, id ASC",
    durability="ordinary logged tables; PostgreSQL fsync on",
)


class Procrastinate:
    """procrastinate on a fresh PostgreSQL database per store."""

    name: ClassVar[str] = "procrastinate"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="real", extend=True, server="postgres", lease_granularity=0.001
    )
    promises: ClassVar[Promises] = PROMISES

    def version(self) -> str:
        return installed_version("procrastinate", "procrastinate", PG_EXTRA)

    def create(self, directory: Path, server: str | None) -> str:
        url = new_database(server, self.name)
        adapter = ProcrastinateAdapter(url)
        try:
            adapter.run(adapter.app.schema_manager.apply_schema_async(), "applying the schema")
            adapter.session.rows(_SIDE_TABLE)
        finally:
            adapter.close()
        return url

    def destroy(self, location: str) -> None:
        """Drop the store's database (``create`` made one per store)."""
        drop_database(location)

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return ProcrastinateAdapter(location)


class ProcrastinateAdapter:
    """One procrastinate App (psycopg's default pool) plus a connection for observing."""

    def __init__(self, url: str) -> None:
        Procrastinate().version()
        import procrastinate

        self.session = PgSession(url)
        connector = procrastinate.PsycopgConnector(conninfo=url)  # the library's pool defaults
        self.app: Any = procrastinate.App(connector=connector)
        self.idle: dict[str, int] = {}
        """Per leasecheck worker, its procrastinate worker that holds no job (the next
        claim's); a worker that fetched a job is its claim's until the ack or nack."""
        try:
            self.run(self.app.open_async(), f"opening procrastinate on {url}")
        except BaseException:
            self.session.close()
            raise
        self.manager: Any = self.app.job_manager

    def run(self, coroutine: Any, what: str) -> Any:
        return self.session.loop.run(coroutine, what)

    def enqueue(self, job: str, payload: str) -> None:
        from procrastinate import jobs

        new = jobs.Job(
            queue=QUEUE, lock=None, queueing_lock=None, task_name=TASK,
            task_kwargs={"job": job, "payload": payload},
        )  # fmt: skip
        self.run(self.manager.defer_job_async(new), f"enqueue({job!r})")

    def _lease(self, worker_id: int, lease: float) -> None:
        """Record ``lease`` as the staleness threshold of ``worker_id`` (for ``recover``)."""
        self.session.rows(
            "INSERT INTO leasecheck_workers VALUES (%s, %s) "
            "ON CONFLICT (worker_id) DO UPDATE SET lease = EXCLUDED.lease", worker_id, lease,
        )  # fmt: skip

    def claim(self, worker: str, lease: float) -> Claim | None:
        if worker in self.idle:
            worker_id = self.idle[worker]
            self.run(self.manager.update_heartbeat(worker_id), f"heartbeat of {worker!r}")
        else:
            worker_id = self.run(self.manager.register_worker(), "register_worker")
        self._lease(worker_id, lease)
        found = self.run(self.manager.fetch_job(None, worker_id), f"claim by {worker!r}")
        if found is None:
            self.idle[worker] = worker_id
            return None
        self.idle.pop(worker, None)
        return Claim(found.task_kwargs["job"], worker, found, token=found.attempts)

    def _done(self, claim: Claim) -> None:
        """The claim's worker holds no job now: its leasecheck worker's next claim uses it
        (unless that worker has an idle one already)."""
        worker_id = claim.handle.worker_id  # type: ignore[attr-defined]
        if worker_id is not None:
            self.idle.setdefault(claim.worker, worker_id)

    def ack(self, claim: Claim) -> bool:
        from procrastinate import jobs

        try:
            return self._refusable(
                self.manager.finish_job(claim.handle, jobs.Status.SUCCEEDED, False), "ack"
            )
        finally:
            self._done(claim)

    def nack(self, claim: Claim) -> bool:
        try:
            return self._refusable(self.manager.retry_job(claim.handle), f"nack of {claim.job!r}")
        finally:
            self._done(claim)

    def _refusable(self, coroutine: Any, what: str) -> bool:
        """The library refuses a finish or retry of a job in the wrong status by raising."""
        from procrastinate.exceptions import ConnectorException

        try:
            self.run(coroutine, what)
        except ConnectorException:
            return False
        return True

    def extend(self, claim: Claim, lease: float) -> bool:
        worker_id = claim.handle.worker_id  # type: ignore[attr-defined]
        self._lease(worker_id, lease)
        self.run(self.manager.update_heartbeat(worker_id), f"extend by {claim.worker!r}")
        return True

    def recover(self) -> int:
        leases = self.session.rows("SELECT worker_id, lease FROM leasecheck_workers")
        lease_of = dict(leases)
        recovered = 0
        for lease in sorted(set(lease_of.values())):
            stalled = self.run(
                self.manager.get_stalled_jobs(seconds_since_heartbeat=lease), "get_stalled_jobs"
            )
            for job in stalled:
                if job.worker_id is None or lease_of.get(job.worker_id) == lease:
                    self.run(self.manager.retry_job(job), f"retry of stalled job {job.id}")
                    recovered += 1
        return recovered

    def observe(self) -> list[StoredJob]:
        return [
            StoredJob(job, _STATE.get(status, "gone"), attempts)
            for job, status, attempts in self.session.rows(_OBSERVE)
        ]

    def close(self) -> None:
        try:
            self.run(self.app.close_async(), "closing procrastinate")
        finally:
            self.session.close()
