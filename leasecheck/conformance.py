"""Conformance: every transition the lease explorer found, replayed against a target.

For each explored transition (a canonical source world, an operation with its fault
choice), the target's database is set to the source queue state (``write_snapshot``
on one tmpfs file, in one transaction, only when it differs from what is stored),
the same operation runs on the target with a fault hook that records every hook
point and raises at the chosen one, and the target's result, error kind, hook
points, stored state and open-transaction flag must equal the model's successor.
The target sees only the stored rows and the arguments, so transitions that differ
only in what the dispatchers hold are replayed once.

The replay's one connection first runs in SQLite's exclusive locking mode (``PRAGMA
locking_mode=EXCLUSIVE``): it keeps its lock on the file between transactions, so a
transaction neither takes and drops file locks, nor re-reads the file's header, nor
creates and deletes a journal (about 1.4x faster on tmpfs). No other connection
touches the file, so no result, error, hook or stored row depends on the lock mode,
with one exception: a target that opens a second connection to the file inside an
operation finds it locked, and raises. So a replay that finds any disagreement in that
mode is run again from the start on a fresh file in the normal mode, and only what that
run finds is reported. (A second connection whose busy timeout outlasts the property's
budget would wait that long on the held lock and read HUNG, not be judged: none of the
bundled targets, adapters or mutants opens one.)
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Hashable
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType

from leasecheck.models._lease_system import LeaseSystem, LeaseWorld
from leasecheck.models.contracts import InjectedFault, Snapshot
from leasecheck.models.evidence import Evidence, Recorder
from leasecheck.models.explorer import Edge, ExploreResult, Move, concretize
from leasecheck.models.lease_ops import LeaseOp, LeaseOutcome
from leasecheck.targets.lease_compare import differences, error_kind
from leasecheck.targets.lease_target import read_snapshot, write_snapshot
from leasecheck.targets.loader import import_again

__all__ = ["ConformanceReport", "InjectedFault", "replay_lease", "run_on_target", "run_record"]


@dataclass
class ConformanceReport:
    """How much of the explored graph was replayed, and the first disagreement."""

    states: int = 0
    """Distinct stored states the target started from."""
    transitions: int = 0
    """Distinct (stored state, operation) pairs run on the target."""
    seconds: float = 0.0
    failure: str | None = None
    evidence: Evidence | None = None
    """The failing run as data: each step's model state, and the target's at the last."""
    rebuilt: str = ""
    """Why each source state was rebuilt by replaying its path on a new target instead of
    copied from its parent's ('' when copied): the target's state cannot be copied, or a
    copy behaved unlike a new instance driven along the same path."""


class _Hook:
    """Records each hook point; raises ``InjectedFault`` at ``raise_at``."""

    def __init__(self, raise_at: str | None) -> None:
        self.raise_at = raise_at
        self.points: list[str] = []

    def __call__(self, point: str) -> None:
        self.points.append(point)
        if point == self.raise_at:
            raise InjectedFault(point)


def run_on_target(module: ModuleType, con: sqlite3.Connection, op: Hashable) -> LeaseOutcome:
    """Run one explored operation on the target connection, as its ``LeaseOp`` record."""
    call = LeaseSystem.record(op)
    assert call is not None, f"{op!r} calls nothing on the target"
    return run_record(module, con, call)


def run_record(module: ModuleType, con: sqlite3.Connection, call: LeaseOp) -> LeaseOutcome:
    """Run one call on the target with a hook that records every point and raises at the
    call's fault; what it returned or raised, the hooks and the stored state after."""
    hook = _Hook(call.fault)
    try:
        result = call.apply(module, con, hook)
    except InjectedFault:
        return _observed(LeaseOutcome(error="fault"), hook, con)
    except Exception as exc:  # a target's error is data here: its kind is compared
        outcome = LeaseOutcome(error=error_kind(exc, module), detail=str(exc)[:160])
        return _observed(outcome, hook, con)
    return _observed(LeaseOutcome(result=result), hook, con)


