"""Every schedule of two real dispatcher processes, up to a bound, checked against the model.

Two children forked by the fork engine (``crash_harness.engine``) share one queue
file holding the scope's jobs. Each runs the program "claim at t=1000; if it got a
ticket, finish it 'ok'" with the engine's blocking ``fault`` hook, and pauses first at
a ``start`` point. The pauses are the scheduling points: at each one the controller
chooses which paused process goes on, or (up to ``kills`` times) SIGKILLs a process
paused at a hook. A process that was told to go is *blocked* when the kernel shows it
asleep in SQLite's busy handler while another process holds a lock on the file
(``_lock_view.next_or_blocked``, the interleavings engine's test: observed, never
guessed from silence); it is waited for once no paused process holds the lock. The
enumeration is a stateless depth-first search: a schedule is its list of choices,
each run forks fresh children, and every alternative at every decision is tried.

Verdicts do not depend on timing: a run's outcome (what each process saw, where it
was killed, the final stored state, ``PRAGMA integrity_check``) must equal the
outcome of *some* serial execution of the same operations in the model, with a kill
before COMMIT meaning "no effect" and after COMMIT "committed, result unseen". Every
schedule is a JSON list of choices; ``replay`` runs one again exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from leasecheck.crash_harness import _lock_view
from leasecheck.crash_harness.engine import GO, Channel, Child, Engine, Message
from leasecheck.crash_harness.zygote import Task
from leasecheck.models import lease_model
from leasecheck.models.contracts import JobRow, Snapshot
from leasecheck.models.evidence import Evidence, Recorder, Token
from leasecheck.targets.lease_target import read_snapshot, write_snapshot

__all__ = ["BOUNDS", "Run", "Schedule", "enumerate_schedules", "evidence", "replay"]

NOW = 1000
LEASE_MS = 1000
NAMES = ("A", "B")
IN_TRANSACTION = frozenset({"after-claim", "after-finish", "after-audit", "after-redrive"})
DEADLINE_S = 30.0
"""How long a process may take to reach its next hook point or be seen blocked."""
BUSY_TIMEOUT_MS = 20_000
"""Raised in the children, so a blocked process outlives any scheduling delay."""
BOUNDS = {"small": ((1, 0),), "ci": ((1, 1), (2, 0)), "deep": ((1, 2), (2, 1), (2, 2))}
"""scope -> the bounds it runs: (jobs in the queue, SIGKILLs per schedule)."""


@dataclass(frozen=True)
class Schedule:
    """One schedule: the queue's job count, the kill bound and the controller's choices."""

    jobs: int
    kills: int
    choices: tuple[str, ...]
    """'A' / 'B': let that paused process go on; 'kill:A' / 'kill:B': SIGKILL it."""

    def to_json(self) -> str:
        return json.dumps({"jobs": self.jobs, "kills": self.kills, "choices": self.choices})

    @classmethod
    def from_json(cls, text: str) -> Schedule:
        data = json.loads(text)
        return cls(int(data["jobs"]), int(data["kills"]), tuple(data["choices"]))


@dataclass
class Run:
    """What one schedule did."""

    schedule: Schedule
    steps: list[str] = field(default_factory=list)
    seen: dict[str, list[Any]] = field(default_factory=dict)
    """Per process: each operation's result, in order."""
    killed: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Per killed process: (index of the operation it was in, the hook point)."""
    errors: dict[str, str] = field(default_factory=dict)
    final: Snapshot = field(default_factory=Snapshot)
    integrity: str = "ok"
    options: list[tuple[str, ...]] = field(default_factory=list)
    """The choices that were open at each decision (for the search)."""
    problem: str | None = None
    diverged: bool = False
    """A recorded choice was not open when run again (a timing-dependent 'blocked')."""
    record: Recorder = field(default_factory=Recorder)
    """Each decision and result as it happened, on its process's lane (the evidence);
    every operation runs at t=NOW, so they stand side by side in order."""

    def describe(self) -> str:
        lines = [f"  {n}. {step}" for n, step in enumerate(self.steps, 1)]
        lines.append(f"  seen: {self.seen}; killed: {self.killed}; errors: {self.errors}")
        lines.append("  final state:\n" + self.final.describe())
        return "\n".join(lines)


def initial_state(jobs: int) -> Snapshot:
    rows = tuple(
        JobRow(f"j{i}", 1, "pending", 0, 3, 0, available_at=NOW - 10, deadline=NOW + 60_000)
        for i in range(1, jobs + 1)
    )
    return Snapshot(rows)


# --- the children -----------------------------------------------------------------------


def _program(module: ModuleType, path: Path, owner: str) -> Task:
    """The dispatcher's program; a ``Task``, so the zygote forks it (a small process)."""
    return Task(_run_program, (module, path, owner))


