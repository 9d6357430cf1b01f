"""Real processes racing on one queue store: queue.exclusive and queue.linearizable.

N racer processes (forked by the engine) each open one connection to the store. A
step hands each racer its calls (``claim``, ``ack``, ``nack`` of its own claims) and
opens a gate (one pipe all racers block on, written once with N bytes), so the calls
start together; each call is stamped with ``time.monotonic_ns`` on entry and return
(one clock for every process). Between steps the harness enqueues, moves the shared
clock and runs the library's recovery on its own connection, stamped the same way.

- ``check_exclusive``: claims only. No job may be held under two live leases: within
  a step no two racers get one job, and across steps no claim gets a job whose
  earlier lease (not acked) is still live by the shared clock.
- ``linear_history``: mixed calls, and an ``observe`` of the store after each step;
  the recorded history goes to ``models.linearizability.check`` with the generic
  model (``models._queue_spec.QueueSpec``).

The interleaving is up to the OS, so a run on a correct library can only pass (every
check accepts every order), and a race bug is caught by repetition: ``rounds``.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapters.protocol import Claim, QueueAdapter, QueueLibrary, SharedClock
from crash_harness.engine import Channel, Child, Engine
from models._history import Operation, Raised, Returned

__all__ = ["ExclusiveReport", "Racers", "check_exclusive", "linear_history"]

LEASE_MS = 10_050
"""A lease that stays live for the whole step (the clock only moves between steps)."""

Command = tuple[str, str, int]
"""(verb, claim id, lease ms): ``("claim", "P1#3", 10050)``, ``("ack", "P1#3", 0)``."""


def _run(
    queue: QueueAdapter, held: dict[str, Claim], who: str, command: Command
) -> Operation | None:
    """Run one command; None for an ack / nack of a claim that got no job (nothing to do)."""
    verb, cid, lease_ms = command
    if verb != "claim" and cid not in held:
        return None
    index = int(cid.rsplit("#", 1)[1])
    started = time.monotonic_ns()
    args: dict[str, Any] = {"cid": cid}
    try:
        if verb == "claim":
            args["lease_ms"] = lease_ms
            got = queue.claim(who, lease_ms / 1000)
            if got is not None:
                held[cid] = got
            outcome: Returned | Raised = Returned(None if got is None else got.job)
        else:
            args["job"] = held[cid].job
            call = queue.ack if verb == "ack" else queue.nack
            outcome = Returned(call(held[cid]) is True)
    except Exception as error:
        outcome = Raised(type(error).__name__, str(error))
    return Operation(who, index, verb, args, started, time.monotonic_ns(), outcome)


def _racer_body(
    library: QueueLibrary, location: str, clock_path: Path, who: str, gate: int
) -> Callable[[Channel], None]:
    def body(channel: Channel) -> None:
        queue = library.connect(location, SharedClock(clock_path))
        held: dict[str, Claim] = {}
        try:
            while (commands := channel.receive()) is not None:
                if os.read(gate, 1) != b"g":
                    return
                made = [_run(queue, held, who, command) for command in commands]
                channel.send("event", [op for op in made if op is not None])
        finally:
            queue.close()

    return body


@dataclass
class Racers:
    """The racer processes, the harness's own connection, and the history so far."""

    library: QueueLibrary
    engine: Engine
    directory: Path
    processes: int
    history: list[Operation] = field(default_factory=list)
    counter: int = 0

    def __post_init__(self) -> None:
        self.scale = self.library.capabilities.time_scale()
        self.clock = SharedClock(self.directory / "clock")
        self.location = self.library.create(self.directory, None)
        self.queue = self.library.connect(self.location, self.clock)
        self.gate_r, self.gate_w = os.pipe()
        self.children: list[Child] = [
            self.engine.fork(
                f"P{i}",
                _racer_body(self.library, self.location, self.clock.path, f"P{i}", self.gate_r),
            )
            for i in range(1, self.processes + 1)
        ]

    def cid(self, racer: int) -> str:
        self.counter += 1
        return f"P{racer + 1}#{self.counter}"

    def step(self, commands: list[list[Command]]) -> list[Operation]:
        """Release every racer with its commands at once; their operations."""
        for child, mine in zip(self.children, commands, strict=True):
            child.answer(mine)
        os.write(self.gate_w, b"g" * len(self.children))
        made: list[Operation] = []
        for child in self.children:
            made += child.next(f"racer {child.name} to finish its step").value
        self.history += made
        return made

    def harness(self, name: str, call: Callable[[], Any], **args: Any) -> Any:
        """One call on the harness's own connection, recorded in the history."""
        self.counter += 1
        started = time.monotonic_ns()
        value = call()
        self.history.append(
            Operation("H", self.counter, name, args, started, time.monotonic_ns(), Returned(value))
        )
        return value

    def enqueue(self, job: str) -> None:
        self.harness("enqueue", lambda: self.queue.enqueue(job, f"payload of {job}"), job=job)

    def advance(self, ms: int) -> None:
        self.harness("advance", lambda: self.clock.advance(ms / 1000), ms=ms)

    def recover(self) -> int:
        returned: int = self.harness("recover", self.queue.recover)
        return returned

    def observe(self) -> None:
        self.harness("observe", lambda: tuple((v.job, v.state) for v in self.queue.observe()))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            for child in self.children:
                child.answer(None)
                child.outcome(f"racer {child.name} to stop")
        self.queue.close()
        self.clock.close()
        for fd in (self.gate_r, self.gate_w):
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass
class ExclusiveReport:
    rounds: int = 0
    claims: int = 0
    wins: int = 0

    def render(self) -> str:
        return f"{self.rounds} race rounds: {self.claims} claims, {self.wins} won, no job twice"


