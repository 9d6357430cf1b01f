"""lease.linearizable and jobs.linearizable: concurrent histories have a sequential explanation.

lease-worker.md: "Read-then-write is one BEGIN IMMEDIATE transaction" — so every
operation must appear to take effect at one instant between its call and its
return, in some order that the reference model explains, and the file read after
all processes end must be the model's state at the end of that order.
job-queue.md: "all methods are safe to call from many threads" and "a job is never
leased to two workers at the same time" — the same check, with threads.

Hypothesis generates a sequential prefix and 2-3 parallel suffixes
(``stateful_tests.parallel``); the suffixes run as forked processes on one SQLite
file (lease) or as threads on one queue (JobQueue), interleaved by a seeded
scheduler, and ``models.linearizability.check`` searches for the order. A busy
timeout ("database is locked") is allowed by the spec's ``timeout=1`` and counts as
an operation with no effect; a process killed mid-operation has an unknown outcome.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings

from leasecheck.models.evidence import attach
from leasecheck.models.shrinking import Budget
from leasecheck.plugin import Checked
from leasecheck.profiles import Profile
from leasecheck.stateful_tests._parallel_jobs import run_jobs_program
from leasecheck.stateful_tests._parallel_lease import run_lease_program
from leasecheck.stateful_tests.parallel import (
    Failure,
    FailureMemo,
    ParallelProgram,
    check_jobs_history,
    check_lease_history,
    failure,
    job_programs,
    lease_programs,
    shrink_program,
)

pytestmark = pytest.mark.usefixtures("no_leaked_children")


SHRINK_SECONDS = {"quick": 5.0, "ci": 8.0, "deep": 60.0}
"""How long a failing property may shrink its program (each attempt runs real processes)."""


def _settings(profile: Profile) -> settings:
    return settings(settings.get_profile("leasecheck"), max_examples=profile.parallel_histories)


def _memo(profile: Profile) -> FailureMemo:
    return FailureMemo(SHRINK_SECONDS.get(profile.name, 8.0))


FURTHER = {"quick": Budget(16, 4.0), "ci": Budget(30, 6.0), "deep": Budget(120, 40.0)}
"""The re-runs (and seconds) leasecheck's own shrink may spend on Hypothesis' minimal
program; spent only on failure."""


def _shrunk_further(
    run: Callable[[], None],
    memo: FailureMemo,
    attempt: Callable[[ParallelProgram], Failure | None],
    profile: Profile,
) -> None:
    """Run the property; on failure, drop the commands Hypothesis left that the failure
    does not need (``shrink_program``), and raise the shortest program's failure."""
    try:
        run()
    except AssertionError as error:
        if memo.last is None or str(error) != memo.last[1].message:
            raise
        budget = FURTHER.get(profile.name, FURTHER["ci"])
        _, found = shrink_program(*memo.last, attempt, budget)
        if found is memo.last[1]:
            raise
        shorter = AssertionError(found.message)
        raise (attach(shorter, found.evidence) if found.evidence else shorter) from error


@pytest.mark.leasecheck("lease.linearizable")
def test_lease_linearizable(
    worker_target: ModuleType,
    worker_path: Path | None,
    scratch: Path,
    lc_profile: Profile,
    lc_seed: int,
    checked: Checked,
) -> None:
    memo = _memo(lc_profile)
    target = f" --impl {worker_path}" if worker_path else ""

    def attempt(program: ParallelProgram) -> Failure | None:
        verdict = check_lease_history(run_lease_program(worker_target, scratch, program))
        ok = verdict.linearizable
        if ok:
            return None
        return failure("lease.linearizable", program, verdict, lc_seed, target, lc_profile.name)

    @_settings(lc_profile)
    @given(program=lease_programs(processes=(2, max(3, min(4, lc_profile.race_processes)))))
    def history_is_linearizable(program: ParallelProgram) -> None:
        memo.run(program, lambda: attempt(program))

    _shrunk_further(history_is_linearizable, memo, attempt, lc_profile)
    checked(
        f"{lc_profile.parallel_histories} parallel histories",
        histories=lc_profile.parallel_histories,
    )


@pytest.mark.leasecheck("jobs.linearizable")
def test_jobs_linearizable(
    jobs_target: type[Any],
    jobs_path: Path | None,
    lc_profile: Profile,
    lc_seed: int,
    checked: Checked,
) -> None:
    memo = _memo(lc_profile)
    target = f" --jobs-impl {jobs_path}" if jobs_path else ""

    def attempt(program: ParallelProgram) -> Failure | None:
        verdict = check_jobs_history(run_jobs_program(jobs_target, program))
        ok = verdict.linearizable
        if ok:
            return None
        return failure("jobs.linearizable", program, verdict, lc_seed, target, lc_profile.name)

    @_settings(lc_profile)
    @given(program=job_programs(threads=(2, max(3, min(4, lc_profile.race_processes)))))
    def history_is_linearizable(program: ParallelProgram) -> None:
        memo.run(program, lambda: attempt(program))

    _shrunk_further(history_is_linearizable, memo, attempt, lc_profile)
    checked(
        f"{lc_profile.parallel_histories} parallel histories",
        histories=lc_profile.parallel_histories,
    )
