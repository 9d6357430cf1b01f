"""The adapter from a lease worker file to ``LeaseQueue``, and its stored rows as a ``Snapshot``.

A target worker is a module with module-level functions taking a connection; the
harnesses see it as ``LeaseTarget`` (one module, one open connection), so mypy checks
it against the same ``LeaseQueue`` Protocol as the model. ``read_snapshot`` and
``write_snapshot`` read and set the whole stored state, the way every harness
compares a target with the model and starts it from a chosen state.
"""

from __future__ import annotations

import sqlite3
from types import ModuleType

from leasecheck.models.contracts import (
    JOB_COLUMNS,
    REDRIVE_COLUMNS,
    ClockFunction,
    Fault,
    JobRow,
    RedriveRow,
    Send,
    Snapshot,
)
from leasecheck.targets.lease_compare import error_kind

__all__ = ["LeaseTarget", "read_snapshot", "write_snapshot"]


_SELECT_JOBS = f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs ORDER BY seq"
_SELECT_REDRIVES = f"SELECT {', '.join(REDRIVE_COLUMNS)} FROM redrives ORDER BY seq"


def read_snapshot(con: sqlite3.Connection) -> Snapshot:
    """Every stored row of both tables, in ``seq`` order.

    Both tables are read in one read transaction (one lock on the file, one check of
    its journal, instead of one for each table: about a quarter of a read's cost),
    which ends before this returns. On a connection already inside a transaction (one a
    target left open: the caller reports it) they are read inside that one, which stays
    open.
    """
    began = not con.in_transaction
    if began:
        con.execute("BEGIN")
    try:
        jobs = con.execute(_SELECT_JOBS).fetchall()
        redrives = con.execute(_SELECT_REDRIVES).fetchall()
    finally:
        # A read transaction: COMMIT ends it and writes nothing. After an error SQLite
        # may have ended it itself (a full disk, a corrupt file), and COMMIT would then
        # replace that error with "no transaction is active".
        if began and con.in_transaction:
            con.execute("COMMIT")
    return Snapshot(
        jobs=tuple(JobRow(*row) for row in jobs),
        redrives=tuple(RedriveRow(*row) for row in redrives),
    )


def write_snapshot(con: sqlite3.Connection, state: Snapshot) -> None:
    """Replace both tables' rows with ``state`` (seq = position + 1), in one transaction."""
    con.execute("BEGIN IMMEDIATE")
    try:
        con.execute("DELETE FROM jobs")
        con.execute("DELETE FROM redrives")
        for seq, job in enumerate(state.jobs, 1):
            con.execute(
                f"INSERT INTO jobs (seq, {', '.join(JOB_COLUMNS)}) VALUES (?{', ?' * 11})",
                (seq, *(getattr(job, column) for column in JOB_COLUMNS)),
            )
        for seq, row in enumerate(state.redrives, 1):
            con.execute(
                "INSERT INTO redrives (seq, id, token, at_ms, note) VALUES (?, ?, ?, ?, ?)",
                (seq, row.id, row.token, row.at_ms, row.note),
            )
        con.execute("COMMIT")
    except sqlite3.OperationalError as error:
        con.execute("ROLLBACK")
        if str(error).startswith("no such table"):  # the file came from the target's open_queue
            raise AssertionError(
                f"the queue file has {error}: it was made with the target's open_queue, which "
                f"creates both tables, jobs and redrives, when they are absent (lease-worker.md)"
            ) from error
        raise
    except BaseException:
        con.execute("ROLLBACK")
        raise


class LeaseTarget:
    """A target worker module and one open connection, seen as a ``LeaseQueue``."""

    def __init__(self, module: ModuleType, con: sqlite3.Connection) -> None:
        self.module = module
        self.con = con

    def enqueue(
        self, event: object, now_ms: object, ttl_ms: object, max_attempts: object = 3
    ) -> object:
        return self.module.enqueue(self.con, event, now_ms, ttl_ms, max_attempts)

    def claim(
        self, owner: object, now_ms: object, lease_ms: object = 1000, fault: Fault = None
    ) -> object:
        return self.module.claim(self.con, owner, now_ms, lease_ms, fault)

    def finish(
        self,
        ticket: object,
        outcome: object,
        now_ms: object,
        delay_ms: object = 0,
        fault: Fault = None,
    ) -> object:
        return self.module.finish(self.con, ticket, outcome, now_ms, delay_ms, fault)

    def redrive(
        self, job_id: object, now_ms: object, ttl_ms: object, note: object, fault: Fault = None
    ) -> object:
        return self.module.redrive(self.con, job_id, now_ms, ttl_ms, note, fault)

    def run_once(
        self,
        owner: object,
        clock: ClockFunction,
        send: Send,
        jitter: object,
        lease_ms: object = 1000,
    ) -> object:
        return self.module.run_once(self.con, owner, clock, send, jitter, lease_ms)

    def retry_delay(self, attempt: object, base_ms: object, cap_ms: object, jitter: object) -> int:
        result: int = self.module.retry_delay(attempt, base_ms, cap_ms, jitter)
        return result

    def snapshot(self) -> Snapshot:
        return read_snapshot(self.con)

    def error_kind(self, error: BaseException) -> str:
        return error_kind(error, self.module)
