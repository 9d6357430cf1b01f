"""The one target loader, and the adapter from a target file to ``LeaseQueue``.

A *target* is a Python file: a lease worker (``--impl``) or a file defining
``JobQueue`` (``--jobs-impl``). Loading never guesses: a missing file, a file that
does not import, or missing names raise ``TargetError`` with a sentence naming the
file and what is wrong, which the CLI turns into exit status 2.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sqlite3
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import queue_impl
from models.contracts import (
    JOB_COLUMNS,
    REDRIVE_COLUMNS,
    Clock,
    Fault,
    JobRow,
    RedriveRow,
    Send,
    Snapshot,
)

__all__ = [
    "BUNDLED_JOBS",
    "BUNDLED_WORKER",
    "JOBQUEUE_METHODS",
    "WORKER_NAMES",
    "LeaseTarget",
    "TargetError",
    "error_kind",
    "load_jobs_target",
    "load_module",
    "load_worker",
    "read_snapshot",
    "write_snapshot",
]

BUNDLED_WORKER = Path(queue_impl.__file__).with_name("worker.py")
BUNDLED_JOBS = Path(queue_impl.__file__).with_name("job_queue.py")

WORKER_NAMES = (
    "Conflict", "Retryable", "Permanent", "BadAck", "retry_delay", "open_queue",
    "enqueue", "claim", "finish", "redrive", "run_once", "run_file",
)  # fmt: skip
JOBQUEUE_METHODS = (
    "submit", "poll", "complete", "fail", "view", "dead_letters", "retry_dead", "cancel",
)  # fmt: skip
_ERROR_NAMES = ("Conflict", "Retryable", "Permanent", "BadAck")


class TargetError(Exception):
    """A target file cannot be used; the message says which file and what to do."""


def load_module(path: str | Path, role: str) -> ModuleType:
    """Import the file at ``path`` as a fresh module (cached per resolved path and content)."""
    file = Path(path)
    if not file.is_file():
        raise TargetError(
            f"{role} {str(path)!r} is not a file; pass the path of a Python file, "
            f"for example --impl path/to/worker.py"
        )
    source = file.read_bytes()
    digest = hashlib.sha256(str(file.resolve()).encode() + source).hexdigest()[:16]
    name = f"leasecheck_target_{file.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise TargetError(f"{role} {str(path)!r} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as error:  # a target may even raise SystemExit while importing
        del sys.modules[name]
        raise TargetError(
            f"{role} {str(path)!r} failed to import: {type(error).__name__}: {error}; "
            f"fix the file so that `python {file}` runs without error"
        ) from error
    return module


def load_worker(path: str | Path | None = None) -> ModuleType:
    """Load a lease worker target (default: the bundled ``queue_impl/worker.py``)."""
    module = load_module(path or BUNDLED_WORKER, "lease worker")
    missing = [name for name in WORKER_NAMES if not hasattr(module, name)]
    if missing:
        raise TargetError(
            f"lease worker {str(path or BUNDLED_WORKER)!r} does not define "
            f"{', '.join(missing)}; lease-worker.md lists every name a worker.py must define"
        )
    for name in _ERROR_NAMES:
        value = getattr(module, name)
        if not (isinstance(value, type) and issubclass(value, Exception)):
            raise TargetError(
                f"lease worker {str(path)!r}: {name} must be an Exception subclass, got {value!r}"
            )
    return module


def load_jobs_target(path: str | Path | None = None) -> type[Any]:
    """Load the ``JobQueue`` class of a job-queue target (default: the bundled one)."""
    where = path or BUNDLED_JOBS
    module = load_module(where, "job queue")
    cls = getattr(module, "JobQueue", None)
    if not isinstance(cls, type):
        raise TargetError(
            f"job queue {str(where)!r} does not define a class JobQueue; "
            f"define `class JobQueue` taking (time, policy), see job-queue.md"
        )
    missing = [name for name in JOBQUEUE_METHODS if not callable(getattr(cls, name, None))]
    if missing:
        raise TargetError(f"job queue {str(where)!r}: JobQueue has no method {', '.join(missing)}")
    return cls


def error_kind(error: BaseException, module: ModuleType | None = None) -> str:
    """The contract's name for ``error``: a worker exception name, or a builtin's name."""
    if module is not None:
        for name in _ERROR_NAMES:
            if isinstance(error, getattr(module, name)):
                return name
    from queue_impl.jobs import IllegalStateError

    for cls in (FileNotFoundError, IllegalStateError, KeyError, ValueError):
        if isinstance(error, cls):
            return cls.__name__
    return f"unexpected {type(error).__name__}"


def read_snapshot(con: sqlite3.Connection) -> Snapshot:
    """Every stored row of both tables, in ``seq`` order (read without a transaction)."""
    jobs = con.execute(f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs ORDER BY seq").fetchall()
    redrives = con.execute(
        f"SELECT {', '.join(REDRIVE_COLUMNS)} FROM redrives ORDER BY seq"
    ).fetchall()
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
        self, owner: object, clock: Clock, send: Send, jitter: object, lease_ms: object = 1000
    ) -> object:
        return self.module.run_once(self.con, owner, clock, send, jitter, lease_ms)

    def retry_delay(self, attempt: object, base_ms: object, cap_ms: object, jitter: object) -> int:
        result: int = self.module.retry_delay(attempt, base_ms, cap_ms, jitter)
        return result

    def snapshot(self) -> Snapshot:
        return read_snapshot(self.con)

    def error_kind(self, error: BaseException) -> str:
        return error_kind(error, self.module)
