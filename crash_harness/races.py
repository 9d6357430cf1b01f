"""Races: N processes released together, round after round; one winner per (job, token).

N long-lived racer processes each open the queue once with the target's
``open_queue``. Every step of a round hands each racer its calls and then opens a
gate — one pipe all racers block on, written once with N bytes — so they start
together. A round is:

1. intake: racer 0 enqueues 0-2 new jobs;
2. claim race: every racer claims at the same instant;
3. stale race: every racer whose ticket's job has since been claimed again finishes
   with that stale ticket, its own clock still inside its old lease, while the new
   owner's lease is live;
4. finish race: racers complete some of their current tickets (ok/retry/permanent)
   and the stale ticket holders try again, against the new owners' completions.

After each step the calls must be explained by some serial order on the model (the
results and the stored state), every (job, token) must have exactly one winner over
the whole run, and a stale finish must never change anything. A racer that gives up
on the lock (SQLite busy after ``timeout=1``) is allowed by the spec: it is counted,
not blamed. Time moves on between rounds so leases run out and jobs are claimed
again.

Who wins a claim is a real race, so nothing after it depends on the winner: every
claimer of a round asks for the same lease length, and the stale and finish steps deal
the tickets out by job and token, not to the racer that won them (a finish is judged by
its ticket, whichever process sends it). Two runs of one seed make the same calls with
the same tickets; only which racer's connection carries each may differ.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from leasecheck.crash_harness._evidence import HistoryRecorder
from leasecheck.crash_harness._queue_files import LeftOpen, QueueFiles, Scenario, read_stored
from leasecheck.crash_harness._serial import Call, double_leases, double_wins, explain, unexplained
from leasecheck.crash_harness.engine import Channel, Child, ChildResult, Engine, ErrorInfo
from leasecheck.models.contracts import Snapshot
from leasecheck.models.evidence import Evidence, attach, shrunk_evidence
from leasecheck.models.lease_ops import LeaseOp
from leasecheck.models.shrinking import Budget, shrink

__all__ = ["RaceReport", "check_races"]

PROPERTY = "lease.races"


@dataclass
class RaceReport:
    rounds: int = 0
    processes: int = 0
    claims: int = 0
    wins: int = 0
    busy: int = 0
    stale_refused: int = 0
    finishes: int = 0

    def render(self) -> str:
        return (
            f"{self.rounds} race rounds of {self.processes} processes: {self.claims} claims, "
            f"{self.wins} wins (each (job, token) once), {self.finishes} finishes, "
            f"{self.stale_refused} stale finishes refused, {self.busy} busy"
        )


@dataclass
class _Held:
    """A ticket a racer won, and whether its job was claimed again since."""

    ticket: dict[str, Any]
    claimed_at: int
    tried_stale: bool = False


def _racer_body(module: ModuleType, path: Path, gate: int) -> Callable[[Channel], None]:
    """Open once; then forever: receive calls, wait at the gate, run them, report."""

    def body(channel: Channel) -> None:
        con = module.open_queue(str(path))
        try:
            while (ops := channel.receive()) is not None:
                if os.read(gate, 1) != b"g":
                    return
                outcomes = []
                for op in ops:
                    try:
                        outcomes.append(ChildResult(op.apply(module, con)))
                        if con.in_transaction:
                            raise LeftOpen(f"{op.describe()} returned with a transaction open")
                    except Exception as error:
                        outcomes.append(ChildResult(error=ErrorInfo.from_exception(error)))
                channel.send("event", outcomes)
        finally:
            con.close()

    return body


@dataclass
class _Race:
    engine: Engine
    path: Path
    racers: list[Child]
    gate: int
    state: Snapshot
    rng: random.Random
    scenario: Scenario
    report: RaceReport
    held: list[_Held] = field(default_factory=list)
    winners: dict[tuple[str, int], str] = field(default_factory=dict)
    ran: list[Call] = field(default_factory=list)
    """Every call of the round so far, step by step (the evidence of a failure)."""
    began: Snapshot = field(default_factory=Snapshot)
    """The stored state the round started from."""
    steps: list[tuple[str, list[list[LeaseOp]]]] = field(default_factory=list)
    """The round's steps so far: what each racer was handed (what a shrink re-runs)."""

    def evidence(self, now: int, message: str) -> Evidence:
        """The round's calls, each racer on its lane; the model reads them in the order
        they answered (no order explains a failing step, so any order shows where)."""
        record = HistoryRecorder(self.began, now)
        for call in self.ran:
            record.ran(call.op, call.outcome, call.who)
        return record.evidence(message.splitlines()[0], ops=str(_count(self.steps)))

    def failure(self, now: int, error: AssertionError) -> AssertionError:
        return attach(self.scenario.fail(str(error)), self.evidence(now, str(error)))

    def step(self, what: str, ops: list[list[LeaseOp]]) -> list[Call]:
        """Release every racer with its calls at once; check the results; the calls."""
        self.scenario.add(what + ": " + _listing(ops))
        self.steps.append((what, ops))
        for racer, calls in zip(self.racers, ops, strict=True):
            racer.answer(calls)
        os.write(self.gate, b"g" * len(self.racers))
        made: list[Call] = []
        for index, (racer, calls) in enumerate(zip(self.racers, ops, strict=True)):
            message = racer.next(f"racer r{index} to finish its calls in '{what}'")
            for op, outcome in zip(calls, message.value, strict=True):
                made.append(Call(f"r{index}", op, outcome))
        self.ran += made
        self._check(made)
        return made

    def _check(self, calls: list[Call]) -> None:
        self.report.busy += sum(call.outcome.busy for call in calls)
        for call in calls:
            self._refused_if_stale(call)
        stored = read_stored(self.path, "after a race step")
        wins = double_wins(calls) + double_leases(calls) + self._repeat_wins(calls)
        if wins:
            raise AssertionError("two processes won the same job at once: " + "; ".join(wins))
        if explain(self.state, calls, stored) is None:
            raise AssertionError(unexplained(self.state, calls, stored))
        self.state = stored

    def _refused_if_stale(self, call: Call) -> None:
        """A finish whose ticket's job was claimed again must return False, whatever the order."""
        if call.op.kind != "finish" or call.outcome.busy:
            return
        ticket = call.op.value("ticket")
        row = self.state.job(ticket["id"])
        if row is not None and row.token > ticket["token"] and call.outcome.value is not False:
            raise AssertionError(
                f"{call.who}'s finish with the stale token {ticket['token']} of job "
                f"{ticket['id']!r} {call.outcome.describe()}, but the job had been claimed again "
                f"(token {row.token}, owner {row.owner!r}, {row.status}); a stale finish must "
                f"return False and change nothing"
            )

    def _repeat_wins(self, calls: list[Call]) -> list[str]:
        found = []
        for call in calls:
            ticket = call.outcome.value
            if call.op.kind == "claim" and isinstance(ticket, dict):
                key = (ticket["id"], ticket["token"])
                if key in self.winners:
                    found.append(
                        f"job {key[0]!r} token {key[1]} was won by {self.winners[key]} and "
                        f"again, in a later round, by {call.who}"
                    )
                self.winners[key] = call.who
        return found


