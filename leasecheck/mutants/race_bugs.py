"""Planted races: bugs that only show when operations overlap in time.

Each one is correct when calls run one at a time, so the differential state
machines pass it; ``lease.linearizable`` / ``jobs.linearizable`` catch it because
some concurrent history it produces has no sequential explanation. The lease
worker's races are between processes on one SQLite file (a read outside the
write lock); JobQueue's between threads on one object (a critical section split
in two); and one is a fencing bug that needs a concurrent reclaim to matter.
"""

from __future__ import annotations

from ._catalogue import Mutant

__all__ = ["MUTANTS"]

_CLAIM_SELECT = (
    "    with _transaction(con):\n"
    '        con.execute(QUARANTINE, {"now": now_ms})\n'
    '        row = con.execute(NEXT_CLAIMABLE, {"now": now_ms}).fetchone()\n'
)
_ENQUEUE_CHECK = "    with _transaction(con):\n        stored = _job(con, job_id)\n"
_MARKER_CHECK = "    if any(row[column] != ticket[key] for column, key in MARKER):\n"
_POLL_CHOICE = "            job = min(ready, key=lambda j: (-j.priority, j.run_at, j.seq))\n"

MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "claim-select-before-begin",
        "worker",
        "claim picks its job with autocommit reads before BEGIN IMMEDIATE, then leases it",
        "a dispatcher that SELECTs the next ready row outside the write lock: two workers "
        "read the same row and both lease it",
        "lease.linearizable",
        (
            (
                _CLAIM_SELECT,
                '    con.execute(QUARANTINE, {"now": now_ms})\n'
                '    row = con.execute(NEXT_CLAIMABLE, {"now": now_ms}).fetchone()\n'
                "    with _transaction(con):\n",
            ),
        ),
    ),
    Mutant(
        "enqueue-check-before-begin",
        "worker",
        "enqueue looks the id up before BEGIN IMMEDIATE, then inserts in the transaction",
        "an idempotent producer doing check-then-insert: two producers of the same event both "
        "see it missing and one gets a UNIQUE-constraint error instead of False",
        "lease.linearizable",
        ((_ENQUEUE_CHECK, "    stored = _job(con, job_id)\n    with _transaction(con):\n"),),
    ),
    Mutant(
        "finish-checks-owner-only",
        "worker",
        "finish fences on the owner name only, not on the token of the current lease",
        "a worker restarted under the same name acking with its pre-crash receipt while its "
        "new incarnation holds the redelivered job",
        "lease.linearizable",
        ((_MARKER_CHECK, '    if row["owner"] != ticket["owner"]:\n'),),
    ),
    Mutant(
        "jobs-poll-two-critical-sections",
        "jobs",
        "poll chooses the best job under the lock, releases it, and leases in a second section",
        "a scheduler that drops its mutex between picking a task and marking it taken "
        "(e.g. to log), so two workers take the same task",
        "jobs.linearizable",
        ((_POLL_CHOICE, _POLL_CHOICE + "        with self._lock:  # re-taken to lease it\n"),),
    ),
)