def _run_program(module: ModuleType, path: Path, owner: str, channel: Channel) -> list[Any]:
    con = module.open_queue(str(path))
    con.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    channel.fault("start")
    ticket = module.claim(con, owner, NOW, LEASE_MS, channel.fault)
    channel.send("event", ticket)
    results: list[Any] = [ticket]
    if ticket is not None:
        status = module.finish(con, ticket, "ok", NOW, 0, channel.fault)
        channel.send("event", status)
        results.append(status)
    con.close()
    return results


# --- one run ------------------------------------------------------------------------------


@dataclass
class _Proc:
    child: Child
    point: str | None = None
    """The point it is paused at, None while running or blocked."""
    done: bool = False
    op: int = 0


def replay(module: ModuleType, directory: Path, schedule: Schedule, strict: bool = True) -> Run:
    """Run ``schedule`` (then the first open choice at each further decision).

    ``strict``: a recorded choice that is not open raises ValueError; otherwise the run
    takes the first open choice and is marked ``diverged``.
    """
    path = directory / "schedule.db"
    path.unlink(missing_ok=True)
    con = module.open_queue(str(path))
    try:
        write_snapshot(con, initial_state(schedule.jobs))
    finally:
        con.close()
    run = Run(schedule, seen={name: [] for name in NAMES})
    with Engine(deadline_s=DEADLINE_S) as engine:
        procs = {n: _Proc(engine.fork(n, _program(module, path, n))) for n in NAMES}
        for name, proc in procs.items():
            _await(run, name, proc, None)
        _drive(run, procs, list(schedule.choices), strict, path)
    _finish(run, module, path)
    return run


def _drive(run: Run, procs: dict[str, _Proc], choices: list[str], strict: bool, path: Path) -> None:
    taken: list[str] = []
    while not all(p.done for p in procs.values()):
        if not _lock_held(procs):
            _wake_blocked(run, procs)  # nobody paused holds the lock: they get it now
        options = _options(run, procs)
        if not options:
            continue
        choice = choices[len(taken)] if len(taken) < len(choices) else options[0]
        if choice not in options:
            if strict:
                raise ValueError(
                    f"schedule choice {choice!r} (decision {len(taken) + 1}) is not open"
                    f" here: {options}; the schedule was recorded on another target"
                )
            choice, run.diverged = options[0], True
        run.options.append(tuple(options))
        taken.append(choice)
        _apply(run, procs, choice, path)
    run.schedule = Schedule(run.schedule.jobs, run.schedule.kills, tuple(taken))


def _options(run: Run, procs: dict[str, _Proc]) -> list[str]:
    paused = [n for n, p in procs.items() if p.point is not None]
    kills_left = len(run.killed) < run.schedule.kills
    kills = [f"kill:{n}" for n in paused if kills_left and procs[n].point != "start"]
    return paused + kills