_Planned = tuple[int, int, LeaseOp]
"""(step number in the round, racer number, operation): one item a shrink may drop."""


def _count(steps: list[tuple[str, list[list[LeaseOp]]]]) -> int:
    return sum(len(calls) for _, ops in steps for calls in ops)


@dataclass
class _Shrink:
    """Delta debugging of a failing round (``models.shrinking``): drop the round's calls
    (chunks, then single calls) while the calls left, handed to the same racers step by
    step on a fresh file holding the state the round began from, still fail. Every call
    carries its own values (a finish its ticket), so a shorter round is a real program.
    Bounded by ``BUDGET``; spent only on failure."""

    engine: Engine
    files: QueueFiles
    module: ModuleType
    seed: int
    number: int
    now: int
    BUDGET = Budget(runs=24, seconds=8.0)

    def run(self, race: _Race, error: AssertionError) -> AssertionError:
        """The failure of the shortest round found (the original if none is shorter)."""
        items = [
            (step, racer, op)
            for step, (_, ops) in enumerate(race.steps)
            for racer, calls in enumerate(ops)
            for op in calls
        ]
        original = (race, error)
        attempt = lambda rest: self.attempt(race, rest)  # noqa: E731
        shrunk = shrink(items, original, attempt, self.BUDGET)
        smallest, failed = shrunk.failure
        if smallest is race:
            return race.failure(self.now, error)
        smallest.scenario.add(
            f"shrunk from {len(items)} to {shrunk.after} calls: the same racers given only "
            f"these calls, from the same state, fail too"
        )
        found = shrunk_evidence(smallest.evidence(self.now, str(failed)), len(items))
        return attach(smallest.scenario.fail(str(failed)), found)

    def attempt(self, race: _Race, items: list[_Planned]) -> tuple[_Race, AssertionError] | None:
        """Run ``items`` as a round of their own; the replayed round and its failure."""
        steps = [
            (
                what,
                [
                    [op for s, r, op in items if (s, r) == (step, racer)]
                    for racer in range(len(ops))
                ],
            )
            for step, (what, ops) in enumerate(race.steps)
        ]
        path = self.files.fresh(race.began)
        gate_r, gate_w = os.pipe()
        racers = [
            self.engine.fork(f"r{index}", _racer_body(self.module, path, gate_r))
            for index in range(len(race.racers))
        ]
        scenario = Scenario(PROPERTY, self.seed)
        scenario.add(
            f"round {self.number} at t={self.now}, shrunk; the state before it:\n"
            + race.began.describe()
        )
        again = _Race(self.engine, path, racers, gate_w, race.began, race.rng, scenario,
                      RaceReport(), began=race.began)  # fmt: skip
        try:
            for what, ops in steps:
                if any(ops):
                    again.step(what, ops)
        except AssertionError as error:
            return again, error
        finally:
            for racer in racers:
                racer.kill()
            for fd in (gate_r, gate_w):
                os.close(fd)
            self.files.remove(path)
        return None


