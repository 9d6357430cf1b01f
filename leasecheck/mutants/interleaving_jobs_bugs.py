"""Race bugs in the bundled JobQueue that only an interleaving shows (jobs.interleavings).

Each is correct when one thread calls the queue: only another thread running in
between two of its lines breaks it. job-queue.md: "with many threads polling at
once, a job is never leased to two workers at the same time; all methods are safe
to call from many threads". ``jobs.interleavings`` runs every schedule of small
scenarios up to a preemption bound, so it finds each of them on every seed, in the
schedule with the fewest preemptions; the OS scheduler, which ``jobs.threads`` and
``jobs.linearizable`` rely on, rarely lands between exactly those two lines.
"""

from __future__ import annotations

from ._catalogue import Mutant

__all__ = ["MUTANTS"]

_POLL_PICK = """            ready = [
                job
                for job in self._jobs.values()
                if job.status is JobStatus.PENDING and job.run_at <= now
            ]
            if not ready:
                return None
            job = min(ready, key=lambda j: (-j.priority, j.run_at, j.seq))
            self._last_token += 1
"""
_POLL_PICK_UNLOCKED = """        ready = [
            job
            for job in self._jobs.values()
            if job.status is JobStatus.PENDING and job.run_at <= now
        ]
        if not ready:
            return None
        job = min(ready, key=lambda j: (-j.priority, j.run_at, j.seq))
        with self._lock:
            self._last_token += 1
"""
_POLL_LOCK = "        with self._lock:\n            now = self._time.now_millis()\n"


def _race(name: str, bug_class: str, real_world: str, *edits: tuple[str, str]) -> Mutant:
    return Mutant(name, "jobs", bug_class, real_world, "jobs.interleavings", edits)


def _split(before: str) -> tuple[str, str]:
    """Release the lock just before ``before`` and take it again: two critical sections."""
    indent = before[: len(before) - len(before.lstrip())]
    return (before, f"{indent[:-4]}with self._lock:\n{before}")


MUTANTS: tuple[Mutant, ...] = (
    _race(
        "jobs-poll-picks-outside-lock",
        "poll chooses the best ready job without the lock, then leases it inside the lock",
        "a dispatcher that scans for work lock-free and locks only to mark the job taken: "
        "two workers scan at once and both take the same job",
        (_POLL_PICK, _POLL_PICK_UNLOCKED),
    ),
    _race(
        "jobs-complete-check-then-act",
        "complete checks the lease in one critical section and marks SUCCEEDED in another",
        "a check-then-act split across two lock scopes: a fail of the same lease slips in "
        "between, and the job is retried and completed at once",
        _split("            job.status = JobStatus.SUCCEEDED\n"),
    ),
    _race(
        "jobs-fail-check-then-act",
        "fail checks the lease in one critical section and records the failure in another",
        "validation and update under separate locks: a complete of the same lease wins the "
        "gap, then the failure overwrites the finished job",
        _split(
            "            self._record_failure(job, DEFAULT_ERROR if message is None else message,"
        ),
    ),
    _race(
        "jobs-token-read-before-lock",
        "poll takes its token from the counter before the lock and stores it back inside",
        "a read-modify-write of an id counter outside the lock: two polls hand out one token",
        (_POLL_LOCK, "        token = self._last_token + 1\n" + _POLL_LOCK),
        ("            self._last_token += 1\n", "            self._last_token = token\n"),
    ),
    _race(
        "jobs-view-without-lock",
        "view reads the job without the lock (a torn read)",
        "a 'read-only' getter left unsynchronized: it sees a job RUNNING with 0 attempts, "
        "halfway through a poll's writes",
        (
            "        with self._lock:\n            return self._find(job_id).view()\n",
            "        return self._find(job_id).view()\n",
        ),
    ),
    _race(
        "jobs-cancel-check-then-act",
        "cancel checks PENDING in one critical section and sets CANCELLED in another",
        "a cancel that races a worker's poll: the job is leased and cancelled at once",
        _split("            job.status = JobStatus.CANCELLED\n"),
    ),
    _race(
        "jobs-submit-id-outside-lock",
        "submit numbers the new job before taking the lock",
        "an id taken from a count read without the lock: two submits get the same id and "
        "one job silently replaces the other",
        (
            "        with self._lock:\n            seq = len(self._jobs) + 1\n",
            "        seq = len(self._jobs) + 1\n        with self._lock:\n",
        ),
    ),
    _race(
        "jobs-retry-dead-check-then-act",
        "retry_dead checks DEAD in one critical section and resets the job in another",
        "two operators retry the same dead letter at once and both succeed",
        _split("            job.status = JobStatus.PENDING\n            job.attempts = 0\n"),
    ),
    _race(
        "jobs-dead-letters-without-lock",
        "dead_letters iterates the jobs without the lock",
        "a listing endpoint that walks a shared dict while a submit adds to it: "
        "RuntimeError 'dictionary changed size during iteration'",
        ("        with self._lock:\n            return [job.view()", "        return [job.view()"),
    ),
)
