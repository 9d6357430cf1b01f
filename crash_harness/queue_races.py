"""Real processes racing on one queue store: queue.exclusive and queue.linearizable.

N racer processes (forked by the engine) each open one connection to the store. A
step hands each racer its calls (``claim``, ``ack``, ``nack`` of its own claims) and
opens a gate (one pipe all racers block on, written once with N bytes), so the calls
start together; each call is stamped with ``time.monotonic_ns`` on entry and return
(one clock for every process). Between steps the harness enqueues, moves the shared
clock and runs the library's recovery on its own connection, stamped the same way.

- ``check_exclusive``: claim races. No job may be held under two live leases: within
  a step no two racers get one job, and across steps no claim gets a job whose
  earlier lease (not acked) is still live by the shared clock. Between races, claims
  whose job another claim has taken since (stale claims) send their nack or extend,
  as a worker back from a pause would: a stale nack the library takes must not make
  a job claimable under another claim's live lease. A round is *raced* when at
  least two racers' claims were released together (a run with none raced nothing);
  how many of those claims really ran at once (their calls overlapped in time) is
  up to the OS and is reported, not judged.
- ``linear_history``: mixed calls, and an ``observe`` of the store after each step;
  the recorded history goes to ``models.linearizability.check`` with the generic
  model (``models._queue_spec.QueueSpec``).

The interleaving is up to the OS, so a run on a correct library can only pass (every
check accepts every order), and a race bug is caught by repetition: ``rounds``.

On a real clock (``clock="real"``) leases last ``REAL.lease`` ms and a clock move
sleeps. A claim then counts as a second live lease only if it returned before the
first lease could have ended (its start plus the lease, less ``MARGIN_MS``); the
history keeps every call clear of lease ends (``adapters.timing.Pacer``) and stops
before a step whose call was descheduled across one.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from leasecheck.adapters.protocol import (
    Capabilities,
    Claim,
    QueueAdapter,
    QueueLibrary,
    ReportsLosses,
    SharedClock,
    Unsupported,
    destroy_store,
)
from leasecheck.adapters.timing import MARGIN_MS, Pacer
from leasecheck.crash_harness.engine import Channel, Child, Engine
from leasecheck.models._history import Operation
from leasecheck.models.evidence import Evidence, Recorder, attach
from leasecheck.models.evidence import Lease as Held
from leasecheck.models.queue_ops import QueueOp, QueueOutcome
from leasecheck.models.shrinking import Budget, Shrunk, shrink

__all__ = [
    "Action",
    "ExclusiveReport",
    "Racers",
    "StaleCallBreach",
    "check_exclusive",
    "linear_history",
    "linear_run",
    "replay_script",
    "shrink_script",
]

F = TypeVar("F")


@dataclass(frozen=True)
class RaceTime:
    """The lease of every claim, a move that leaves it live and one past it (ms)."""

    lease: int
    short: int
    past: int


SHARED = RaceTime(lease=10_050, short=1000, past=10_100)
"""On a clock the harness moves: the lease stays live for the whole step (the clock only
moves between steps); times are stretched by the library's ``time_scale``."""
REAL = RaceTime(lease=80, short=15, past=95)
"""On real time: a step takes a few ms, so an 80 ms lease outlives it."""
PROBE_REAL_MS = 1000
"""On real time, the lease of the stale-call probes' claims (``_stale_probe``)."""

RaceCommand = tuple[str, str, int]
"""A racer's program entry, before its claim's job is known (``_record`` makes the
``QueueOp``): (verb, claim id, lease ms): ``("claim", "P1#3", 10050)``, ``("ack", "P1#3", 0)``,
``("extend", "P1#3", 10050)``."""


