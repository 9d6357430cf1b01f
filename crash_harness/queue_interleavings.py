"""Every schedule of 2 (and, bounded, 3) processes running a real library's verbs, stepped
at each SQL statement the library runs: ``queue.interleavings``.

The lease worker's engine (``crash_harness.interleavings``) schedules these processes:
one fork engine, one scheduler, one search. What differs is the child: each process
opens the library through its adapter (``QueueLibrary.connect``) with ``sqlite3.connect``
wrapped, so every connection the library opens itself reports each statement before
SQLite runs it and waits (``_interleave_child.trace_new_connections``); each adapter verb
is a scheduling point too, so a library whose SQL is out of Python's reach (localqueue's
Rust engine) is scheduled verb by verb.

On a server library (PostgreSQL, Redis) the points are the commands it sends: each
process starts a wire proxy (``_wire_proxy``) between the library and the server that
holds every command until the engine releases it, and the server says when a released
command waits for another process (``_server_waits``): PostgreSQL for a row lock, Redis
for a write that ends a blocking command with no timeout.

A scenario (``_queue_scenarios``) starts from a store the harness seeded once (jobs
enqueued, some claimed, a lease run out by moving the clock, or by waiting on real
time) and copied for every schedule. The history (the harness's seeding calls, each
process's calls with their schedule steps as times, and a read of the store after every
process ended) goes to the linearizability checker with the generic model
(``models._queue_spec.QueueSpec``): the one comparison core of the other queue
properties. A history no order explains breaks the first generic property which, once
adopted, explains it; the property test judges that property by the library's promises.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from leasecheck.adapters.protocol import (
    GENERIC_PROPERTIES,
    Claim,
    QueueAdapter,
    QueueLibrary,
    SharedClock,
    Unsupported,
    destroy_store,
)
from leasecheck.crash_harness._interleave_child import trace_new_connections
from leasecheck.crash_harness._pg_snapshot import PgSnapshot
from leasecheck.crash_harness._queue_scenarios import QueueScenario, Verb
from leasecheck.crash_harness._server_waits import PgWaits, RedisWaits
from leasecheck.crash_harness._wire_proxy import WireProxy, dialect_of
from leasecheck.crash_harness.engine import Channel, Engine, HarnessError
from leasecheck.crash_harness.interleavings import (
    LAST_POINT,
    STEP_NS,
    Exploration,
    Run,
    Schedule,
    ServerWaits,
    run_schedules,
    run_with,
)
from leasecheck.models._queue_spec import QueueSpec
from leasecheck.models.linearizability import (
    HarnessStep,
    Operation,
    Verdict,
    check,
)
from leasecheck.models.queue_model import QueueState
from leasecheck.models.queue_ops import REFUSABLE, Granted, QueueOp, QueueOutcome

__all__ = ["LIVE_MS", "Finding", "QueueExploration", "explore_queue", "replay_queue"]

LIVE_MS = 120_000
"""Every lease that must stay live for the whole exploration of a scenario."""
SHORT_MS = 50
"""A seeded lease that has run out when the processes start..."""
EXPIRE_MS = 200
"""...after the harness moves the clock (or waits, on real time) this long."""
HARNESS = "H"


@dataclass(frozen=True)
class Finding:
    """A schedule no order explains: the generic property it breaks, and the run."""

    prop: str
    promised: bool
    run: Run
    report: str
    history: tuple[Operation, ...] = ()
    """The history judged: the seeding calls, the processes' calls, the final read."""
    origin: float = 0.0
    """The shared clock's reading when the seeding began (model time 0): a lease end the
    library reports (``Granted.until``) is that many seconds after it."""

    @property
    def text(self) -> str:
        return f"{self.prop}: not linearizable against the generic model:\n{self.report}"


@dataclass
class QueueExploration:
    """One scenario's search, and its first finding of a promised / unpromised property."""

    exploration: Exploration
    violated: Finding | None = None
    unpromised: Finding | None = None
    unobserved: bool = False
    """The library has no read that takes nothing: its histories end without the read
    of the store after each schedule (the row says so)."""


@dataclass
class _Store:
    """The seeded store: a template directory, its location, the seeded claims and ops."""

    library: QueueLibrary
    template: Path
    location: str
    claims: dict[str, Claim] = field(default_factory=dict)
    ops: list[Operation] = field(default_factory=list)
    seeded_at: float = 0.0
    origin: float = 0.0
    """The shared clock's reading before the first seeding call (model time 0)."""

    def copy(self, directory: Path) -> tuple[str, Path]:
        """A fresh copy of the seeded store in ``directory``: its location and its file."""
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(self.template, directory)
        location = self.location.replace(str(self.template), str(directory))
        return location, _database_file(Path(location))


