"""lease.interleavings: every statement-level schedule of 2 (and, bounded, 3) processes.

lease-worker.md: "Read-then-write is one BEGIN IMMEDIATE transaction" and the
connection waits out a 1 s busy timeout. So however the statements of concurrent
calls interleave, each call must appear to take effect at one instant between its call
and its return (linearizable against the model, the file read at the end included),
every job and generation has one winner, no job is lost, and no call fails with
"database is locked" (every lock in these schedules is held for a few statements).

Each scenario (``crash_harness._interleave_scenarios``: every write path, from seeded
queues) runs as real forked processes on one SQLite file, stepped one SQL statement or
fault hook at a time by ``crash_harness.interleavings``: every schedule of two
processes, and of three with at most ``k`` preemptions, cheapest first, so a failure
prints with the fewest forced switches. Its schedule is data: ``--export`` writes a
test that replays exactly that schedule.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from leasecheck.counterexample import ScheduleFailure
from leasecheck.crash_harness._interleave_scenarios import BOUNDS, by_name
from leasecheck.crash_harness.interleavings import STEP_NS, Exploration, explore
from leasecheck.models.evidence import attach
from leasecheck.models.history_evidence import schedule_evidence
from leasecheck.plugin import Checked, NotChecked
from leasecheck.profiles import Profile


def _scope(explorations: list[Exploration]) -> str:
    """'2-3 processes (3: <= 2 preemptions), <= 16 statements and hooks'."""
    sizes = sorted({e.scenario.processes for e in explorations})
    bounds = ", ".join(
        f"{e.scenario.processes}: <= {e.bound} preemptions"
        for e in explorations if e.bound is not None
    )  # fmt: skip
    most = max(e.points for e in explorations)
    span = f"{sizes[0]}-{sizes[-1]}" if len(sizes) > 1 else str(sizes[0])
    return f"{span} processes ({bounds or 'every schedule'}), <= {most} statements and hooks"


@pytest.mark.leasecheck("lease.interleavings")
def test_interleavings(
    worker_target: ModuleType,
    worker_path: Path | None,
    lc_profile: Profile,
    scratch: Path,
    no_leaked_children: None,
    checked: Checked,
    not_checked: NotChecked,
) -> None:
    done: list[Exploration] = []
    for name, bound in BOUNDS[lc_profile.explore_scope]:
        exploration = explore(worker_target, by_name(name), scratch, bound)
        failure = exploration.failure
        if failure is not None:
            target = worker_path or "the bundled queue_impl/worker.py"
            error = ScheduleFailure(
                f"lease.interleavings: a schedule of {exploration.scenario.processes} processes "
                f"running {target} breaks the contract (found after {exploration.explored} "
                f"schedules):\n" + failure.describe(exploration.scenario),
                failure.schedule.record(),
            )
            summary = f"lease.interleavings: {failure.problem} ({exploration.scenario.name})"
            evidence = schedule_evidence(failure.ops, summary, STEP_NS, "process",
                                         exploration.scenario.initial)  # fmt: skip
            raise attach(error, evidence)
        done.append(exploration)
    explored = sum(e.explored for e in done)
    if not explored:
        not_checked("0 schedules explored", "use the ci or deep profile")
    pruned = sum(e.pruned + e.cut for e in done)
    checked(
        f"{_scope(done)}; {explored} schedules, {pruned} pruned",
        scenarios=len(done), processes=max(e.scenario.processes for e in done),
        statements=max(e.points for e in done),
        preemptions={e.scenario.name: e.bound for e in done}, schedules=explored, pruned=pruned,
    )  # fmt: skip