def check_exclusive(
    library: QueueLibrary, directory: Path, processes: int, rounds: int, seed: int
) -> ExclusiveReport:
    """Claim races; raise AssertionError when one job is held under two live leases."""
    rng = random.Random(f"queue.exclusive:{seed}")
    report = ExclusiveReport()
    with Engine() as engine:
        racers = Racers(library, engine, directory, processes)
        try:
            live: dict[str, tuple[str, int]] = {}
            now = 0
            for number in range(rounds):
                for index in range(rng.randint(1, max(1, processes - 1))):
                    racers.enqueue(f"r{number}j{index}")
                lease = LEASE_MS * racers.scale
                claims = [[("claim", racers.cid(i), lease)] for i in range(processes)]
                made = racers.step(claims)
                _check_claims(made, live, now, lease, library.name)
                report.claims += len(made)
                report.wins += sum(_job(op) is not None for op in made)
                now += _between(racers, rng, made, live)
                report.rounds += 1
        finally:
            racers.close()
    return report


def _job(op: Operation) -> str | None:
    return op.outcome.value if isinstance(op.outcome, Returned) else None


def _check_claims(
    made: list[Operation], live: dict[str, tuple[str, int]], now: int, lease: int, name: str
) -> None:
    for op in made:
        job = _job(op)
        if job is None:
            continue
        holder = live.get(job)
        if holder is not None and now < holder[1]:
            raise AssertionError(
                f"queue.exclusive violated by {name}: {op.args['cid']} claimed job {job!r} at "
                f"t={now} ms while {holder[0]}'s lease on it was live until t={holder[1]} ms "
                f"(both claims are real processes racing: two live leases on one job)"
            )
        live[job] = (str(op.args["cid"]), now + lease)


def _between(
    racers: Racers, rng: random.Random, made: list[Operation], live: dict[str, tuple[str, int]]
) -> int:
    """Ack some wins (their jobs are done, not leased), then maybe let leases run out."""
    acks: list[list[Command]] = [[] for _ in racers.children]
    for op in made:
        if _job(op) is not None and rng.random() < 0.5:
            acks[int(op.process[1:]) - 1].append(("ack", str(op.args["cid"]), 0))
    for op in racers.step(acks) if any(acks) else []:
        if op.outcome == Returned(True):
            live.pop(str(op.args["job"]), None)
    if rng.random() < 0.5:
        return 0
    moved = (LEASE_MS + 50) * racers.scale
    racers.advance(moved)
    if rng.random() < 0.5:
        racers.recover()
    return moved


def linear_history(
    library: QueueLibrary, directory: Path, processes: int, rounds: int, seed: int
) -> list[Operation]:
    """Rounds of mixed concurrent calls and harness steps; the whole recorded history."""
    rng = random.Random(f"queue.linearizable:{seed}")
    with Engine() as engine:
        racers = Racers(library, engine, directory, processes)
        try:
            held: list[list[str]] = [[] for _ in range(processes)]
            for number in range(rounds):
                for index in range(rng.randint(0, 2)):
                    racers.enqueue(f"r{number}j{index}")
                racers.step([_mixed(racers, rng, i, held[i]) for i in range(processes)])
                racers.observe()
                if rng.random() < 0.4:
                    racers.advance(rng.choice((1000, LEASE_MS + 50)) * racers.scale)
                if rng.random() < 0.3:
                    racers.recover()
                    racers.observe()
        finally:
            racers.close()
    return racers.history


def _mixed(racers: Racers, rng: random.Random, racer: int, held: list[str]) -> list[Command]:
    """One or two calls: a claim, or an ack / nack of a claim this racer made."""
    commands: list[Command] = []
    for _ in range(rng.randint(1, 2)):
        if held and rng.random() < 0.5:
            verb = "nack" if racers.library.capabilities.nack and rng.random() < 0.3 else "ack"
            commands.append((verb, held.pop(rng.randrange(len(held))), 0))
        else:
            cid = racers.cid(racer)
            held.append(cid)
            commands.append(("claim", cid, LEASE_MS * racers.scale))
    return commands
