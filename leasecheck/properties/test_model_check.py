"""lease.model-check and jobs.model-check: exhaustive exploration plus conformance.

Within the profile's scope (``lc_profile.explore_scope``) every reachable state of the
reference model is visited with every invariant checked, every operation, hook point
and outcome must be reached (no vacuous pass), the search must be exhausted, and every
explored transition is replayed on the target, whose result, error and stored state
must equal the model's successor.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from leasecheck.explore import check_jobs_part, check_lease_part
from leasecheck.models.evidence import attach
from leasecheck.models.job_explorer import JobScope, job_scope_parts
from leasecheck.models.lease_explorer import scope_parts
from leasecheck.plugin import Checked
from leasecheck.profiles import Profile


@pytest.mark.leasecheck("lease.model-check")
def test_lease_model_check(
    worker_target: ModuleType, lc_profile: Profile, scratch: Path, checked: Checked
) -> None:
    states = transitions = seeded = 0
    parts = scope_parts(lc_profile.explore_scope)
    for part in parts:
        report = check_lease_part(worker_target, part, scratch)
        if report.problem is not None:
            error = AssertionError(f"lease.model-check, {report.name}:\n{report.problem}")
            raise attach(error, report.evidence) if report.evidence else error
        states, transitions = states + report.states, transitions + report.replayed_transitions
        seeded += report.states if part.start is not None else 0
    starts = [p for p in parts if p.start is not None]
    whole = max(len(p.jobs) for p in parts if p.start is None)
    bounds = f"all states of <= {whole} jobs"
    if starts:
        depth = min(p.max_depth or 0 for p in starts)
        bounds += f", {len(starts)} start states near the bounds {depth}+ moves deep"
    checked(
        f"{states} states, {transitions} replayed; {bounds}", states=states,
        replayed=transitions, seeded_states=seeded, starts=[p.start for p in starts],
    )  # fmt: skip


@pytest.mark.leasecheck("jobs.model-check")
def test_jobs_model_check(jobs_target: type[Any], lc_profile: Profile, checked: Checked) -> None:
    states = transitions = seeded = 0
    rebuilt = ""
    parts = job_scope_parts(lc_profile.explore_scope)
    for part in parts:
        report = check_jobs_part(jobs_target, part)
        if report.problem is not None:
            error = AssertionError(f"jobs.model-check, {report.name}:\n{report.problem}")
            raise attach(error, report.evidence) if report.evidence else error
        states, transitions = states + report.states, transitions + report.replayed_transitions
        seeded += report.states if part.seed is not None else 0
        rebuilt = rebuilt or report.rebuilt
    how = "; each state rebuilt from its path (the target's copies cannot stand in)" * bool(rebuilt)
    checked(
        f"{states} states, {transitions} replayed; {_job_bounds(parts)}{how}",
        states=states, replayed=transitions, seeded_states=seeded, rebuilt=rebuilt,
        max_jobs=max(p.jobs for p in parts), max_attempts=max(p.max_attempts for p in parts),
        depth=max((p.max_depth or 0) for p in parts),
    )  # fmt: skip


def _job_bounds(parts: tuple[JobScope, ...]) -> str:
    """What the parts prove, in a few words: exhaustive up to N jobs, seeds to depth D."""
    whole = max((p.jobs for p in parts if p.max_depth is None), default=0)
    seeds = [p for p in parts if p.seed is not None and p.max_depth is not None]
    words = f"all states of <= {whole} jobs"
    if seeds:
        jobs = max(len(_seed_jobs(p)) for p in seeds)
        depth = min(p.max_depth or 0 for p in seeds)
        attempts = max(p.max_attempts for p in seeds)
        words += f", {jobs}-job/{attempts}-attempt seeds {depth} moves deep"
    return words


def _seed_jobs(part: JobScope) -> list[object]:
    assert part.seed is not None
    return [op for op in part.seed.setup if op[0] == "submit"]
