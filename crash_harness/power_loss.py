"""Power loss: after a cut at any instant, every acknowledged operation is still there.

A SIGKILL never loses a committed SQLite transaction (the OS still has the pages); a
power cut loses whatever was not synced, and a file's creation, unlink or rename is
not durable until its directory is synced. For each history the harness:

1. builds a queue file holding a model state (durable: it exists before the run);
2. runs a real child process under strace (``crash_harness._syscalls``): it opens
   the queue with the target's ``open_queue`` and runs the operations, writing one
   acknowledgement to a marker file as each returns to its caller;
3. replays the recorded system calls over ``crash_harness._disk.Disk`` and, at every
   *cut point* (each write, sync, directory change or acknowledgement), lists the
   crash states a power cut there can leave (every subset of the unsynced writes, or
   a seeded sample, times every durable prefix of the directory changes);
4. rebuilds each state's files in a scratch directory, opens them with SQLite (a hot
   journal rolls back, as the target's next ``open_queue`` would) and checks:
   ``PRAGMA integrity_check`` is ``ok``, and the rows are the model's state after the
   acknowledged operations, or after those plus the one in flight.

The spec (lease-worker.md) fixes ``journal_mode=DELETE, synchronous=FULL``. SQLite
documents that FULL in rollback-journal mode does not sync the directory after it
deletes the journal, so a power cut can bring the journal back and roll the last
commit back; EXTRA syncs it. Unless ``strict`` is set, a crash state that lost
exactly the last acknowledged operation that way, on a target using exactly the
spec's setting, is counted as ``spec_losses`` (a finding about the spec, printed),
not as a violation; any other loss, and every integrity failure, is one.
"""

from __future__ import annotations

import json
import pickle
import random
import shutil
import sqlite3
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Final

from leasecheck.crash_harness._disk import CrashState, Cut, DirChange, Disk, crash_states
from leasecheck.crash_harness._evidence import HistoryRecorder, at_of
from leasecheck.crash_harness._ops import Expected, agrees, expect
from leasecheck.crash_harness._queue_files import IntegrityFailure, QueueFiles, read_stored
from leasecheck.crash_harness._states import random_history, random_op, step
from leasecheck.crash_harness._syscalls import record
from leasecheck.crash_harness.engine import ChildResult, Engine
from leasecheck.models.contracts import Snapshot
from leasecheck.models.evidence import Evidence, attach
from leasecheck.models.lease_ops import LeaseOp

__all__ = [
    "PowerLoss",
    "PowerReport",
    "Settings",
    "Trial",
    "changing",
    "check_power_loss",
    "lost_ops",
    "run_trial",
]

PROPERTY = "lease.power-loss"
TRACE_TIMEOUT_S = 120.0
SPEC_SETTING = ("delete", 2)
SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
DB = "queue.db"
GONE, CORRUPT, INTEGRITY, UNREADABLE = "gone", "corrupt", "integrity", "unreadable"
LOST, TORN = "lost", "torn"
HEADLINES: Final[dict[str, str]] = {
    GONE: "the queue file is gone",
    CORRUPT: "the reopened file is corrupt",
    INTEGRITY: "the reopened file fails PRAGMA integrity_check",
    UNREADABLE: "the reopened file cannot be read",
    LOST: "an operation that had returned to its caller is not in the reopened file",
    TORN: "the reopened file holds none of the states the history passed through "
    "(an operation was torn)",
}
"""What a ``PowerLoss`` of each kind found, in its first line."""


@dataclass(frozen=True)
class Settings:
    """The target connection's journal mode and synchronous level, as SQLite reports them."""

    journal_mode: str
    synchronous: int

    def describe(self) -> str:
        level = SYNCHRONOUS.get(self.synchronous, str(self.synchronous))
        return f"journal_mode={self.journal_mode.upper()}, synchronous={level}"

    def remedy(self) -> str:
        """The pragma that would have kept the write, per SQLite's documentation."""
        mode = self.journal_mode.lower()
        if self.synchronous == 0:
            return "PRAGMA synchronous=FULL (EXTRA with a rollback journal): OFF never fsyncs"
        if mode in ("memory", "off"):
            return f"PRAGMA journal_mode=DELETE (or WAL): with {mode.upper()} a cut tears commits"
        if mode == "wal" and self.synchronous < 2:
            return "PRAGMA synchronous=FULL: in WAL mode NORMAL does not fsync the WAL at commit"
        if mode != "wal" and self.synchronous < 3:
            return (
                "PRAGMA synchronous=EXTRA: FULL does not fsync the directory after the "
                "journal is deleted, so the journal can come back and roll the commit back"
            )
        return "no pragma: SQLite syncs everything here; the target's own write order is at fault"