def _run(
    queue: QueueAdapter, held: dict[str, Claim], who: str, command: RaceCommand
) -> Operation | None:
    """Run one command; None for an ack / nack / extend of a claim that got no job."""
    verb, cid, lease_ms = command
    if verb != "claim" and cid not in held:
        return None
    index = int(cid.rsplit("#", 1)[1])
    op = _record(verb, cid, lease_ms, held)
    started = time.monotonic_ns()
    value, got = op.run(queue, held, worker=who)
    if verb == "claim" and value is not None:
        held[cid] = value
    outcome = got if got.error or verb == "claim" else QueueOutcome(got.result is True)
    return Operation(who, index, op, started, time.monotonic_ns(), outcome)


def _record(verb: str, cid: str, lease_ms: int, held: dict[str, Claim]) -> QueueOp:
    """The command as the generic queue's record, once the claim's job is known."""
    if verb == "claim":
        return QueueOp.of("claim", cid, lease_ms)
    if verb == "extend":
        return QueueOp.of("extend", cid, held[cid].job, lease_ms)
    return QueueOp.of(verb, cid, held[cid].job)


def _racer_body(
    library: QueueLibrary, location: str, clock_path: Path, who: str, gate: int
) -> Callable[[Channel], None]:
    def body(channel: Channel) -> None:
        clock = SharedClock.of(clock_path, library.capabilities)
        queue = library.connect(location, clock)
        held: dict[str, Claim] = {}
        try:
            while (commands := channel.receive()) is not None:
                if os.read(gate, 1) != b"g":
                    return
                made = [_run(queue, held, who, command) for command in commands]
                channel.send("event", [op for op in made if op is not None])
        finally:
            queue.close()
            clock.close()

    return body


@dataclass
class Racers:
    """The racer processes, the harness's own connection, and the history so far."""

    library: QueueLibrary
    engine: Engine
    directory: Path
    processes: int
    server: str | None = None
    """The URL of the server the library keeps its store on, if it needs one."""
    history: list[Operation] = field(default_factory=list)
    counter: int = 0

    def __post_init__(self) -> None:
        caps = self.library.capabilities
        real = caps.real_time
        self.pacer = Pacer(slack_ms=caps.slack_ms) if real else None
        scale = 1 if real else caps.time_scale()
        base = REAL if real else SHARED
        self.time = RaceTime(base.lease * scale, base.short * scale, base.past * scale)
        if real and caps.server_lease is not None:  # the server's one lease, ended on a tick
            lease = caps.real_lease_ms(REAL.lease)
            self.time = RaceTime(lease, REAL.short, lease + caps.slack_ms + REAL.past - REAL.lease)
        self.now = 0
        """The time the harness moved the shared clock to (ms); unused on a real clock."""
        self.disturbed = False
        """Real clock: whether a call has run across a lease's end (``Pacer.ambiguous``)."""
        self.blind = False
        """The library has no ``observe`` (``Unsupported``): the history has none."""
        self.lost = 0
        """Second deliveries set aside: the first claim's delivery was lost (``Lost``)."""
        self.clock = SharedClock.of(self.directory / "clock", self.library.capabilities)
        self.location = self.library.create(self.directory, self.server)
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

    def window(self, op: Operation) -> tuple[int, int]:
        """When ``op`` ran (ms): its real interval, or the shared clock's time."""
        if self.pacer is None or op.returned_ns is None:
            return self.now, self.now
        return self.pacer.since_start(op.invoked_ns), self.pacer.since_start(op.returned_ns)

    def clear(self) -> None:
        """Real clock: wait until no lease ends within the next call."""
        if self.pacer is not None:
            self.pacer.clear()

    def _timed(self, made: list[Operation]) -> None:
        """Real clock: note whether a call of ``made`` ran across a lease's end
        (``disturbed``), and the ends of the leases ``made`` took."""
        if self.pacer is None:
            return
        pacer = self.pacer
        if any(pacer.ambiguous(*self.window(op)) for op in made):
            self.disturbed = True
        for op in made:
            if op.name == "claim" and _job(op) is not None:
                pacer.leased(*self.window(op), int(op.args["lease_ms"]))

    def step(self, commands: list[list[RaceCommand]]) -> list[Operation]:
        """Release every racer with its commands at once; their operations."""
        self.clear()
        for child, mine in zip(self.children, commands, strict=True):
            child.answer(mine)
        os.write(self.gate_w, b"g" * len(self.children))
        made: list[Operation] = []
        for child in self.children:
            made += child.next(f"racer {child.name} to finish its step").value
        self.history += made
        self._timed(made)
        return made

    def harness(self, name: str, call: Callable[[], Any], **args: Any) -> Any:
        """One call on the harness's own connection, recorded in the history."""
        self.counter += 1
        self.clear()
        started = time.monotonic_ns()
        value = call()
        op = Operation(
            "H", self.counter, QueueOp.of(name, **args), started, time.monotonic_ns(),
            QueueOutcome(value),
        )  # fmt: skip
        self.history.append(op)
        if name != "advance":  # a sleep, not a call to the library
            self._timed([op])
        return value

    def enqueue(self, job: str) -> None:
        self.harness("enqueue", lambda: self.queue.enqueue(job, f"payload of {job}"), job=job)

    def advance(self, ms: int) -> None:
        self.harness("advance", lambda: self.clock.advance(ms / 1000), ms=ms)
        self.now += ms

    def recover(self) -> int:
        returned: int = self.harness("recover", self.queue.recover)
        return returned

    def observe(self) -> None:
        if self.blind:
            return
        try:
            self.harness("observe", lambda: tuple((v.job, v.state) for v in self.queue.observe()))
        except Unsupported:
            # No read-only view (AMQP reads a message only by taking it): the history is
            # the verbs' answers alone.
            self.blind = True

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
        destroy_store(self.library, self.location)


