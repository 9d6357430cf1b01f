"""procrastinate (PostgreSQL) through the adapter protocol.

Real paths, all public ``JobManager`` methods the worker itself calls:
``defer_job_async`` (enqueue), ``fetch_job`` (claim: ``procrastinate_fetch_job_v2``,
``FOR UPDATE SKIP LOCKED``), ``finish_job`` with ``succeeded`` (ack), ``retry_job``
(nack), ``update_heartbeat`` (extend) and, for recovery, the recipe of the library's
"Retry stalled jobs" how-to: ``get_stalled_jobs`` then ``retry_job`` on each.

Leases: procrastinate has no per-job lease. A worker registers (``register_worker``)
and sends heartbeats; its ``doing`` jobs are stalled once its heartbeat is older than
``seconds_since_heartbeat``. The adapter registers one procrastinate worker per
leasecheck worker name, beats at every claim and extend, and records the lease asked
for in a side table ``leasecheck_workers`` so that ``recover()`` passes each worker's
own lease as ``seconds_since_heartbeat``.

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
    """One procrastinate App (a one-connection pool) plus a connection for observing."""

    def __init__(self, url: str) -> None:
        Procrastinate().version()
        import procrastinate

        self.session = PgSession(url)
        connector = procrastinate.PsycopgConnector(conninfo=url)  # the library's pool defaults
        self.app: Any = procrastinate.App(connector=connector)
        self.workers: dict[str, int] = {}
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

    def _worker_id(self, worker: str, lease: float) -> int:
        if worker not in self.workers:
            self.workers[worker] = self.run(self.manager.register_worker(), "register_worker")
        worker_id = self.workers[worker]
        self.session.rows(
            "INSERT INTO leasecheck_workers VALUES (%s, %s) "
            "ON CONFLICT (worker_id) DO UPDATE SET lease = EXCLUDED.lease", worker_id, lease,
        )  # fmt: skip
        return worker_id

    def claim(self, worker: str, lease: float) -> Claim | None:
        worker_id = self._worker_id(worker, lease)
        self.run(self.manager.update_heartbeat(worker_id), f"heartbeat of {worker!r}")
        found = self.run(self.manager.fetch_job(None, worker_id), f"claim by {worker!r}")
        if found is None:
            return None
        return Claim(found.task_kwargs["job"], worker, found, token=found.attempts)

    def ack(self, claim: Claim) -> bool:
        from procrastinate import jobs

        return self._refusable(
            self.manager.finish_job(claim.handle, jobs.Status.SUCCEEDED, False), "ack"
        )

    def nack(self, claim: Claim) -> bool:
        return self._refusable(self.manager.retry_job(claim.handle), f"nack of {claim.job!r}")

    def _refusable(self, coroutine: Any, what: str) -> bool:
        """The library refuses a finish or retry of a job in the wrong status by raising."""
        from procrastinate.exceptions import ConnectorException

        try:
            self.run(coroutine, what)
        except ConnectorException:
            return False
        return True

    def extend(self, claim: Claim, lease: float) -> bool:
        worker_id = self._worker_id(claim.worker, lease)
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