@dataclass(frozen=True)
class Trial:
    """One history: a start state, the ops, and the model's state before/after each."""

    ops: tuple[LeaseOp, ...]
    states: tuple[Snapshot, ...]
    """``states[i]``: the model's state after the first ``i`` ops."""
    expected: tuple[Expected, ...]

    @classmethod
    def of(cls, start: Snapshot, ops: list[LeaseOp]) -> Trial:
        states, expected = [start], []
        for op in ops:
            verdict = expect(op, states[-1])
            states.append(verdict.state)
            expected.append(verdict)
        return cls(tuple(ops), tuple(states), tuple(expected))


@dataclass
class PowerReport:
    """What was checked: histories, cut points, crash states, and how long it took."""

    histories: int = 0
    operations: int = 0
    cuts: int = 0
    states: int = 0
    distinct: int = 0
    """Distinct file states opened with SQLite (the others share a verdict)."""
    spec_losses: int = 0
    """Crash states that lost the last commit the way the spec's own setting allows."""
    trace_seconds: float = 0.0
    check_seconds: float = 0.0
    settings: set[Settings] = field(default_factory=set)

    def cuts_per_operation(self) -> float:
        return self.cuts / max(1, self.operations)

    def states_per_second(self) -> float:
        return self.states / max(1e-9, self.check_seconds)

    def render(self) -> str:
        text = (
            f"{self.states} crash states at {self.cuts} cut points of {self.operations} "
            f"operations in {self.histories} traced histories "
            f"({self.cuts_per_operation():.1f} cut points per operation, {self.distinct} "
            f"distinct files opened, {self.states_per_second():.0f} states/s; tracing "
            f"{self.trace_seconds:.1f} s, checking {self.check_seconds:.1f} s)"
        )
        if self.spec_losses:
            text += "\n" + spec_finding(self.spec_losses)
        return text


def spec_finding(count: int) -> str:
    return (
        f"FINDING about lease-worker.md: in {count} crash states the spec's own setting "
        f"(journal_mode=DELETE, synchronous=FULL) lost the last acknowledged commit: the "
        f"journal's unlink was not yet durable, the journal came back and rolled the commit "
        f"back. PRAGMA synchronous=EXTRA keeps it (LEASECHECK_POWER_LOSS=strict fails on it)."
    )


@dataclass(frozen=True)
class PowerLoss:
    """A crash state that breaks the property, with everything needed to explain it."""

    trial: Trial
    cut: Cut
    state: CrashState
    found: str
    settings: Settings
    outcomes: tuple[ChildResult, ...]
    kind: str
    """A key of ``HEADLINES``: the file could not be read as a queue (``GONE``, ``CORRUPT``,
    ``INTEGRITY``, ``UNREADABLE``), it holds an earlier state of the model (``LOST``:
    acknowledged operations missing) or no state of the model (``TORN``)."""

    def explain(self) -> str:
        count = len(self.trial.states[0].jobs)
        rows = [line.strip() for line in self.trial.states[0].describe().splitlines()]
        held = f"the queue file holds {count} job{'' if count == 1 else 's'} (durable)"
        lines = [held + (": " + "; ".join(rows) if count else "")]
        lines.append("a child opens it with open_queue and runs, acknowledging each result:")
        shown = zip(self.trial.ops, self.outcomes, strict=True)
        for index, (op, outcome) in enumerate(list(shown)[: self.cut.acked + 1]):
            told = "returned to its caller" if index < self.cut.acked else "in flight"
            lines.append(f"   op {index}: {op.describe()} {outcome.describe()} ({told})")
        if self.cut.acked + 1 < len(self.trial.ops):
            lines.append(f"   (ops {self.cut.acked + 1}.. had not started at the cut)")
        lines.append(f"power cut after system call {self.cut.number}: {self.cut.event}")
        lines.append("not on disk at the cut: " + _lost(self.state))
        lines.append(f"reopened: {self.found}")
        lines.append(f"the target's settings: {self.settings.describe()}")
        lines.append(f"what would have kept it: {self.remedy()}")
        return "\n".join(f"  {n}. {line}" for n, line in enumerate(lines, 1))

    def remedy(self) -> str:
        """The settings' pragma; none for a torn state that lost no write at the cut: every
        write reached the disk, so the target itself wrote a state between whole operations."""
        if self.kind == TORN and not self.state.lost:
            return (
                "no pragma: every write reached the disk, so the target itself wrote a state "
                "that no prefix of whole operations leaves (lease-worker.md: each operation "
                "is one transaction)"
            )
        return self.settings.remedy()

    def headline(self) -> str:
        return HEADLINES[self.kind]