def _database_file(location: Path) -> Path:
    """The SQLite file the locks and the state hash look at (a directory store's
    ``*.db``/``*.sqlite3``; else the location itself)."""
    if location.is_dir():
        found = sorted([*location.glob("*.db"), *location.glob("*.sqlite3")])
        return found[0] if found else location
    return location


def _harness_op(store: _Store, name: str, outcome: QueueOutcome, **args: Any) -> None:
    number = len(store.ops) + 1
    store.ops.append(
        Operation(HARNESS, number, QueueOp.of(name, **args), 2 * number * STEP_NS,
                  (2 * number + 1) * STEP_NS, outcome)
    )  # fmt: skip


def _seed(
    library: QueueLibrary, scenario: QueueScenario, directory: Path, server: str | None = None
) -> _Store:
    """Create the store, enqueue and claim as the scenario says, run out the short leases."""
    template = directory / "template"
    template.mkdir(parents=True)
    location = library.create(template, server)
    store = _Store(library, template, location)
    clock = SharedClock.of(template / "clock", library.capabilities)
    scale = library.capabilities.time_scale()
    queue = library.connect(location, clock)
    store.origin = clock.now()
    try:
        for seed in scenario.seeds:
            queue.enqueue(seed.job, f"payload of {seed.job}")
            _harness_op(store, "enqueue", QueueOutcome(None), job=seed.job)
            if seed.held == "ready":
                continue
            lease = (SHORT_MS if seed.held == "expired" else LIVE_MS) * scale
            got = queue.claim(HARNESS, lease / 1000)
            if got is None or got.job != seed.job:
                raise HarnessError(
                    f"seeding {scenario.name!r}: claim {seed.cid} got {got!r}, not job "
                    f"{seed.job!r} (the oldest ready one); the scenario needs FIFO claims"
                )
            store.claims[seed.cid] = got
            granted = QueueOutcome(seed.job, granted=Granted.of(got))
            _harness_op(store, "claim", granted, cid=seed.cid, lease_ms=lease)
        if any(seed.held == "expired" for seed in scenario.seeds):
            clock.advance(EXPIRE_MS * scale / 1000)
            _harness_op(store, "advance", QueueOutcome(None), ms=EXPIRE_MS * scale)
    finally:
        queue.close()
        clock.close()
    store.seeded_at = time.monotonic()
    return store


# --- the child --------------------------------------------------------------------------


class _Process:
    """One process's connection, clock and claims, in the child."""

    def __init__(self, store: _Store, location: str, clock_path: Path) -> None:
        self.library, self.location = store.library, location
        self.clock = SharedClock.of(clock_path, store.library.capabilities)
        self.held = dict(store.claims)
        self.queue: QueueAdapter | None = None
        self.scale = store.library.capabilities.time_scale()

    def open(self) -> None:
        self.queue = queue = self.library.connect(self.location, self.clock)
        # A claim's handle may hold the client that made it (rq's job and execution): an
        # adapter offering ``adopt`` rebinds it to this connection (and so to its proxy).
        if (adopt := getattr(queue, "adopt", None)) is not None:
            self.held = {cid: adopt(claim) for cid, claim in self.held.items()}

    def reopen(self) -> None:
        self.close()
        self.open()

    def close(self) -> None:
        if self.queue is not None:
            self.queue.close()
            self.queue = None

    def record(self, verb: Verb) -> QueueOp | HarnessStep:
        """The call ``verb`` makes, as the generic queue's record: its lease in the
        library's time scale, an ack's, nack's or extend's job the one its claim got."""
        if verb.name in ("open", "reopen"):
            return HarnessStep(verb.name)  # type: ignore[arg-type]
        lease = LIVE_MS * self.scale
        if verb.name == "claim":
            return QueueOp.of("claim", verb.cid, lease)
        if verb.name == "recover":
            return QueueOp.of("recover")
        made = _OF_CLAIM[verb.name]  # the harness's own table: an unknown verb is its bug
        return made(verb.cid, self.held[verb.cid].job, lease)

    def run(self, verb: Verb) -> tuple[QueueOp | HarnessStep, QueueOutcome]:
        """The call as its record, and its outcome as the model reads it."""
        call = self.record(verb)
        if isinstance(call, HarnessStep):
            return call, QueueOutcome.running(self.reopen)
        queue = self.queue
        assert queue is not None, f"{verb.describe()} before the process opened the store"
        value, got = call.run(queue, self.held)
        if got.error is not None:
            return call, got
        if call.kind == "claim":
            if isinstance(value, Claim):
                self.held[verb.cid] = value
                return call, got
            return call, QueueOutcome(value)
        return call, QueueOutcome(value is True if call.kind in REFUSABLE else value)


