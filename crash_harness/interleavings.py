"""Every statement-level schedule of 2-3 real processes on one SQLite file, judged by the model.

Each process of a scenario (``_interleave_scenarios``) is a child forked by the fork
engine (``crash_harness.engine``). It stops before every SQL statement its target
runs and at every fault hook (``_interleave_child``); exactly one process runs at a
time, and the engine chooses which. A schedule is the list of those choices (JSON);
``replay`` runs one again exactly.

Blocked is observed, never guessed from silence. A process released into a statement
that needs a lock another (paused) process holds sleeps in SQLite's busy handler; the
engine sees it sleeping in ``clock_nanosleep`` while ``/proc/locks`` shows another
process holding a lock on the file, and SIGSTOPs it (SQLite's busy timeout counts
retries, not wall time, so a stopped waiter keeps its 1 s budget). It is continued,
alone, as soon as ``/proc/locks`` shows nothing in its way. A statement that fails at
once with "database is locked" never slept: that is a finding, because every lock in
a schedule is held for a few statements, well inside the spec's 1 s timeout.

The search (CHESS-style preemption bounding, iterative by cost): a run follows its
prefix of choices, then keeps running the current process until it blocks or ends.
At every decision past the prefix each other runnable process is pushed as a new
prefix, costing one preemption when the current process could have gone on. Prefixes
run cheapest first, so the first failing schedule has the fewest forced switches.
Runs are pruned by state hashing: at each decision the engine hashes (per process:
its status, pending statement and every (statement, file hash) it ran; the file's
bytes; which operations returned before which others began). A run reaching a state
already reached with no more preemptions is cut there (docs/interleavings.md says why
this and not DPOR).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from leasecheck.crash_harness import _lock_view
from leasecheck.crash_harness._interleave_child import child_body
from leasecheck.crash_harness._interleave_scenarios import Scenario, by_name
from leasecheck.crash_harness.engine import (
    FINAL_KINDS,
    GO,
    Channel,
    Child,
    Engine,
    ErrorInfo,
    HarnessTimeout,
    Message,
)
from leasecheck.models._linear_specs import BUSY, LeaseSpec
from leasecheck.models.contracts import Snapshot
from leasecheck.models.lease_ops import LeaseOutcome
from leasecheck.models.linearizability import (
    HarnessStep,
    Operation,
    Verdict,
    check,
)
from leasecheck.targets.lease_target import read_snapshot, write_snapshot

__all__ = [
    "LAST_POINT",
    "BodyOf",
    "Exploration",
    "Run",
    "Schedule",
    "ScheduleMismatch",
    "ServerWaits",
    "explore",
    "judge",
    "replay",
    "run_schedules",
    "run_with",
]

LAST_POINT = "leasecheck:last"
"""The point a process may pass last of all: a library whose claims end with the
connection that made them (RabbitMQ's deliveries) waits there, after its program, until
every other process has ended or waits there too, so no process's end hands its claims
back in the middle of another's program."""

BodyOf = Callable[[str, tuple[Any, ...]], Callable[[Channel], str]]
"""The child body of process ``name`` running ``program`` (its calls have ``text()``)."""

DEADLINE_S = 10.0
_WRITE_LOCK = ("BEGIN IMMEDIATE", "BEGIN EXCLUSIVE", "INSERT", "UPDATE", "DELETE", "REPLACE")
POLL_S = 0.0005
STEP_NS = 1_000_000
"""An operation's call and return instants are the numbers of its schedule steps (as
nanoseconds, so the checker's report shows step n as 'n.000 ms')."""


class ScheduleMismatch(ValueError):
    """A recorded choice names a process that cannot run there (another target, or edited)."""


@dataclass(frozen=True)
class Schedule:
    """One schedule: the scenario and, at each decision, the process that ran next."""

    scenario: str
    choices: tuple[str, ...]

    def record(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "choices": list(self.choices)}

    def to_json(self) -> str:
        return json.dumps(self.record())

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        data = json.loads(text)
        return cls(str(data["scenario"]), tuple(str(c) for c in data["choices"]))


@dataclass(frozen=True)
class Step:
    """One line of a schedule as a user reads it."""

    process: str
    action: str
    """ran | sent | passed | blocked | resumed | returned | ended"""
    text: str

    def describe(self) -> str:
        if self.action == "ran":
            return f"{self.process} ran `{' '.join(self.text.split())}`"
        if self.action == "waits":
            return (f"{self.process} waits at the server in `{self.text}` (for a lock "
                    f"another process's open transaction holds, or another's write)")  # fmt: skip
        if self.action == "sent":
            return f"{self.process} sent `{self.text}`"
        if self.action == "passed":
            return f"{self.process} passed fault({self.text!r})"
        if self.action == "blocked":
            return (f"{self.process} is blocked in `{' '.join(self.text.split())}` (asleep in "
                    f"SQLite's busy handler while another process holds the lock)")  # fmt: skip
        if self.action == "resumed":
            return f"{self.process} gets the lock and goes on"
        if self.action == "starts":
            return f"{self.process} calls {self.text}"
        return f"{self.process}: {self.text}"


@dataclass
class Run:
    """What one schedule did."""

    schedule: Schedule
    steps: list[Step] = field(default_factory=list)
    ops: list[Operation] = field(default_factory=list)
    final: Snapshot | None = None
    integrity: str = "ok"
    preemptions: int = 0
    points: int = 0
    """Statements and hooks released in this run."""
    pruned: bool = False
    failures: list[str] = field(default_factory=list)
    """A child that failed outside an operation (as words)."""
    errors: list[ErrorInfo] = field(default_factory=list)
    """...and what it raised, as data (whose code raised it: ``frames``)."""
    problem: str | None = None
    verdict: Verdict | None = None

    def interleaving(self) -> str:
        return "\n".join(f"  {n}. {step.describe()}" for n, step in enumerate(self.steps, 1))

    def describe(
        self, scenario: Any, replay_with: str = "leasecheck.crash_harness.interleavings.replay"
    ) -> str:
        return "\n".join([
            scenario.describe(),
            f"The schedule ({self.preemptions} forced switches; each line is one step):",
            self.interleaving(),
            f"What is wrong: {self.problem}",
            f"The schedule, replayed by {replay_with}:",
            f"  {self.schedule.to_json()}",
        ])  # fmt: skip


# --- one run --------------------------------------------------------------------------------


@dataclass(eq=False)
class _Proc:
    name: str
    child: Child
    status: str = "running"
    """running | paused | blocked | done"""
    kind: str = ""
    at: str = ""
    """The statement (or hook point) it is paused or blocked at."""
    seen: list[tuple[str, str, str]] = field(default_factory=list)
    invoked: dict[int, int] = field(default_factory=dict)


class _Search:
    """The queue of prefixes, cheapest first, and the costs of the states seen."""

    def __init__(self, bound: int | None, prune: bool = True) -> None:
        self.bound, self.prune = bound, prune
        self.visited: dict[Hashable, int] = {}
        self.skipped = 0
        """Alternatives not run: they would only block (``_Runner._would_block``)."""
        self.buckets: dict[int, list[tuple[str, ...]]] = {0: [()]}

    def seen(self, key: Hashable, cost: int) -> bool:
        if not self.prune:
            return False
        if self.visited.get(key, cost + 1) <= cost:
            return True
        self.visited[key] = cost
        return False

    def push(self, prefix: tuple[str, ...], cost: int) -> None:
        if self.bound is None or cost <= self.bound:
            self.buckets.setdefault(cost, []).append(prefix)

    def pop(self) -> tuple[str, ...] | None:
        for cost in sorted(self.buckets):
            if self.buckets[cost]:
                return self.buckets[cost].pop()
        return None


class _Runner:
    def __init__(
        self, module: ModuleType | None, scenario: Scenario, path: Path,
        prefix: tuple[str, ...], search: _Search | None, engine: Engine,
        body_of: BodyOf | None = None, waits: ServerWaits | None = None,
    ) -> None:  # fmt: skip
        self.module, self.scenario, self.path = module, scenario, path
        self.body_of, self.waits = body_of, waits
        self.prefix, self.search, self.engine = prefix, search, engine
        self.locks: list[_lock_view.FileLock] | None = None
        """/proc/locks for the file, valid until a process is let go (the others wait)."""
        self.run = Run(Schedule(scenario.name, prefix))
        self.procs: list[_Proc] = []
        self.current: _Proc | None = None
        self.taken: list[str] = []

    def execute(self) -> Run:
        """Start the processes (each opens its connection, then runs to its first
        statement, one after the other, in name order) and follow the schedule."""
        try:
            for n, program in enumerate(self.scenario.programs, 1):
                name = f"P{n}"
                body = self._body(name, program)
                self.procs.append(_Proc(name, self.engine.fork(name, body)))
            for proc in self.procs:
                ready = proc.child.next(f"{proc.name} to open its connection and say so")
                if ready.kind == "raise":
                    raise AssertionError(
                        f"{proc.name}: the target's open_queue failed before "
                        f"anything was scheduled: {ready.value.describe()}"
                    )
                if ready.kind != "ready":
                    raise AssertionError(f"{proc.name} sent {ready.kind} before it was ready")
            for proc in self.procs:
                proc.child.answer(GO)
                self._settle(proc, watch=False)
            self._loop()
        finally:
            for proc in self.procs:  # a pruned run's children are SIGKILLed here
                problem = proc.child.force_end()
                self.engine.children.remove(proc.child)
                if problem:
                    raise AssertionError(problem)
        self.run.schedule = Schedule(self.scenario.name, tuple(self.taken))
        return self.run

    def _body(self, name: str, program: tuple[Any, ...]) -> Callable[[Channel], str]:
        if self.body_of is not None:
            return self.body_of(name, program)
        assert self.module is not None, "a lease-worker run needs its target module"
        return child_body(self.module, self.path, name, program)

    # -- the decisions --

    def _loop(self) -> None:
        while True:
            self._wake()
            paused = [p for p in self.procs if p.status == "paused"]
            # A process at its last barrier (``LAST_POINT``) goes on only when no other
            # can: its end (closing its connection) comes after every other's calls.
            runnable = [p for p in paused if p.at != LAST_POINT] or paused
            blocked = [p for p in self.procs if p.status == "blocked"]
            if not runnable and not blocked:
                return
            if not runnable:  # nobody can move, but the lock view says still held: try
                self._resume(blocked[0])
                continue
            chosen = self._choose(runnable)
            if chosen is None:
                self.run.pruned = True
                return
            self._release(chosen)
            if self.run.pruned:
                return

    def _choose(self, runnable: list[_Proc]) -> _Proc | None:
        can_go_on = self.current is not None and self.current in runnable
        default = self.current if can_go_on and self.current else runnable[0]
        decision = len(self.taken)
        if decision < len(self.prefix):
            chosen = next((p for p in runnable if p.name == self.prefix[decision]), None)
            if chosen is None:
                raise ScheduleMismatch(
                    f"schedule choice {self.prefix[decision]!r} (decision {decision + 1}) "
                    f"cannot run here (runnable: {[p.name for p in runnable]}); the schedule "
                    f"was recorded on another target or edited"
                )
        else:
            if self.search is not None:
                if self.search.seen(self._key(), self.run.preemptions):
                    return None
                cost = self.run.preemptions + (1 if can_go_on else 0)
                for other in runnable:
                    if other is not default and not (
                        self.search.prune and self._would_block(other)
                    ):
                        self.search.push((*self.taken, other.name), cost)
            chosen = default
        if can_go_on and chosen is not self.current:
            self.run.preemptions += 1
        self.taken.append(chosen.name)
        self.current = chosen
        return chosen

    def _key(self) -> Hashable:
        procs = tuple((p.status, p.at, tuple(p.seen)) for p in self.procs)
        returned = [(op.label(), op.returned_ns) for op in self.run.ops]
        invoked = [(f"{p.name}#{i}", t) for p in self.procs for i, t in p.invoked.items()]
        before = frozenset(
            (a, b) for a, end in returned for b, start in invoked
            if a.split("#")[0] != b.split("#")[0] and end is not None and end < start
        )  # fmt: skip
        return (_digest(self.path), procs, before)

    # -- moving one process --

    def _release(self, proc: _Proc) -> None:
        action = {"stmt": "ran", "wire": "sent"}.get(proc.kind, "passed")
        self.run.steps.append(Step(proc.name, action, proc.at))
        self.run.points += 1
        proc.seen.append((proc.kind, proc.at, _digest(self.path)))
        proc.status, self.locks = "running", None
        if self.waits is not None:
            self.waits.released(proc.child.pid, proc.at)
        proc.child.answer(GO)
        self._settle(proc, watch=True)
        if proc.status == "blocked" and self.search is not None and self.search.prune:
            # Waiting with no lock of its own (a BEGIN IMMEDIATE or a first write: the busy
            # handler retries from scratch; a COMMIT waits holding its locks) it changes
            # nothing, so this is the schedule where it runs the statement once the lock is
            # free: that one is explored, at the same cost.
            self.run.pruned = not any(lock.pid == proc.child.pid for lock in self._locks())

    def _settle(self, proc: _Proc, watch: bool) -> None:
        """Read ``proc``'s messages until it pauses, ends, or (``watch``) is seen blocked."""
        deadline = time.monotonic() + DEADLINE_S
        waiting = f"{proc.name}'s next statement or hook"
        while True:
            message = proc.child.poll_message(POLL_S, waiting)
            if message is not None:
                if self._handle(proc, message):
                    return
                continue
            if watch and self.waits is not None and self.waits.waiting(proc.child.pid):
                proc.status = "blocked"  # the server says it waits for another's lock
                self.run.steps.append(Step(proc.name, "waits", proc.at))
                return
            blocked = watch and _lock_view.waits_for_lock(proc.child.pid, self.path)
            if blocked and self._stop_asleep(proc):
                return
            if time.monotonic() > deadline:
                raise HarnessTimeout(
                    f"timed out after {DEADLINE_S:g} s waiting for {waiting}: it is neither "
                    f"talking nor asleep in SQLite's busy handler (does the target loop?)"
                )

    def _handle(self, proc: _Proc, message: Message) -> bool:
        """Record one message; True when the process paused or ended."""
        if message.kind in ("stmt", "point", "wire"):  # "wire": a command held at its proxy
            proc.status, proc.kind, proc.at = "paused", message.kind, str(message.value)
            return True
        if message.kind == "invoke":
            index = int(message.value)
            call = self.scenario.programs[int(proc.name[1:]) - 1][index - 1]
            self.run.steps.append(Step(proc.name, "starts", call.describe()))
            proc.invoked[index] = len(self.run.steps) * STEP_NS
            return False
        if message.kind == "op":
            op = message.value
            self.run.steps.append(Step(proc.name, "returned",
                                       f"{op.call_text()} {op.outcome_text()}"))  # fmt: skip
            end = len(self.run.steps) * STEP_NS
            self.run.ops.append(replace(op, invoked_ns=proc.invoked[op.index], returned_ns=end))
            return False
        if message.kind in FINAL_KINDS:
            proc.child._collect_final(f"{proc.name}'s exit")
            proc.status = "done"
            if message.kind == "raise":
                self.run.failures.append(f"{proc.name} failed outside an operation: "
                                         f"{message.value.describe()}")  # fmt: skip
                self.run.errors.append(message.value)
            return True
        raise AssertionError(f"{proc.name} sent an unexpected {message.kind!r} message")

    # -- blocked processes --

    def _stop_asleep(self, proc: _Proc) -> bool:
        """SIGSTOP ``proc``; if the stop caught it inside the busy handler's sleep (not in
        a retry, where it may hold a SHARED lock for a moment) it is blocked: True."""
        _lock_view.stop(proc.child.pid, DEADLINE_S)
        if not _lock_view.stopped_asleep(proc.child.pid):
            _lock_view.resume(proc.child.pid)
            return False
        proc.status = "blocked"
        self.run.steps.append(Step(proc.name, "blocked", proc.at))
        return True

    def _may_proceed(self, proc: _Proc) -> bool:
        """Nothing in ``proc``'s way: no other process holds a write lock (RESERVED or
        more), and if ``proc`` writes (it waits to commit) no other holds any lock. On a
        server: the server no longer says it waits."""
        if self.waits is not None and proc.kind == "wire":
            return not self.waits.still_waiting(proc.child.pid)
        locks = self._locks()
        others = [lock for lock in locks if lock.pid != proc.child.pid]
        writes = any(lock.write for lock in locks if lock.pid == proc.child.pid)
        if _lock_view.wal(self.path):  # readers never stop a WAL writer; every connection reads
            return not any(lock.write for lock in others)
        return not any(lock.write for lock in others) and not (writes and others)

    def _would_block(self, proc: _Proc) -> bool:
        """SQLite's locking says so: a process holding no lock that asks for the write
        lock (BEGIN IMMEDIATE, or a write outside a read transaction) while another holds
        it waits in the busy handler, holding nothing; running it now is the schedule where
        it runs once the lock is free (that one is explored). Counted as pruned."""
        if proc.kind != "stmt" or not proc.at.lstrip().upper().startswith(_WRITE_LOCK):
            return False
        locks = self._locks()
        if any(lock.pid == proc.child.pid for lock in locks):
            return False
        blocked = any(lock.write for lock in locks)
        if blocked and self.search is not None:
            self.search.skipped += 1
        return blocked

    def _locks(self) -> list[_lock_view.FileLock]:
        if self.locks is None:
            self.locks = _lock_view.locks_on(self.path)
        return self.locks

    def _wake(self) -> None:
        """Continue each blocked process whose lock is free, one at a time, by name."""
        while True:
            free = [p for p in self.procs if p.status == "blocked" and self._may_proceed(p)]
            if not free:
                return
            self._resume(free[0])

    def _resume(self, proc: _Proc) -> None:
        proc.seen.append(("resumed", proc.at, _digest(self.path)))
        self.run.steps.append(Step(proc.name, "resumed", proc.at))
        proc.status, self.locks = "running", None
        _lock_view.resume(proc.child.pid)
        self._settle(proc, watch=False)


def _digest(path: Path) -> str:
    """The file's bytes and its WAL's (its committed state: uncommitted pages stay in the
    writer's cache; a WAL database commits into the ``-wal`` file)."""
    digest = hashlib.blake2b(digest_size=12)
    parts = sorted(path.rglob("*")) if path.is_dir() else [path, Path(f"{path}-wal")]
    for part in parts:  # a directory store (files, or a server's): every file in it
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            digest.update(part.read_bytes())
        digest.update(b"|")
    return digest.hexdigest()


# --- the verdict ----------------------------------------------------------------------------


def _tickets(ops: list[Operation]) -> list[tuple[str, tuple[Any, Any]]]:
    """(label, (job id, token)) of every lease a claim or run_once reported winning."""
    found = []
    for op in ops:
        value = op.result
        if op.name in ("claim", "run_once", "run_file") and type(value) is dict:
            found.append((op.label(), (value.get("id"), value.get("token"))))
    return found


def judge(scenario: Scenario, run: Run) -> tuple[str | None, Verdict | None]:
    """None if the run is linearizable against the model (with the file read at the end),
    with one winner per job and generation and no job lost; else a sentence why not."""
    if run.failures:
        return "; ".join(run.failures), None
    busy = [
        (op, op.outcome) for op in run.ops if op.outcome is not None and op.outcome.error == BUSY
    ]
    if busy:
        op, error = busy[0]
        return (
            f"{op.label()} {op.call_text()} raised 'database is locked' ({error.detail}); "
            "in this schedule every lock is held for a few statements, well inside the "
            "spec's 1 s busy timeout, so the wait should have been absorbed: the transaction "
            "took its write lock late (a deferred BEGIN upgraded to a write fails at once "
            "under a concurrent writer; lease-worker.md: read-then-write is one BEGIN "
            "IMMEDIATE transaction)"
        ), None
    if run.integrity != "ok":
        return f"PRAGMA integrity_check says {run.integrity!r}", None
    winners: dict[tuple[Any, Any], str] = {}
    for label, key in _tickets(run.ops):
        if key in winners:
            return (f"two winners of job {key[0]!r} generation (token) {key[1]}: "
                    f"{winners[key]} and {label}"), None  # fmt: skip
        winners[key] = label
    assert run.final is not None
    enqueued = {op.args["event"]["id"] for op in run.ops
                if op.name == "enqueue" and op.outcome == LeaseOutcome(True)}  # fmt: skip
    lost = sorted({row.id for row in scenario.initial.jobs} | enqueued)
    lost = [job for job in lost if run.final.job(job) is None]
    if lost:
        return f"job(s) {lost} are missing from the file at the end (a lost job)", None
    end = max((op.returned_ns or 0 for op in run.ops), default=0)
    final = LeaseOutcome(run.final)
    read = Operation("harness", 1, HarnessStep(), end + STEP_NS, end + 2 * STEP_NS, final)
    verdict = check([*run.ops, read], LeaseSpec(), scenario.initial)
    if verdict.linearizable:
        return None, verdict
    return (
        "not linearizable against the model (each operation's call and return are "
        "steps counted from step 1 of the schedule above, shown as ms):\n" + verdict.report()
    ), verdict


def _finish(scenario: Scenario, run: Run, path: Path) -> None:
    con = sqlite3.connect(path, isolation_level=None, timeout=1)
    try:
        run.final = read_snapshot(con)
        run.integrity = str(con.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        con.close()
    run.problem, run.verdict = judge(scenario, run)


# --- replay and search ----------------------------------------------------------------------


def _template(module: ModuleType, scenario: Scenario, directory: Path) -> bytes:
    """The seeded queue file's bytes, made once with the target's own ``open_queue``."""
    path = directory / "template.db"
    path.unlink(missing_ok=True)
    con = module.open_queue(str(path))
    try:
        write_snapshot(con, scenario.initial)
    finally:
        con.close()
    data = path.read_bytes()
    path.unlink()
    return data


def _one(
    module: ModuleType, scenario: Scenario, template: bytes, directory: Path,
    prefix: tuple[str, ...], search: _Search | None, engine: Engine,
) -> Run:  # fmt: skip
    path = directory / "interleave.db"
    path.write_bytes(template)
    try:
        run = _Runner(module, scenario, path, prefix, search, engine).execute()
        if not run.pruned:
            _finish(scenario, run, path)
        return run
    finally:
        for leftover in (path, Path(f"{path}-journal")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def replay(module: ModuleType, schedule: Schedule, directory: Path) -> Run:
    """Run exactly ``schedule`` on ``module`` (in a file in ``directory``) and judge it."""
    scenario = by_name(schedule.scenario)
    template = _template(module, scenario, directory)
    with Engine(DEADLINE_S) as engine:
        return _one(module, scenario, template, directory, schedule.choices, None, engine)


@dataclass
class Exploration:
    """The figures of one explored scenario, and its first failing run (fewest switches)."""

    scenario: Scenario
    bound: int | None
    explored: int = 0
    pruned: int = 0
    """Alternatives not run because they would only block."""
    cut: int = 0
    """Runs cut where they reached a state already reached with no more preemptions."""
    points: int = 0
    """The most statements and hooks one schedule released."""
    seconds: float = 0.0
    failure: Run | None = None


def explore(
    module: ModuleType, scenario: Scenario, directory: Path, bound: int | None,
    limit: int = 20_000, prune: bool = True,
) -> Exploration:  # fmt: skip
    """Every schedule of ``scenario`` with at most ``bound`` preemptions (None: all),
    cheapest first; stops at the first failing one. ``prune=False`` (for the benchmark)
    runs every schedule, with neither state hashing nor the would-block rule."""
    template = _template(module, scenario, directory)

    def one(prefix: tuple[str, ...], search: _Search | None, engine: Engine) -> Run:
        return _one(module, scenario, template, directory, prefix, search, engine)

    return run_schedules(one, scenario, bound, limit, prune)


class ServerWaits(Protocol):
    """What a server says of a process: a connection of it waits for a lock, or (a
    blocking command) for another's write; told the command each release runs."""

    def released(self, pid: int, text: str) -> None: ...
    def waiting(self, pid: int) -> bool: ...
    def still_waiting(self, pid: int) -> bool: ...


RunOne = Callable[[tuple[str, ...], "_Search | None", Engine], Run]
"""Run (and judge) one schedule from its prefix of choices, feeding the search."""


def run_with(
    body_of: BodyOf, scenario: Any, path: Path, prefix: tuple[str, ...],
    search: _Search | None, engine: Engine, waits: ServerWaits | None = None,
) -> Run:  # fmt: skip
    """One schedule of ``scenario``'s programs on the file ``path``, each process's body
    made by ``body_of`` (another library's calls, scheduled by this engine); not judged.
    ``waits``: on a server, which processes the server says wait for a lock."""
    return _Runner(None, scenario, path, prefix, search, engine, body_of, waits).execute()


def run_schedules(
    one: RunOne, scenario: Any, bound: int | None, limit: int = 20_000, prune: bool = True
) -> Exploration:
    """The search: every schedule ``one`` can run with at most ``bound`` preemptions,
    cheapest first, until the first whose ``problem`` is set."""
    started = time.monotonic()
    result = Exploration(scenario, bound)
    search = _Search(bound, prune)
    with Engine(DEADLINE_S) as engine:
        while (prefix := search.pop()) is not None and result.explored < limit:
            run = one(prefix, search, engine)
            result.pruned = search.skipped
            if run.pruned:
                result.cut += 1
                continue
            result.explored += 1
            result.points = max(result.points, run.points)
            if run.problem is not None:
                result.failure = run
                break
    result.seconds = time.monotonic() - started
    return result