def _lost(state: CrashState) -> str:
    if not state.lost:
        return "nothing (every write and directory change reached the disk)"
    return "; ".join(change.describe() for change in state.lost)


def check_power_loss(
    module: ModuleType, directory: Path, histories: int, limit: int, seed: int, strict: bool
) -> PowerReport:
    """Trace ``histories`` random histories and check every crash state; raise on a loss."""
    rng = random.Random(f"{PROPERTY}:{seed}")
    report = PowerReport()
    with Engine() as engine:
        (directory / "files").mkdir(parents=True, exist_ok=True)
        files = QueueFiles(engine, module, directory / "files")
        for number in range(1, histories + 1):
            trial = _random_trial(rng)
            start = files.fresh(trial.states[0])
            loss = run_trial(module, start, directory / f"history-{number}", trial, limit,
                             rng, strict, report)  # fmt: skip
            if loss is not None:
                raise _counterexample(module, files, directory, loss, limit, seed, strict)
    return report


def _random_trial(rng: random.Random) -> Trial:
    world = random_history(rng, rng.randint(0, 12))
    start, ops = world.state, []
    for _ in range(rng.randint(3, 8)):
        op = random_op(rng, world)
        world = step(rng, world, op)
        ops.append(op)
    return Trial.of(start, ops)


def run_trial(
    module: ModuleType,
    start: Path,
    root: Path,
    trial: Trial,
    limit: int,
    rng: random.Random,
    strict: bool,
    report: PowerReport,
) -> PowerLoss | None:
    """Trace ``trial`` on a copy of ``start`` and check every crash state; the first loss."""
    queue = root / "queue"
    queue.mkdir(parents=True)
    shutil.copyfile(start, queue / DB)
    began = time.monotonic()
    outcomes, settings, disk, cuts = _traced(module, root, trial, {DB: start.read_bytes()})
    report.trace_seconds += time.monotonic() - began
    report.histories += 1
    report.operations += len(trial.ops)
    report.settings.add(settings)
    checker = _Checker(trial, settings, strict, root / "crash", report)
    try:
        for cut in cuts:
            report.cuts += 1
            loss = checker.check_cut(disk, cut, limit, rng)
            if loss is not None:
                return PowerLoss(trial, cut, loss[0], loss[2], settings, outcomes, loss[1])
        return None
    finally:
        report.check_seconds += checker.seconds


def _traced(
    module: ModuleType, root: Path, trial: Trial, before: dict[str, bytes]
) -> tuple[tuple[ChildResult, ...], Settings, Disk, list[Cut]]:
    spec = {
        "target": str(Path(str(module.__file__)).resolve()),
        "db": str(root / "queue" / DB),
        "marker": str(root / "acks"),
        "results": str(root / "results.pickle"),
        "ops": [op.to_json() for op in trial.ops],
    }
    (root / "spec.json").write_text(json.dumps(spec))
    argv = [sys.executable, "-m", "leasecheck.crash_harness._power_child", str(root / "spec.json")]
    events = record(argv, root, root / "strace.log", TRACE_TIMEOUT_S)
    results = pickle.loads((root / "results.pickle").read_bytes())
    outcomes = tuple(results["outcomes"])
    _check_outcomes(trial, outcomes)
    disk = Disk.holding(str(root / "queue"), str(root / "acks"), before)
    cuts = [disk.cut("before the child's first system call")]
    for event in events:
        what = disk.feed(event)
        if what is not None:
            cuts.append(disk.cut(what))
    return outcomes, Settings(results["journal_mode"], results["synchronous"]), disk, cuts


def _check_outcomes(trial: Trial, outcomes: tuple[ChildResult, ...]) -> None:
    for index, (op, outcome) in enumerate(zip(trial.ops, outcomes, strict=True)):
        if not agrees(outcome, trial.expected[index]):
            raise AssertionError(
                f"op {index} {op.describe()} {outcome.describe()} on the target but the model "
                f"{trial.expected[index].describe()} (before any power cut)"
            )


