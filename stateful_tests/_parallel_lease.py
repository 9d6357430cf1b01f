"""Run a ``ParallelProgram`` against a lease worker: forked processes, one SQLite file.

The prefix runs in the harness process on its own connection, which is closed
before any fork. Each suffix runs in a child forked by the crash-harness engine;
the child opens its own connection, says it is ready (a barrier: nobody starts
before all have opened), and then stops before every SQL statement until the
harness lets it go (``channel.trace``). The harness keeps exactly one child
running, from the start (the children start one by one, by name, each until it
waits at its first statement): when every live child waits at a statement it lets
the last one go on, or with probability ``switch_percent`` % another one
(``random.Random(seed)`` of the program); a child that the kernel shows asleep in
SQLite's busy handler while another child holds a lock on the file is blocked
(``_lock_view.next_or_blocked``, the interleavings engine's test: observed, never
guessed from silence), so the harness lets another one run. A child is SIGKILLed at
the statement named by ``program.kill``.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from leasecheck.crash_harness import _lock_view
from leasecheck.crash_harness.engine import Channel, Child, Engine, Message
from leasecheck.crash_harness.zygote import Task
from leasecheck.models.lease_ops import LeaseOp, LeaseOutcome
from leasecheck.models.linearizability import (
    BUSY,
    OPEN_TRANSACTION,
    HarnessStep,
    Operation,
)
from leasecheck.targets.lease_compare import error_kind
from leasecheck.targets.lease_target import read_snapshot

if TYPE_CHECKING:
    # Types only: ``parallel`` imports Hypothesis, and the zygote imports this module to
    # fork the children (a process that forks after importing Hypothesis is about half
    # again as large, and every fork and exit from it costs that much more).
    from leasecheck.stateful_tests.parallel import ParallelProgram, ProgramOp

__all__ = ["run_lease_program"]

DEADLINE_S = 10.0


def _outcome(module: ModuleType, con: sqlite3.Connection, call: Callable[[], Any]) -> LeaseOutcome:
    try:
        value = call()
    except Exception as error:
        text = str(error).lower()
        busy = isinstance(error, sqlite3.OperationalError) and ("locked" in text or "busy" in text)
        kind = BUSY if busy else error_kind(error, module)
        outcome = LeaseOutcome(error=kind, detail=str(error))
    else:
        outcome = LeaseOutcome(value)
    if con.in_transaction:
        outcome = LeaseOutcome(error=OPEN_TRANSACTION, detail=f"after it {outcome.describe()}")
        con.execute("ROLLBACK")
    return outcome


def run_command(
    module: ModuleType,
    con: sqlite3.Connection,
    where: tuple[str, int],
    command: ProgramOp,
    held: list[dict[str, Any]],
    announce: Callable[[str, Any], None] | None = None,
) -> Operation | None:
    """Run one command on ``con``, keep a returned ticket in ``held``; the operation."""
    assert isinstance(command, LeaseOp), f"a lease program holds {command!r}"
    op = command.resolve(held)
    if op is None:
        return None
    started = time.monotonic_ns()
    if announce is not None:
        announce("invoke", (where[1], op, started))
    outcome = _outcome(module, con, lambda: op.apply(module, con))
    ended = time.monotonic_ns()
    if op.kind == "claim" and outcome.error is None and type(outcome.result) is dict:
        held.append(dict(outcome.result))
    return Operation(where[0], where[1], op, started, ended, outcome)


def _child(
    module: ModuleType, path: Path, name: str, suffix: tuple[ProgramOp, ...], held: list[Any]
) -> Callable[[Channel], str]:
    """Process ``name``'s part of the program; a ``Task``, so the zygote forks it (a small
    process) with a copy of ``held`` as it is now."""
    return Task(_run_child, (module, path, name, suffix, held))


def _run_child(
    module: ModuleType,
    path: Path,
    name: str,
    suffix: tuple[ProgramOp, ...],
    held: list[Any],
    channel: Channel,
) -> str:
    con = module.open_queue(str(path))
    try:
        channel.ask("ready")
        con.set_trace_callback(channel.trace)
        for index, command in enumerate(suffix, 1):
            op = run_command(module, con, (name, index), command, held, channel.send)
            if op is not None:
                channel.send("op", op)
        con.set_trace_callback(None)
        channel.ask("finished")
    finally:
        con.close()
    return name


class _Driver:
    """The harness side: keeps one child running, records operations, kills on cue."""

    def __init__(
        self, engine: Engine, children: list[Child], program: ParallelProgram, path: Path
    ) -> None:
        self.engine = engine
        self.path = path
        self.live = list(children)
        self.paused: list[Child] = []
        self.program = program
        self.rng = random.Random(program.seed)
        self.current: Child | None = None
        self.waiting_at: dict[Child, str] = {}
        self.in_transaction: set[Child] = set()
        self.statements = dict.fromkeys(children, 0)
        self.pending: dict[Child, tuple[int, LeaseOp, int]] = {}
        self.ops: list[Operation] = []

    def run(self) -> list[Operation]:
        for child in self.live:
            message = child.next("the child to open its connection and say it is ready")
            if message.kind != "ready":
                raise AssertionError(f"child {child.name} sent {message} before it was ready")
        for child in list(self.live):
            child.answer("start")
            self._to_first_statement(child)
        while self.live:
            running = [child for child in self.live if child not in self.paused]
            got = self._wait(running) if running else None
            if got is None:
                if not self.paused:
                    got = self.engine.wait_any(self.live, "a statement or a result")
                else:
                    self._release()
                    continue
            self._handle(*got)
        return self.ops

    def _to_first_statement(self, child: Child) -> None:
        """Run ``child`` alone until it waits at its first statement (or ends, or is killed).

        Started together, the children would reach their first statements in the order
        the kernel ran them: that order decided which child ``_release`` picked first and
        which operations ended before others began, so one program and seed gave two
        histories (a mutant's verdict flipped between runs). One at a time, by name, the
        start is the same in every run.
        """
        while child in self.live and child not in self.paused:
            self._handle(*self.engine.wait_any([child], "the child's first statement"))

    def _wait(self, running: list[Child]) -> tuple[Child, Message] | None:
        """The next message of a running child; None when every running child is seen
        blocked on a lock while others wait at a statement (one of them goes on then)."""
        waiting = "the running child's next statement"
        if not self.paused:
            return self.engine.wait_any(running, waiting)
        return _lock_view.next_or_blocked(running, self.path, waiting, DEADLINE_S)

    def _release(self) -> None:
        """Let one waiting child run its statement: the current one, or switch."""
        ready = [child for child in self.paused if not self._would_block(child)] or self.paused
        others = [child for child in ready if child is not self.current]
        switch = self.rng.randrange(100) < self.program.switch_percent
        stay = self.current in ready and not switch
        chosen = self.current if stay or not others else self.rng.choice(others)
        assert chosen is not None
        self.paused.remove(chosen)
        self.current = chosen
        statement = self.waiting_at.pop(chosen).lstrip().upper()
        if statement.startswith("BEGIN"):
            self.in_transaction.add(chosen)
        elif statement.startswith(("COMMIT", "END", "ROLLBACK")):
            self.in_transaction.discard(chosen)
        chosen.answer()

    def _would_block(self, child: Child) -> bool:
        """A write (or BEGIN) while another child is inside a transaction waits for its lock."""
        statement = self.waiting_at[child].lstrip().upper()
        writes = statement.startswith(("BEGIN", "INSERT", "UPDATE", "DELETE", "REPLACE"))
        return writes and any(other is not child for other in self.in_transaction)

    def _handle(self, child: Child, message: Message) -> None:
        if message.kind == "stmt":
            self.statements[child] += 1
            if self.program.kill == (int(child.name[1:]), self.statements[child]):
                self._kill(child)
            else:
                self.paused.append(child)
                self.waiting_at[child] = str(message.value)
        elif message.kind == "invoke":
            self.pending[child] = message.value
        elif message.kind == "op":
            self.pending.pop(child, None)
            self.ops.append(message.value)
        elif message.kind == "finished":
            child.answer()
            child.outcome(f"child {child.name} to close its connection and exit")
            self.live.remove(child)
        else:
            detail = message.value.describe() if message.kind == "raise" else repr(message.value)
            raise AssertionError(
                f"child {child.name} ended its commands abnormally ({message.kind}: {detail}); "
                "the target raised outside an operation or the harness lost a message"
            )

    def _kill(self, child: Child) -> None:
        for message in child.kill():
            if message.kind == "op":
                self._handle(child, message)
        ended = time.monotonic_ns()
        self.live.remove(child)
        self.in_transaction.discard(child)
        if child in self.pending:
            index, call, started = self.pending.pop(child)
            note = f"SIGKILLed before its SQL statement #{self.statements[child]}"
            self.ops.append(Operation(child.name, index, call, started, ended, None, note))


def run_lease_program(
    module: ModuleType, directory: Path, program: ParallelProgram
) -> list[Operation]:
    """Run ``program`` on a fresh queue file in ``directory``; the whole history.

    The last operation is the harness reading every stored row after all children
    ended: the model state at the end of the linearization must equal it.
    """
    path = directory / f"parallel-{os.getpid()}-{time.monotonic_ns()}.db"
    try:
        held: list[dict[str, Any]] = []
        ops: list[Operation] = []
        con = module.open_queue(str(path))
        try:
            for index, command in enumerate(program.prefix, 1):
                op = run_command(module, con, ("prefix", index), command, held)
                ops += [op] if op is not None else []
        finally:
            con.close()
        with Engine(DEADLINE_S) as engine:
            children = [
                engine.fork(f"P{n}", _child(module, path, f"P{n}", suffix, held))
                for n, suffix in enumerate(program.suffixes, 1)
            ]
            ops += _Driver(engine, children, program, path).run()
        ops.append(_final_read(path))
        return ops
    finally:
        for leftover in (path, Path(f"{path}-journal")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def _final_read(path: Path) -> Operation:
    started = time.monotonic_ns()
    con = sqlite3.connect(path, isolation_level=None, timeout=1)
    try:
        snapshot = read_snapshot(con)
    finally:
        con.close()
    return Operation(
        "harness", 1, HarnessStep(), started, time.monotonic_ns(), LeaseOutcome(snapshot)
    )