def _observed(outcome: LeaseOutcome, hook: _Hook, con: sqlite3.Connection) -> LeaseOutcome:
    return replace(outcome, hooks=tuple(hook.points), state=read_snapshot(con))


def _model_outcome(move: Move[LeaseWorld]) -> LeaseOutcome:
    return LeaseOutcome(move.result, move.error, hooks=move.hooks, state=move.state.queue)


def compare(
    model: LeaseOutcome, target: LeaseOutcome, in_transaction: bool, call: str = "it"
) -> list[str]:
    """Sentences for every way ``target`` differs from ``model`` (empty: they agree)."""
    problems = differences(call, target, model)
    return [*problems, "the target left a transaction open"] if in_transaction else problems


def replay_lease(
    module: ModuleType,
    system: LeaseSystem,
    explored: ExploreResult[LeaseWorld],
    path: Path,
) -> ConformanceReport:
    """Replay every explored lease transition on ``module``, once per distinct (stored
    queue, operation) (BFS order: the first failure has a shortest path to its source):
    first with the connection in exclusive locking mode, and again in the normal mode
    (on ``path`` with ``-normal`` added to its name) when that finds a disagreement,
    whose report is then the one returned."""
    started = time.perf_counter()
    report = _replay(module, system, explored, path, exclusive=True)
    if report.failure is not None:
        report = _replay(module, system, explored, _normal_path(path), exclusive=False)
    report.seconds = time.perf_counter() - started
    return report


def _normal_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}-normal{path.suffix}")


def _replay(
    module: ModuleType,
    system: LeaseSystem,
    explored: ExploreResult[LeaseWorld],
    path: Path,
    exclusive: bool,
) -> ConformanceReport:
    report = ConformanceReport()
    con = module.open_queue(str(path))
    try:
        if exclusive:
            # Anything that refuses it (a connection-like object of the target's own)
            # leaves the normal mode, which the replay is correct in too.
            with contextlib.suppress(Exception):
                con.execute("PRAGMA locking_mode=EXCLUSIVE")
        stored: Snapshot | None = None
        sources: set[int] = set()
        for source, move in system.distinct_moves(explored.order):
            op = move.op
            assert isinstance(op, tuple)
            if op[0] == "tick":
                continue
            report.transitions += 1
            sources.add(id(source.queue))  # canonical queues are interned
            if stored != source.queue:
                write_snapshot(con, source.queue)
            target = run_on_target(module, con, op)
            stored = target.state
            problems = compare(
                _model_outcome(move), target, con.in_transaction, system.describe_op(op)
            )
            if problems:
                edge = Edge(source, move, system.canonical(move.state))
                report.failure, report.evidence = _explain(
                    module, con, system, explored, edge, problems
                )
                break
        report.states = len(sources)
    finally:
        if con.in_transaction:
            con.execute("ROLLBACK")
        con.close()
    return report