_OF_CLAIM: dict[str, Callable[[str, str, int], QueueOp]] = {
    "ack": lambda cid, job, lease: QueueOp.of("ack", cid, job),
    "nack": lambda cid, job, lease: QueueOp.of("nack", cid, job),
    "extend": lambda cid, job, lease: QueueOp.of("extend", cid, job, lease),
}
"""The verbs that use a claim the process holds, as records of that claim."""


def _wire(store: _Store, location: str, channel: Channel) -> tuple[WireProxy | None, str]:
    """On a server: a proxy (in this process) between the library and the server, and the
    location that points the library at it; else no proxy and the location as it was."""
    dialect = dialect_of(store.library.capabilities.server)
    if dialect is None:
        return None, location
    parts = urllib.parse.urlsplit(location)
    unique = parts.fragment or parts.path.lstrip("/")  # the store's prefix, or its database
    proxy = WireProxy(
        dialect, (parts.hostname or "127.0.0.1", parts.port or 0),
        lambda text: channel.ask("wire", text), lambda text: text.replace(unique, "<store>"),
    )  # fmt: skip
    netloc = parts.netloc.rpartition("@")
    host = f"{netloc[0]}{netloc[1]}127.0.0.1:{proxy.port}"
    return proxy, urllib.parse.urlunsplit(parts._replace(netloc=host))


def _body_of(store: _Store, location: str, clock_path: Path) -> Any:
    def body_of(name: str, program: tuple[Verb, ...]) -> Callable[[Channel], str]:
        def body(channel: Channel) -> str:
            opened: list[sqlite3.Connection] = []
            tracing = trace_new_connections(channel, opened)
            proxy, wired = _wire(store, location, channel)
            process = _Process(store, wired, clock_path)
            try:
                if not program or program[0].name != "open":
                    process.open()
                channel.ask("ready")
                tracing[0] = True
                if proxy is not None:
                    proxy.holding = True
                for con in opened:
                    con.set_trace_callback(channel.trace)
                for index, verb in enumerate(program, 1):
                    _step(channel, process, name, index, verb)
                if store.library.capabilities.server_lease is not None:
                    # The broker requeues a connection's deliveries when it closes: this
                    # process ends only after every other's calls (the last barrier).
                    channel.fault(LAST_POINT)
            finally:
                tracing[0] = False
                for con in opened:
                    with contextlib.suppress(sqlite3.ProgrammingError):  # closed already
                        con.set_trace_callback(None)
                if proxy is not None:
                    proxy.holding = False
                process.close()
                process.clock.close()
                if proxy is not None:
                    proxy.close()
            return name

        return body

    return body_of


def _step(channel: Channel, process: _Process, name: str, index: int, verb: Verb) -> None:
    """One verb: a scheduling point, then the call between ``invoke`` and its ``op``."""
    if verb.name in ("ack", "nack", "extend") and verb.cid not in process.held:
        return  # its claim got no job
    channel.fault(verb.name)
    channel.send("invoke", index)
    call, outcome = process.run(verb)
    channel.send("op", Operation(name, index, call, 0, 0, outcome))


# --- one schedule, judged ---------------------------------------------------------------


def _final(store: _Store, location: str, clock_path: Path, after_ns: int) -> Operation | None:
    """The read of the store after every process ended; None where the library has no
    read that takes nothing (AMQP reads a queue only by taking its messages: ``observe``
    raises ``Unsupported``), and the history ends with the processes' calls."""
    clock = SharedClock.of(clock_path, store.library.capabilities)
    # A library whose open changes the store (persist-queue's defaults resume every claim)
    # offers ``reader``: a connection for reads that changes nothing on open.
    reader = getattr(store.library, "reader", store.library.connect)
    queue = reader(location, clock)
    try:
        seen = tuple((view.job, view.state) for view in queue.observe())
    except Unsupported:
        return None
    finally:
        queue.close()
        clock.close()
    return Operation(HARNESS, 0, QueueOp.of("observe"), after_ns + STEP_NS,
                     after_ns + 2 * STEP_NS, QueueOutcome(seen))  # fmt: skip