class StaleCallBreach(AssertionError):
    """Two live leases on one job, reached through a stale claim's nack or extend that the
    library took: a library that does not fence stale claims (``queue.stale-ack`` not
    promised) may do that, so the verdict also asks for that promise."""


@dataclass(frozen=True)
class Lease:
    """A lease a claim took in a race: its claim id, and when it began and ends (ms)."""

    cid: str
    start: int
    until: int


@dataclass
class ExclusiveReport:
    rounds: int = 0
    claims: int = 0
    wins: int = 0
    raced: int = 0
    """Rounds in which at least two racers' claims were released together."""
    overlapped: int = 0
    """Rounds in which two claims really ran at once (their calls overlapped in time)."""
    stale: int = 0
    """Nacks and extends sent by claims whose job another claim had taken since."""
    lost: int = 0
    """Second deliveries not judged: the library recorded the first claim's delivery lost
    (its connection ended: ``ReportsLosses``), which ended that lease early."""

    def render(self) -> str:
        aside = f", {self.lost} set aside (first delivery lost)" if self.lost else ""
        return (
            f"{self.rounds} race rounds ({self.raced} raced, {self.overlapped} overlapped): "
            f"{self.claims} claims, "
            f"{self.wins} won, {self.stale} stale nacks/extends{aside}, no job twice"
        )


