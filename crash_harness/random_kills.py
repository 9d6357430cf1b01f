"""Kill at random instants: whatever a SIGKILL interrupts, the file holds a prefix of history.

One queue file lives through the whole property. Again and again a forked child
opens it with the target's ``open_queue`` and runs a random history of operations
(drawn by the model as a user would: intake, dispatch, completion, redrive), sending
an acknowledgement with each result *without waiting* for the harness. The harness
picks a random acknowledgement and SIGKILLs the child as soon as it reads it, while
the child is already inside a later operation, anywhere in it: validating, inside
the transaction, inside COMMIT, after it. Then it drains the acknowledgements that
made it into the pipe and reopens the file:

- every acknowledged result must be the model's result;
- the stored state must be the model's state after the acknowledged prefix, or after
  that prefix plus the one operation that was in flight — nothing else.

The next child continues from whichever of the two it found.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from leasecheck.crash_harness._evidence import HistoryRecorder, at_of, owner_of
from leasecheck.crash_harness._ops import Expected, agrees
from leasecheck.crash_harness._queue_files import (
    QueueFiles,
    Scenario,
    check_opened,
    read_stored,
    side_by_side,
)
from leasecheck.crash_harness._states import World, random_op, step
from leasecheck.crash_harness.engine import (
    FINAL_KINDS,
    Channel,
    Child,
    ChildResult,
    Engine,
    ErrorInfo,
    HarnessError,
    HarnessTimeout,
)
from leasecheck.crash_harness.zygote import Task
from leasecheck.models.contracts import JobRow, Snapshot
from leasecheck.models.evidence import Evidence, attach, evidence_of, shrunk_evidence
from leasecheck.models.lease_ops import LeaseOp
from leasecheck.models.shrinking import Budget, Shrunk, shrink
from leasecheck.targets.lease_target import read_snapshot

__all__ = ["RandomKillReport", "check_random_kills"]

PROPERTY = "lease.crash-random"


@dataclass
class RandomKillReport:
    kills: int = 0
    in_flight_kept: int = 0
    """Kills after which the in-flight operation turned out committed."""
    in_flight_lost: int = 0
    """Kills after which it had rolled back (or had not started writing)."""
    after_history: int = 0
    """Kills that found the child done with its whole history (nothing in flight)."""
    acknowledged: int = 0
    forks: int = 0

    def render(self) -> str:
        return (
            f"{self.kills} random kills checked, {self.acknowledged} acknowledged operations; "
            f"the operation in flight was kept {self.in_flight_kept} times, rolled back or not "
            f"started {self.in_flight_lost} times, none in flight {self.after_history} times"
        )


@dataclass(frozen=True)
class _Planned:
    op: LeaseOp
    expected: Expected
    world: World
    """The model's world after this operation."""


def _plan(rng: random.Random, world: World, length: int) -> list[_Planned]:
    plan = []
    for _ in range(length):
        op = random_op(rng, world)
        before = world
        world = step(rng, world, op)
        plan.append(_Planned(op, _expected_of(op, before), world))
    return plan


def _expected_of(op: LeaseOp, world: World) -> Expected:
    _, expected = world.apply(op)
    return expected


def _history_body(module: ModuleType, path: Path, ops: list[LeaseOp]) -> Callable[[Channel], None]:
    """Run ``ops`` in order, acknowledging each result without waiting; then wait to die.

    A ``Task``: the zygote forks it."""
    return Task(_run_history, (module, path, ops))


def _run_history(module: ModuleType, path: Path, ops: list[LeaseOp], channel: Channel) -> None:
    con = module.open_queue(str(path))
    channel.send("event", ("opened", read_snapshot(con)))
    for index, op in enumerate(ops):
        try:
            outcome = ChildResult(op.apply(module, con))
        except Exception as error:
            outcome = ChildResult(error=ErrorInfo.from_exception(error))
        channel.send("event", ("ack", index, outcome))
    channel.send("event", ("done", None))
    channel.receive()  # blocks until the SIGKILL: the kill always finds a live process


