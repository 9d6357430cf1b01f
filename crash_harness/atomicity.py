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

One fork per kill: the process that reopens a killed case's file and claims is the one a
later case then kills (it never had that file open before the kill). Its commands travel
with its task (the claim on an earlier case's file, ``LANES``, then its own case's
operation on a file built before the fork), and it blocks only at the point it is killed
in, reporting the points before it as passed: the harness reads the same messages and
checks the same things as when it answered *go* at every point, with one wake-up of the
child per kill instead of one per command and point.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from leasecheck.crash_harness._evidence import HistoryRecorder, at_of, owner_of
from leasecheck.crash_harness._ops import agrees, expect
from leasecheck.crash_harness._queue_files import (
    QueueFiles,
    Scenario,
    StoredFile,
    check_opened,
    read_stored_open,
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


LANES: Final = 2
"""Children at work at once: while the harness checks one case, the next case's child
already runs (both cores busy). With more than one lane, the child of case *k + lanes*
is forked while case *k*'s child dies (the kernel tears its memory down before it
releases its locks, and the harness would only wait), so it makes the next claim on
the file of case *k - 1*, the last one checked then: the claim lags *lanes + 1* cases.
With one lane the child of case *k* is forked after case *k - 1* is checked and claims
on that file (the reference order, one child at a time)."""


@dataclass(frozen=True)
class _Case:
    """One generated case: the world before the op, the op, the point it is killed at."""

    label: str
    world: World
    op: LeaseOp
    point: str


@dataclass
class _Lane:
    """A forked child: its case, the file holding that case's state, the next claim it
    makes first (on an earlier case's file) and the command it runs then."""

    child: Child
    case: _Case
    path: Path
    claim: _NextClaim | None
    run: tuple[Any, ...]


def check_every_point(
    module: ModuleType,
    directory: Path,
    states_per_point: int,
    seed: int,
    deadline_s: float = DEFAULT_DEADLINE_S,
    lanes: int = LANES,
) -> KillTable:
    """Run every case of ``POINT_CASES`` from ``states_per_point`` generated states.

    ``deadline_s`` bounds every wait for a child (a target that hangs is named after it).
    One fork per kill: the child that is killed in a case first makes the next claim on
    the file of an earlier case, which it has never opened (``session_body``; which
    case: ``LANES``). ``lanes`` children run at once; the cases, and the order in which
    a failure is found, are those of one child at a time (``lanes=1``): the same table,
    the same first failure.
    """
    rng = random.Random(f"{PROPERTY}:{seed}")
    table = KillTable()
    cases = _cases(rng, states_per_point)
    with Engine(deadline_s) as engine:
        files = QueueFiles(engine, module, directory)
        killed: deque[_NextClaim] = deque()  # checked, their next claim not yet sent
        running: deque[_Lane] = deque()
        ready: list[tuple[_Case, Path]] = []  # the next case and its file, built ahead

        def prepare_next() -> None:
            """Draw the next case and build its file (done while a killed child dies)."""
            if not ready and (case := next(cases, None)) is not None:
                ready.append((case, files.fresh(case.world.state)))

        def fork_next() -> None:
            prepare_next()
            if not ready:
                return
            case, path = ready.pop()
            run = ("op", str(path), case.op, case.point)  # a str unpickles cheaper in the child
            claim = killed.popleft() if killed else None
            first = [] if claim is None else [_claim_command(claim)]
            name = f"{case.op.kind}@{case.point}"
            child = engine.fork(name, session_body(module), [*first, run])
            running.append(_Lane(child, case, path, claim, run))

        def check_claims_left() -> None:
            """The next claims not checked yet, in the order one child at a time makes
            them: those the running children make first, then those no child was sent
            (one more child makes them)."""
            for later in running:
                if later.claim is not None:
                    _next_claim(engine, files, later.child, later.claim, [later.run])
            if killed:
                stop = ("stop", None, None)
                commands = [*map(_claim_command, killed), stop]
                last = engine.fork("next-claim", session_body(module), commands)
                for index, case_left in enumerate(killed, 1):
                    last = _next_claim(engine, files, last, case_left, commands[index:])
                last.outcome("the end of the last next-claim child")

        ahead = lanes > 1  # fork the next child while a killed one dies (LANES)
        meanwhile = fork_next if ahead else prepare_next
        try:
            for _ in range(lanes):
                fork_next()
            while running:
                lane = running.popleft()
                case = lane.case
                child = lane.child
                if lane.claim is not None:
                    child = _next_claim(engine, files, child, lane.claim, [lane.run])
                try:
                    scenario = Scenario(PROPERTY, seed)
                    done = _kill_case(
                        lane.path, child, case.world, case.op, case.point, scenario, meanwhile
                    )
                except AssertionError:
                    # One child at a time checks the next claims on the files of the cases
                    # before this one first: a failure there is the one to report.
                    check_claims_left()
                    raise
                killed.append(done)
                table.kills[case.label] += 1
                if not ahead:
                    fork_next()
            check_claims_left()
        finally:  # the readers of files whose next claim never came (a failure on the way)
            for left in [*killed, *(lane.claim for lane in running if lane.claim)]:
                left.reader.close()
        table.forks = engine.forks
    return table


def _cases(rng: random.Random, states_per_point: int) -> Iterator[_Case]:
    """Every (operation, point) of ``POINT_CASES``, ``states_per_point`` times, each from a
    generated state (drawn in this order, whatever runs at once)."""
    for name, outcome, point in POINT_CASES:
        for _ in range(states_per_point):
            history = random_history(rng, rng.randint(0, 14), seeded=True)
            world, op = prepare(rng, history, name, outcome)
            yield _Case(KillTable.label(name, outcome, point), world, op, point)


@dataclass(frozen=True)
class _NextClaim:
    """A case killed and checked, whose reopened file waits for the next claim."""

    path: Path
    now: int
    state: Snapshot
    scenario: Scenario
    record: HistoryRecorder
    reader: StoredFile
    """The harness's connection that read the file after the kill, kept for the read after
    the next claim (closed then, or when the loop ends)."""


def _kill_case(
    path: Path,
    child: Child,
    world: World,
    op: LeaseOp,
    point: str,
    scenario: Scenario,
    meanwhile: Callable[[], None] | None = None,
) -> _NextClaim:
    """Check case ``op``@``point`` on ``path`` (holding ``world.state``): ``child`` has
    been sent the command to run ``op`` there; it is killed at ``point`` (``meanwhile``
    runs while it dies)."""
    before = world.state
    expected = expect(op, before)
    assert point in expected.points, f"model: {op.describe()} never passes {point!r}"
    index = expected.points.index(point)
    committed = index >= expected.committed_at
    scenario.add(
        f"the model ran {len(world.history)} operations from {world.origin()}: "
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
        passed = _run_to(child, point, op, before)
        if tuple(passed) != expected.points[:index]:
            raise AssertionError(
                f"{op.describe()} called the hooks {passed} before {point!r}; "
                f"lease-worker.md orders them {list(expected.points[: index + 1])}"
            )
        child.kill(meanwhile)
        record.event("kill", owner_of(op), at_of(op), f"SIGKILL in {point} ({_when(committed)})")
        stored, reader = read_stored_open(path, f"after the SIGKILL at {point!r}")
        wanted = expected.state if committed else before
        record.model_state = wanted
        record.rows("model", wanted.jobs, at_of(op))
        record.stored(stored, at_of(op))
        try:
            _check_stored(op, point, committed, before, wanted, stored)
        except AssertionError:
            reader.close()
            raise
    except AssertionError as error:
        evidence = record.evidence(str(error).splitlines()[0])
        raise attach(scenario.fail(str(error)), evidence) from error
    return _NextClaim(path, world.now, wanted, scenario, record, reader)


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


def _claim_command(case: _NextClaim) -> tuple[str, str, LeaseOp]:
    """The session command for the next claim on ``case``'s reopened file."""
    return ("claim", str(case.path), _claim_of(case))


def _claim_of(case: _NextClaim) -> LeaseOp:
    return LeaseOp.of("claim", "next", case.now, 1000)


def _next_claim(
    engine: Engine, files: QueueFiles, child: Child, case: _NextClaim, then: list[Any]
) -> Child:
    """A new process reopens the killed case's file and claims (``child``, sent
    ``_claim_command(case)`` and then the commands ``then``): the result and state the
    model gives. The child that is ready for its next command (a fresh one sent
    ``then``, if the claim ended the first)."""
    try:
        ended = _check_next_claim(child, case)
    except AssertionError as error:
        evidence = case.record.evidence(str(error).splitlines()[0])
        raise attach(case.scenario.fail(str(error)), evidence) from error
    finally:
        case.reader.close()
    files.remove(case.path)
    return engine.fork(child.name, session_body(files.module), then) if ended else child


def _check_next_claim(child: Child, case: _NextClaim) -> bool:
    """Check the next claim on ``case``'s file, made by ``child``; True if that ended it."""
    claim = _claim_of(case)
    case.scenario.add(
        f"a new process reopens the file with open_queue and calls {claim.describe()}"
    )
    expected = expect(claim, case.state)
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
    stored = case.reader.read("after the next claim")
    if stored != expected.state:
        raise AssertionError(
            f"after the next {claim.describe()} the stored state is not the model's\n"
            + side_by_side("model", expected.state, "stored", stored)
        )
    return isinstance(claimed, ChildResult)