def _apply(run: Run, procs: dict[str, _Proc], choice: str, path: Path) -> None:
    if choice.startswith("kill:"):
        name = choice[5:]
        proc = procs[name]
        run.killed[name] = (proc.op, proc.point or "?")
        run.steps.append(f"{name} is SIGKILLed at {proc.point!r}")
        run.record.event("kill", name, NOW, f"{name} SIGKILLed at {proc.point}")
        for message in proc.child.kill():
            _note(run, name, proc, message)
        proc.done, proc.point = True, None
        return
    proc = procs[choice]
    run.steps.append(f"{choice} goes on from {proc.point!r}")
    run.record.step(choice, f"{choice} goes on from {proc.point!r}", "resume", NOW)
    proc.point = None
    proc.child.answer(GO)
    _await(run, choice, proc, path if _lock_held(procs) else None)


def _lock_held(procs: dict[str, _Proc]) -> bool:
    return any(p.point in IN_TRANSACTION for p in procs.values())


def _await(run: Run, name: str, proc: _Proc, locked: Path | None) -> None:
    """Read ``proc``'s messages until it pauses or ends (or, while another process holds
    a lock on the file ``locked``, until the kernel shows it waiting for that lock)."""
    waiting = f"{name}'s next hook point"
    while True:
        if locked is None:
            message: Message | None = proc.child.next(waiting)
        else:
            got = _lock_view.next_or_blocked([proc.child], locked, waiting, DEADLINE_S)
            message = got[1] if got else None
        if message is None:
            run.steps.append(f"{name} is blocked (asleep in SQLite's busy handler: the write lock)")
            run.record.step(name, f"{name} is blocked on the write lock", "blocked", NOW)
            return
        if _note(run, name, proc, message):
            return


def _note(run: Run, name: str, proc: _Proc, message: Message) -> bool:
    """Record one message; True when the process paused or ended."""
    if message.kind == "event":
        run.seen[name].append(message.value)
        _result(run, name, proc.op, message.value)
        proc.op += 1
        return False
    if message.kind == "point":
        proc.point = message.value
        return True
    if message.kind == "raise":
        run.errors[name] = message.value.describe()
        what = "claim" if proc.op == 0 else "finish"
        run.record.step(name, f"{what} raised", what, NOW, target=run.errors[name])
    proc.done = True
    proc.child._collect_final(f"{name}'s last message")  # reap; checks a clean exit
    return True


def _result(run: Run, name: str, op: int, value: Any) -> None:
    """Record what operation ``op`` of process ``name`` returned, and the lease it got."""
    what = "claim" if op == 0 else "finish"
    ticket = value if isinstance(value, dict) else None
    job = str(ticket["id"]) if ticket else None
    token = ticket.get("token") if ticket else None
    call = f"claim({name!r}, {NOW}, {LEASE_MS})" if op == 0 else f"finish(ticket, 'ok', {NOW})"
    run.record.step(name, call, what, NOW, job, token, target=f"returned {value!r}")
    if ticket and isinstance(ticket.get("lease_until"), int):
        run.record.held(
            "target",
            [*_held(run, "target"), (str(ticket["id"]), token, name, ticket["lease_until"])],
            NOW,
        )


def _held(run: Run, side: str) -> list[tuple[str, Token, str, float]]:
    return [
        (lease.job, lease.token, lease.holder, lease.until)
        for (held_side, _, _), lease in run.record.live.items()
        if held_side == side
    ]


def evidence(run: Run) -> Evidence:
    """The failing run as evidence: the decisions, results and leases, parting at the end
    (the outcome no serial execution gives)."""
    text = (run.problem or "").splitlines()[0] if run.problem else ""
    for row in run.final.jobs:
        run.record.deadline(row.id, row.deadline)
    return run.record.evidence(text, extra_schedule=run.schedule.to_json())


def _wake_blocked(run: Run, procs: dict[str, _Proc]) -> None:
    """No paused process holds the lock: each blocked one gets it; wait for its next pause."""
    for name, proc in procs.items():
        if not proc.done and proc.point is None:
            run.steps.append(f"{name} gets the lock and goes on")
            run.record.step(name, f"{name} gets the write lock", "resume", NOW)
            _await(run, name, proc, None)


