"""Planted bugs in the bundled JobQueue (queue_impl/job_queue.py), one spec sentence each.

``jobs.agreement`` (the differential state machine) catches the sequential ones;
``jobs.threads`` catches the one that only shows under concurrency (a poll without
the lock).
"""

from __future__ import annotations

from ._catalogue import Mutant

__all__ = ["MUTANTS"]

_BEST = "key=lambda j: (-j.priority, j.run_at, j.seq)"
_EXPIRY_TEST = "if job.status is JobStatus.RUNNING and now >= job.lease_until:"
_POLL_LOCK = "        with self._lock:\n            now = self._time.now_millis()\n"


def _jobs(
    name: str, bug_class: str, real_world: str, *edits: tuple[str, str], caught_by: str = ""
) -> Mutant:
    return Mutant(name, "jobs", bug_class, real_world, caught_by or "jobs.agreement", edits)


MUTANTS: tuple[Mutant, ...] = (
    _jobs(
        "jobs-priority-reversed",
        "best job picks the lowest priority first",
        "a min-heap used where a max-heap was meant: urgent jobs starve behind batch work",
        (_BEST, "key=lambda j: (j.priority, j.run_at, j.seq)"),
    ),
    _jobs(
        "jobs-run-at-tie-break-ignored",
        "among equal priorities, the earliest run-at is not preferred",
        "a scheduler ordering only by priority, so long-overdue retries wait behind new jobs",
        (_BEST, "key=lambda j: (-j.priority, j.seq)"),
    ),
    _jobs(
        "jobs-submission-order-ignored",
        "last tie-break is newest first instead of submission order",
        "a LIFO stack where a FIFO queue was meant: early submitters starve under load",
        (_BEST, "key=lambda j: (-j.priority, j.run_at, -j.seq)"),
    ),
    _jobs(
        "jobs-expiry-boundary",
        "lease still valid at now == lease_until (> instead of >=)",
        "an off-by-one visibility timeout letting a worker finish a job already handed out",
        (_EXPIRY_TEST, "if job.status is JobStatus.RUNNING and now > job.lease_until:"),
    ),
    _jobs(
        "jobs-expiry-anchor-now",
        "expired lease's backoff counted from the time it was noticed, not from lease_until",
        "a retry delay that grows with how late the sweeper ran, not with the failure time",
        (
            "self._record_failure(job, LEASE_EXPIRED, job.lease_until)",
            "self._record_failure(job, LEASE_EXPIRED, now)",
        ),
    ),
    _jobs(
        "jobs-stale-token-accepted",
        "token compared by order: any older token of the job is accepted",
        "an SQS consumer deleting a message with the receipt handle of an earlier delivery",
        ("if token != job.token:", "if not isinstance(token, int) or token > job.token:"),
    ),
    _jobs(
        "jobs-token-reuse-after-retry-dead",
        "tokens derived from (job, attempt) repeat once retry_dead resets attempts",
        "a zombie worker from before a redrive completing the redriven job with its old handle",
        ("job.token = self._last_token", "job.token = job.seq * 1000 + job.attempts"),
    ),
    _jobs(
        "jobs-cancel-running",
        "cancel allowed while the job is RUNNING",
        "an admin 'cancel' that races the worker and leaves a half-done side effect",
        (
            "if job.status is not JobStatus.PENDING:",
            "if job.status not in (JobStatus.PENDING, JobStatus.RUNNING):",
        ),
    ),
    _jobs(
        "jobs-unlocked-poll",
        "poll selects and leases a job without holding the lock",
        "two workers picking the same row because the SELECT and the UPDATE are not atomic",
        (
            _POLL_LOCK,
            "        if True:  # the lock is gone\n            now = self._time.now_millis()\n",
        ),
        caught_by="jobs.threads",
    ),
    _jobs(
        "jobs-expiry-in-view",
        "view processes expired leases (the spec: only poll, complete and fail do)",
        "a read-only status endpoint with a side effect, so monitoring changes the queue",
        (
            "            return self._find(job_id).view()",
            "            self._expire_leases(self._time.now_millis())\n"
            "            return self._find(job_id).view()",
        ),
    ),
    _jobs(
        "jobs-cancel-refusal-expires",
        "cancel processes expired leases before it refuses a job that is not PENDING (the "
        "spec: only poll, complete and fail process them)",
        "a refusal path that 'tidies up' first, so a failed cancel of a lapsed job retries it",
        (
            "            if job.status is not JobStatus.PENDING:\n                raise",
            "            if job.status is not JobStatus.PENDING:\n"
            "                self._expire_leases(self._time.now_millis())\n                raise",
        ),
    ),
    _jobs(
        "jobs-backoff-uncapped",
        "backoff not capped at max_backoff_millis",
        "exponential backoff without a ceiling: a job retried after hours instead of a minute",
        (
            "return min(self._policy.max_backoff_millis, doubled)",
            "return doubled",
        ),
    ),
    _jobs(
        "jobs-backoff-exponent-off-by-one",
        "backoff after the n-th attempt is base * 2**n instead of base * 2**(n-1)",
        "a retry schedule starting at 2 s where the runbook promises 1 s",
        ("2 ** (attempts - 1)", "2**attempts"),
    ),
    _jobs(
        "jobs-retry-dead-keeps-attempts",
        "retry_dead leaves attempts as they were instead of resetting them to 0",
        "a redriven dead letter that dies again after one attempt because its count survived",
        ("            job.attempts = 0\n", ""),
    ),
    _jobs(
        "jobs-fail-none-error-not-recorded",
        'fail(error=None) stores None instead of "failed"',
        "a crash handler passing a null message, leaving operators with an empty error column",
        (
            "DEFAULT_ERROR if message is None else message",
            "message",
        ),
    ),
    _jobs(
        "jobs-payload-none-not-stored-empty",
        'payload None is stored as None instead of ""',
        "a null body reaching a worker that calls .decode() on it",
        ('"" if text is None else text', "text"),
    ),
    _jobs(
        "jobs-dead-letters-newest-first",
        "dead_letters() lists jobs newest first instead of in submission order",
        "a DLQ console sorted by id descending where the redrive tool assumes oldest first",
        (
            "for job in self._jobs.values() if job.status is JobStatus.DEAD",
            "for job in reversed(self._jobs.values()) if job.status is JobStatus.DEAD",
        ),
    ),
    _jobs(
        "jobs-max-attempts-off-by-one",
        "a job gets max_attempts + 1 attempts before it is dead-lettered (<= instead of <)",
        "a maxReceiveCount compared inclusively: poison messages run once more than configured",
        (
            "if job.attempts < self._policy.max_attempts:",
            "if job.attempts <= self._policy.max_attempts:",
        ),
    ),
    _jobs(
        "jobs-complete-skips-expiry",
        "complete does not process expired leases first, so an expired lease can complete",
        "a worker finishing after its visibility timeout while the job is already due again",
        (
            "            self._expire_leases(self._time.now_millis())\n"
            '            self._check_lease(job, token, "complete")',
            '            self._check_lease(job, token, "complete")',
        ),
    ),
    _jobs(
        "jobs-whitespace-type-accepted",
        "a type of only whitespace is accepted (blank check uses `not type`, not `.strip()`)",
        "jobs with type '  ' that no handler is registered for, retried until dead",
        (
            "if job_type is None or not job_type.strip():",
            "if job_type is None or not job_type:",
        ),
    ),
)
