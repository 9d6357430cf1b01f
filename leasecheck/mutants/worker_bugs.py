"""Planted bugs in the bundled lease worker that ``lease.agreement`` must catch.

One mutant per class of bug, each a real violation of a sentence of
lease-worker.md (never a reading the spec leaves open), written as small text
edits of ``queue_impl/worker.py``. ``tests/test_lease_machine.py`` checks that the
agreement machine catches every one and shrinks it to at most 10 steps.
"""

from __future__ import annotations

from ._catalogue import Mutant

__all__ = ["MUTANTS"]

CAUGHT_BY = "lease.agreement"


def _worker(
    name: str, bug_class: str, real_world: str, *edits: tuple[str, str], caught_by: str = ""
) -> Mutant:
    return Mutant(name, "worker", bug_class, real_world, caught_by or CAUGHT_BY, tuple(edits))


MUTANTS: tuple[Mutant, ...] = (
    _worker(
        "stale-finish-accepted",
        "finish does not compare the token: a stale ticket completes the new lease",
        "SQS consumer deleting a message with an expired receipt handle after redelivery",
        ('    ("token", "token"),\n', ""),
    ),
    _worker(
        "expiry-off-by-one-claim",
        "a lease counts as expired only after lease_until, not at it",
        "visibility timeout compared with > instead of >= (a job stuck one tick longer)",
        (
            "OR (status = 'leased' AND lease_until <= :now)\n  ORDER BY",
            "OR (status = 'leased' AND lease_until < :now)\n  ORDER BY",
        ),
    ),
    _worker(
        "quarantine-lost-when-nothing-claimable",
        "claim rolls back its quarantine when it finds no job to lease",
        "a dead-letter sweep that only commits when the poll also found work",
        (
            "            return None  # commits the quarantine; no hook on a no-change return",
            '            con.execute("ROLLBACK")  # nothing to lease: undo the quarantine too\n'
            '            con.execute("BEGIN")\n'
            "            return None",
        ),
        # lease.agreement also catches it at seed 0, but shrinks it to 12 steps; the edge
        # sweep shows it in 3 (enqueue with ttl 1, one millisecond later, claim)
        caught_by="lease.edges",
    ),
    _worker(
        "lease-not-capped-at-deadline",
        "a lease may run past the job's deadline",
        "a visibility timeout extended beyond the message retention period",
        (
            "lease_until = min(now_ms + lease_ms, deadline)",
            "lease_until = now_ms + lease_ms",
        ),
    ),
    _worker(
        "budget-reset-by-duplicate-enqueue",
        "a duplicate enqueue (same id and qty) resets the retry budget",
        "an idempotent producer retry that silently re-arms a poison message",
        (
            '        elif stored["qty"] != qty:\n',
            '        elif stored["qty"] == qty:\n'
            "            con.execute(\n"
            '                "UPDATE jobs SET attempts = 0, max_attempts = ? WHERE id = ?",\n'
            "                (max_attempts, job_id),\n"
            "            )\n"
            "        else:\n",
        ),
    ),
    _worker(
        "enqueue-conflict-not-raised",
        "an enqueue reusing an id with another qty is ignored instead of refused",
        "INSERT OR IGNORE hiding a producer that reuses idempotency keys for different work",
        ("            raise Conflict(", "            return False\n            raise Conflict("),
    ),
    _worker(
        "redrive-resets-token",
        "redrive resets the fencing token, so tokens repeat",
        "a DLQ redrive that re-creates the job row and restarts its fencing sequence",
        (
            'REDRIVE = """UPDATE jobs SET status = \'pending\', attempts = 0,',
            'REDRIVE = """UPDATE jobs SET status = \'pending\', attempts = 0, token = 0,',
        ),
    ),
    _worker(
        "redrive-bumps-token",
        "redrive bumps the token (the spec keeps it; only claims bump it)",
        "a requeue that also increments the version, desynchronising fencing from leases",
        (
            'REDRIVE = """UPDATE jobs SET status = \'pending\', attempts = 0,',
            'REDRIVE = """UPDATE jobs SET status = \'pending\', attempts = 0, token = token + 1,',
        ),
    ),
    _worker(
        "audit-row-without-state-change",
        "the redrive audit row commits in its own transaction, without the state change",
        "an audit log written before the main transaction, leaving audit rows for nothing",
        (
            '        con.execute(AUDIT, (job_id, row["token"], now_ms, note))\n',
            '        con.execute(AUDIT, (job_id, row["token"], now_ms, note))\n'
            '        con.execute("COMMIT")\n'
            '        con.execute("BEGIN IMMEDIATE")\n',
        ),
    ),
    _worker(
        "hook-after-commit",
        "the after-finish hook runs after COMMIT, so a crash there keeps the finish",
        "a pre-commit callback moved after the commit by a refactoring of the transaction helper",
        (
            '        _hook(fault, "after-finish")\n',
            "",
        ),
        (
            '    _hook(fault, "after-commit")\n    return status',
            '    _hook(fault, "after-finish")\n    _hook(fault, "after-commit")\n    return status',
        ),
    ),
    _worker(
        "truthy-ack-accepted",
        "run_once treats any truthy send result as an acknowledgement",
        "an HTTP client treating a non-empty error body as success",
        ("if result is not True:", "if not result:"),
    ),
    _worker(
        "backwards-clock-ignored",
        "a backwards second clock reading is clamped instead of refused",
        "a worker on a host whose NTP step moved the clock back finishing with a made-up time",
        (
            't2 = _read_clock(clock, "second")',
            't2 = max(t1, _read_clock(clock, "second"))',
        ),
    ),
    _worker(
        "send-inside-transaction",
        "send runs inside a write transaction, holding the queue's lock during delivery",
        "a dispatcher holding a database lock across a network call, stalling every worker",
        (
            "    outcome, delay_ms = _deliver(send, ticket, jitter)\n",
            '    con.execute("BEGIN IMMEDIATE")\n'
            "    try:\n"
            "        outcome, delay_ms = _deliver(send, ticket, jitter)\n"
            "    finally:\n"
            '        con.execute("COMMIT")\n',
        ),
    ),
    _worker(
        "run-file-creates-file",
        "run_file creates a queue at a missing path instead of raising FileNotFoundError",
        "a cron job with a typo in its path silently running against a new empty queue",
        ("or not os.path.isfile(path):", "or os.path.isdir(path):"),
    ),
    _worker(
        "open-queue-wipes-rows",
        "open_queue drops the existing jobs table before creating it",
        "a schema 'migration' run at startup that recreates tables and loses the backlog",
        (
            "            con.execute(JOBS_TABLE)\n",
            '            con.execute("DROP TABLE IF EXISTS jobs")\n'
            "            con.execute(JOBS_TABLE)\n",
        ),
    ),
    _worker(
        "exhausted-wins-over-deadline",
        "quarantine reports 'exhausted' when the deadline was also missed (deadline must win)",
        "a dead-letter reason chosen by the first check that fires, misleading the on-call",
        (
            "CASE WHEN deadline <= :now THEN 'deadline' ELSE 'exhausted' END",
            "CASE WHEN attempts >= max_attempts THEN 'exhausted' ELSE 'deadline' END",
        ),
    ),
    _worker(
        "bool-accepted-as-int",
        "True and False pass as the ints 1 and 0",
        "isinstance(x, int) validation letting a JSON true through as a quantity",
        ("if type(value) is not int:", "if not isinstance(value, int):"),
    ),
    _worker(
        "identifier-trailing-newline",
        "an identifier with a trailing newline is accepted ('$' matches before '\\n')",
        "a regex validator using ^...$ with re.match, letting 'id\\n' into logs and keys",
        ("IDENTIFIER.fullmatch(value)", "re.match(r'^[A-Za-z0-9_-]{1,64}$', value)"),
    ),
    _worker(
        "claim-picks-highest-seq",
        "claim leases the newest claimable job instead of the lowest seq",
        "a LIFO poll starving old jobs past their deadlines",
        ("ORDER BY seq LIMIT 1", "ORDER BY seq DESC LIMIT 1"),
    ),
    _worker(
        "retry-ignores-max-attempts",
        "a retry outcome goes back to pending even with the attempt budget spent",
        "a retry policy checking the budget only at the next poll, not when recording the failure",
        (
            '    if row["attempts"] >= row["max_attempts"]:\n        return "dead", "exhausted"\n',
            "",
        ),
    ),
    _worker(
        "ticket-mutated",
        "finish writes its result into the caller's ticket dict",
        "a library annotating the caller's request object in place",
        (
            '    _hook(fault, "after-commit")\n    return status',
            '    _hook(fault, "after-commit")\n    ticket["status"] = status\n    return status',
        ),
    ),
    _worker(
        "redrive-of-done-job",
        "redrive accepts a job that is not dead (e.g. done), running finished work again",
        "a 'retry all' admin button that also re-runs completed jobs",
        ('if row["status"] != "dead":', 'if row["status"] == "leased":'),
    ),
    _worker(
        "retry-delay-ignored",
        "finish(retry) makes the job available at once, ignoring delay_ms",
        "a backoff computed and logged but never stored, hammering a failing receiver",
        (
            'available_at = now_ms + delay_ms if status == "pending" else now_ms',
            "available_at = now_ms",
        ),
    ),
    _worker(
        "jitter-before-cap",
        "retry_delay applies the jitter before the cap (the spec caps first)",
        "exponential backoff code where min() and the jitter multiplication were swapped",
        (
            "    return math.floor(capped * jitter)",
            "    return min(cap_ms, math.floor(base_ms * 2 ** (attempt - 1) * jitter))",
        ),
    ),
    _worker(
        "claim-ignores-available-at",
        "claim leases a pending job before its available_at (a retry's backoff is skipped)",
        "a delayed message delivered immediately because the poll ignores its not-before time",
        (
            "(status = 'pending' AND available_at <= :now)",
            "(status = 'pending')",
        ),
    ),
)
