"""pgqueuer (PostgreSQL) through the adapter protocol.

Real paths: ``Queries.enqueue``, ``Queries.dequeue`` (the worker loop's one claim
statement: ``FOR UPDATE SKIP LOCKED`` on queued rows, plus re-pick of ``picked`` rows
whose heartbeat is older than ``heartbeat_timeout``), ``Queries.log_jobs`` with status
``successful`` (the ack the ``QueueManager``'s completion buffer flushes),
``Queries.retry_job`` (its retry path) and ``Queries.update_heartbeat`` (extend). The
``QueueManager`` itself is not run: its loop only batches these calls (internals driven
directly, as said here).

Time: pgqueuer compares the ``heartbeat`` column with the server's ``NOW()``, which no
client can move, so ``clock="real"``: leases are real seconds and the adapter's clock is
not read by the library. The lease is the claimer's ``heartbeat_timeout``: a later
claimer re-picks a row once its heartbeat is older than *its own* timeout, so a lease
means what the model says only when every claim uses the same (``one_lease=True``).
Recovery is lazy (the next ``dequeue`` re-picks stale rows), so ``recover()`` returns ``-1``.

Concurrency: a dequeue skips rows another transaction holds locked (``skips_locked``).
pgqueuer 1.6.0's ``Queries.dequeue``: "locks them with FOR UPDATE SKIP LOCKED"; its
docs (``docs/reference/skip-locked.md``): "locked rows are treated as nonexistent. No
wait, no error." So a dequeue beside another one may answer nothing while a ready row is
locked: ``build_dequeue_query`` locks up to ``batch_size`` queued *and* ``batch_size``
stale rows and keeps ``batch_size`` of them, so a dequeue that re-picks a stale row also
holds a queued one it does not take until it commits.

Settings: the schema as ``Queries.install()`` makes it (logged tables, the default
durability). ``dequeue`` is called with ``batch_size=1`` where the ``QueueManager``
defaults to 10: the protocol's claim is one job; a batch is that many claims in one
statement (the same ``FOR UPDATE SKIP LOCKED`` query), so one job a call is the unit.
Both settings are checked: ``pgqueuer-defaults`` (``PgqueuerDefaults``) dequeues as the
``QueueManager`` does by default, ``batch_size=10``, and keeps the jobs it got beyond the
first in the connection's buffer (the manager's in-process queue), handing out one per
claim of the same worker. What the default changes: one claim picks up to 10 rows at
once, each with its heartbeat set then, so a job waiting in a buffer is leased (picked,
invisible to every other worker) from the batch's dequeue on, and once its heartbeat is
older than the timeout another worker re-picks it while it is still buffered; a
connection closed with a buffer leaves those rows picked until they go stale.

Observation: pgqueuer deletes a finished row and logs it in ``pgqueuer_log`` by id, so
the adapter keeps a side table ``leasecheck_jobs(job, id)`` written at enqueue; state is
read from the queue row, else from the job's last log entry (a successful one is
``done``; a job with neither is ``gone``: lost). The adapter does not run the
``QueueManager``, whose timer would fold the log into statistics. Sources cited in
``promises`` are pgqueuer 1.6.0's own files.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
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

__all__ = ["Pgqueuer", "PgqueuerDefaults"]

DEFAULT_BATCH = 10
"""``QueueManager.run(batch_size=10)``: how many rows one dequeue picks by default."""

ENTRYPOINT = "leasecheck"
_SIDE_TABLE = (
    "CREATE TABLE IF NOT EXISTS leasecheck_jobs (seq serial, job text PRIMARY KEY, id bigint)"
)
_OBSERVE = """
SELECT m.job, q.status, q.attempts,
       (SELECT l.status FROM pgqueuer_log l WHERE l.job_id = m.id ORDER BY l.id DESC LIMIT 1)
