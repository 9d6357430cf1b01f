"""Kill at every fault point: each operation is all-or-nothing across a SIGKILL.

For every (operation, fault point) of lease-worker.md — claim at after-claim and
after-commit; finish with each outcome at after-finish and after-commit; redrive at
after-audit, after-redrive and after-commit — and for many generated starting
states, a forked child opens a queue file holding that state, runs the operation
and is SIGKILLed while its ``fault`` hook blocks at the point. The harness then
reopens the file and checks, against the model:

- ``PRAGMA integrity_check`` is ok and every job id is still there;
- the stored state is exactly the model's state *before* the operation when the
  point is before COMMIT (a rollback, the hot journal undone), and exactly the state
  *after* it at ``after-commit``;
- the hooks before the point were called in the spec's order;
- the next ``claim`` on the reopened file (a new process, the target's
  ``open_queue``) returns what the model says and leaves the model's state.

One fork per kill: the process that reopens a killed case's file and claims is the
one the next case then kills (it never had that file open before the kill).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from leasecheck.crash_harness._evidence import HistoryRecorder, at_of, owner_of
from leasecheck.crash_harness._ops import agrees, expect
from leasecheck.crash_harness._queue_files import (
    QueueFiles,
    Scenario,
    check_opened,
    read_stored,
    session_body,
    side_by_side,
)
from leasecheck.crash_harness._states import World, prepare, random_history
from leasecheck.crash_harness.engine import DEFAULT_DEADLINE_S, Child, ChildResult, Engine
from leasecheck.models.contracts import Snapshot
from leasecheck.models.evidence import attach
from leasecheck.models.lease_ops import LeaseOp

__all__ = ["POINT_CASES", "KillTable", "check_every_point"]

PROPERTY = "lease.crash-points"
POINT_CASES: tuple[tuple[str, str, str], ...] = (
    ("claim", "", "after-claim"),
    ("claim", "", "after-commit"),
    *(
        ("finish", outcome, point)
        for outcome in ("ok", "retry", "permanent")
        for point in ("after-finish", "after-commit")
    ),
    ("redrive", "", "after-audit"),
    ("redrive", "", "after-redrive"),
    ("redrive", "", "after-commit"),
)
"""(operation, finish outcome or '', fault point): every point of every operation."""


@dataclass
class KillTable:
    """How many SIGKILLs landed at each (operation, point), each one checked."""

    kills: Counter[str] = field(default_factory=Counter)
    forks: int = 0

    @staticmethod
    def label(name: str, outcome: str, point: str) -> str:
        return f"{name}({outcome})@{point}" if outcome else f"{name}@{point}"

    @property
    def total(self) -> int:
        return sum(self.kills.values())

    def render(self) -> str:
        width = max(map(len, self.kills), default=0)
        rows = [f"  {label:<{width}}  {count}" for label, count in self.kills.items()]
        return "\n".join([*rows, f"  {'total':<{width}}  {self.total}"])


def check_every_point(
    module: ModuleType,
    directory: Path,
    states_per_point: int,
    seed: int,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> KillTable:
    """Run every case of ``POINT_CASES`` from ``states_per_point`` generated states.

    ``deadline_s`` bounds every wait for a child (a target that hangs is named after it).
    One fork per kill: the child that is killed in case *k* first makes the next claim
    on the file of case *k - 1*, which it has never opened (``session_body``).
    """
    rng = random.Random(f"{PROPERTY}:{seed}")
    table = KillTable()
    with Engine(deadline_s) as engine:
        files = QueueFiles(engine, module, directory)
        pending: _NextClaim | None = None
        for name, outcome, point in POINT_CASES:
            for _ in range(states_per_point):
                world, op = prepare(
                    rng, random_history(rng, rng.randint(0, 14), seeded=True), name, outcome
                )
                child = engine.fork(f"{op.kind}@{point}", session_body(module))
                if pending is not None:
                    child = _next_claim(engine, files, child, pending)
                pending = _kill_case(files, child, world, op, point, Scenario(PROPERTY, seed))
                table.kills[KillTable.label(name, outcome, point)] += 1
        if pending is not None:
            last = _next_claim(
                engine, files, engine.fork("next-claim", session_body(module)), pending
            )
            last.answer(("stop", None, None))
            last.outcome("the end of the last next-claim child")
        table.forks = engine.forks
    return table


@dataclass(frozen=True)
class _NextClaim:
    """A case killed and checked, whose reopened file waits for the next claim."""

    path: Path
    now: int
    state: Snapshot
    scenario: Scenario
    record: HistoryRecorder


def _kill_case(
    files: QueueFiles, child: Child, world: World, op: LeaseOp, point: str, scenario: Scenario
) -> _NextClaim:
    before = world.state
    expected = expect(op, before)
    assert point in expected.points, f"model: {op.describe()} never passes {point!r}"
    index = expected.points.index(point)
    committed = index >= expected.committed_at
    path = files.fresh(before)
    scenario.add(
        f"the model ran {len(world.history)} operations from an empty queue: "
        + "; ".join(o.describe() for o in world.history)
    )
    scenario.add("that state is written to a fresh queue file (the target's open_queue)")
    scenario.add(f"a child process calls {op.describe()}")
    scenario.add(f"it is SIGKILLed inside fault({point!r}), {_when(committed)}")
    record = HistoryRecorder(before, at_of(op))
    record.ran(op, None, expected=expected, advance_model=False)
    kept = f"kept: the state after {op.kind}" if committed else f"the state before {op.kind}"
    record.answered(f"SIGKILLed in fault({point!r})", kept)
    try:
        child.answer(("op", path, op))
        passed = _run_to(child, point, op, before)
        if tuple(passed) != expected.points[:index]:
            raise AssertionError(
                f"{op.describe()} called the hooks {passed} before {point!r}; "
                f"lease-worker.md orders them {list(expected.points[: index + 1])}"
            )
        child.kill()
        record.event("kill", owner_of(op), at_of(op), f"SIGKILL in {point} ({_when(committed)})")
        stored = read_stored(path, f"after the SIGKILL at {point!r}")
        wanted = expected.state if committed else before
        record.model_state = wanted
        record.rows("model", wanted.jobs, at_of(op))
        record.stored(stored, at_of(op))
        _check_stored(op, point, committed, before, wanted, stored)
    except AssertionError as error:
        evidence = record.evidence(str(error).splitlines()[0])
        raise attach(scenario.fail(str(error)), evidence) from error
    return _NextClaim(path, world.now, wanted, scenario, record)


def _run_to(child: Child, point: str, op: LeaseOp, before: Snapshot) -> list[str]:
    """Run the child to ``point``; an open_queue that changed the rows is named as such."""
    try:
        passed = child.run_to_point(point, op.describe())
    except AssertionError:
        check_opened(child.events, before)
        raise
    check_opened(child.events, before)
    return passed


def _when(committed: bool) -> str:
    return "after COMMIT" if committed else "before COMMIT"


def _check_stored(
    op: LeaseOp, point: str, committed: bool, before: Snapshot, wanted: Snapshot, stored: Snapshot
) -> None:
    lost = sorted({r.id for r in before.jobs} - {r.id for r in stored.jobs})
    if lost:
        raise AssertionError(f"jobs {lost} are gone after the SIGKILL at {point!r} of {op.kind}")
    if stored != wanted:
        which = "after" if committed else "before"
        rule = (
            "a kill after COMMIT must keep the committed operation"
            if committed
            else "a kill before COMMIT must roll the whole operation back"
        )
        raise AssertionError(
            f"after a SIGKILL at {point!r} ({_when(committed)}) the stored state is not the "
            f"model's state {which} {op.kind}; {rule}\n"
            + side_by_side(f"model, {which} {op.kind}", wanted, "stored", stored)
        )


def _next_claim(engine: Engine, files: QueueFiles, child: Child, case: _NextClaim) -> Child:
    """A new process reopens the killed case's file and claims: the result and state the
    model gives. The child that is ready for the next kill (a fresh one if the claim
    ended the first)."""
    try:
        ended = _check_next_claim(child, case)
    except AssertionError as error:
        evidence = case.record.evidence(str(error).splitlines()[0])
        raise attach(case.scenario.fail(str(error)), evidence) from error
    files.remove(case.path)
    return engine.fork(child.name, session_body(files.module)) if ended else child


def _check_next_claim(child: Child, case: _NextClaim) -> bool:
    """Check the next claim on ``case``'s file, made by ``child``; True if that ended it."""
    claim = LeaseOp.of("claim", "next", case.now, 1000)
    case.scenario.add(
        f"a new process reopens the file with open_queue and calls {claim.describe()}"
    )
    expected = expect(claim, case.state)
    child.answer(("claim", case.path, claim))
    waiting_for = f"{claim.describe()} on the reopened file"
    claimed = child.run_until(lambda m: m.kind == "event" and m.value[0] == "claimed", waiting_for)
    child.events.clear()  # what it saw opening that file is not the next case's concern
    outcome = claimed if isinstance(claimed, ChildResult) else claimed.value[1]
    case.record.ran(claim, outcome, expected=expected)
    if not agrees(outcome, expected):
        raise AssertionError(
            f"the next {claim.describe()} on the reopened file {outcome.describe()} "
            f"but the model {expected.describe()}; the state before it:\n" + case.state.describe()
        )
    stored = read_stored(case.path, "after the next claim")
    if stored != expected.state:
        raise AssertionError(
            f"after the next {claim.describe()} the stored state is not the model's\n"
            + side_by_side("model", expected.state, "stored", stored)
        )
    return isinstance(claimed, ChildResult)