def _listing(ops: list[list[LeaseOp]]) -> str:
    parts = [
        f"r{index} " + ", ".join(op.describe() for op in calls)
        for index, calls in enumerate(ops)
        if calls
    ]
    return "; ".join(parts) or "nothing"


def check_races(
    module: ModuleType, directory: Path, processes: int, rounds: int, seed: int
) -> RaceReport:
    """Run ``rounds`` rounds of ``processes`` racers; raise AssertionError on a violation."""
    rng = random.Random(f"{PROPERTY}:{seed}")
    report = RaceReport(processes=processes)
    gate_r, gate_w = os.pipe()
    try:
        with Engine() as engine:
            files = QueueFiles(engine, module, directory)
            path = files.fresh(Snapshot())
            racers = [
                engine.fork(f"r{index}", _racer_body(module, path, gate_r))
                for index in range(processes)
            ]
            scenario = Scenario(PROPERTY, seed)
            race = _Race(engine, path, racers, gate_w, Snapshot(), rng, scenario, report)
            now = rng.randint(0, 10**6)
            for number in range(1, rounds + 1):
                race.scenario = Scenario(PROPERTY, seed)
                race.scenario.add(
                    f"round {number} of {rounds} at t={now}; the state before it:\n"
                    + race.state.describe()
                )
                race.ran, race.began, race.steps = [], race.state, []
                try:
                    _round(race, now)
                except AssertionError as error:
                    shrunk = _Shrink(engine, files, module, seed, number, now).run(race, error)
                    raise shrunk from error
                report.rounds += 1
                now += rng.choice((0, 150, 400, 900, 1600))
            for racer in racers:
                racer.answer(None)
                racer.outcome(f"racer {racer.name} to stop")
            if report.claims and not report.wins:
                raise AssertionError(
                    f"none of {report.claims} claims won a job ({report.busy} were busy); "
                    f"the model gives a job to the first claimer of every round with one"
                )
    finally:
        for fd in (gate_r, gate_w):
            with contextlib.suppress(OSError):
                os.close(fd)
    return report


