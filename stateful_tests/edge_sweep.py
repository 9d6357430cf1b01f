"""Every edge of both contracts, tried once each, through the agreement machines' rules.

Random generation reaches a given edge only with some probability; this sweep makes
sure each one in ``models.edges`` is tried on every run, in a few milliseconds: both
valid ends of every range, both invalid neighbours, every look-alike type (bool,
float, str, None, int/str/dict subclasses), every printable character outside the
identifier alphabet, every start state near the bounds, and for the JobQueue a
dozen jobs, policies of up to sixteen attempts with caps that are and are not
base * 2**k, and ids past J9.

Each program is a few rule calls of ``LeaseAgreement`` or ``JobAgreement`` (the same
``_agree``/``_both`` core compares target and model), with the machine's invariants
checked after every step. A failure is reported as the program that shows it, in
the same ``state.rule(...)`` form as a shrunk Hypothesis program: the program's
setup and the one call that disagreed, without the probes before it (calls both sides
refused) when it fails the same way without them, else with every one of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from types import ModuleType
from typing import Any

from hypothesis.stateful import MultipleResults

from leasecheck.models import edges
from leasecheck.models.contracts import shown
from leasecheck.models.evidence import Evidence, attach, evidence_of
from leasecheck.models.lease_model import MAX_NOW
from leasecheck.queue_impl.jobs import Lease, RetryPolicy

from . import _lease_strategies as s
from ._lease_values import Bad, Clock, Hook, Keep, Put, Send, Start, Subclass, When
from .job_machine import MAX_JOBS, Backlog, JobAgreement
from .lease_machine import LeaseAgreement

__all__ = ["EdgeFailure", "SweepReport", "sweep_jobs", "sweep_lease"]

LONG_ID = edges.IDENTIFIER_ENDS[1]


@dataclass(frozen=True)
class EdgeFailure:
    """The program that shows a disagreement, and what disagreed."""

    program: str
    machine: str
    lines: tuple[str, ...]
    message: str
    evidence: Evidence | None = None
    """What the machine recorded when it failed (its steps, both sides, the leases)."""

    def render(self) -> str:
        steps = "\n".join(f"    {line}" for line in self.lines)
        return f"edge program {self.program!r}:\n{steps}\n\n    {self.message}"

    def error(self) -> AssertionError:
        """The disagreement as an AssertionError carrying its program the way Hypothesis
        prints one (``state = Machine()`` .. ``state.teardown()``), so that the runner
        records it, the report draws it and ``--export`` writes a test of it."""
        error = AssertionError(f"edge program {self.program!r}: {self.message}")
        body = "\n".join(f"    {line}" for line in self.lines)
        error.add_note(f"    state = {self.machine}()\n{body}\n    state.teardown()")
        if self.evidence is not None:
            attach(error, self.evidence)
        return error


@dataclass
class SweepReport:
    programs: int = 0
    calls: int = 0
    failure: EdgeFailure | None = None


@dataclass
class _Program:
    """One program on a fresh machine: setup lines are kept, probe lines are not (a
    probe is refused by both sides and changes nothing), unless ``probes`` says
    "keep" (run and print them) or "skip" (run none of them)."""

    name: str
    machine: Any
    setup: list[str] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)
    calls: int = 0
    probes: str = "run"
    failing: int = -1
    """With ``probes`` "skip": the number of the step that failed (run, probe or not)."""
    index: int = 0
    """Steps asked for so far, run or skipped."""
    probed: bool = False
    """A probe ran before the step that failed."""

    def step(self, rule: str, probe: bool = False, **kwargs: Any) -> Any:
        self.index += 1
        if probe and self.probes == "skip" and self.index != self.failing:
            return None
        args = ", ".join(f"{k}={self._show(v)}" for k, v in kwargs.items())
        line = f"state.{rule}({args})"
        self.calls += 1
        try:
            result = getattr(self.machine, rule)(**kwargs)
            self._invariants()
        except AssertionError as error:
            machine = type(self.machine).__name__
            failure = EdgeFailure(
                self.name, machine, (*self.setup, line), str(error), evidence_of(error)
            )
            raise _Failed(failure) from None
        self.probed = self.probed or probe
        probe = probe and self.probes != "keep"
        if isinstance(result, MultipleResults):
            value = result.values[0] if result.values else None
        else:
            value = result
        if isinstance(value, dict | Lease) and not probe:
            kind = "leases" if isinstance(value, Lease) else "tickets"
            name = f"{kind}_{len(self.names)}"
            self.names[id(value)] = name
            line = f"({name},) = {line}" if kind == "tickets" else f"{name} = {line}"
        if not probe:
            self.setup.append(line)
        return value

    def _show(self, value: object) -> str:
        return self.names.get(id(value), shown(value))

    def _invariants(self) -> None:
        for name in ("consistent", "views_agree"):
            check = getattr(self.machine, name, None)
            if check is not None:
                check()


class _Failed(Exception):
    def __init__(self, failure: EdgeFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def _run(programs: Iterator[tuple[str, Callable[[_Program], None]]], make: Any) -> SweepReport:
    report = SweepReport()
    for name, body in programs:
        machine = make()
        program = _Program(name, machine)
        try:
            body(program)
        except _Failed as failed:
            report.failure = failed.failure
            if program.probed:
                report.failure = _replayable(name, body, make, failed.failure, program.index)
            return report
        finally:
            report.programs += 1
            report.calls += program.calls
            machine.teardown()
    return report


def _replayable(
    name: str, body: Callable[[_Program], None], make: Any, failure: EdgeFailure, failing: int
) -> EdgeFailure:
    """The failure as a program that shows it when run as printed. Without its probes
    if it fails the same way without them; else with every probe (a probe the target
    accepted wrongly may have changed what it hides, such as its next id)."""
    for probes in ("skip", "keep"):
        machine = make()
        try:
            body(_Program(name, machine, probes=probes, failing=failing))
        except _Failed as failed:
            if failed.failure.message.splitlines()[:1] == failure.message.splitlines()[:1]:
                return failed.failure
        finally:
            machine.teardown()
    return failure


# --- the lease worker ----------------------------------------------------------------------


def sweep_lease(module: ModuleType) -> SweepReport:
    """Every edge of lease-worker.md on ``module``, against the model."""
    LeaseAgreement.bind(module)
    return _run(_lease_programs(), LeaseAgreement)


EMPTY = Start()


def _first(p: _Program, start: Start = EMPTY, ttl_ms: int = 60000, budget: int = 3) -> None:
    p.step("enqueue_first", start=start, job="a", qty=1, ttl_ms=ttl_ms, max_attempts=budget)


def _claim(p: _Program, owner: str = "w1", lease_ms: int = 1000, probe: bool = False) -> Any:
    return p.step("claim", probe, owner=owner, now=When(), lease_ms=lease_ms, fault=None, bad=None)


def _finish(p: _Program, ticket: Any, outcome: str = "ok", delay_ms: int = 0, **kw: Any) -> None:
    p.step("finish", ticket=ticket, change=kw.pop("change", Keep()), outcome=outcome,
           now=kw.pop("now", When()), delay_ms=delay_ms, fault=kw.pop("fault", None),
           bad=kw.pop("bad", None), **kw)  # fmt: skip


def _lease_programs() -> Iterator[tuple[str, Callable[[_Program], None]]]:
    yield "quarantine with nothing to claim", _quarantine_only
    for start in edges.LEASE_STARTS:
        yield f"start {start}", partial(_from_start, start=Start(start))
    yield "valid ends", _valid_ends
    for name, bads in _ENQUEUE_BADS.items():
        yield f"enqueue {name}", partial(_enqueue_bads, bads=bads)
    yield "claim bad values", _claim_bads
    yield "finish bad tickets", _finish_bads
    yield "finish near misses", _finish_near_misses
    yield "faults that are no Exception", _interrupts
    yield "redrive bad values", _redrive_bads
    yield "retry_delay edges", _retry_delay_edges
    yield "retry_delay doubling and jitters just under 1", _retry_delay_walk
    yield "run_once jitters and paths", _jitters_and_paths
    yield "look-alike ids", _look_alike_ids


def _quarantine_only(p: _Program) -> None:
    """A job whose deadline has just passed: the claim finds nothing but must still commit
    the quarantine (the deadline's edge: ttl 1, one millisecond later)."""
    _first(p, ttl_ms=1)
    p.step("advance_clock", ms=1)
    _claim(p)


def _from_start(p: _Program, start: Start) -> None:
    """From a start near the bounds: claim with the longest lease, finish each way, redrive
    every dead job, deliver twice; everything agrees with the model."""
    _first(p, start)
    for outcome, delay in (("ok", 0), ("retry", 60000), ("permanent", 0)):
        ticket = _claim(p, LONG_ID, 60000)
        if ticket is not None:
            _finish(p, ticket, outcome, delay)
    for job in ("a", "b", "c", "k"):
        p.step("redrive", job=job, now=When(), ttl_ms=60000, note=LONG_ID, fault=None, bad=None)
    for send, jitter in ((Send("retryable"), 1), (Send("ack"), 0)):
        p.step("run_once", owner="w2", clock=Clock(When(), When("now", delta=1)), send=send,
               jitter=jitter, lease_ms=60000)  # fmt: skip
    p.step("advance_clock", ms=60000)
    _claim(p, "a", 1)


def _valid_ends(p: _Program) -> None:
    """Both valid ends of every range in one program (the tops first, then the bottoms)."""
    p.step("enqueue_first", start=Start(), job=LONG_ID, qty=1000, ttl_ms=60000,
           max_attempts=16)  # fmt: skip
    p.step("enqueue", job="b", qty=1, now=When("now", delta=MAX_NOW), ttl_ms=1, max_attempts=1,
           bad=None)  # fmt: skip
    ticket = _claim(p, "a", 1)
    if ticket is not None:
        _finish(p, ticket, "retry", 60000)
    p.step("enqueue", job="c", qty=1000, now=When("now", delta=MAX_NOW), ttl_ms=60000,
           max_attempts=16, bad=None)  # fmt: skip
    ticket = _claim(p, LONG_ID, 60000)
    if ticket is not None:
        _finish(p, ticket, "ok", 0)


_ENQUEUE_BADS: dict[str, list[Bad]] = {
    "events": [Bad("event", event) for event in s.BAD_EVENTS]
    + [Bad("event", {"id": bad, "qty": 1}) for bad in edges.OUTSIDE_IDENTIFIERS]
    + [Bad("event", {"id": "a", "qty": bad}) for bad in edges.bad_ints(1, 1000)],
    "ranges": [Bad(name, v) for name, r in (("ttl_ms", (1, 60000)), ("max_attempts", (1, 16)),
               ("now", (0, MAX_NOW))) for v in edges.bad_ints(*r)],
}  # fmt: skip


def _enqueue_bads(p: _Program, bads: list[Bad]) -> None:
    _first(p)
    for bad in bads:
        p.step("enqueue", True, job="b", qty=1, now=When(), ttl_ms=100, max_attempts=3, bad=bad)


def _identifier_bads() -> tuple[object, ...]:
    return (*edges.BAD_IDENTIFIERS, *edges.OUTSIDE_IDENTIFIERS)


def _claim_bads(p: _Program) -> None:
    _first(p)
    bads = [Bad("owner", v) for v in _identifier_bads()]
    bads += [Bad("lease_ms", v) for v in edges.bad_ints(1, 60000)]
    bads += [Bad("now", v) for v in edges.bad_ints(0, MAX_NOW)]
    for bad in bads:
        p.step("claim", True, owner="w1", now=When(), lease_ms=10, fault=None, bad=bad)


def _finish_bads(p: _Program) -> None:
    _first(p)
    ticket = _claim(p)
    for key in s.TICKET_KEYS:
        values = _identifier_bads() if key in ("id", "owner") else s._bad_ticket_values(key)
        for value in values:
            _finish(p, ticket, change=Put(key, value), probe=True)
    _finish(p, ticket, change=Subclass(), probe=True)
    for name, values in (("outcome", s.BAD_OUTCOMES), ("delay_ms", edges.bad_ints(0, 60000))):
        for value in values:
            _finish(p, ticket, bad=Bad(name, value), probe=True)
    _finish(p, ticket, delay_ms=60000)


def _finish_near_misses(p: _Program) -> None:
    """The ticket of a second lease with one marker field off by one (token, attempt,
    lease_until, qty), another owner or another job: a valid ticket that is not the live
    lease, so finish returns False and changes nothing; then the ticket as claimed. (A
    second lease: its attempt 2 has a valid neighbour on both sides.)"""
    _first(p)
    _claim(p, lease_ms=1)
    p.step("advance_clock", ms=1)  # the first lease runs out: the job is claimable again
    ticket = _claim(p)
    if ticket is None:
        return  # the model's claim failed too, and the machine compared that
    for change in (*s.TOKEN_MISSES, *s.NEAR_MISSES):
        if change.apply(ticket) != ticket:
            _finish(p, ticket, change=change, probe=True)
    _finish(p, ticket)


def _interrupts(p: _Program) -> None:
    """A fault hook that raises ``InjectedInterrupt``, no ``Exception`` (as KeyboardInterrupt
    and SystemExit are not), at every point of claim, finish and redrive: before COMMIT
    everything is rolled back and the error re-raised, at after-commit the change is kept
    and the error re-raised; no transaction is left open "whatever happens". The calls that
    roll back are probes; those that commit stay in the program."""
    _first(p)
    p.step("enqueue", job="b", qty=1, now=When(), ttl_ms=60000, max_attempts=3, bad=None)
    for point in s.HOOK_POINTS["claim"]:
        p.step("claim", point != "after-commit", owner="w1", now=When(), lease_ms=1000,
               fault=Hook(point, interrupt=True), bad=None)  # fmt: skip
    ticket = _claim(p, "w2")  # job b: job a is leased to w1, whose claim raised after COMMIT
    if ticket is None:
        return
    for point in s.HOOK_POINTS["finish"]:
        _finish(p, ticket, "permanent", fault=Hook(point, interrupt=True),
                probe=point != "after-commit")  # fmt: skip
    for point in s.HOOK_POINTS["redrive"]:
        p.step("redrive", point != "after-commit", job="b", now=When(), ttl_ms=100, note="n1",
               fault=Hook(point, interrupt=True), bad=None)  # fmt: skip


def _redrive_bads(p: _Program) -> None:
    _first(p, budget=1)
    _finish(p, _claim(p), "permanent")
    bads = [Bad(name, v) for name in ("job", "note") for v in _identifier_bads()]
    bads += [Bad("ttl_ms", v) for v in edges.bad_ints(1, 60000)]
    for bad in bads:
        p.step("redrive", True, job="a", now=When(), ttl_ms=100, note="n1", fault=None, bad=bad)
    p.step("redrive", job="a", now=When(), ttl_ms=60000, note=LONG_ID, fault=None, bad=None)


def _retry_delay_edges(p: _Program) -> None:
    _first(p)
    ends: list[tuple[object, object, object, object]] = [
        (16, 60000, 60000, 1), (1, 1, 1, 0), (16, 1, 1, 1.0), (5, 100, 1000, 0.5),
    ]  # fmt: skip
    ranges = {"attempt": (1, 16), "base_ms": (1, 60000), "cap_ms": (1, 60000)}
    for name, (low, high) in ranges.items():
        for value in edges.bad_ints(low, high):
            args = {"attempt": 1, "base_ms": 1, "cap_ms": 1, name: value}
            ends.append((args["attempt"], args["base_ms"], args["cap_ms"], 1))
    ends += [(1, 10, 5, 1)]  # cap below base
    ends += [(1, 1, 1, j) for j in (*s.BAD_JITTERS, math.nextafter(1.0, 2.0), *HUGE_JITTERS)]
    for attempt, base, cap, jitter in ends:
        p.step("retry_delay", True, attempt=attempt, base_ms=base, cap_ms=cap, jitter=jitter)


JUST_BELOW_ONE = (math.nextafter(1.0, 0.0), 1 - 1e-12)
"""Valid jitters a hair under 1: every reading of the formula floors a product just under
a whole number down (a target that adds an epsilon before ``floor``, or rounds, does not)."""


def _retry_delay_walk(p: _Program) -> None:
    """The doubling at every attempt, 1 to 16, under a cap it never reaches (base 1 and
    7, cap 60000), and products a hair under a whole number."""
    _first(p)
    for base in (1, 7):
        for attempt in range(1, 17):
            p.step("retry_delay", True, attempt=attempt, base_ms=base, cap_ms=60000, jitter=1)
    for jitter in JUST_BELOW_ONE:
        for attempt, base, cap in ((1, 1, 1), (1, 60000, 60000), (16, 1, 60000), (3, 100, 1000)):
            p.step("retry_delay", True, attempt=attempt, base_ms=base, cap_ms=cap, jitter=jitter)


LOOK_ALIKE_IDS = ("abc", "a_c", "ABC", "A", "a-c", "a__", "_")
"""Ids that differ from another only in case, or match it as a SQL ``LIKE`` pattern
(``_`` stands for any one character there): each is a job of its own."""


def _look_alike_ids(p: _Program) -> None:
    """Jobs whose ids look alike: each is enqueued, claimed, finished and redriven by its
    exact id (an identifier is case-sensitive, ``_`` is one of its characters)."""
    _first(p)
    for qty, job in enumerate(LOOK_ALIKE_IDS, 2):
        p.step("enqueue", job=job, qty=qty, now=When(), ttl_ms=60000, max_attempts=3, bad=None)
    for outcome in ("ok", "permanent", "retry", "ok", "permanent", "ok", "permanent", "ok"):
        ticket = _claim(p)
        if ticket is not None:
            _finish(p, ticket, outcome)
    for job in ("ABC", "a-c", "_", "a__"):
        p.step("redrive", job=job, now=When(), ttl_ms=60000, note="n1", fault=None, bad=None)


HUGE_JITTERS = (10**400, -(10**400), 2**1024)
"""Ints past a float's range: out of 0..1, so a ValueError ("A format or range error is a
`ValueError`"). ``math.isfinite`` or ``float()`` on them raises OverflowError, which a
check of finiteness before the range lets out (a helper's worker did)."""


def _jitters_and_paths(p: _Program) -> None:
    _first(p)
    for jitter in (*s.BAD_JITTERS, *HUGE_JITTERS):
        p.step("run_once", True, owner="w1", clock=Clock(), send=Send(), jitter=jitter,
               lease_ms=10)  # fmt: skip
    for path in ("missing", "directory", "fifo"):
        p.step("run_file", True, path=path, owner="w1", clock=Clock(), send=Send(), jitter=1)


# --- the job queue -------------------------------------------------------------------------


def sweep_jobs(target_class: type[Any]) -> SweepReport:
    """Every edge of job-queue.md on ``target_class``, against the model."""
    JobAgreement.bind(target_class)
    return _run(_job_programs(), JobAgreement)


def edge_policies() -> Iterator[RetryPolicy]:
    """Up to 6 attempts; caps exactly base * 2**k, between two powers, never reached."""
    for attempts in (1, 6):
        for base in (1, 7):
            for k in (0, 2, 4):
                power = base * 2**k
                for cap in (power, power + max(1, power // 2)):
                    yield RetryPolicy(attempts, base, cap)
            yield RetryPolicy(attempts, base, base * 2**6)


def _job_programs() -> Iterator[tuple[str, Callable[[_Program], None]]]:
    for policy in edge_policies():
        yield f"backoff {policy}", partial(_backoff_walk, policy=policy)
    for policy in LONG_POLICIES:
        yield f"backoff {policy}", partial(_backoff_walk, policy=policy)
    yield "a dozen jobs", _dozen_jobs
    yield "blank values", _blank_values
    yield "error texts", _error_texts
    yield "tokens past 256", _many_tokens
    yield "large values", _large_values
    yield "look-alike ids", _look_alike_job_ids
    yield "many jobs, most cancelled", _many_cancelled
    yield "many leases that end together", _many_expiring


def _backoff_walk(p: _Program, policy: RetryPolicy) -> None:
    """One job failed, and its lease let expire, until it is dead: every backoff up to the
    sixth attempt, each retry polled exactly at its run-at."""
    p.step("start", policy=policy, backlog=Backlog(1, 0))
    for attempt in range(policy.max_attempts):
        lease = p.step("poll", worker="w1", lease_millis=1)
        if lease is None:
            break
        if attempt % 2:  # let the lease expire; complete then processes it, and is refused
            p.step("advance_clock", to="lease_until", offset=0)
            p.step("complete", lease=lease, job_id=None)
        else:
            p.step("fail", lease=lease, job_id=None, error=None)
        p.step("advance_clock", to="run_at", offset=0)
    p.step("dead_letters")


LONG_POLICIES = (
    RetryPolicy(16, 1, 10**9), RetryPolicy(13, 5, 5 * 2**11), RetryPolicy(3, 2**53 + 1, 2**60),
)  # fmt: skip
"""Backoff doubling up to the 16th attempt under a cap it never reaches, up to the 13th
onto a cap it meets exactly (the draws stop at 6 attempts), and backoffs past 2**53, where
a float (``math.pow``, ``2.0 ** n``) can no longer hold every int: ``2**53 + 1`` becomes
``2**53``."""


def _dozen_jobs(p: _Program) -> None:
    """Twelve jobs: ties broken among many ready jobs, ids past J9, dead letters in order."""
    p.step("start", policy=RetryPolicy(1, 1, 1), backlog=Backlog(MAX_JOBS, 0))
    p.step("advance_clock", to="run_at", offset=20)
    for job_id in ("J10", "J12", "J13", "J9", "J1"):
        p.step("view", True, job_id=job_id)
    leases = [p.step("poll", worker="w1", lease_millis=5) for _ in range(MAX_JOBS)]
    for lease in reversed(leases):
        if lease is not None:
            p.step("fail", lease=lease, job_id=None, error="boom")
    p.step("dead_letters")
    for job_id in ("J12", "J10", "J13"):
        p.step("retry_dead", True, job_id=job_id)
        p.step("cancel", True, job_id=job_id)


ERROR_TEXTS = ("", " ", "\t", "failed", "lease expired", "None", "\u00e9rr", "e" * 5000)
"""``fail`` errors that look like the default or like nothing, and a long one: only
``None`` becomes ``"failed"`` (job-queue.md, ``fail``); every ``str`` is recorded as given,
whole."""


def _error_texts(p: _Program) -> None:
    """One job failed with each look-alike error text; every view compared after each."""
    p.step("start", policy=RetryPolicy(1, 1, 1), backlog=Backlog(len(ERROR_TEXTS), 0))
    p.step("advance_clock", to="run_at", offset=0)
    for text in ERROR_TEXTS:
        lease = p.step("poll", worker="w1", lease_millis=5)
        if lease is not None:
            p.step("fail", lease=lease, job_id=None, error=text)
    p.step("dead_letters")


def _many_tokens(p: _Program) -> None:
    """One job polled 260 times, each lease failed and the job polled again at its retry:
    its last tokens are past CPython's cached small ints, and every complete or fail hands
    the token back as an equal copy (``job_machine.travelled``), which a queue comparing
    tokens with ``is`` refuses (job-queue.md: "only uniqueness and equality count")."""
    p.step("start", policy=RetryPolicy(300, 1, 1), backlog=Backlog(1, 0))
    for _ in range(260):
        lease = p.step("poll", worker="w1", lease_millis=5)
        if lease is None:
            break
        p.step("fail", lease=lease, job_id=None, error="boom")
        p.step("advance_clock", to="run_at", offset=0)


UNICODE_BLANKS = ("\u3000", "\u2003", "\u2028", "\x1f", " \u3000 ")
"""Whitespace beyond ASCII: blank under Python's ``str.strip`` and Java's
``isWhitespace`` alike (the seed's and this page's readings of "whitespace")."""


def _blank_values(p: _Program) -> None:
    p.step("start", policy=RetryPolicy(1, 1, 1), backlog=Backlog())
    for blank in (*edges.BLANK_TEXTS, *UNICODE_BLANKS):
        p.step("submit", True, type=blank, payload=None, priority=0, run_at_millis=0)
    p.step("submit", type="email", payload=None, priority=0, run_at_millis=0)
    for blank in (*edges.BLANK_TEXTS, *UNICODE_BLANKS):
        p.step("poll", True, worker=blank, lease_millis=1)
    for lease_millis in (0, -1):
        p.step("poll", True, worker="w1", lease_millis=lease_millis)
    p.step("poll", worker="w1", lease_millis=1)


EPOCH = 2_000_000_000
"""A clock in epoch seconds, or a run-at 23 days of milliseconds away: far past the draws."""
DAY = 86_400_000


def _large_values(p: _Program) -> None:
    """Values far past the machine's draws: a run-at and a clock of 2e9 (a higher priority
    still comes first, however late its run-at), priorities past 32 bits, and leases of a
    day and more, valid until they end (job-queue.md: ``lease_until = now +
    lease_millis``; a lease is valid while ``now < lease_until``)."""
    p.step("start", policy=RetryPolicy(2, 1, 1), backlog=Backlog())
    p.step("submit", type="email", payload=None, priority=0, run_at_millis=0)
    p.step("submit", type="email", payload=None, priority=1, run_at_millis=EPOCH)
    p.step("advance_clock", to="run_at", offset=0)
    day = p.step("poll", worker="w1", lease_millis=DAY)
    for priority in (2**31, -(2**31), 10**18, 2**31 - 1):
        p.step("submit", type="email", payload=None, priority=priority, run_at_millis=EPOCH)
    longer = p.step("poll", worker="w2", lease_millis=2**31)
    longest = p.step("poll", worker="w2", lease_millis=10**12)
    p.step("advance_clock", to="now", offset=DAY // 2 + 3_600_000)
    for lease in (day, longer, longest):
        if lease is not None:
            p.step("complete", lease=lease, job_id=None)
    p.step("advance_clock", to="now", offset=DAY)
    p.step("poll", worker="w1", lease_millis=1)


LOOK_ALIKE_JOB_IDS = ("J01", "J+1", "J 1", "J1 ", " J1", "j1", "J\u0661", "J1\n", "1", "J1.0")
"""Ids that name J1 only to a parser (``int(job_id[1:])``) or a case-folding lookup: each is
an unknown id, a ``KeyError`` (job-queue.md), and must change nothing."""


def _look_alike_job_ids(p: _Program) -> None:
    """One job of each state a call can act on, then every call that takes an id, with ids
    that look like J1's, J2's or J3's."""
    p.step("start", policy=RetryPolicy(1, 1, 1), backlog=Backlog(3, 0))
    p.step("advance_clock", to="run_at", offset=0)
    lease = p.step("poll", worker="w1", lease_millis=1000)
    p.step("poll", True, worker="w1", lease_millis=1)
    for near in (*LOOK_ALIKE_JOB_IDS, "J02", "j3", "J3 "):
        p.step("view", True, job_id=near)
        p.step("cancel", True, job_id=near)
        p.step("retry_dead", True, job_id=near)
        if lease is not None:
            p.step("fail", True, lease=lease, job_id=near, error="e")
    if lease is not None:
        p.step("complete", lease=lease, job_id=None)


MANY_JOBS = 70
"""Past the thresholds a queue's housekeeping may have: a heap compacted once 32 or 64 of
its entries are dead, expiries handled 10, 16 or 64 at a time (the machines stop at 12)."""


def _many_cancelled(p: _Program) -> None:
    """Seventy jobs, all but five cancelled, the five polled to the end, best first.

    The first three are a heap's worst case after a compaction that filters its list
    without restoring the heap order: J1 (priority 9, cancelled) at the top, J2 (1) and
    J3 (5) below it, the rest (0) under them; filtered, J2 comes first, but J3 is the
    better job."""
    p.step("start", policy=RetryPolicy(2, 1000, 1000), backlog=Backlog())
    for n, priority in enumerate((9, 1, 5, *(0 for _ in range(MANY_JOBS - 3))), 1):
        p.step("submit", type="email", payload=f"p{n}", priority=priority, run_at_millis=n % 3)
    p.step("advance_clock", to="now", offset=5)
    kept = {2, 3, 20, 41, 62}
    for n in range(1, MANY_JOBS + 1):
        if n not in kept:
            p.step("cancel", job_id=f"J{n}")
    for _ in range(len(kept) + 1):
        p.step("poll", worker="w1", lease_millis=1000)


def _many_expiring(p: _Program) -> None:
    """Seventy leases that all end at one instant; the next poll must process every one of
    them before its own work (job-queue.md, Expiry), and fail none twice."""
    p.step("start", policy=RetryPolicy(2, 1000, 1000), backlog=Backlog())
    for n in range(1, MANY_JOBS + 1):
        p.step("submit", type="email", payload=f"p{n}", priority=n % 4, run_at_millis=0)
    for _ in range(MANY_JOBS):
        p.step("poll", worker="w1", lease_millis=10)
    p.step("advance_clock", to="lease_until", offset=0)
    p.step("poll", worker="w2", lease_millis=10)
    p.step("dead_letters")