def history_of(store: _Store, run: Run, final: Operation | None) -> list[Operation]:
    """The seeding calls, then the run's calls (their times after the seeding's), then the
    final read; ``open``/``reopen`` are scheduling steps, not operations of the model."""
    offset = (2 * len(store.ops) + 2) * STEP_NS
    ran = [
        replace(op, invoked_ns=(op.invoked_ns or 0) + offset,
                returned_ns=(op.returned_ns or 0) + offset)
        for op in run.ops if not isinstance(op.call, HarnessStep)
    ]  # fmt: skip
    return [*store.ops, *ran, *([] if final is None else [final])]


def broken(
    history: list[Operation], library: QueueLibrary, tolerate: frozenset[str]
) -> tuple[str, str] | None:
    """None if the generic model explains ``history`` (adopting ``tolerate``); else the
    first generic property whose adoption explains it (``queue.linearizable`` if none
    does), and the checker's report."""
    deletes = library.capabilities.ack_deletes
    spec = QueueSpec(deletes, tolerate)
    verdict = check(history, spec, QueueState())
    if verdict.linearizable:
        return None
    named = _frontier(spec, verdict)
    if named is not None:
        return named, verdict.report()
    for prop in GENERIC_PROPERTIES:
        if prop in tolerate or prop == "queue.linearizable":
            continue
        if check(history, QueueSpec(deletes, tolerate | {prop}), QueueState()).linearizable:
            return prop, verdict.report()
    return "queue.linearizable", verdict.report()


def _frontier(spec: QueueSpec, verdict: Verdict) -> str | None:
    """The property the model names for the first operation no order explains, after the
    longest explainable prefix the checker found (read from the model, as data)."""
    states = [QueueState()]
    for op in verdict.order:
        states = list(dict.fromkeys(after for state in states for after in spec.step(state, op)))
    for op in verdict.conflicting:
        for state in states:
            if (mismatch := spec.mismatch(state, op)) is not None:
                return mismatch.prop
    return None


def _one_judged(
    store: _Store, scenario: QueueScenario, directory: Path, found: QueueExploration,
    unpromised: frozenset[str], server: str | None = None, pg: _Postgres | None = None,
    redis_waits: RedisWaits | None = None,
) -> Callable[..., Run]:  # fmt: skip
    """One schedule's run, judged. On Redis each run seeds a store of its own and destroys
    it; on PostgreSQL the seeded rows are put back in place before each run."""
    runs = [0]
    seeded = store

    def one(prefix: tuple[str, ...], search: Any, engine: Engine) -> Run:
        nonlocal store
        if pg is not None:  # PostgreSQL: the seeded rows put back, in place
            pg.snapshot.restore()
            location, path = seeded.location, seeded.template
            clock_path = seeded.template / "clock"
        elif server is not None:  # a Redis store cannot be copied: seed each one afresh
            runs[0] += 1
            store = _seed(store.library, scenario, directory / f"run-{runs[0]}", server)
            location, path = store.location, store.template
            clock_path = store.template / "clock"
        else:
            location, path = store.copy(directory / "run")
            clock_path = directory / "run" / "clock"
        if store.library.capabilities.real_time:
            _check_live(store, scenario)
        try:
            waits = pg.waits if pg is not None else redis_waits
            return _run_judged(store, scenario, (location, path, clock_path), prefix,
                               (search, engine, waits), (found, unpromised))  # fmt: skip
        finally:
            if server is not None and pg is None:  # a PostgreSQL store is reused
                destroy_store(store.library, location)

    return one


@dataclass
class _Postgres:
    """On PostgreSQL: the server's word on which process waits for a row lock, and the
    seeded rows to put back."""

    waits: PgWaits
    snapshot: PgSnapshot

    def close(self) -> None:
        try:
            self.snapshot.close()
        finally:
            self.waits.close()


def _postgres(store: _Store, server: str | None) -> _Postgres | None:
    if server is None or store.library.capabilities.server != "postgres":
        return None
    waits = PgWaits(server)
    try:
        snapshot = PgSnapshot(store.location)
    except BaseException:
        waits.close()
        raise
    pg = _Postgres(waits, snapshot)
    try:
        snapshot.take()
    except BaseException:
        pg.close()
        raise
    return pg


def _run_judged(
    store: _Store, scenario: QueueScenario, where: tuple[str, Path, Path],
    prefix: tuple[str, ...], searching: tuple[Any, Engine, ServerWaits | None],
    judging: tuple[QueueExploration, frozenset[str]],
) -> Run:  # fmt: skip
    location, path, clock_path = where
    body_of = _body_of(store, location, clock_path)
    run = run_with(body_of, scenario, path, prefix, *searching)
    if run.pruned:
        return run
    if run.failures:
        run.problem = "; ".join(run.failures)
        return run
    end = max((op.returned_ns or 0 for op in run.ops), default=0)
    end += (2 * len(store.ops) + 2) * STEP_NS
    final = _final(store, location, clock_path, end)
    if final is None:
        judging[0].unobserved = True
    history = history_of(store, run, final)
    _judge(store, history, run, *judging)
    return run


