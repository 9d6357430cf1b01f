"""The bundled lease worker: the reference implementation of ``lease-worker.md``.

A queue is one SQLite file. Workers claim a job under a lease (owner, token,
lease_until), deliver it outside any transaction, and finish it only if their
whole marker is still current. Every function validates its arguments before it
touches the database, runs its read-then-write as one ``BEGIN IMMEDIATE``
transaction, rolls everything back on an error before ``COMMIT`` and never leaves
a transaction open. This file only imports the standard library, so it can be
copied and checked as a standalone target (students compare their worker.py with it).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any, Literal

__all__ = [
    "BadAck",
    "Conflict",
    "Permanent",
    "Retryable",
    "claim",
    "enqueue",
    "finish",
    "open_queue",
    "redrive",
    "retry_delay",
    "run_file",
    "run_once",
]

Fault = Callable[[str], object] | None
Ticket = dict[str, Any]

MAX_NOW = 10**15 - 60000
MAX_TOKEN = 10**15
IDENTIFIER = re.compile(r"[A-Za-z0-9_-]{1,64}")
IDENTIFIER_RULE = "an identifier (1-64 ASCII letters, digits, _ or -)"
EVENT_KEYS = ("id", "qty")
TICKET_KEYS = ("id", "qty", "owner", "token", "attempt", "lease_until")
OUTCOMES = ("ok", "retry", "permanent")
MARKER = (  # (jobs column, ticket key): the whole marker a finish must still match
    ("qty", "qty"),
    ("owner", "owner"),
    ("token", "token"),
    ("attempts", "attempt"),
    ("lease_until", "lease_until"),
)
JOB_FIELDS = (
    "seq", "id", "qty", "status", "attempts", "max_attempts", "token", "deadline", "owner",
    "lease_until",
)  # fmt: skip

JOBS_TABLE = """CREATE TABLE IF NOT EXISTS jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE, qty INTEGER NOT NULL,
  status TEXT NOT NULL CHECK(status IN ('pending','leased','done','dead')),
  attempts INTEGER NOT NULL, max_attempts INTEGER NOT NULL, token INTEGER NOT NULL,
  available_at INTEGER NOT NULL, deadline INTEGER NOT NULL,
  owner TEXT, lease_until INTEGER, reason TEXT)"""
REDRIVES_TABLE = """CREATE TABLE IF NOT EXISTS redrives (seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL, token INTEGER NOT NULL, at_ms INTEGER NOT NULL, note TEXT NOT NULL)"""

INSERT_JOB = """INSERT INTO jobs (id, qty, status, attempts, max_attempts, token,
  available_at, deadline, owner, lease_until, reason)
  VALUES (?, ?, 'pending', 0, ?, 0, ?, ?, NULL, NULL, NULL)"""
QUARANTINE = """UPDATE jobs SET status = 'dead',
  reason = CASE WHEN deadline <= :now THEN 'deadline' ELSE 'exhausted' END,
  owner = NULL, lease_until = NULL
  WHERE (status = 'pending' OR (status = 'leased' AND lease_until <= :now))
  AND (deadline <= :now OR attempts >= max_attempts)"""
NEXT_CLAIMABLE = """SELECT seq FROM jobs
  WHERE (status = 'pending' AND available_at <= :now)
  OR (status = 'leased' AND lease_until <= :now)
  ORDER BY seq LIMIT 1"""
LEASE = """UPDATE jobs SET status = 'leased', attempts = ?, token = ?,
  owner = ?, lease_until = ?, reason = NULL WHERE seq = ?"""
FINISH = """UPDATE jobs SET status = ?, reason = ?, available_at = ?,
  owner = NULL, lease_until = NULL WHERE seq = ?"""
AUDIT = "INSERT INTO redrives (id, token, at_ms, note) VALUES (?, ?, ?, ?)"
REDRIVE = """UPDATE jobs SET status = 'pending', attempts = 0, available_at = ?, deadline = ?,
  owner = NULL, lease_until = NULL, reason = NULL WHERE seq = ?"""


class Conflict(Exception):
    """An enqueue reused a job id with another qty."""


class Retryable(Exception):
    """Raised by ``send``: delivery may succeed later (timeout, connection error, 5xx)."""


class Permanent(Exception):
    """Raised by ``send``: the receiver refused the job for good."""


class BadAck(Exception):
    """``send`` returned something other than exactly ``True``; the job stays leased."""


# --- value rules -------------------------------------------------------------------------


def _check_int(where: str, name: str, value: object, low: int, high: int) -> None:
    """An exact int (bool rejected) in ``low .. high``."""
    if type(value) is not int:
        raise ValueError(
            f"{where}: {name} must be an exact int (not bool) in {low}..{high}, "
            f"got {name}={value!r}"
        )
    if not low <= value <= high:
        raise ValueError(f"{where}: {name} must be in {low}..{high}, got {name}={value!r}")


def _check_now(where: str, name: str, value: object) -> None:
    """A time: an exact int in ``0 .. 10**15 - 60000``."""
    _check_int(where, name, value, 0, MAX_NOW)


def _check_identifier(where: str, name: str, value: object) -> None:
    """An exact str of 1-64 ASCII letters, digits, ``_`` or ``-`` (fullmatch: no newline)."""
    if type(value) is not str or IDENTIFIER.fullmatch(value) is None:
        raise ValueError(f"{where}: {name} must be {IDENTIFIER_RULE}, got {name}={value!r}")


def _check_dict(where: str, name: str, value: object, keys: tuple[str, ...]) -> None:
    """Exactly a ``dict`` (no subclass) with exactly ``keys``."""
    if type(value) is not dict or set(value) != set(keys):
        raise ValueError(
            f"{where}: {name} must be exactly a dict with the keys {', '.join(keys)}, "
            f"got {name}={value!r}"
        )


def _check_jitter(where: str, jitter: object) -> None:
    """An int or float (not bool), finite, in ``0 .. 1``."""
    if type(jitter) is not int and type(jitter) is not float:
        raise ValueError(
            f"{where}: jitter must be an int or float (not bool), got jitter={jitter!r}"
        )
    if not (0 <= jitter <= 1 and math.isfinite(jitter)):
        raise ValueError(f"{where}: jitter must be finite and in 0..1, got jitter={jitter!r}")


def _check_event(event: dict[str, Any]) -> None:
    _check_dict("enqueue", "event", event, EVENT_KEYS)
    _check_identifier("enqueue", "event['id']", event["id"])
    _check_int("enqueue", "event['qty']", event["qty"], 1, 1000)


def _check_ticket(ticket: Ticket) -> None:
    _check_dict("finish", "ticket", ticket, TICKET_KEYS)
    _check_identifier("finish", "ticket['id']", ticket["id"])
    _check_int("finish", "ticket['qty']", ticket["qty"], 1, 1000)
    _check_identifier("finish", "ticket['owner']", ticket["owner"])
    _check_int("finish", "ticket['token']", ticket["token"], 1, MAX_TOKEN)
    _check_int("finish", "ticket['attempt']", ticket["attempt"], 1, 16)
    _check_int("finish", "ticket['lease_until']", ticket["lease_until"], 1, MAX_TOKEN)


def _check_outcome(outcome: object) -> None:
    if type(outcome) is not str or outcome not in OUTCOMES:
        raise ValueError(
            f"finish: outcome must be one of 'ok', 'retry', 'permanent', got outcome={outcome!r}"
        )


# --- transactions and hooks --------------------------------------------------------------


@contextlib.contextmanager
def _transaction(con: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` .. ``COMMIT``. Any error before COMMIT has succeeded (a failing
    COMMIT included) rolls everything back and is re-raised: no transaction is left open."""
    con.execute("BEGIN IMMEDIATE")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise


def _hook(fault: Fault, point: str) -> None:
    """Call the fault hook at ``point`` (never when it is None)."""
    if fault is not None:
        fault(point)


def _job(con: sqlite3.Connection, job_id: str) -> dict[str, Any] | None:
    """The stored job ``job_id`` as a dict of ``JOB_FIELDS``, or None."""
    sql = f"SELECT {', '.join(JOB_FIELDS)} FROM jobs WHERE id = ?"
    row = con.execute(sql, (job_id,)).fetchone()
    return None if row is None else dict(zip(JOB_FIELDS, row, strict=True))


# --- functions ---------------------------------------------------------------------------


def retry_delay(attempt: int, base_ms: int, cap_ms: int, jitter: float) -> int:
    """``floor(min(cap_ms, base_ms * 2**(attempt-1)) * jitter)``: cap, then jitter, then floor."""
    _check_int("retry_delay", "attempt", attempt, 1, 16)
    _check_int("retry_delay", "base_ms", base_ms, 1, 60000)
    _check_int("retry_delay", "cap_ms", cap_ms, base_ms, 60000)
    _check_jitter("retry_delay", jitter)
    capped: int = min(cap_ms, base_ms * 2 ** (attempt - 1))
    return math.floor(capped * jitter)


def open_queue(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open (creating if needed) the queue file at ``path``; existing rows are kept."""
    if not isinstance(path, str | os.PathLike) or os.fspath(path) in ("", ":memory:"):
        raise ValueError(
            f"open_queue: path must name a real file (not '' or ':memory:'), got path={path!r}"
        )
    con = sqlite3.connect(path, isolation_level=None, timeout=1)
    try:
        con.execute("PRAGMA journal_mode=DELETE")
        con.execute("PRAGMA synchronous=FULL")
        with _transaction(con):
            con.execute(JOBS_TABLE)
            con.execute(REDRIVES_TABLE)
    except BaseException:
        con.close()
        raise
    return con


def enqueue(
    con: sqlite3.Connection, event: dict[str, Any], now_ms: int, ttl_ms: int, max_attempts: int = 3
) -> bool:
    """Insert a new pending job: True; the same id and qty again: False, nothing changes."""
    _check_event(event)
    _check_now("enqueue", "now_ms", now_ms)
    _check_int("enqueue", "ttl_ms", ttl_ms, 1, 60000)
    _check_int("enqueue", "max_attempts", max_attempts, 1, 16)
    job_id, qty = event["id"], event["qty"]
    with _transaction(con):
        stored = _job(con, job_id)
        if stored is None:
            con.execute(INSERT_JOB, (job_id, qty, max_attempts, now_ms, now_ms + ttl_ms))
        elif stored["qty"] != qty:
            raise Conflict(
                f"enqueue: job {job_id!r} already exists with qty={stored['qty']}, "
                f"got qty={qty}; use a new id for different work"
            )
    return stored is None


def claim(
    con: sqlite3.Connection, owner: str, now_ms: int, lease_ms: int = 1000, fault: Fault = None
) -> Ticket | None:
    """Quarantine overdue or exhausted jobs, then lease the lowest-seq claimable one."""
    _check_identifier("claim", "owner", owner)
    _check_now("claim", "now_ms", now_ms)
    _check_int("claim", "lease_ms", lease_ms, 1, 60000)
    with _transaction(con):
        con.execute(QUARANTINE, {"now": now_ms})
        row = con.execute(NEXT_CLAIMABLE, {"now": now_ms}).fetchone()
        if row is None:
            return None  # commits the quarantine; no hook on a no-change return
        ticket = _lease(con, row[0], owner, now_ms, lease_ms)
        _hook(fault, "after-claim")
    _hook(fault, "after-commit")
    return ticket


def _lease(con: sqlite3.Connection, seq: int, owner: str, now_ms: int, lease_ms: int) -> Ticket:
    """Lease job ``seq`` to ``owner``: a new attempt and a new token."""
    job_id, qty, attempts, token, deadline = con.execute(
        "SELECT id, qty, attempts, token, deadline FROM jobs WHERE seq = ?", (seq,)
    ).fetchone()
    attempt = attempts + 1
    token = token + 1
    lease_until = min(now_ms + lease_ms, deadline)
    con.execute(LEASE, (attempt, token, owner, lease_until, seq))
    return {
        "id": job_id,
        "qty": qty,
        "owner": owner,
        "token": token,
        "attempt": attempt,
        "lease_until": lease_until,
    }


def finish(
    con: sqlite3.Connection,
    ticket: Ticket,
    outcome: str,
    now_ms: int,
    delay_ms: int = 0,
    fault: Fault = None,
) -> str | Literal[False]:
    """Record ``outcome`` for a still-current lease; a stale ticket gets False, no change."""
    _check_ticket(ticket)
    _check_outcome(outcome)
    _check_now("finish", "now_ms", now_ms)
    _check_int("finish", "delay_ms", delay_ms, 0, 60000)
    with _transaction(con):
        row = _job(con, ticket["id"])
        if row is None or _is_stale(row, ticket, now_ms):
            return False  # stale or unknown ticket: no change, no hook
        status, reason = _outcome_state(row, outcome, now_ms, delay_ms)
        available_at = now_ms + delay_ms if status == "pending" else now_ms
        con.execute(FINISH, (status, reason, available_at, row["seq"]))
        _hook(fault, "after-finish")
    _hook(fault, "after-commit")
    return status


def _is_stale(row: dict[str, Any], ticket: Ticket, now_ms: int) -> bool:
    """True unless the job is leased under exactly ``ticket``'s marker and still live."""
    if row["status"] != "leased":
        return True
    if any(row[column] != ticket[key] for column, key in MARKER):
        return True
    if now_ms >= row["lease_until"]:
        return True
    if now_ms >= row["deadline"]:  # noqa: SIM103 -- one rule per statement
        return True
    return False


def _outcome_state(
    row: dict[str, Any], outcome: str, now_ms: int, delay_ms: int
) -> tuple[str, str | None]:
    """The (status, reason) a finish with ``outcome`` leaves."""
    if outcome == "ok":
        return "done", None
    if outcome == "permanent":
        return "dead", "permanent"
    if row["attempts"] >= row["max_attempts"]:
        return "dead", "exhausted"
    if now_ms + delay_ms >= row["deadline"]:
        return "dead", "deadline"
    return "pending", "retry"


def redrive(
    con: sqlite3.Connection,
    job_id: str,
    now_ms: int,
    ttl_ms: int,
    note: str,
    fault: Fault = None,
) -> bool:
    """Give a dead job a fresh budget (token kept), with an audit row, in one transaction."""
    _check_identifier("redrive", "job_id", job_id)
    _check_now("redrive", "now_ms", now_ms)
    _check_int("redrive", "ttl_ms", ttl_ms, 1, 60000)
    _check_identifier("redrive", "note", note)
    with _transaction(con):
        row = _job(con, job_id)
        if row is None:
            raise ValueError(f"redrive: no job {job_id!r}; only a dead job can be redriven")
        if row["status"] != "dead":
            raise ValueError(
                f"redrive: job {job_id!r} is {row['status']}, not dead; "
                f"only a dead job can be redriven"
            )
        con.execute(AUDIT, (job_id, row["token"], now_ms, note))
        _hook(fault, "after-audit")
        con.execute(REDRIVE, (now_ms, now_ms + ttl_ms, row["seq"]))
        _hook(fault, "after-redrive")
    _hook(fault, "after-commit")
    return True


def run_once(
    con: sqlite3.Connection,
    owner: str,
    clock: Callable[[], int],
    send: Callable[[dict[str, Any]], object],
    jitter: float,
    lease_ms: int = 1000,
) -> dict[str, Any] | None:
    """Claim one job, deliver it with ``send`` outside any transaction, then finish it."""
    _check_jitter("run_once", jitter)
    _check_identifier("run_once", "owner", owner)
    _check_int("run_once", "lease_ms", lease_ms, 1, 60000)
    t1 = _read_clock(clock, "first")
    ticket = claim(con, owner, t1, lease_ms)
    if ticket is None:
        return None
    outcome, delay_ms = _deliver(send, ticket, jitter)
    t2 = _read_clock(clock, "second")
    if t2 < t1:
        raise ValueError(
            f"run_once: the clock went backwards (first t1={t1}, second t2={t2}); "
            f"the claim of job {ticket['id']!r} with token {ticket['token']} is kept"
        )
    status = finish(con, ticket, outcome, t2, delay_ms)
    return {
        "id": ticket["id"],
        "token": ticket["token"],
        "status": "stale" if status is False else status,
    }


def _read_clock(clock: Callable[[], int], which: str) -> int:
    """One clock reading, which must be a valid time."""
    now = clock()
    _check_now("run_once", f"the {which} clock() reading", now)
    return now


def _deliver(
    send: Callable[[dict[str, Any]], object], ticket: Ticket, jitter: float
) -> tuple[str, int]:
    """Call ``send`` once with a fresh ``{id, qty}``; the (outcome, delay_ms) to finish with."""
    try:
        result = send({"id": ticket["id"], "qty": ticket["qty"]})
    except Retryable:
        return "retry", retry_delay(ticket["attempt"], 100, 1000, jitter)
    except Permanent:
        return "permanent", 0
    if result is not True:
        raise BadAck(
            f"run_once: send must return exactly True for job {ticket['id']!r}, "
            f"got {result!r}; the job stays leased until its lease expires"
        )
    return "ok", 0


def run_file(
    path: str | os.PathLike[str],
    owner: str,
    clock: Callable[[], int],
    send: Callable[[dict[str, Any]], object],
    jitter: float,
    lease_ms: int = 1000,
) -> dict[str, Any] | None:
    """``run_once`` on the existing queue file ``path``, with a connection of its own."""
    if not isinstance(path, str | os.PathLike) or not os.path.isfile(path):
        raise FileNotFoundError(
            f"run_file: path must be an existing queue file, got path={path!r}; "
            f"create the queue with open_queue first"
        )
    con = open_queue(path)
    try:
        return run_once(con, owner, clock, send, jitter, lease_ms)
    finally:
        con.close()