def _round(race: _Race, now: int) -> None:
    count = len(race.racers)
    rng = race.rng
    intake = [_new_job(rng, race.state, now, n) for n in range(rng.choice((0, 1, 1, 2)))]
    if intake:
        race.step("intake", [intake] + [[] for _ in range(count - 1)])
    # One lease length for every claimer of a round: which racer wins which job is a real
    # race, and the rounds after it must not depend on it (each lease would end at the
    # winner's own instant). The later steps deal the tickets out by job, for the same reason.
    lease_ms = rng.randint(100, 1200)
    claims = [[LeaseOp.of("claim", f"r{i}", now, lease_ms)] for i in range(count)]
    for call in race.step("claim race", claims):
        race.report.claims += 1
        if isinstance(call.outcome.value, dict):
            race.report.wins += 1
            race.held.append(_Held(call.outcome.value, now))
    stale = _stale(race)
    if any(stale):
        tried = race.step("stale finishes against live new leases", stale)
        race.report.stale_refused += sum(call.outcome.value is False for call in tried)
    finishes = _finishes(race, now)
    for index, again in enumerate(stale):
        finishes[index] += again[:1]
    if any(finishes):
        done = race.step("finish race", finishes)
        race.report.finishes += len(done)
        race.report.stale_refused += sum(
            call.outcome.value is False for call in done if _superseded_call(race, call)
        )
    race.held = [h for h in race.held if _keep(race.state, h)]


def _keep(state: Snapshot, held: _Held) -> bool:
    """Keep current leases, and superseded tickets not yet tried against the new lease."""
    row = state.job(held.ticket["id"])
    if row is None or row.status != "leased":
        return False
    return row.token == held.ticket["token"] or not held.tried_stale


def _superseded_call(race: _Race, call: Call) -> bool:
    return any(h.tried_stale and h.ticket == call.op.value("ticket") for h in race.held)


def _new_job(rng: random.Random, state: Snapshot, now: int, offset: int) -> LeaseOp:
    event = {"id": f"j{len(state.jobs) + offset}", "qty": rng.randint(1, 1000)}
    return LeaseOp.of("enqueue", event, now, rng.randint(1500, 9000), rng.randint(1, 4))


def _superseded(state: Snapshot, ticket: dict[str, Any]) -> bool:
    row = state.job(ticket["id"])
    return row is not None and row.token > ticket["token"]


def _stale(race: _Race) -> list[list[LeaseOp]]:
    """Finishes with tickets whose jobs were claimed again (at most 2 per racer)."""
    ops: list[list[LeaseOp]] = [[] for _ in race.racers]
    for held in _by_ticket(race):
        slot = _free(ops)
        if slot is not None and _superseded(race.state, held.ticket):
            held.tried_stale = True
            inside = race.rng.randint(held.claimed_at, held.ticket["lease_until"] - 1)
            outcome = race.rng.choice(("ok", "retry", "permanent"))
            ops[slot].append(LeaseOp.of("finish", dict(held.ticket), outcome, inside, 0))
    return ops


def _finishes(race: _Race, now: int) -> list[list[LeaseOp]]:
    """Completions of some current tickets, inside their leases (at most 2 per racer)."""
    ops: list[list[LeaseOp]] = [[] for _ in race.racers]
    for held in _by_ticket(race):
        row = race.state.job(held.ticket["id"])
        current = row is not None and row.token == held.ticket["token"]
        live = current and now < held.ticket["lease_until"]
        slot = _free(ops)
        if live and race.rng.random() < 0.6 and slot is not None:
            when = race.rng.randint(now, held.ticket["lease_until"] - 1)
            outcome = race.rng.choice(("ok", "ok", "retry", "permanent"))
            delay = race.rng.choice((0, 100, 500))
            ops[slot].append(LeaseOp.of("finish", dict(held.ticket), outcome, when, delay))
    return ops


def _by_ticket(race: _Race) -> list[_Held]:
    """The tickets held, by job and token: not by which racer won them (a real race)."""
    return sorted(race.held, key=lambda held: (held.ticket["id"], held.ticket["token"]))


def _free(ops: list[list[LeaseOp]]) -> int | None:
    """The racer with the fewest calls so far (the first of them), if it has fewer than 2.

    A finish is a call with a ticket, whichever process makes it: the ticket, not the
    connection, is what the spec judges."""
    slot = min(range(len(ops)), key=lambda index: len(ops[index]))
    return slot if len(ops[slot]) < 2 else None