class _Checker:
    """Reads crash states (once per distinct content) and judges them against the model."""

    def __init__(
        self, trial: Trial, settings: Settings, strict: bool, scratch: Path, report: PowerReport
    ) -> None:
        self.trial, self.settings, self.strict = trial, settings, strict
        self.scratch, self.report = scratch, report
        self.readings: dict[str, Snapshot | tuple[str, str]] = {}
        self.seconds = 0.0

    def check_cut(
        self, disk: Disk, cut: Cut, limit: int, rng: random.Random
    ) -> tuple[CrashState, str, str] | None:
        """The first crash state at ``cut`` that breaks the property: (state, kind, text)."""
        began = time.monotonic()
        try:
            for state in crash_states(disk, cut, limit, rng):
                self.report.states += 1
                problem = self._judge(cut, state, self._read(state))
                if problem is not None:
                    return state, *problem
            return None
        finally:
            self.seconds += time.monotonic() - began

    def _read(self, state: CrashState) -> Snapshot | tuple[str, str]:
        digest = state.digest()
        if digest not in self.readings:
            self.report.distinct += 1
            self.readings[digest] = _read_files(self.scratch, state)
        return self.readings[digest]

    def _judge(
        self, cut: Cut, state: CrashState, found: Snapshot | tuple[str, str]
    ) -> tuple[str, str] | None:
        if not isinstance(found, Snapshot):
            return found
        states, acked = self.trial.states, cut.acked
        if found in states[acked : acked + 2]:
            return None
        if self._spec_loss(cut, state, found):
            self.report.spec_losses += 1
            return None
        return _which(states, acked, found)

    def _spec_loss(self, cut: Cut, state: CrashState, found: Snapshot) -> bool:
        """Exactly the last acknowledged op lost because the journal's unlink was not durable."""
        if self.strict or (self.settings.journal_mode.lower(), self.settings.synchronous) != (
            SPEC_SETTING
        ):
            return False
        journal_back = any(
            isinstance(c, DirChange) and c.kind == "unlink" and c.name == DB + "-journal"
            for c in state.lost
        )
        lost = lost_ops(self.trial.states, cut.acked, found)
        return journal_back and lost is not None and len(lost) == 1


def changing(states: tuple[Snapshot, ...], ops: range) -> list[int]:
    """The ops in ``ops`` that changed the state (a no-op commits nothing to lose)."""
    return [index for index in ops if states[index] != states[index + 1]]


def lost_ops(states: tuple[Snapshot, ...], acked: int, found: Snapshot) -> list[int] | None:
    """The acknowledged ops missing from ``found``, if it is an earlier state of the model."""
    earlier = [index for index in range(acked) if states[index] == found]
    if not earlier:
        return None
    return changing(states, range(earlier[-1], acked)) or None


def _which(states: tuple[Snapshot, ...], acked: int, found: Snapshot) -> tuple[str, str]:
    """(kind, text): an earlier state of the model (``LOST``), or none of its states."""
    lost = lost_ops(states, acked, found)
    if lost:
        names = ", ".join(str(index) for index in lost)
        return LOST, (
            f"integrity ok, but the rows are the model's state before op {lost[0]}: the "
            f"acknowledged op{'s' if len(lost) > 1 else ''} {names} lost\n{found.describe()}"
        )
    return TORN, (
        f"integrity ok, but the rows are no state the model reached by op {acked} "
        f"(nor op {acked} in flight):\n{found.describe()}\nexpected:\n{states[acked].describe()}"
    )