def check_random_kills(
    module: ModuleType, directory: Path, kills: int, seed: int
) -> RandomKillReport:
    """SIGKILL ``kills`` histories at random instants; check every reopened state."""
    rng = random.Random(f"{PROPERTY}:{seed}")
    report = RandomKillReport()
    with Engine() as engine:
        files = QueueFiles(engine, module, directory)
        path = files.fresh(Snapshot())
        world = World(now=rng.randint(0, 10**6))
        for number in range(1, kills + 1):
            plan = _plan(rng, world, rng.randint(4, 40))
            scenario = _scenario(seed, number, world, plan)
            trigger = rng.randint(0, len(plan) // 2)  # 0: on 'opened'; i: on the ack of op i-1
            try:
                reached = _kill_at(engine, module, path, plan, world, trigger, scenario, report)
            except AssertionError as error:
                shrunk = _Shrink(engine, files, module, world, seed, number).run(plan, error)
                raise shrunk or scenario.fail(str(error)) from error
            # The next history starts where the first ``trigger`` acknowledged operations
            # leave the queue, whatever else the child finished before the SIGKILL landed:
            # so which histories a run plays depends on the seed, never on the scheduler.
            settled = plan[trigger - 1].world if trigger else world
            if reached.state != settled.state:
                files.remove(path)
                path = files.fresh(settled.state)
            world = settled
        files.remove(path)
        report.forks = engine.forks
    return report


def _scenario(seed: int, number: int, world: World, plan: list[_Planned]) -> Scenario:
    scenario = Scenario(PROPERTY, seed)
    scenario.add(f"kill #{number}: the queue file holds the state the model reached so far")
    scenario.add("a child opens it with open_queue and runs, acknowledging each result:")
    for index, planned in enumerate(plan):
        scenario.add(f"   op {index}: {planned.op.describe()}")
    return scenario


def _kill_at(
    engine: Engine,
    module: ModuleType,
    path: Path,
    plan: list[_Planned],
    world: World,
    trigger: int,
    scenario: Scenario,
    report: RandomKillReport,
    wait_s: float | None = None,
) -> World:
    """Run ``plan`` in a child, SIGKILL it on message ``trigger`` (each message awaited
    ``wait_s``, or the engine's deadline), judge the file."""
    child = engine.fork(f"history-{report.kills + 1}", _history_body(module, path, _ops(plan)))
    try:
        seen = _read_until(child, trigger, wait_s)
    except HarnessTimeout:
        child.kill()  # still running: it does not outlive this kill
        raise
    seen += [m.value for m in child.kill()]
    try:
        return _judge(path, plan, world, seen, trigger, scenario, report)
    except AssertionError as error:
        attach(error, _evidence(world, plan, seen, str(error)))
        raise


def _judge(
    path: Path,
    plan: list[_Planned],
    world: World,
    seen: list[Any],
    trigger: int,
    scenario: Scenario,
    report: RandomKillReport,
) -> World:
    """The world the reopened file is in: after the acknowledged prefix, or after the
    operation in flight too; raises if it is neither."""
    check_opened(seen, world.state)
    acks = _acks(seen, plan)
    scenario.add(
        f"the harness SIGKILLs the child when it reads message {trigger}; "
        f"{len(acks)} operations were acknowledged"
    )
    report.kills += 1
    report.acknowledged += len(acks)
    before = plan[len(acks) - 1].world if acks else world
    stored = read_stored(path, f"after kill #{report.kills}")
    if len(acks) == len(plan):
        report.after_history += 1
    if stored == before.state:
        report.in_flight_lost += len(acks) < len(plan)
        return before
    if len(acks) < len(plan) and stored == plan[len(acks)].world.state:
        report.in_flight_kept += 1
        return plan[len(acks)].world
    raise AssertionError(_mismatch(plan, acks, before.state, stored))


def _evidence(world: World, plan: list[_Planned], seen: list[Any], message: str) -> Evidence:
    """The acknowledged operations (the target's results beside the model's), the one in
    flight when the SIGKILL came, and the first that disagreed or the kill as the step
    where they part."""
    opened = next((rest[0] for kind, *rest in seen if kind == "opened"), world.state)
    record = HistoryRecorder(world.state, world.now, opened)
    record.step(
        "child", "open_queue(path)", "open_queue", world.now,
        target=f"left {len(opened.jobs)} job rows", model=f"keeps {len(world.state.jobs)}",
    )  # fmt: skip
    acks = [rest[1] for kind, *rest in seen if kind == "ack"]
    parted = record.last if opened != world.state else None
    for planned, got in zip(plan, acks, strict=False):
        record.ran(planned.op, got, expected=planned.expected)
        if parted is None and not agrees(got, planned.expected):
            parted = record.last
    if parted is None and len(acks) < len(plan):
        flying = plan[len(acks)].op
        record.ran(flying, None, expected=plan[len(acks)].expected, advance_model=False)
        record.event("kill", owner_of(flying), at_of(flying), "SIGKILL (this op in flight)")
    elif parted is None:
        record.event("kill", "queue", at_of(plan[-1].op), "SIGKILL (history done)")
    return record.evidence(message.splitlines()[0], parted, ops=str(len(plan)))


@dataclass
class _Shrink:
    """Delta debugging of a failing history (``models.shrinking``): drop the operations
    after the one in flight, then chunks and single operations, while the shorter
    history, replanned on the model from the same state and killed (``attempt``), still
    fails. Bounded by ``BUDGET``."""

    engine: Engine
    files: QueueFiles
    module: ModuleType
    world: World
    seed: int
    number: int
    BUDGET = Budget(runs=60, seconds=8.0)

    ROWS = Budget(runs=40, seconds=6.0)
    """For dropping the starting state's job rows, after the operations are shrunk."""

    def run(self, plan: list[_Planned], error: AssertionError) -> AssertionError | None:
        """The failure of the shortest history found, from the smallest starting state
        found, with its scenario; None if nothing smaller failed."""
        ops = [planned.op for planned in plan][: _in_flight(error, plan) + 1]
        shrunk = shrink(ops, error, self.attempt, self.BUDGET)
        rows = len(self.world.state.jobs)
        failure = self._drop_rows(list(shrunk.items), shrunk.failure)
        if failure is error:  # no smaller history, from no smaller state, failed
            return None
        shrunk = replace(shrunk, failure=failure)
        if self.kept < rows and len(shrunk.items) > 1:  # fewer jobs: fewer operations matter
            again = shrink(list(shrunk.items), failure, self.attempt, self.BUDGET)
            shrunk = replace(again, before=shrunk.before)
        return self._reported(shrunk, len(plan), rows)

    kept: int = -1
    """Job rows of the starting state the reported history still needs."""

    def _drop_rows(self, ops: list[LeaseOp], failure: AssertionError) -> AssertionError:
        """A kill late in a long run starts from the dozens of jobs earlier kills left:
        drop the job rows (and their redrive rows) the failure does not need, so the
        reported scenario shows only the jobs it is about."""
        start = self.world

        def fails(jobs: list[JobRow]) -> AssertionError | None:
            self.world = _with_jobs(start, jobs)
            return self.attempt(ops)

        rows = shrink(list(start.state.jobs), failure, fails, self.ROWS)
        self.world = _with_jobs(start, list(rows.items))
        self.kept = len(rows.items)
        return rows.failure

    SETTLED_WAIT_S = 2.0
    """How long a settled kill waits for each acknowledgement (the original kill, with
    the last operation in flight, never waited for that one: it may hang)."""

    def attempt(self, ops: list[LeaseOp]) -> AssertionError | None:
        """Does the history ``ops`` fail, killed with its last operation in flight or, if
        that holds, once every operation is acknowledged?

        With the last operation in flight, whether it ran before the SIGKILL landed is a
        race, so that kill alone would make the shrink depend on the machine's load. The
        settled kill's outcome is the target's alone: a failure that needs no operation in
        flight (a wrong acknowledgement, a wrong state after an acknowledged operation)
        then fails every attempt, however loaded the machine is. A child that hangs or
        dies before acknowledging the last operation (``SETTLED_WAIT_S``) says nothing."""
        plan = _replan(self.world, ops)
        in_flight = self._killed(plan, len(plan) - 1)
        if in_flight is not None:
            return in_flight
        try:
            return self._killed(plan, len(plan), settled=True)
        except HarnessError:
            return None

    def _killed(
        self, plan: list[_Planned], trigger: int, settled: bool = False
    ) -> AssertionError | None:
        """The failure of ``plan`` killed on message ``trigger``, or None; with ``settled``
        the harness's own errors (a child that hung or died) are raised, not returned."""
        path = self.files.fresh(self.world.state)
        scenario = _scenario(self.seed, self.number, self.world, plan)
        wait_s = self.SETTLED_WAIT_S if settled else None
        try:
            _kill_at(self.engine, self.module, path, plan, self.world, trigger,
                     scenario, RandomKillReport(), wait_s)  # fmt: skip
        except AssertionError as error:  # a HarnessError is one too
            if settled and isinstance(error, HarnessError):
                raise
            return error
        finally:
            self.files.remove(path)
        return None

    def _reported(
        self, shrunk: Shrunk[LeaseOp, AssertionError], length: int, rows: int
    ) -> AssertionError:
        plan = _replan(self.world, list(shrunk.items))
        scenario = _scenario(self.seed, self.number, self.world, plan)
        fewer = f" and from {rows} to {self.kept} job rows in the file" if self.kept < rows else ""
        scenario.add(
            f"shrunk from {length} to {shrunk.after} operations{fewer}: the same kill of this "
            f"shorter history (with its last operation in flight, or once it is acknowledged)"
            f" fails too"
        )
        failure = scenario.fail(str(shrunk.failure))
        found = evidence_of(shrunk.failure)
        if found is None:
            return failure
        return attach(failure, shrunk_evidence(found, length))


def _with_jobs(world: World, jobs: list[JobRow]) -> World:
    """``world`` whose file holds only ``jobs`` (and the redrive rows of those jobs)."""
    kept = {row.id for row in jobs}
    redrives = tuple(row for row in world.state.redrives if row.id in kept)
    return replace(world, state=replace(world.state, jobs=tuple(jobs), redrives=redrives))


def _in_flight(error: AssertionError, plan: list[_Planned]) -> int:
    """The index of the last operation that may have run (the one in flight, or the last
    one the evidence shows), so the operations after it can be dropped at once."""
    found = evidence_of(error)
    ran = sum(1 for step in found.steps if step.kind != "open_queue") if found else len(plan)
    return min(max(ran - 1, 0), len(plan) - 1)


def _replan(world: World, ops: list[LeaseOp]) -> list[_Planned]:
    """``ops`` with the model's verdict on each, applied in order from ``world``."""
    plan = []
    for op in ops:
        before = world
        world, expected = before.apply(op)
        plan.append(_Planned(op, expected, world))
    return plan


def _ops(plan: list[_Planned]) -> list[LeaseOp]:
    return [planned.op for planned in plan]


def _read_until(child: Child, trigger: int, wait_s: float | None = None) -> list[Any]:
    """Read the child's messages up to and including message number ``trigger`` (each
    within ``wait_s``, or the engine's deadline)."""
    seen: list[Any] = []
    while len(seen) <= trigger:
        message = child.next(f"acknowledgement {len(seen)} of the history", wait_s)
        if message.kind in FINAL_KINDS or message.kind != "event":
            raise AssertionError(
                f"the history child sent {message.kind} {message.value!r} instead of an "
                f"acknowledgement; a target must not call fault when it is None"
            )
        seen.append(message.value)
    return seen


def _acks(seen: list[Any], plan: list[_Planned]) -> list[ChildResult]:
    """The acknowledged outcomes in order, each checked against the model."""
    acks: list[ChildResult] = []
    for kind, *rest in seen:
        if kind != "ack":
            continue
        index, outcome = rest
        assert index == len(acks), f"acknowledgement {index} arrived out of order"
        expected = plan[index].expected
        if not agrees(outcome, expected):
            raise AssertionError(
                f"op {index} {plan[index].op.describe()} {outcome.describe()} on the target "
                f"but the model {expected.describe()}"
            )
        acks.append(outcome)
    return acks


def _mismatch(
    plan: list[_Planned], acks: list[ChildResult], before: Snapshot, stored: Snapshot
) -> str:
    done = len(acks)
    text = (
        f"after the SIGKILL the stored state is neither the model's state after the "
        f"{done} acknowledged operations"
    )
    if done < len(plan):
        in_flight = plan[done]
        text += f" nor after the in-flight op {done} {in_flight.op.describe()}"
        extra = "\n" + in_flight.world.state.describe()
    else:
        extra = ""
    return (
        text
        + "\n"
        + side_by_side(f"model after {done} operations", before, "stored", stored)
        + (f"\nmodel after {done + 1} operations:{extra}" if extra else "")
    )
