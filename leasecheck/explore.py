"""``leasecheck explore``: model-check the models, replay every transition on the targets.

For each part of the chosen scope it explores the model exhaustively, checks every
invariant in every state, that every operation and hook was reached and that the
search was exhausted, then replays every explored transition on the target; for the
lease worker it also runs every schedule of two real dispatcher processes up to the
scope's bounds. Exit status: 0 all hold, 1 a violation (with a shortest trace), 2 a
usage error or a target that cannot be loaded.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from leasecheck.conformance import replay_lease
from leasecheck.crash_harness.schedules import BOUNDS, enumerate_schedules
from leasecheck.crash_harness.schedules import evidence as schedule_evidence
from leasecheck.job_conformance import probe_clear_error, probe_expiry_on_error, replay_jobs
from leasecheck.models.evidence import Evidence
from leasecheck.models.job_explorer import JobScope, explore_jobs, job_scope_parts
from leasecheck.models.lease_explorer import LeaseScope, explore_lease, scope_parts
from leasecheck.targets.loader import TargetError, load_jobs_target, load_worker
from leasecheck.targets.scratch import scratch_dir

__all__ = [
    "PartReport",
    "add_arguments",
    "check_jobs_part",
    "check_lease_part",
    "check_schedules",
    "explore_command",
]


@dataclass
class PartReport:
    """One explored part (or one schedule bound): the figures and the first problem."""

    name: str
    scope: str
    states: int = 0
    transitions: int = 0
    depth: int = 0
    exhausted: bool = False
    explore_seconds: float = 0.0
    replayed_states: int = 0
    replayed_transitions: int = 0
    replay_seconds: float = 0.0
    schedules: int = 0
    coverage: dict[str, int] = field(default_factory=dict)
    problem: str | None = None
    evidence: Evidence | None = None
    """What the failing run did, as data (a failing schedule records it)."""
    rebuilt: str = ""
    """Why the replay rebuilt each state from its path instead of copying it ('' if not)."""

    def line(self) -> str:
        if self.schedules:
            return (f"{self.name}: schedules={self.schedules} time={self.replay_seconds:.1f}s"
                    f" -- {self.scope}")  # fmt: skip
        rate = self.states / self.explore_seconds if self.explore_seconds else 0
        return (
            f"{self.name}: states={self.states} transitions={self.transitions}"
            f" depth={self.depth} exhausted={'yes' if self.exhausted else 'no'}"
            f" explore={self.explore_seconds:.1f}s ({rate:.0f} states/s);"
            f" replayed {self.replayed_transitions} transitions from"
            f" {self.replayed_states} states in {self.replay_seconds:.1f}s\n  {self.scope}"
            + (f"\n  each state rebuilt from its path: {self.rebuilt}" if self.rebuilt else "")
        )


def _explored(report: PartReport, result: Any, render: str | None) -> bool:
    report.states, report.transitions = result.states, result.transitions
    report.depth, report.exhausted = result.depth, result.exhausted
    report.explore_seconds, report.coverage = result.seconds, dict(result.coverage)
    if render is not None:
        report.problem = render
    elif result.missing:
        report.problem = (f"vacuous: these operations/hooks/outcomes were never reached:"
                          f" {', '.join(result.missing)}; widen the scope")  # fmt: skip
    elif not result.exhausted:
        report.problem = "the search was cut off before exhausting the scope (max_states)"
    return report.problem is None


def check_lease_part(module: ModuleType, part: LeaseScope, directory: Path) -> PartReport:
    report = PartReport(f"lease {part.name}", part.describe())
    system, result = explore_lease(part)
    render = result.violation.render(system) if result.violation else None
    if _explored(report, result, render):
        replayed = replay_lease(module, system, result, directory / f"{part.name}.db")
        report.replayed_states, report.replayed_transitions = replayed.states, replayed.transitions
        report.replay_seconds, report.problem = replayed.seconds, replayed.failure
        report.evidence = replayed.evidence
    return report


def check_jobs_part(cls: type[Any], part: JobScope) -> PartReport:
    report = PartReport(f"jobs {part.name}", part.describe())
    system, result = explore_jobs(part, probe_clear_error(cls), probe_expiry_on_error(cls))
    render = result.violation.render(system) if result.violation else None
    if _explored(report, result, render):
        replayed = replay_jobs(cls, system, result)
        report.rebuilt = replayed.rebuilt
        report.replayed_states, report.replayed_transitions = replayed.states, replayed.transitions
        report.replay_seconds, report.problem = replayed.seconds, replayed.failure
        report.evidence = replayed.evidence
    return report


def check_schedules(module: ModuleType, jobs: int, kills: int, directory: Path) -> PartReport:
    started = time.perf_counter()
    scope = (
        f"two dispatcher processes, each 'claim at t=1000, finish ok'; {jobs} job(s);"
        f" every interleaving of their hook points, <= {kills} SIGKILL(s) at a hook"
    )
    report = PartReport(f"lease schedules jobs={jobs} kills={kills}", scope)
    count, failing = enumerate_schedules(module, directory, jobs, kills)
    report.schedules, report.replay_seconds = count, time.perf_counter() - started
    report.exhausted = failing is None
    if failing is not None:
        report.problem = (
            f"{failing.problem}\nschedule (replay with crash_harness.schedules.replay):\n"
            f"{failing.describe()}\n  {failing.schedule.to_json()}"
        )
        report.evidence = schedule_evidence(failing)
    return report


def _part_json(report: PartReport) -> dict[str, Any]:
    evidence = report.evidence.to_json() if report.evidence else None
    return {**asdict(report), "evidence": evidence}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``leasecheck explore`` (a subcommand of the ``leasecheck`` parser)."""
    parser.add_argument("--impl", metavar="PATH", help="lease worker target file")
    parser.add_argument("--jobs-impl", metavar="PATH", help="file defining JobQueue")
    parser.add_argument("--scope", choices=("small", "ci", "deep"), default="ci")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(impl: str | None, jobs_impl: str | None, scope: str) -> list[PartReport]:
    """Every check of ``scope`` on the chosen targets (both when neither is given)."""
    lease = impl is not None or jobs_impl is None
    jobs = jobs_impl is not None or impl is None
    module = load_worker(impl) if lease else None
    cls = load_jobs_target(jobs_impl) if jobs else None
    reports: list[PartReport] = []
    with scratch_dir() as directory:
        if module is not None:
            reports += [check_lease_part(module, part, directory) for part in scope_parts(scope)]
            reports += [check_schedules(module, j, k, directory) for j, k in BOUNDS[scope]]
        if cls is not None:
            reports += [check_jobs_part(cls, part) for part in job_scope_parts(scope)]
    return reports


def explore_command(args: argparse.Namespace) -> int:
    """Run ``leasecheck explore`` with parsed ``args``; the exit status."""
    started = time.perf_counter()
    try:
        reports = run(args.impl, args.jobs_impl, args.scope)
    except TargetError as error:
        print(f"leasecheck explore: {error}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - started
    failed = [r for r in reports if r.problem]
    if args.json:
        parts = [_part_json(r) for r in reports]
        print(json.dumps({"scope": args.scope, "seconds": round(seconds, 2),
                          "ok": not failed, "parts": parts}))  # fmt: skip
    else:
        print(f"leasecheck explore --scope {args.scope}")
        for report in reports:
            print(report.line())
        for report in failed:
            print(f"\nVIOLATION in {report.name}:\n{report.problem}")
        print(f"{'FAILED' if failed else 'passed'} in {seconds:.1f}s")
    return 1 if failed else 0