def _read_files(scratch: Path, state: CrashState) -> Snapshot | tuple[str, str]:
    """Write ``state``'s files to ``scratch`` and read the queue back (a problem: its kind
    and its text)."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    for name, content in state.files:
        (scratch / name).write_bytes(content)
    if DB not in dict(state.files):
        return GONE, f"{DB} itself is gone (its creation was never made durable)"
    try:
        return read_stored(scratch / DB, "after the power cut")
    except IntegrityFailure as error:
        return INTEGRITY, str(error)
    except AssertionError as error:
        return UNREADABLE, str(error)
    except sqlite3.DatabaseError as error:
        return CORRUPT, f"PRAGMA integrity_check cannot even run: {error} (the file is corrupt)"


def _counterexample(
    module: ModuleType,
    files: QueueFiles,
    directory: Path,
    loss: PowerLoss,
    limit: int,
    seed: int,
    strict: bool,
) -> AssertionError:
    """Shrink to the one op that lost, from the state before it, if that still fails."""
    shrunk = _shrink(module, files, directory, loss, limit, seed, strict) or loss
    mode = " (strict)" if strict else ""
    error = AssertionError(
        f"{PROPERTY}{mode}: after a power cut, {shrunk.headline()}\nscenario:\n"
        f"{shrunk.explain()}\nreplay with {'LEASECHECK_POWER_LOSS=strict ' if strict else ''}"
        f"--leasecheck-seed {seed} (property {PROPERTY})"
    )
    attach(error, _evidence(shrunk, f"after a power cut, {shrunk.headline()}"))
    return error


def _evidence(loss: PowerLoss, summary: str) -> Evidence:
    """The acknowledged operations beside the model's, the one in flight, the power cut
    after the last acknowledgement; they part at the last acknowledged operation."""
    trial, acked = loss.trial, loss.cut.acked
    record = HistoryRecorder(trial.states[0], at_of(trial.ops[0]) if trial.ops else 0.0)
    ran = zip(trial.ops[:acked], loss.outcomes[:acked], trial.expected[:acked], strict=True)
    for op, outcome, expected in ran:
        record.ran(op, outcome, expected=expected)
    parted = record.last
    if acked < len(trial.ops):
        record.ran(trial.ops[acked], None, expected=trial.expected[acked], advance_model=False)
        record.answered("in flight at the power cut", trial.expected[acked].describe())
    at = at_of(trial.ops[min(acked, len(trial.ops) - 1)]) if trial.ops else 0.0
    record.event("power-cut", "power", at, f"power cut after system call {loss.cut.number}")
    return record.evidence(summary, parted, cut=loss.cut.event, found=loss.found)


def _shrink(
    module: ModuleType,
    files: QueueFiles,
    directory: Path,
    loss: PowerLoss,
    limit: int,
    seed: int,
    strict: bool,
) -> PowerLoss | None:
    trial, acked = loss.trial, loss.cut.acked
    if len(trial.ops) == 1:
        return None
    before = changing(trial.states, range(acked))[-1:]
    in_flight = changing(trial.states, range(acked, min(acked + 1, len(trial.ops))))
    for candidate in dict.fromkeys(before + in_flight):
        small = Trial.of(trial.states[candidate], [trial.ops[candidate]])
        found = _retrace(module, files, directory / f"shrink-{candidate}", small, limit, seed,
                         strict)  # fmt: skip
        if found is not None:
            return _fewer_jobs(module, files, directory / f"fewer-{candidate}", found,
                               limit, seed, strict)  # fmt: skip
    return None


def _fewer_jobs(
    module: ModuleType,
    files: QueueFiles,
    directory: Path,
    loss: PowerLoss,
    limit: int,
    seed: int,
    strict: bool,
) -> PowerLoss:
    """Drop the start jobs the op leaves alone while the single op still changes state and
    still loses: all of them at once first (one traced run where that keeps the loss, as
    it usually does), then one at a time."""
    start, after = loss.trial.states[:2]
    untouched = {row.id for row in start.jobs if row in after.jobs}
    if untouched:
        loss = _without(module, files, directory / "untouched", loss, untouched, limit, seed,
                        strict) or loss  # fmt: skip
    for job in loss.trial.states[0].jobs:
        loss = _without(module, files, directory / f"without-{job.id}", loss, {job.id}, limit,
                        seed, strict) or loss  # fmt: skip
    return loss


def _without(
    module: ModuleType,
    files: QueueFiles,
    root: Path,
    loss: PowerLoss,
    dropped: set[str],
    limit: int,
    seed: int,
    strict: bool,
) -> PowerLoss | None:
    """``loss``'s single op from its start state without the jobs ``dropped`` (nor their
    redrive rows): the loss it still shows, None if it shows none or the op then changes
    nothing (a no-op commits nothing to lose)."""
    (op,) = loss.trial.ops
    start = loss.trial.states[0]
    smaller = Snapshot(
        tuple(row for row in start.jobs if row.id not in dropped),
        tuple(row for row in start.redrives if row.id not in dropped),
    )
    trial = Trial.of(smaller, [op])
    if trial.states[0] == trial.states[1]:
        return None
    return _retrace(module, files, root, trial, limit, seed, strict)


def _retrace(
    module: ModuleType,
    files: QueueFiles,
    root: Path,
    trial: Trial,
    limit: int,
    seed: int,
    strict: bool,
) -> PowerLoss | None:
    """A shrink's try: ``trial`` traced from a fresh file holding its start state, with
    the crash states drawn from the shrink's own seed (the same for every try)."""
    rng = random.Random(f"{PROPERTY}:{seed}:shrink")
    start = files.fresh(trial.states[0])
    return run_trial(module, start, root, trial, limit, rng, strict, PowerReport())