def check_exclusive(
    library: QueueLibrary,
    directory: Path,
    processes: int,
    rounds: int,
    seed: int,
    server: str | None = None,
) -> ExclusiveReport:
    """Claim races; raise AssertionError when one job is held under two live leases."""
    rng = random.Random(f"queue.exclusive:{seed}")
    report = ExclusiveReport()
    with Engine() as engine:
        racers = Racers(library, engine, directory, processes, server)
        try:
            live: dict[str, Lease] = {}
            stale: list[str] = []
            taken: Taken = {}
            first_breach: StaleCallBreach | None = None
            for verb, job in STALE_PROBES:
                try:
                    report.stale += _stale_probe(racers, live, taken, verb, job)
                except StaleCallBreach as breach:
                    # The races still run: they are what queue.exclusive promises even
                    # where stale calls are not fenced, and a breach of theirs decides.
                    first_breach = first_breach or breach
                    _forget(live, taken, stale)
            for number in range(rounds):
                for index in range(rng.randint(1, max(1, processes - 1))):
                    racers.enqueue(f"r{number}j{index}")
                claims = [[("claim", racers.cid(i), racers.time.lease)] for i in range(processes)]
                made = racers.step(claims)
                try:
                    stale += _check_claims(racers, made, live, taken)
                except StaleCallBreach as breach:
                    # Kept for the verdict; the races go on knowing no lease (forgetting
                    # can only hide a breach, never invent one) so claims alone are judged.
                    first_breach = first_breach or breach
                    _forget(live, taken, stale)
                report.claims += len(made)
                report.wins += sum(_job(op) is not None for op in made)
                report.raced += len(made) >= 2
                report.overlapped += _overlapping(made)
                report.stale += _between(racers, rng, made, live, stale, taken)
                report.rounds += 1
            if first_breach is not None:
                held = (f"\nThe {report.rounds} race rounds ran on and found no job held twice "
                        f"through claims alone: {report.render()}.")  # fmt: skip
                first_breach.args = (f"{first_breach.args[0]}{held}", *first_breach.args[1:])
                raise first_breach
        finally:
            report.lost = racers.lost
            racers.close()
    return report


def _forget(live: dict[str, Lease], taken: Taken, stale: list[str]) -> None:
    """Know no lease, stale call or stale claim any more (after a breach was kept)."""
    live.clear()
    taken.clear()
    stale.clear()


STALE_PROBES = (("nack", "stale"), ("extend", "stale-extend"))
"""The stale calls driven one racer at a time before the races, each on its own job."""


def _stale_probe(racers: Racers, live: dict[str, Lease], taken: Taken, verb: str, job: str) -> int:
    """One stale-call path, driven one racer at a time so that it runs the same way on
    every run: P1 claims ``job``, its lease runs out, a sweep, P2 claims it again, and
    P1's stale claim sends ``verb``, as a worker back from a pause would: a ``nack``, or
    an ``extend`` by a short lease (which must not shorten P2's: the time then moves past
    that short lease, still inside P2's). Another claim follows. Whether a race round
    meets this depends on which racer won what; here it does not, so a library whose
    stale call frees a job another claim holds is found on every run (judged, as in the
    rounds, by its ``queue.stale-ack`` promise). The holder then acks. Stale calls sent:
    0 or 1."""
    capabilities = racers.library.capabilities
    if not (capabilities.nack if verb == "nack" else capabilities.extend):
        return 0
    racers.enqueue(job)
    # On real time a race round's lease (80 ms) may run out while the probe's steps run
    # one after another on a loaded machine: the probe's leases last PROBE_REAL_MS.
    real = racers.pacer is not None
    lease = capabilities.real_lease_ms(PROBE_REAL_MS) if real else racers.time.lease
    slack = capabilities.slack_ms
    margin = slack + REAL.past - REAL.lease if real else racers.time.past - racers.time.lease
    short = lease // 4 if real else racers.time.short
    last = len(racers.children) - 1

    def alone(racer: int, call: str, cid: str, ms: int = 0) -> list[Operation]:
        commands: list[list[RaceCommand]] = [[] for _ in racers.children]
        commands[racer] = [(call, cid, lease if call == "claim" else ms)]
        return racers.step(commands)

    first, other = racers.cid(0), min(1, last)
    claimed = alone(0, "claim", first)
    _check_claims(racers, claimed, live, taken, lease)
    if [_job(op) for op in claimed] != [job]:
        return 0  # the store's oldest job is not the one just enqueued: no probe
    racers.advance(lease + margin)
    racers.recover()
    second = racers.cid(other)
    again = alone(other, "claim", second)
    if first not in _check_claims(racers, again, live, taken, lease):
        return 0  # not delivered again: nothing is stale
    (stale,) = alone(0, verb, first, short)
    if stale.outcome == QueueOutcome(True):
        by = f" by {short} ms" if verb == "extend" else ""
        said = f"at t={racers.window(stale)[1]} ms P1 sent {verb}{by} of job {job!r} as stale claim"
        taken[job] = (f"{said} {first} -> True",)
        if verb == "extend":
            racers.advance(short + margin)
            racers.recover()
        third = alone(last, "claim", racers.cid(last))
        _check_claims(racers, third, live, taken, lease)  # raises on a breach
    alone(other, "ack", second)
    live.pop(job, None)
    return 1


