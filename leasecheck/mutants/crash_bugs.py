"""Planted bugs that only show across a SIGKILL, a lock or a second process.

Each one is a real violation of lease-worker.md — a transaction split in two, a
hook on the wrong side of COMMIT, a read outside the write lock, an ``open_queue``
that resets the queue, a duplicate send — written as small text edits of
``queue_impl/worker.py``. ``tests/test_crash_mutants.py`` checks that the property
named in ``caught_by`` catches each one, loaded through ``--impl`` like any target.
"""

from __future__ import annotations

from ._catalogue import Mutant

__all__ = ["MUTANTS"]


def _worker(
    name: str, caught_by: str, bug_class: str, real_world: str, *edits: tuple[str, str]
) -> Mutant:
    return Mutant(name, "worker", bug_class, real_world, caught_by, tuple(edits))


_SPLIT = '        con.execute("COMMIT")\n        con.execute("BEGIN IMMEDIATE")\n'

MUTANTS: tuple[Mutant, ...] = (
    _worker(
        "redrive-audit-committed-alone",
        "lease.crash-points",
        "redrive commits its audit row in a transaction of its own, before the job changes",
        "an outbox/audit insert committed before the state change it records (half a redrive)",
        (
            '        con.execute(AUDIT, (job_id, row["token"], now_ms, note))\n',
            '        con.execute(AUDIT, (job_id, row["token"], now_ms, note))\n' + _SPLIT,
        ),
    ),
    _worker(
        "finish-hook-after-commit",
        "lease.crash-points",
        "finish calls fault('after-finish') after COMMIT instead of before it",
        "a 'before commit' callback that really runs after the commit (ORM post-flush hooks)",
        (
            '        con.execute(FINISH, (status, reason, available_at, row["seq"]))\n'
            '        _hook(fault, "after-finish")\n',
            '        con.execute(FINISH, (status, reason, available_at, row["seq"]))\n'
            '    _hook(fault, "after-finish")\n',
        ),
    ),
    _worker(
        "finish-two-transactions",
        "lease.crash-points",
        "finish commits the new status first and clears owner/lease_until in a second commit",
        "an ack that updates the message state and releases its lease in two round trips",
        (
            '        con.execute(FINISH, (status, reason, available_at, row["seq"]))\n',
            "        con.execute('UPDATE jobs SET status = ?, reason = ?, available_at = ? "
            "WHERE seq = ?', (status, reason, available_at, row['seq']))\n"
            + _SPLIT
            + "        con.execute('UPDATE jobs SET owner = NULL, lease_until = NULL "
            "WHERE seq = ?', (row['seq'],))\n",
        ),
    ),
    _worker(
        "claim-commit-hook-before-commit",
        "lease.crash-points",
        "claim calls fault('after-commit') while its transaction is still open",
        "a worker acking 'claimed' to its supervisor before the claim is durable",
        (
            '        _hook(fault, "after-claim")\n    _hook(fault, "after-commit")\n',
            '        _hook(fault, "after-claim")\n        _hook(fault, "after-commit")\n',
        ),
    ),
    _worker(
        "open-queue-deletes-rows",
        "lease.crash-points",
        "open_queue empties the jobs table, so every restart loses the queue",
        "an init script that runs 'DELETE FROM jobs' on startup, fine in dev, fatal after a crash",
        (
            "            con.execute(REDRIVES_TABLE)\n",
            "            con.execute(REDRIVES_TABLE)\n"
            '            con.execute("DELETE FROM jobs")\n',
        ),
    ),
    _worker(
        "open-queue-recreates-tables",
        "lease.crash-random",
        "open_queue drops and recreates both tables instead of creating them if absent",
        "a migration step that runs DROP TABLE + CREATE TABLE on every boot",
        (
            "            con.execute(JOBS_TABLE)\n",
            '            con.execute("DROP TABLE IF EXISTS jobs")\n'
            '            con.execute("DROP TABLE IF EXISTS redrives")\n'
            "            con.execute(JOBS_TABLE)\n",
        ),
    ),
    _worker(
        "claim-selects-outside-lock",
        "lease.single-winner",
        "claim commits its SELECT of the next job, then leases that job in a new transaction",
        "check-then-act polling: SELECT a ready row, then UPDATE it in a later transaction",
        (
            '        row = con.execute(NEXT_CLAIMABLE, {"now": now_ms}).fetchone()\n',
            '        row = con.execute(NEXT_CLAIMABLE, {"now": now_ms}).fetchone()\n' + _SPLIT,
        ),
    ),
    _worker(
        "finish-ignores-marker",
        "lease.races",
        "finish checks only that the job is leased, not that the lease is the ticket's",
        "a stale consumer acking a redelivered message and overwriting the new owner's result",
        (
            "    if any(row[column] != ticket[key] for column, key in MARKER):\n"
            "        return True\n",
            "",
        ),
    ),
    _worker(
        "run-once-sends-twice",
        "lease.duplicate-send",
        "run_once delivers every job twice (a retry loop around a send that already succeeded)",
        "an HTTP client retrying a POST that did reach the server, doubling a payment",
        (
            '        result = send({"id": ticket["id"], "qty": ticket["qty"]})\n',
            '        send({"id": ticket["id"], "qty": ticket["qty"]})\n'
            '        result = send({"id": ticket["id"], "qty": ticket["qty"]})\n',
        ),
    ),
)