FROM leasecheck_jobs m LEFT JOIN pgqueuer q ON q.id = m.id ORDER BY m.seq
"""
_ROW_STATE: dict[str, JobState] = {"queued": "ready", "picked": "leased", "failed": "failed"}
_LOG_STATE: dict[str, JobState] = {"successful": "done", "exception": "failed", "failed": "failed"}

_SRC = "pgqueuer 1.6.0"
PROMISES = Promises(
    properties={
        "queue.ack-final": Promise(
            True,
            f"{_SRC} adapters/persistence/qb.py:build_log_job_query",
            "a successful job's row is DELETEd from the queue table in the same statement "
            "that logs it, so it cannot be dequeued again",
        ),
        "queue.no-loss": Promise(
            True,
            f"{_SRC} core/qm.py:QueueManager.run (heartbeat_timeout docstring)",
            "'heartbeat_timeout is the staleness threshold for re-picking a job'",
        ),
        "queue.exclusive": Promise(
            False,
            f"{_SRC} adapters/persistence/qb.py:build_dequeue_query (next_stale)",
            "a row whose heartbeat is stale is re-picked while its first worker may still "
            "run: exclusion holds only while heartbeats flow",
        ),
        "queue.stale-ack": Promise(
            False,
            f"{_SRC} adapters/persistence/qb.py:build_log_job_query",
            "the ack deletes by job id alone; queue_manager_id is not compared",
        ),
        "queue.server-crash": Promise(
            True,
            f"{_SRC} domain/settings.py:Durability (default durable)",
            "'durable: All tables are logged, ensuring maximum data durability'",
        ),
        "queue.clock-skew": Promise(
            True,
            f"{_SRC} adapters/persistence/qb.py:build_dequeue_query",
            "every time comparison uses the server's NOW(), never a client clock",
        ),
    },
    delivery="at-least-once",
    fencing="none: ack and retry address the row by id only",
    recovery="lazy: dequeue re-picks 'picked' rows whose heartbeat is older than the "
    "claimer's heartbeat_timeout",
    ordering="priority DESC, id ASC",
    durability="logged tables (Durability.durable, the default); PostgreSQL fsync on",
)


class Pgqueuer:
    """pgqueuer on a fresh PostgreSQL database per store."""

    name: ClassVar[str] = "pgqueuer"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="real", extend=True, server="postgres", lease_granularity=0.001, one_lease=True,
        skips_locked=True,
    )  # fmt: skip
    promises: ClassVar[Promises] = PROMISES

    def version(self) -> str:
        return installed_version("pgqueuer", "pgqueuer", PG_EXTRA)

    def create(self, directory: Path, server: str | None) -> str:
        url = new_database(server, self.name)
        adapter = PgqueuerAdapter(url)
        try:
            adapter.session.loop.run(adapter.queries.install(), "installing the pgqueuer schema")
            adapter.session.rows(_SIDE_TABLE)
        finally:
            adapter.close()
        return url

    def destroy(self, location: str) -> None:
        """Drop the store's database (``create`` made one per store)."""
        drop_database(location)

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return PgqueuerAdapter(location)


class PgqueuerDefaults(Pgqueuer):
    """pgqueuer dequeuing as the ``QueueManager`` does by default: 10 rows a dequeue."""

    name: ClassVar[str] = "pgqueuer-defaults"

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return PgqueuerAdapter(location, batch_size=DEFAULT_BATCH)


class PgqueuerAdapter:
    """One connection to a pgqueuer store; ``batch_size`` rows a dequeue, the ones beyond
    the first kept per worker, in order, for its next claims (the manager's buffer)."""

    def __init__(self, url: str, batch_size: int = 1) -> None:
        self.version()
        from pgqueuer.queries import Queries

        self.batch_size = batch_size
        self.buffered: dict[str, list[Any]] = {}
        self.session = PgSession(url)
        self.queries: Any = Queries.from_psycopg_connection(self.session.connection)

    @staticmethod
    def version() -> str:
        return Pgqueuer().version()

    def _run(self, coroutine: Any, what: str) -> Any:
        return self.session.loop.run(coroutine, what)

    def enqueue(self, job: str, payload: str) -> None:
        (job_id,) = self._run(
            self.queries.enqueue(ENTRYPOINT, payload.encode()), f"enqueue({job!r})"
        )
        self.session.rows("INSERT INTO leasecheck_jobs (job, id) VALUES (%s, %s)", job, job_id)

    def claim(self, worker: str, lease: float) -> Claim | None:
        from pgqueuer.ports.repository import EntrypointExecutionParameter

        if buffered := self.buffered.get(worker):
            return self._claim(worker, buffered.pop(0))
        manager = uuid.uuid5(uuid.NAMESPACE_URL, f"leasecheck:{worker}")
        jobs = self._run(
            self.queries.dequeue(
                batch_size=self.batch_size,
                entrypoints={ENTRYPOINT: EntrypointExecutionParameter(concurrency_limit=0)},
                queue_manager_id=manager,
                global_concurrency_limit=None,
                heartbeat_timeout=timedelta(seconds=lease),
            ),
            f"claim by {worker!r}",
        )
        if not jobs:
            return None
        self.buffered[worker] = list(jobs[1:])
        return self._claim(worker, jobs[0])

    def _claim(self, worker: str, job: Any) -> Claim:
        (found,) = self.session.rows("SELECT job FROM leasecheck_jobs WHERE id = %s", job.id)
        return Claim(found[0], worker, job, token=job.attempts)

    def ack(self, claim: Claim) -> bool:
        self._run(self.queries.log_jobs([(claim.handle, "successful", None)]), f"ack {claim}")
        return True

    def nack(self, claim: Claim) -> bool:
        self._run(self.queries.retry_job(claim.handle, timedelta(0), None), f"nack {claim}")
        return True

    def extend(self, claim: Claim, lease: float) -> bool:
        handle: Any = claim.handle
        self._run(self.queries.update_heartbeat([handle.id]), f"extend {claim}")
        return True

    def recover(self) -> int:
        return -1  # dequeue re-picks stale rows itself; there is no sweep to call

    def observe(self) -> list[StoredJob]:
        views = []
        for job, status, attempts, last_log in self.session.rows(_OBSERVE):
            state = _ROW_STATE.get(status) if status else _LOG_STATE.get(last_log or "", "gone")
            views.append(StoredJob(job, state or "gone", attempts))
        return views

    def close(self) -> None:
        self.session.close()