def _job(op: Operation) -> str | None:
    job: str | None = op.result
    return job


def _overlapping(made: list[Operation]) -> bool:
    """Whether two of the claims ``made`` ran at once (one began before the other returned)."""
    spans = sorted((op.invoked_ns, op.returned_ns or op.invoked_ns) for op in made)
    return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans))


Taken = dict[str, tuple[str, ...]]
"""Per job, every stale claim's nack or extend the library took on it, as steps."""


def _check_claims(
    racers: Racers, made: list[Operation], live: dict[str, Lease], taken: Taken,
    lease_ms: int | None = None,
) -> list[str]:  # fmt: skip
    """No claim of ``made`` got a job whose earlier lease (``live``) was surely still
    running when the claim returned; the claims this made stale (their job was taken)."""
    slack = 0 if racers.pacer is None else MARGIN_MS
    lease = racers.time.lease if lease_ms is None else lease_ms
    stale: list[str] = []
    for op in made:
        job = _job(op)
        if job is None:
            continue
        start, end = racers.window(op)
        holder = live.get(job)
        if holder is not None and end + slack < holder.until and _lost(racers, holder, job):
            racers.lost += 1  # its lease ended with its connection: not two live leases
        elif holder is not None and end + slack < holder.until:
            since = taken.get(job, ())
            first = (
                f"at t={holder.start} ms {holder.cid.split('#')[0]} claimed job {job!r} as "
                f"{holder.cid}, leased until t={holder.until} ms"
            )
            breach = StaleCallBreach if since else AssertionError
            error = breach(
                f"queue.exclusive violated by {racers.library.name}: {op.args['cid']} claimed "
                f"job {job!r} at t={end} ms while {holder.cid}'s lease on it was live until "
                f"t={holder.until} ms (both claims are real processes racing: two live leases "
                f"on one job):\n"
                + _steps(
                    *sorted((first, *since), key=_at),
                    f"at t={end} ms {op.process} claimed job {job!r} as {op.args['cid']}, "
                    f"while that lease was live",
                )
            )
            second = Lease(str(op.args["cid"]), end, start + lease)
            raise attach(error, _two_leases(job, holder, second, op.process))
        if holder is not None:
            stale.append(holder.cid)
        live[job] = Lease(str(op.args["cid"]), start, start + lease)
    return stale


def _lost(racers: Racers, holder: Lease, job: str) -> bool:
    """Whether the library recorded ``holder``'s delivery of ``job`` lost after the claim
    began (``ReportsLosses``: its worker's connection ended, and the broker requeued it);
    the record may come from the same step as the second claim (the requeue precedes the
    worker's seeing it)."""
    if not isinstance(racers.queue, ReportsLosses):
        return False
    who = holder.cid.split("#")[0]
    return any(
        lost.worker == who and lost.job == job
        and (racers.pacer is None or racers.pacer.since_start(lost.at_ns) >= holder.start)
        for lost in racers.queue.lost()
    )  # fmt: skip


def _two_leases(job: str, first: Lease, second: Lease, process: str) -> Evidence:
    """The two claims of one job, each a lease on its process's lane; they overlap."""
    record = Recorder()
    for lease, who in ((first, first.cid.split("#")[0]), (second, process)):
        number = lease.cid.split("#")[-1]
        token = int(number) if number.isdigit() else None
        record.step(who, f"claim as {lease.cid}", "claim", lease.start, job, token,
                    target=f"returned job {job!r}")  # fmt: skip
        record.lease(Held("target", job, token, who, lease.start, lease.until, record.last))
    said = f"{second.cid} claimed job {job!r} while {first.cid}'s lease on it was live"
    return record.evidence(said)