def _judge(
    store: _Store, history: list[Operation], run: Run, found: QueueExploration,
    unpromised: frozenset[str],
) -> None:  # fmt: skip
    """Set ``run.problem`` for a promised property it breaks; keep the first unpromised."""
    library = store.library
    promised = broken(history, library, unpromised)
    if promised is not None:
        prop, report = promised
        found.violated = Finding(prop, True, run, report, tuple(history), store.origin)
        run.problem = found.violated.text
        return
    if found.unpromised is None and (strict := broken(history, library, frozenset())):
        prop, report = strict
        found.unpromised = Finding(prop, False, run, report, tuple(history), store.origin)


def _check_live(store: _Store, scenario: QueueScenario) -> None:
    """On real time the seeded live leases must still be live (they last ``LIVE_MS``)."""
    spent = time.monotonic() - store.seeded_at
    if spent * 1000 > LIVE_MS / 2:
        raise HarnessError(
            f"exploring {scenario.name!r} took {spent:.0f} s on real time, so its live "
            f"leases ({LIVE_MS} ms) may run out; run on a less loaded machine or a smaller "
            "profile"
        )


def _redis_waits(store: _Store, server: str | None) -> RedisWaits | None:
    """On Redis: the server's word on which process a blocking command holds."""
    if server is None or store.library.capabilities.server != "redis":
        return None
    return RedisWaits(server)


def explore_queue(
    library: QueueLibrary, scenario: QueueScenario, directory: Path, bound: int | None,
    limit: int = 2_000, server: str | None = None,
) -> QueueExploration:  # fmt: skip
    """Every schedule of ``scenario`` on ``library`` with at most ``bound`` preemptions,
    cheapest first, until the first that breaks a property the library promises. On a
    server (``server``) the points are the commands each process sends (its wire proxy
    holds each one) and the verbs, and every schedule is run (a store on a server has no
    file whose bytes could be hashed): at most ``limit`` of them."""
    unpromised = frozenset(p for p in GENERIC_PROPERTIES if not library.promises.of(p).promised)
    store = _seed(library, scenario, directory / scenario.name, server)
    redis_waits: RedisWaits | None = None
    try:
        pg = _postgres(store, server)
        redis_waits = _redis_waits(store, server)
    except BaseException:
        destroy_store(library, store.location)
        raise
    try:
        found = QueueExploration(Exploration(scenario, bound))  # type: ignore[arg-type]
        one = _one_judged(store, scenario, directory / scenario.name, found, unpromised, server,
                          pg, redis_waits)  # fmt: skip
        found.exploration = run_schedules(one, scenario, bound, limit, prune=server is None)
        return found
    finally:
        if pg is not None:
            pg.close()
        if redis_waits is not None:
            redis_waits.close()
        # Every child of a run has exited, so no connection is open. A store seeded for
        # one schedule on a server is destroyed by that run itself.
        destroy_store(library, store.location)
        shutil.rmtree(directory / scenario.name, ignore_errors=True)


def replay_queue(
    library: QueueLibrary, scenario: QueueScenario, schedule: Schedule, directory: Path,
    server: str | None = None,
) -> QueueExploration:  # fmt: skip
    """Run exactly ``schedule`` of ``scenario`` on ``library`` (on ``server``) and judge it."""
    unpromised = frozenset(p for p in GENERIC_PROPERTIES if not library.promises.of(p).promised)
    store = _seed(library, scenario, directory / scenario.name, server)
    redis_waits: RedisWaits | None = None
    try:
        pg = _postgres(store, server)
        redis_waits = _redis_waits(store, server)
    except BaseException:
        destroy_store(library, store.location)
        raise
    try:
        found = QueueExploration(Exploration(scenario, 0))  # type: ignore[arg-type]
        one = _one_judged(store, scenario, directory / scenario.name, found, unpromised, server,
                          pg, redis_waits)  # fmt: skip
        with Engine() as engine:
            run = one(schedule.choices, None, engine)
        found.exploration.explored = 1
        found.exploration.failure = run if run.problem is not None else None
        return found
    finally:
        if pg is not None:
            pg.close()
        if redis_waits is not None:
            redis_waits.close()
        destroy_store(library, store.location)
        shutil.rmtree(directory / scenario.name, ignore_errors=True)
