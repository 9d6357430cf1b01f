"""Single winner, deterministically: two processes claim, held exactly where it matters.

lease-worker.md: claim picks and leases its job inside one ``BEGIN IMMEDIATE``, so two
dispatchers never hold the same job and generation, and a finish is refused once
the lease is someone else's. Three schedules, each against generated queue states,
each judged by the model (some serial order of the calls must give every result
and the stored state; a claim that gave up on the lock did nothing):

- **held**: A is held inside its fault hook at ``after-claim`` (holding the write
  lock) while B claims; SQLite makes B wait and give up after ``timeout=1``, or B
  returns — either way it must not win A's (job, token). Then A is released or
  SIGKILLed.
- **at B's BEGIN**: B's connection reports every SQL statement (a trace callback)
  and is held at its k-th ``BEGIN``; A claims and is released or SIGKILLed; then B
  goes on. A claim that read its job before taking the lock is caught here at once.
- **takeover**: when A won, B claims at A's ``lease_until`` until it owns A's job,
  then A finishes with its own clock still inside its lease (refused: the job is
  B's), B completes, and A tries again (refused: never overwrites B's completion).
"""

from __future__ import annotations

import random
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from leasecheck.crash_harness._evidence import HistoryRecorder, at_of, owner_of
from leasecheck.crash_harness._ops import agrees, expect
from leasecheck.crash_harness._queue_files import (
    QueueFiles,
    Scenario,
    op_body,
    read_stored,
    sequence_body,
    side_by_side,
)
from leasecheck.crash_harness._serial import Call, double_leases, double_wins, explain, unexplained
from leasecheck.crash_harness._states import prepare, random_history
from leasecheck.crash_harness.engine import GO, Child, ChildResult, Engine, Message
from leasecheck.models.contracts import JobRow, RedriveRow, Snapshot
from leasecheck.models.evidence import Evidence, attach, shrunk_evidence
from leasecheck.models.lease_ops import LeaseOp
from leasecheck.models.shrinking import Budget, shrink

__all__ = ["SingleWinnerReport", "check_single_winner"]

PROPERTY = "lease.single-winner"


@dataclass
class SingleWinnerReport:
    scenarios: Counter[str] = field(default_factory=Counter)
    busy: int = 0
    """Claims that gave up on the lock (SQLite busy): allowed, counted."""
    stale_refused: int = 0
    """Finishes from a dispatcher whose job had been taken over, each refused."""

    def render(self) -> str:
        kinds = ", ".join(f"{name} {count}" for name, count in sorted(self.scenarios.items()))
        return (
            f"single-winner schedules: {kinds}; busy claims {self.busy}; "
            f"stale finishes refused {self.stale_refused}"
        )


@dataclass
class _Case:
    """One schedule on one generated state."""

    engine: Engine
    module: ModuleType
    path: Path
    before: Snapshot
    claim_a: LeaseOp
    claim_b: LeaseOp
    scenario: Scenario
    ran: list[tuple[str, LeaseOp, ChildResult | None]] = field(default_factory=list)
    """What each process ran and got, in the order they answered (the evidence)."""
    killed: bool = False

    def fork_a(self) -> Child:
        return self.engine.fork("A", op_body(self.module, self.path, self.claim_a))

    def hold_a(self) -> tuple[Child, ChildResult | None]:
        """A runs to after-claim and stays there; or ends first (its outcome)."""
        child = self.fork_a()
        reached = child.run_until(
            lambda m: m.kind == "point" and m.value == "after-claim", "A's claim to after-claim"
        )
        return child, reached if isinstance(reached, ChildResult) else None

    def resolve_a(self, child: Child, release: bool) -> ChildResult | None:
        if release:
            self.scenario.add("A is released: it commits and returns")
            child.answer(GO)
            return child.outcome("A's claim to return after it was released")
        self.scenario.add("A is SIGKILLed inside fault('after-claim'), before COMMIT")
        self.killed = True
        child.kill()
        return None


def check_single_winner(
    module: ModuleType, directory: Path, rounds: int, seed: int
) -> SingleWinnerReport:
    """``rounds`` times (BEGIN 1, 2) x (release, kill), then the held schedule twice."""
    rng = random.Random(f"{PROPERTY}:{seed}")
    report = SingleWinnerReport()
    schedules = [
        ("begin", k, release) for _ in range(rounds) for k in (1, 2) for release in (True, False)
    ] + [("held", 0, True), ("held", 0, False)]  # last: each waits out B's busy timeout
    with Engine() as engine:
        files = QueueFiles(engine, module, directory)
        for schedule in schedules:
            case = _new_case(engine, files, module, rng, seed)
            try:
                _run(case, schedule, report)
            except AssertionError as error:
                failure = _Shrink(engine, files, module, seed, schedule).run(case, error)
                raise failure from error
            kind, k, release = schedule
            label = f"{kind}{k or ''}-{'release' if release else 'kill'}"
            report.scenarios[label] += 1
            files.remove(case.path)
    return report


_Schedule = tuple[str, int, bool]
"""(kind, k, release): 'held' or 'begin', B's BEGIN number, release A or SIGKILL it."""