def _between(
    racers: Racers,
    rng: random.Random,
    made: list[Operation],
    live: dict[str, Lease],
    stale: list[str],
    taken: Taken,
) -> int:
    """Ack some wins (their jobs are done, not leased) while stale claims send a nack or
    an extend, then maybe let leases run out; how many stale calls were sent."""
    calls: list[list[RaceCommand]] = [[] for _ in racers.children]
    for op in made:
        if _job(op) is not None and rng.random() < 0.5:
            calls[_racer(str(op.args["cid"]))].append(("ack", str(op.args["cid"]), 0))
    sent = 0
    while stale and (verb := _stale_verb(racers.library.capabilities, rng)) is not None:
        cid = stale.pop()
        calls[_racer(cid)].append((verb, cid, racers.time.lease))
        sent += 1
    for op in racers.step(calls) if any(calls) else []:
        job, took = str(op.args["job"]), op.outcome == QueueOutcome(True)
        if op.name == "ack" and took:
            live.pop(job, None)
        elif took:
            at, cid = racers.window(op)[1], op.args["cid"]
            said = f"at t={at} ms {op.process} sent {op.name} of job {job!r} as stale claim {cid}"
            taken[job] = (*taken.get(job, ()), f"{said} -> True")
    if rng.random() >= 0.5:
        racers.advance(racers.time.past)
        if rng.random() < 0.5:
            racers.recover()
    return sent


def _at(step: str) -> int:
    """The time of a step that begins "at t=N ms" (the stale calls sort among the claims)."""
    return int(step.removeprefix("at t=").split(" ", 1)[0])


def _steps(*lines: str) -> str:
    """Numbered steps, as the report draws them."""
    return "\n".join(f"  {number}. {line}" for number, line in enumerate(lines, 1))


def _racer(cid: str) -> int:
    """The index of the racer that made claim ``cid`` ("P2#7" -> 1)."""
    return int(cid[1 : cid.index("#")]) - 1


def _stale_verb(capabilities: Capabilities, rng: random.Random) -> str | None:
    """What a stale claim sends: a nack or an extend, as the library has them."""
    verbs = [verb for verb, has in (("nack", capabilities.nack), ("extend", capabilities.extend))
             if has]  # fmt: skip
    return rng.choice(verbs) if verbs else None


Action = tuple[str, Any]
"""One thing ``linear_history`` did, replayable: ``("step", commands per racer)``,
``("enqueue", job)``, ``("advance", ms)``, ``("recover", None)``, ``("observe", None)``."""


def _act(racers: Racers, action: Action) -> None:
    kind, value = action
    if kind == "step":
        racers.step(value)
    elif kind == "enqueue":
        racers.enqueue(value)
    elif kind == "advance":
        racers.advance(value)
    else:
        getattr(racers, kind)()


def linear_history(
    library: QueueLibrary,
    directory: Path,
    processes: int,
    rounds: int,
    seed: int,
    server: str | None = None,
) -> list[Operation]:
    """Rounds of mixed concurrent calls and harness steps; the whole recorded history (on a
    real clock, cut before the first round with a call that ran across a lease's end)."""
    return linear_run(library, directory, processes, rounds, seed, server)[0]


def linear_run(
    library: QueueLibrary,
    directory: Path,
    processes: int,
    rounds: int,
    seed: int,
    server: str | None = None,
) -> tuple[list[Operation], list[Action]]:
    """``linear_history``, and what it did as a script ``replay_script`` runs again."""
    rng = random.Random(f"queue.linearizable:{seed}")
    script: list[Action] = []
    with Engine() as engine:
        racers = Racers(library, engine, directory, processes, server)

        def act(kind: str, value: Any = None) -> None:
            script.append((kind, value))
            _act(racers, (kind, value))

        try:
            held: list[list[str]] = [[] for _ in range(processes)]
            for number in range(rounds):
                begun, done = len(racers.history), len(script)
                for index in range(rng.randint(0, 2)):
                    act("enqueue", f"r{number}j{index}")
                act("step", [_mixed(racers, rng, i, held[i]) for i in range(processes)])
                act("observe")
                if rng.random() < 0.4:
                    act("advance", rng.choice((racers.time.short, racers.time.past)))
                if rng.random() < 0.3:
                    act("recover")
                    act("observe")
                if racers.disturbed:
                    del racers.history[begun:]
                    del script[done:]
                    break
        finally:
            racers.close()
    return racers.history, script