def _explain(
    module: ModuleType,
    con: sqlite3.Connection,
    system: LeaseSystem,
    explored: ExploreResult[LeaseWorld],
    edge: Edge[LeaseWorld],
    problems: list[str],
) -> tuple[str, Evidence]:
    """The failing transition as a numbered run from the start state (a shortest one).

    The explored path is made concrete (consistent names, absolute clock); the last
    step is run again on the target from the concrete state, and that run is what is
    reported when it fails too (else the canonical source state is shown).
    """
    trace = [*explored.path_to(edge.source), (edge.move.op, edge.move.state)]
    steps = concretize(system, trace)
    before = steps[-2].state if len(steps) > 1 else system.initial()
    write_snapshot(con, before.queue)
    last = steps[-1].op
    ran = run_on_target(module, con, last)
    again = compare(_model_outcome(steps[-1]), ran, con.in_transaction,
                    system.describe_op(last))  # fmt: skip
    reached = before
    if not again:
        steps = [*concretize(system, trace[:-1]), edge.move]
        before = edge.source
        write_snapshot(con, before.queue)
        ran = run_on_target(module, con, edge.move.op)
        if con.in_transaction:
            con.execute("ROLLBACK")
    start = system.scope.start
    origin = "the empty queue" if start is None else f"the start state {start!r}"
    lines = ["the target disagrees with the model on an explored transition;",
             f"a shortest run from {origin}:"]  # fmt: skip
    lines += [f"  {n}. {system.describe_op(move.op)}" for n, move in enumerate(steps, 1)]
    if again:
        lines.append(f"step {len(steps)} starts from")
    else:  # the disagreement needs a column the contract never reads again: say so
        lines += [
            f"the steps before step {len(steps)} reach this state, and from it the target "
            f"agrees with the model:",
            system.describe_state(reached),
            f"the explorer keeps that state in its own form, which blanks the columns no "
            f"operation of the contract reads again (a done or dead row's attempts, "
            f"available_at and deadline: redrive overwrites them). From that form the target "
            f"disagrees, so it reads such a column; step {len(steps)} from that form:",
        ]
    lines.append(system.describe_state(before))
    lines += [f"  -> {problem}" for problem in (again or problems)]
    if again and not _fails_from_scratch(module, con, system, steps):
        lines += [
            f"Run from the start on a new queue file, with the target imported again, these "
            f"{len(steps)} steps agree with the model at every step: the disagreement above "
            f"needs what the target kept outside the queue file (a module-level cache or "
            f"global) from its earlier runs on other states. lease-worker.md keeps a queue's "
            f"state in its SQLite file; another process, or the next import, would not have "
            f"that state.",
        ]
    return "\n".join(lines), _evidence(system, steps, before, ran, (again or problems)[0])


def _fails_from_scratch(
    module: ModuleType, con: sqlite3.Connection, system: LeaseSystem, steps: list[Move[LeaseWorld]]
) -> bool:
    """Whether ``steps``, run one after another from the scope's start on a new file by a
    new import of the target, still end in a disagreement (or could not be run so)."""
    try:
        fresh = import_again(module)
        file = Path(con.execute("PRAGMA database_list").fetchone()[2])
        path = file.with_name(f"{file.stem}-from-scratch{file.suffix}")
        again = fresh.open_queue(str(path))
    except Exception:  # no second run: the report stands as it is
        return True
    try:
        write_snapshot(again, system.initial().queue)
        for number, move in enumerate(steps, 1):
            if LeaseSystem.record(move.op) is None:  # a tick: the next call carries its time
                continue
            ran = run_on_target(fresh, again, move.op)
            problems = compare(_model_outcome(move), ran, again.in_transaction)
            if problems or number == len(steps):
                return bool(problems)
        return True
    except Exception:  # a target that cannot run them so: the report stands
        return True
    finally:
        with contextlib.suppress(Exception):
            if again.in_transaction:
                again.execute("ROLLBACK")
            again.close()
        for leftover in (path, path.with_name(f"{path.name}-journal")):
            leftover.unlink(missing_ok=True)


def _evidence(
    system: LeaseSystem,
    steps: list[Move[LeaseWorld]],
    before: LeaseWorld,
    ran: LeaseOutcome,
    said: str,
) -> Evidence:
    """The run as evidence: every step's model state (the target agreed on all but the
    last), and what the target returned and stored at the last."""
    record = Recorder()
    at = float(before.now)
    record.rows("model", before.queue.jobs, at)
    record.rows("target", before.queue.jobs, at)
    for number, move in enumerate(steps, 1):
        call = LeaseSystem.record(move.op)
        if call is None:  # the clock moved
            record.event("clock", "clock", move.state.now, f"t={move.state.now}")
            continue
        last = number == len(steps)
        at = float(call.value("now_ms"))
        record.step(
            _actor(call), system.describe_op(move.op), call.kind, at,
            target=ran.describe() if last else None,
            model=_model_outcome(move).describe(), call=call.to_json(),
        )  # fmt: skip
        record.rows("model", move.state.queue.jobs, at)
        stored = ran.state if last and ran.state is not None else move.state.queue
        record.rows("target", stored.jobs, at)
    return record.evidence(said)


def _actor(call: LeaseOp) -> str:
    if call.kind == "claim":
        return str(call.value("owner"))
    if call.kind == "finish":
        return str(call.value("ticket")["owner"])
    return "queue"
