"""Planted bugs that exhaustive exploration finds quickly: boundaries and interleavings.

Each is one comparison moved by one millisecond or one lock taken too late. Random
testing has to hit the exact instant (now == deadline, now == lease_until) to see
them; the explorer visits every such instant by construction (``lease.model-check``,
``jobs.model-check``), and the schedule enumerator runs every interleaving of two
real dispatchers (``lease.schedules``).
"""

from __future__ import annotations

from ._catalogue import Mutant

__all__ = ["MUTANTS"]

_COMPLETE_START = (
    "            job = self._find(job_id)\n"
    "            self._expire_leases(self._time.now_millis())\n"
)

MUTANTS: tuple[Mutant, ...] = (
    # Moved here from worker_bugs: the random programs of lease.agreement reach this
    # one-millisecond boundary only on some seeds; the explorer visits it every time.
    Mutant(
        "expiry-off-by-one-finish",
        "worker",
        "finish accepted at exactly lease_until, when the lease is already over",
        "a worker completing a job in the same millisecond another worker re-leased it",
        "lease.model-check",
        (('if now_ms >= row["lease_until"]:', 'if now_ms > row["lease_until"]:'),),
    ),
    Mutant(
        "quarantine-deadline-strict",
        "worker",
        "quarantine uses deadline < now instead of <=, so a job is leased at its deadline",
        "a TTL sweeper comparing expiry exclusively: a message delivered in its last instant "
        "with a lease that is already over",
        "lease.model-check",
        (("AND (deadline <= :now OR attempts", "AND (deadline < :now OR attempts"),),
    ),
    Mutant(
        "quarantine-expired-lease-strict",
        "worker",
        "quarantine skips a lease expiring exactly now, so claim re-leases it past its budget",
        "a maxReceiveCount check that runs before the visibility timeout is seen as over, "
        "giving a poison message one attempt too many",
        "lease.model-check",
        (
            (
                "OR (status = 'leased' AND lease_until <= :now))\n  AND",
                "OR (status = 'leased' AND lease_until < :now))\n  AND",
            ),
        ),
    ),
    Mutant(
        "retry-at-deadline-pending",
        "worker",
        "a retry whose backoff ends exactly at the deadline stays pending instead of dead",
        "a retry scheduler that books a retry for the instant the job expires, which no "
        "worker may then claim",
        "lease.model-check",
        (('if now_ms + delay_ms >= row["deadline"]:', 'if now_ms + delay_ms > row["deadline"]:'),),
    ),
    Mutant(
        "deferred-begin",
        "worker",
        "transactions start with a deferred BEGIN: reads run under a shared lock and the "
        "upgrade to a write lock fails with 'database is locked' when another claim writes",
        "Python's sqlite3 default deferred transactions: two workers read, then one dies "
        "with SQLITE_BUSY on the upgrade (a read outside the write lock)",
        "lease.schedules",
        (('    con.execute("BEGIN IMMEDIATE")\n    try:', '    con.execute("BEGIN")\n    try:'),),
    ),
    Mutant(
        "jobs-ready-boundary",
        "jobs",
        "poll treats a job as ready only after its run-at, not at it (< instead of <=)",
        "a delayed-delivery queue comparing not-before times exclusively: every retry waits "
        "one tick longer than its backoff",
        "jobs.model-check",
        (
            (
                "if job.status is JobStatus.PENDING and job.run_at <= now",
                "if job.status is JobStatus.PENDING and job.run_at < now",
            ),
        ),
    ),
    Mutant(
        "jobs-expiry-one-early",
        "jobs",
        "a lease expires one millisecond before lease_until (now >= lease_until - 1)",
        "a server-side clock-skew margin that takes a job away from a worker whose lease is "
        "still valid",
        "jobs.model-check",
        (
            (
                "if job.status is JobStatus.RUNNING and now >= job.lease_until:",
                "if job.status is JobStatus.RUNNING and now >= job.lease_until - 1:",
            ),
        ),
    ),
    Mutant(
        "jobs-token-checked-before-expiry",
        "jobs",
        "complete checks the token before it processes expired leases: a token never issued "
        "is refused without processing them, the job's own lapsed token after processing them",
        "a 'cheap rejection of zombies first' added at the top of complete",
        "jobs.model-check",
        (
            (
                _COMPLETE_START,
                _COMPLETE_START.replace(
                    "self._expire_leases",
                    'self._check_lease(job, token, "complete")\n            self._expire_leases',
                ),
            ),
        ),
    ),
)