def _run(case: _Case, schedule: _Schedule, report: SingleWinnerReport) -> None:
    """Run one schedule on ``case``; raises AssertionError on a violation."""
    kind, k, release = schedule
    calls = _held(case, release) if kind == "held" else _at_begin(case, k, release)
    report.busy += sum(call.outcome.busy for call in calls)
    stored = _judge(case, calls)
    a_won = calls[0].who == "A" and isinstance(calls[0].outcome.value, dict)
    if a_won:
        report.stale_refused += _takeover(case, calls[0].outcome.value, stored)


def _failure(case: _Case, error: AssertionError) -> AssertionError:
    return attach(case.scenario.fail(str(error)), _evidence(case, str(error)))


Row = JobRow | RedriveRow


@dataclass
class _Shrink:
    """Delta debugging of a failing case's starting state (``models.shrinking``): drop
    job and redrive rows (each the result of an operation that set the queue up) while
    the same schedule of the same two claims, on a fresh file holding the rest, still
    fails. Bounded by ``BUDGET``; spent only on failure."""

    engine: Engine
    files: QueueFiles
    module: ModuleType
    seed: int
    schedule: _Schedule
    BUDGET = Budget(runs=24, seconds=6.0)

    def run(self, case: _Case, error: AssertionError) -> AssertionError:
        """The failure of the smallest starting state found (the original if none)."""
        rows: list[Row] = [*case.before.jobs, *case.before.redrives]
        shrunk = shrink(rows, (case, error), lambda rest: self.attempt(case, rest), self.BUDGET)
        smallest, failed = shrunk.failure
        if smallest is not case:
            before, after = len(rows) + 2, shrunk.after + 2  # the rows, and the two claims
            smallest.scenario.add(_sentence(before, after))
            found = _evidence(smallest, str(failed))
            return attach(
                smallest.scenario.fail(str(failed)), shrunk_evidence(found, before, after)
            )
        return _failure(case, error)

    def attempt(self, case: _Case, rows: list[Row]) -> tuple[_Case, AssertionError] | None:
        """The case on a fresh file holding only ``rows``, and its failure, if it fails."""
        state = Snapshot(
            tuple(r for r in rows if isinstance(r, JobRow)),
            tuple(r for r in rows if isinstance(r, RedriveRow)),
        )
        try:
            path = self.files.fresh(state)
        except sqlite3.Error:  # a redrive row without its job: not a state a queue can hold
            return None
        again = _Case(self.engine, self.module, path, state, case.claim_a, case.claim_b,
                      _scenario(self.seed, state))  # fmt: skip
        try:
            _run(again, self.schedule, SingleWinnerReport())
        except AssertionError as error:
            return again, error
        finally:
            self.files.remove(path)
        return None


def _sentence(before: int, after: int) -> str:
    return (
        f"shrunk from {before} to {after} operations (the starting state's rows and the two "
        f"claims): the same schedule on this smaller state fails too"
    )


def _scenario(seed: int, state: Snapshot) -> Scenario:
    scenario = Scenario(PROPERTY, seed)
    scenario.add(f"a queue file holds a generated state:\n{state.describe()}")
    return scenario


def _new_case(
    engine: Engine, files: QueueFiles, module: ModuleType, rng: random.Random, seed: int
) -> _Case:
    world, _ = prepare(rng, random_history(rng, rng.randint(0, 10)), "claim")
    lease = rng.randint(200, 1500)
    scenario = _scenario(seed, world.state)
    claim_a = LeaseOp.of("claim", "A", world.now, lease)
    claim_b = LeaseOp.of("claim", "B", world.now, lease)
    path = files.fresh(world.state)
    return _Case(engine, module, path, world.state, claim_a, claim_b, scenario)


def _held(case: _Case, release: bool) -> list[Call]:
    case.scenario.add(f"A calls {case.claim_a.describe()} and is held in fault('after-claim')")
    a, ended = case.hold_a()
    if ended is not None:
        raise AssertionError(
            f"A's {case.claim_a.describe()} {ended.describe()} without calling "
            f"fault('after-claim'), but the model gives it a job"
        )
    case.scenario.add(f"B calls {case.claim_b.describe()} while A holds the write lock")
    b = case.engine.fork("B", op_body(case.module, case.path, case.claim_b, hooked=False))
    b_outcome = b.outcome("B's claim while A is held at after-claim (timeout=1 should end it)")
    case.scenario.add(f"B's claim {b_outcome.describe()}")
    a_outcome = case.resolve_a(a, release)
    return _calls(case, a_outcome, b_outcome)


def _is_begin(message: Message) -> bool:
    return message.kind == "stmt" and str(message.value).lstrip().upper().startswith("BEGIN")