def replay_script(
    library: QueueLibrary,
    directory: Path,
    processes: int,
    script: list[Action],
    server: str | None = None,
) -> list[Operation]:
    """Run ``script`` (``linear_run``'s) again on a fresh store; the recorded history. The
    OS interleaves each step's calls anew; a claim's id is in its commands, so an ack or
    nack whose claim was left out does nothing, as in the first run."""
    directory.mkdir(parents=True, exist_ok=True)
    with Engine() as engine:
        racers = Racers(library, engine, directory, processes, server)
        try:
            for action in script:
                _act(racers, action)
        finally:
            racers.close()
    return racers.history


_Item = tuple[int, int, Any]
"""(action number, racer number or -1 for a harness action, command or action)."""


def _items(script: list[Action]) -> list[_Item]:
    items: list[_Item] = []
    for number, (kind, value) in enumerate(script):
        if kind != "step":
            items.append((number, -1, (kind, value)))
            continue
        items += [(number, racer, c) for racer, mine in enumerate(value) for c in mine]
    return items


def _script(script: list[Action], items: list[_Item]) -> list[Action]:
    """``script`` with only ``items``; a step left with no command is dropped."""
    kept: list[Action] = []
    for number, (kind, value) in enumerate(script):
        if kind != "step":
            kept += [action for n, racer, action in items if n == number and racer < 0]
            continue
        mine = [
            [c for n, r, c in items if (n, r) == (number, racer)] for racer in range(len(value))
        ]
        kept += [("step", mine)] if any(mine) else []
    return kept


SHRINK = Budget(runs=16, seconds=10.0)
"""What shrinking a failing history may spend: each try runs the racers again."""


def shrink_script(
    library: QueueLibrary,
    directory: Path,
    processes: int,
    script: list[Action],
    judge: Callable[[list[Operation]], F | None],
    first: F,
    server: str | None = None,
    budget: Budget = SHRINK,
) -> tuple[list[Action], F, Shrunk[_Item, F]] | None:
    """Delta debugging of a failing ``linear_run`` (``models.shrinking``): drop harness
    actions and racers' calls while the script, run again by fresh racers on a fresh
    store, still gives a history ``judge`` fails. None on a real clock (where a replay's
    timing is another history's) or if nothing shorter failed."""
    if library.capabilities.real_time:
        return None
    tries = [0]

    def fails(items: list[_Item]) -> F | None:
        tries[0] += 1
        smaller = _script(script, items)
        return judge(replay_script(library, directory / f"shrink-{tries[0]}", processes,
                                   smaller, server))  # fmt: skip

    items = _items(script)
    shrunk = shrink(items, first, fails, budget)
    if shrunk.failure is first:
        return None
    return _script(script, list(shrunk.items)), shrunk.failure, shrunk


def _mixed(racers: Racers, rng: random.Random, racer: int, held: list[str]) -> list[RaceCommand]:
    """One or two calls: a claim, or an ack / nack of a claim this racer made."""
    commands: list[RaceCommand] = []
    for _ in range(rng.randint(1, 2)):
        if held and rng.random() < 0.5:
            verb = "nack" if racers.library.capabilities.nack and rng.random() < 0.3 else "ack"
            commands.append((verb, held.pop(rng.randrange(len(held))), 0))
        else:
            cid = racers.cid(racer)
            held.append(cid)
            commands.append(("claim", cid, racers.time.lease))
    return commands
