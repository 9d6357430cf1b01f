"""Planted races that only a chosen interleaving of SQL statements shows.

Each is correct when the calls run one at a time and rarely wrong when two processes
race on two cores (the window is one or two statements wide), so the differential
machines pass it and the random-schedule properties miss it on most seeds.
``lease.interleavings`` runs every statement-level schedule of two processes, so it
finds each on every seed: the same schedules, the same first failure.

Two shapes: a check-then-act split across statements (the decision read outside the
write lock, or committed before the write), and one path whose transaction takes the
write lock late (a deferred BEGIN: under a concurrent writer its upgrade fails at once
with "database is locked" instead of waiting out the spec's busy timeout; the same edit
of every path is ``deferred-begin`` in ``explore_bugs``).
"""

from __future__ import annotations

from ._catalogue import Mutant

__all__ = ["MUTANTS"]


def _worker(name: str, bug_class: str, real_world: str, *edits: tuple[str, str]) -> Mutant:
    return Mutant(name, "worker", bug_class, real_world, "lease.interleavings", tuple(edits))


_SPLIT = '        con.execute("COMMIT")\n        con.execute("BEGIN IMMEDIATE")\n'

_CLAIM_BODY = """    with _transaction(con):
        con.execute(QUARANTINE, {"now": now_ms})
        row = con.execute(NEXT_CLAIMABLE, {"now": now_ms}).fetchone()
        if row is None:
            return None  # commits the quarantine; no hook on a no-change return
        ticket = _lease(con, row[0], owner, now_ms, lease_ms)
"""
_CLAIM_SELECT_THEN_UPDATE = """    con.execute(QUARANTINE, {"now": now_ms})
    row = con.execute(NEXT_CLAIMABLE, {"now": now_ms}).fetchone()
    if row is None:
        return None
    job_id, qty, attempts, token, deadline = con.execute(
        "SELECT id, qty, attempts, token, deadline FROM jobs WHERE seq = ?", (row[0],)
    ).fetchone()
    lease_until = min(now_ms + lease_ms, deadline)
    with _transaction(con):
        con.execute(LEASE, (attempts + 1, token + 1, owner, lease_until, row[0]))
        ticket = {"id": job_id, "qty": qty, "owner": owner, "token": token + 1,
                  "attempt": attempts + 1, "lease_until": lease_until}
"""

MUTANTS: tuple[Mutant, ...] = (
    _worker(
        "claim-select-then-update-by-id",
        "claim SELECTs the candidate row and its counters outside the transaction, then "
        "UPDATEs it by id inside BEGIN IMMEDIATE with the token it computed from that read",
        "a poller doing SELECT ... LIMIT 1 then UPDATE ... WHERE id = ?: two workers lease the "
        "same row with the same fencing token",
        (_CLAIM_BODY, _CLAIM_SELECT_THEN_UPDATE),
    ),
    _worker(
        "enqueue-begins-deferred",
        "enqueue alone opens its read-then-write transaction with a plain (deferred) BEGIN, "
        "so it takes the write lock only at its INSERT",
        "one code path written with sqlite3's default BEGIN while the others use BEGIN "
        "IMMEDIATE: two producers of one event both read it missing, and one fails with "
        "'database is locked' at once instead of waiting",
        (
            "def _transaction(con: sqlite3.Connection) -> Iterator[None]:\n",
            "def _transaction(con: sqlite3.Connection, begin: str = 'BEGIN IMMEDIATE') -> "
            "Iterator[None]:\n",
        ),
        ('    con.execute("BEGIN IMMEDIATE")\n    try:\n', "    con.execute(begin)\n    try:\n"),
        (
            "    with _transaction(con):\n        stored = _job(con, job_id)\n",
            "    with _transaction(con, 'BEGIN'):\n        stored = _job(con, job_id)\n",
        ),
    ),
    _worker(
        "finish-checks-then-commits-before-update",
        "finish checks the ticket in one transaction, commits, and updates the job in a "
        "second one without checking again",
        "an ack handler that validates the receipt, then writes the result in a new "
        "transaction: two acks of one lease both succeed",
        (
            "            return False  # stale or unknown ticket: no change, no hook\n",
            "            return False  # stale or unknown ticket: no change, no hook\n" + _SPLIT,
        ),
    ),
    _worker(
        "redrive-checks-dead-before-begin",
        "redrive reads the job and checks that it is dead before BEGIN IMMEDIATE, then "
        "writes the audit row and resets the job inside the transaction",
        "a DLQ 'redrive' button pressed twice: both requests see the job dead, both requeue "
        "it, and the audit log shows two redrives of one death",
        (
            "    with _transaction(con):\n        row = _job(con, job_id)\n",
            "    row = _job(con, job_id)\n    with _transaction(con):\n",
        ),
    ),
)