def _at_begin(case: _Case, k: int, release: bool) -> list[Call]:
    case.scenario.add(f"B calls {case.claim_b.describe()}, held at its BEGIN number {k}")
    traced = op_body(case.module, case.path, case.claim_b, hooked=False, traced=True)
    b = case.engine.fork("B", traced)
    b_outcome = _run_to_begin(b, k)
    a, a_ended = case.hold_a()
    case.scenario.add(f"A calls {case.claim_a.describe()} and is held in fault('after-claim')")
    a_outcome = a_ended if a_ended is not None else case.resolve_a(a, release)
    if b_outcome is None:
        case.scenario.add("B goes on")
        b.answer(GO)
        b_outcome = b.outcome("B's claim to return after it was let go")
    case.scenario.add(f"B's claim {b_outcome.describe()}")
    return _calls(case, a_outcome, b_outcome)


def _run_to_begin(b: Child, k: int) -> ChildResult | None:
    """Hold B at its k-th BEGIN (None), or B's outcome if it ended before that."""
    for number in range(1, k + 1):
        reached = b.run_until(_is_begin, f"B's claim to reach its BEGIN number {number}")
        if isinstance(reached, ChildResult):
            return reached
        if number < k:
            b.answer(GO)
    return None


def _calls(case: _Case, a: ChildResult | None, b: ChildResult) -> list[Call]:
    calls = [Call("A", case.claim_a, a)] if a is not None else []
    calls.append(Call("B", case.claim_b, b))
    case.ran += [(call.who, call.op, call.outcome) for call in calls]
    return calls


def _evidence(case: _Case, message: str) -> Evidence:
    """The claims as each process got them (the target's leases) beside the model's
    serial reading of them in the order they answered, the kill, and the takeover."""
    record = HistoryRecorder(case.before, at_of(case.claim_a))
    for who in ("A", "B"):
        record.actor(who, "process")
    if case.killed:
        record.step("A", case.claim_a.describe(), "claim", at_of(case.claim_a),
                    target="no answer: SIGKILLed in fault('after-claim')",
                    call=case.claim_a.to_json())  # fmt: skip
        record.event("kill", "A", at_of(case.claim_a), "A SIGKILLed before COMMIT")
    for who, op, got in case.ran:
        record.ran(op, got, who)
    rows = len(case.before.jobs) + len(case.before.redrives)
    return record.evidence(message.splitlines()[0], ops=str(rows + 2))


def _judge(case: _Case, calls: list[Call]) -> Snapshot:
    """No (job, token) won twice; some serial order explains results and stored state."""
    stored = read_stored(case.path, "after both claims")
    wins = double_wins(calls) + double_leases(calls)
    if wins:
        raise AssertionError("two processes won the same job at once: " + "; ".join(wins))
    if explain(case.before, calls, stored) is None:
        raise AssertionError(unexplained(case.before, calls, stored))
    return stored


def _takeover(case: _Case, ticket_a: dict[str, Any], state: Snapshot) -> int:
    """B takes A's job over after A's lease; A's late finishes must be refused. Returns the
    number of refused stale finishes (0 if B never reached A's job)."""
    later = ticket_a["lease_until"]
    ops, ticket_b = _takeover_claims(state, ticket_a["id"], later, case.claim_b.value("lease_ms"))
    if ticket_b is not None:
        a_now = case.claim_a.value("now_ms") + 1  # A's clock: still inside its own lease
        ops += [
            LeaseOp.of("finish", dict(ticket_a), "ok", min(a_now, later - 1)),
            LeaseOp.of("finish", dict(ticket_b), "ok", later),
            LeaseOp.of("finish", dict(ticket_a), "ok", min(a_now + 1, later - 1)),
        ]
    for op in ops:
        case.scenario.add(f"then, in one process: {op.describe()}")
    child = case.engine.fork("takeover", sequence_body(case.module, case.path, ops))
    outcome = child.outcome("the takeover sequence (claims by B, late finishes by A)")
    if outcome.raised:
        raise AssertionError(f"the takeover child {outcome.describe()}")
    case.ran += [(owner_of(op, "B"), op, got) for op, got in zip(ops, outcome.value, strict=True)]
    refused = 0
    for op, got in zip(ops, outcome.value, strict=True):
        expected = expect(op, state)
        if not agrees(got, expected):
            raise AssertionError(
                f"{op.describe()} {got.describe()} but the model {expected.describe()}"
                f"\nstate before it:\n{state.describe()}"
            )
        refused += (
            op.kind == "finish" and op.value("ticket") == ticket_a and expected.result is False
        )
        state = expected.state
    stored = read_stored(case.path, "after the takeover")
    if stored != state:
        raise AssertionError(
            "after the takeover the stored state is not the model's\n"
            + side_by_side("model", state, "stored", stored)
        )
    return refused


def _takeover_claims(
    state: Snapshot, job_id: str, now: int, lease: int
) -> tuple[list[LeaseOp], dict[str, Any] | None]:
    """Claims by B at ``now`` until the model gives B job ``job_id`` (at most 4 claims)."""
    ops: list[LeaseOp] = []
    for _ in range(4):
        op = LeaseOp.of("claim", "B", now, lease)
        expected = expect(op, state)
        ops.append(op)
        state = expected.state
        if not isinstance(expected.result, dict):
            break
        if expected.result["id"] == job_id:
            return ops, expected.result
    return ops, None