def _finish(run: Run, module: ModuleType, path: Path) -> None:
    con = module.open_queue(str(path))
    try:
        run.final = read_snapshot(con)
        run.integrity = str(con.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        con.close()
    run.problem = check(run)


# --- the verdict --------------------------------------------------------------------------


def _freeze(value: Any) -> Any:
    return tuple(sorted(value.items())) if isinstance(value, dict) else value


def check(run: Run) -> str | None:
    """None if some serial model execution explains ``run``, else a sentence why not."""
    if run.errors:
        return f"an operation raised: {run.errors}"
    if run.integrity != "ok":
        return f"PRAGMA integrity_check says {run.integrity!r}"
    seen = tuple(tuple(_freeze(v) for v in run.seen[n]) for n in NAMES)
    allowed = set(_serial_outcomes(initial_state(run.schedule.jobs), run.killed))
    if (run.final, seen) in allowed:
        return None
    return (
        "no serial execution of these operations in the model gives this outcome "
        f"(the model allows {len(allowed)} outcome(s); e.g. seen "
        f"{next(iter(allowed))[1] if allowed else '-'})"
    )


def _serial_outcomes(
    state: Snapshot, killed: dict[str, tuple[int, str]]
) -> Iterator[tuple[Snapshot, tuple[tuple[Any, ...], ...]]]:
    start = {n: (0, None, ()) for n in NAMES}
    yield from _serial(state, start, killed)


def _serial(
    state: Snapshot,
    procs: dict[str, tuple[int, Any, tuple[Any, ...]]],
    killed: dict[str, tuple[int, str]],
) -> Iterator[tuple[Snapshot, tuple[tuple[Any, ...], ...]]]:
    """Every (final state, results seen) of a serial order of the two programs."""
    runnable = [n for n, (pc, ticket, _) in procs.items() if _has_next(pc, ticket)]
    if not runnable:
        yield state, tuple(procs[n][2] for n in NAMES)
        return
    for name in runnable:
        pc, ticket, seen = procs[name]
        step = (
            lease_model.claim(state, name, NOW, LEASE_MS)
            if pc == 0
            else lease_model.finish(state, ticket, "ok", NOW, 0)
        )
        if name in killed and killed[name][0] == pc:
            point = killed[name][1]
            if point in step.before_commit:
                after = state
            elif point in step.after_commit:
                after = step.state
            else:
                continue  # the model never pauses there: not this serial order
            yield from _serial(after, {**procs, name: (9, None, seen)}, killed)
            continue
        new = (pc + 1, step.result if pc == 0 else None, (*seen, _freeze(step.result)))
        yield from _serial(step.state, {**procs, name: new}, killed)


def _has_next(pc: int, ticket: Any) -> bool:
    return pc == 0 or (pc == 1 and ticket is not None)


# --- the search ----------------------------------------------------------------------------


def enumerate_schedules(
    module: ModuleType, directory: Path, jobs: int, kills: int, limit: int = 10_000
) -> tuple[int, Run | None]:
    """Run every schedule (depth-first over the open choices); (count, first failing run)."""
    stack: list[tuple[str, ...]] = [()]
    count = 0
    while stack and count < limit:
        prefix = stack.pop()
        run = replay(module, directory, Schedule(jobs, kills, prefix), strict=False)
        count += 1
        if run.problem is not None:
            return count, run
        taken = run.schedule.choices
        if run.diverged:
            continue  # its subtree was entered through another recorded prefix
        for index in range(len(taken) - 1, len(prefix) - 1, -1):
            for alternative in run.options[index]:
                if alternative != taken[index]:
                    stack.append((*taken[:index], alternative))
    return count, None


def save(run: Run, directory: Path) -> Path:
    """Write the failing schedule as JSON (replay it with ``Schedule.from_json``)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"schedule-{abs(hash(run.schedule.choices)) % 10**8}.json"
    path.write_text(run.schedule.to_json())
    return path
