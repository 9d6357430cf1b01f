"""Parallel stateful testing: a sequential prefix, then 2+ suffixes run at once.

The approach of Erlang QuickCheck's ``parallel_commands`` and of
quickcheck-state-machine, on real processes and threads. Hypothesis generates a
``ParallelProgram`` (so a failure shrinks to a short program); a runner executes
the prefix alone, then the suffixes concurrently, and records every operation's
invocation and response instant (``time.monotonic_ns``, one clock domain) and its
outcome; ``models.linearizability.check`` then decides whether some order that
respects real time explains every outcome with the reference model.

- Lease worker (``stateful_tests/_parallel_lease.py``): one forked process per
  suffix, each with its own connection to one SQLite file. Every SQL statement a
  child runs first stops at the harness (``con.set_trace_callback``), which lets
  exactly one child run its next statement, chosen by the program's ``schedule``.
  Processes share nothing but the database, so interleaving at statement
  granularity covers every race between them, and the same program gives the
  same interleaving: a failure replays and shrinks.
- JobQueue (``stateful_tests/_parallel_jobs.py``): one thread per suffix on one
  queue object, released together by a barrier, with the interpreter's switch
  interval at 1 µs and a clock that yields, so threads interleave inside methods.

Times are arguments: a lease operation takes ``now_ms`` from the program, and a
JobQueue operation's thread sets the clock to the program's ``now`` before the
call, so the model is deterministic given the order.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st

from leasecheck.models.contracts import Snapshot
from leasecheck.models.evidence import Evidence, attach, shrunk_evidence
from leasecheck.models.history_evidence import history_evidence
from leasecheck.models.job_model import JobState
from leasecheck.models.job_ops import JobOp
from leasecheck.models.lease_ops import Held, LeaseOp
from leasecheck.models.linearizability import JobQueueSpec, LeaseSpec, Operation, Verdict, check
from leasecheck.models.shrinking import Budget, shrink
from leasecheck.queue_impl.jobs import RetryPolicy

__all__ = [
    "JOB_POLICY",
    "Failure",
    "FailureMemo",
    "Held",
    "ParallelProgram",
    "ProgramOp",
    "check_jobs_history",
    "check_lease_history",
    "failure",
    "failure_message",
    "job_programs",
    "lease_programs",
    "shrink_program",
]

JOB_POLICY = RetryPolicy(max_attempts=2, base_backoff_millis=10, max_backoff_millis=40)


ProgramOp = LeaseOp | JobOp
"""One operation of a parallel program: the contract's own record (``Held`` stands for
a ticket or lease the process got earlier, counted back from its latest)."""


@dataclass(frozen=True)
class ParallelProgram:
    """A prefix run alone, then the suffixes at once (suffix i in process/thread P<i+1>).

    The runners let one process or thread run at a time and, at each scheduling
    point (an SQL statement, a line of the JobQueue target), switch to another one
    with probability ``switch_percent`` %, drawn from ``random.Random(seed)``: the
    same program gives the same interleaving. ``kill`` is (process number,
    statement number): SIGKILL that lease process when it reaches that statement,
    leaving its operation with an unknown outcome.
    """

    prefix: tuple[ProgramOp, ...]
    suffixes: tuple[tuple[ProgramOp, ...], ...]
    seed: int = 0
    switch_percent: int = 50
    kill: tuple[int, int] | None = None

    def __repr__(self) -> str:
        lines = ["ParallelProgram(", "  prefix, run alone in order:"]
        lines += [f"    {i}. {cmd.describe()}" for i, cmd in enumerate(self.prefix, 1)]
        for number, suffix in enumerate(self.suffixes, 1):
            lines.append(f"  P{number}, at the same time as the others:")
            lines += [f"    P{number}#{i}. {cmd.describe()}" for i, cmd in enumerate(suffix, 1)]
        lines.append(f"  schedule: seed={self.seed}, switch_percent={self.switch_percent}")
        if self.kill:
            lines.append(f"  kill P{self.kill[0]} at its statement #{self.kill[1]}")
        return "\n".join([*lines, ")"])


# --- generation ----------------------------------------------------------------------------

JOB_IDS = ("a", "b", "c")
OWNERS = ("w1", "w2")
PREFIX_TIMES = st.integers(0, 5).map(lambda k: 10 * k)
SUFFIX_BASE = 100
SUFFIX_TIMES = st.integers(0, 10).map(lambda k: SUFFIX_BASE + 20 * k)
SCHEDULES = st.tuples(st.integers(0, 2**16), st.sampled_from([50, 20, 80]))


@functools.cache
def _pick(*values: Any) -> st.SearchStrategy[Any]:
    """``st.sampled_from(values)``, built once. A strategy built inside a draw is new at
    every draw and is validated before it draws, which cost more than the draw itself:
    building these once made generating a history about twice as fast, with the same
    choices and so the same programs. (``st.integers`` and ``st.lists`` of hashable
    arguments need no such cache: Hypothesis keeps one strategy per arguments itself.)"""
    return st.sampled_from(values)


def _command(name: str, **args: Any) -> LeaseOp:
    return LeaseOp.of(name, **args)


def _job(name: str, now: int, **args: Any) -> JobOp:
    return JobOp.of(name, now=now, **args)


LEASE_KINDS = ("claim", "claim", "finish", "enqueue", "redrive", "claim", "finish")


@functools.cache  # one strategy per arguments (see _pick)
@st.composite
def _lease_command(
    draw: st.DrawFn, now: int, kinds: tuple[str, ...] = LEASE_KINDS, jobs: tuple[str, ...] = ()
) -> LeaseOp:
    kind = draw(_pick(*kinds))
    if kind == "claim":
        lease = draw(_pick(40, 1000, 15))
        return _command("claim", owner=draw(_pick(*OWNERS)), now_ms=now, lease_ms=lease)
    if kind == "finish":
        outcome = draw(_pick("ok", "retry", "permanent"))
        held = Held(draw(st.integers(0, 1)))
        delay = draw(_pick(0, 30))
        return _command("finish", ticket=held, outcome=outcome, now_ms=now, delay_ms=delay)
    job = draw(_pick(*(jobs or JOB_IDS[::-1])))
    if kind == "enqueue":
        event = {"id": job, "qty": draw(_pick(1, 2))}
        ttl, budget = draw(_pick(60000, 150)), draw(_pick(3, 1))
        return _command("enqueue", event=event, now_ms=now, ttl_ms=ttl, max_attempts=budget)
    return _command("redrive", job_id=job, now_ms=now, ttl_ms=60000, note="n")


@functools.cache  # one strategy per arguments (see _pick)
@st.composite
def _timed(draw: st.DrawFn, times: st.SearchStrategy[int], size: tuple[int, int], make: Any) -> Any:
    """A list of commands with nondecreasing times (each process has its own clock)."""
    nows = sorted(draw(st.lists(times, min_size=size[0], max_size=size[1])))
    return [draw(make(now)) for now in nows]


PREFIX_KINDS = ("claim", "claim", "finish", "enqueue")
OPENINGS = ("none", "same", "same", "reclaim")
"""How the suffixes start: freely; all with the same command (the classic race: every
process claims, or enqueues the same new event, at once); or a reclaim race (the
prefix's last lease expires, P1 claims again under the same owner while the others
finish with the prefix's ticket, which is now stale)."""


@functools.cache  # one strategy per arguments (see _pick)
@st.composite
def _suffixes(
    draw: st.DrawFn, count: int, size: int, make: Any, opening: Any
) -> tuple[tuple[ProgramOp, ...], ...]:
    """``count`` suffixes, each prefixed with its command from ``opening`` (if any)."""
    firsts = draw(opening(count))
    suffixes = [draw(_timed(SUFFIX_TIMES, (1, size), make)) for _ in range(count)]
    return tuple((*first, *suffix) for first, suffix in zip(firsts, suffixes, strict=True))


def _prefix_command(now: int) -> st.SearchStrategy[LeaseOp]:
    """A command of the sequential prefix at ``now`` (a function, so ``_timed`` caches it)."""
    return _lease_command(now, PREFIX_KINDS)


@functools.cache  # one strategy per arguments (see _pick)
@st.composite
def _lease_openings(draw: st.DrawFn, count: int) -> list[tuple[LeaseOp, ...]]:
    kind = draw(_pick(*OPENINGS))
    if kind == "none":
        return [()] * count
    if kind == "same":
        shared = draw(_lease_command(SUFFIX_BASE, ("claim", "enqueue", "finish"), ("c",)))
        return [(shared,)] * count
    claim = _command("claim", owner="w1", now_ms=SUFFIX_BASE, lease_ms=1000)
    outcome = draw(_pick("ok", "retry", "permanent"))
    stale = _command("finish", ticket=Held(0), outcome=outcome, now_ms=SUFFIX_BASE, delay_ms=0)
    openings: list[tuple[LeaseOp, ...]] = [(claim,)]
    return openings + [(stale,)] * (count - 1)


@st.composite
def lease_programs(
    draw: st.DrawFn, processes: tuple[int, int] = (2, 3), suffix_len: int = 4
) -> ParallelProgram:
    """Programs for the lease worker: enqueue first, then mostly claims on few jobs."""
    first = [
        _command("enqueue", event={"id": job, "qty": 1}, now_ms=0, ttl_ms=60000, max_attempts=3)
        for job in JOB_IDS[: draw(st.integers(1, 2))]
    ]
    more = draw(_timed(PREFIX_TIMES, (0, 3), _prefix_command))
    count = draw(st.integers(*processes))
    suffixes = draw(_suffixes(count, suffix_len, _lease_command, _lease_openings))
    if suffixes[0][0].kind == "claim" and suffixes[-1][0].kind == "finish":  # a reclaim race
        more.append(_command("claim", owner="w1", now_ms=60, lease_ms=30))
    kill = None
    if draw(st.integers(0, 9)) == 0:
        kill = (draw(st.integers(1, count)), draw(st.integers(1, 8)))
    return ParallelProgram((*first, *more), suffixes, *draw(SCHEDULES), kill)


JOB_TYPES = ("email", "sms")


JOB_KINDS: tuple[str, ...] = ("poll", "poll", "complete", "fail", "view", "submit", "poll")
JOB_KINDS += ("cancel", "retry_dead", "dead_letters")


@functools.cache  # one strategy per arguments (see _pick)
@st.composite
def _job_command(draw: st.DrawFn, now: int, kinds: tuple[str, ...] = JOB_KINDS) -> JobOp:
    kind = draw(_pick(*kinds))
    if kind == "poll":
        lease = draw(_pick(1000, 30, 5))
        return _job("poll", now, worker_id=draw(_pick(*OWNERS)), lease_millis=lease)
    if kind in ("complete", "fail"):
        extra = {"error": draw(_pick(None, "boom"))} if kind == "fail" else {}
        held = Held(draw(st.integers(0, 1)))
        return _job(kind, now, job_id=held, token=held, **extra)
    if kind == "submit":
        return _job(
            "submit",
            now,
            type=draw(_pick(*JOB_TYPES)),
            payload="p",
            priority=draw(st.integers(0, 2)),
            run_at_millis=draw(_pick(0, 120)),
        )
    if kind == "dead_letters":
        return _job("dead_letters", now)
    return _job(kind, now, job_id=f"J{draw(st.integers(1, 3))}")


@functools.cache  # one strategy per arguments (see _pick)
@st.composite
def _job_openings(draw: st.DrawFn, count: int) -> list[tuple[JobOp, ...]]:
    if draw(_pick(*OPENINGS)) == "none":
        return [()] * count
    return [(draw(_job_command(SUFFIX_BASE, ("poll", "poll", "complete", "submit"))),)] * count


@st.composite
def job_programs(
    draw: st.DrawFn, threads: tuple[int, int] = (2, 3), suffix_len: int = 5
) -> ParallelProgram:
    """Programs for JobQueue: a few submits first, then mostly polls racing for them."""
    first = [
        _job(
            "submit",
            0,
            type="email",
            payload="p",
            priority=draw(st.integers(0, 1)),
            run_at_millis=0,
        )
        for _ in range(draw(st.integers(1, 3)))
    ]
    more = draw(_timed(PREFIX_TIMES, (0, 3), _job_command))
    count = draw(st.integers(*threads))
    suffixes = draw(_suffixes(count, suffix_len, _job_command, _job_openings))
    return ParallelProgram((*first, *more), suffixes, *draw(SCHEDULES))


# --- checking and reporting ----------------------------------------------------------------


class FailureMemo:
    """Bounds the time Hypothesis spends shrinking, and makes the final replay exact.

    Every parallel run costs real processes or threads, so a shrink of hundreds of
    attempts could take minutes. Once a program has failed, programs that failed
    before fail again at once with their recorded message (Hypothesis' final
    replay of the minimal example therefore always reproduces), and after
    ``budget_s`` of shrinking, new programs are not run any more and count as
    passing: the shrink stops at the smallest failure found so far.
    """

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.failed: dict[str, Failure] = {}
        self.first_failure: float | None = None
        self.last: tuple[ParallelProgram, Failure] | None = None
        """The program that failed last and its failure: after Hypothesis gives up, its
        minimal example (Hypothesis replays it last)."""

    @property
    def exhausted(self) -> bool:
        started = self.first_failure
        return started is not None and time.monotonic() - started > self.budget_s

    def run(self, program: ParallelProgram, attempt: Callable[[], Failure | str | None]) -> None:
        key = repr(program)
        failed = self.failed.get(key)
        if failed is None:
            if self.exhausted:
                return
            found = attempt()
            if found is None:
                return
            failed = found if isinstance(found, Failure) else Failure(found)
            self.failed[key] = failed
            self.first_failure = self.first_failure or time.monotonic()
        self.last = (program, failed)
        error = AssertionError(failed.message)  # one raise site: Hypothesis sees one failure
        raise attach(error, failed.evidence) if failed.evidence else error


_Placed = tuple[int, ProgramOp]
"""A command and where it runs: 0 the prefix, n the suffix of process/thread Pn."""


def _placed(program: ParallelProgram) -> list[_Placed]:
    items = [(0, command) for command in program.prefix]
    return items + [(n, c) for n, suffix in enumerate(program.suffixes, 1) for c in suffix]


def _program(original: ParallelProgram, items: list[_Placed]) -> ParallelProgram:
    """``original`` with only ``items``; a suffix left empty is dropped, unless the kill
    names a process by number (then the numbers must stay)."""
    suffixes = [
        tuple(c for where, c in items if where == n) for n in range(1, len(original.suffixes) + 1)
    ]
    kept = tuple(s for s in suffixes if s or original.kill is not None)
    prefix = tuple(c for where, c in items if where == 0)
    return replace(original, prefix=prefix, suffixes=kept)


def shrink_program(
    program: ParallelProgram,
    failed: Failure,
    attempt: Callable[[ParallelProgram], Failure | None],
    budget: Budget,
) -> tuple[ParallelProgram, Failure]:
    """Drop the commands of a failing program that Hypothesis left (``models.shrinking``)
    while ``attempt`` (the real target's run, judged again) still fails; the program at
    the same schedule seed replays the same interleaving, so the result is exact. The
    failure of the shortest program, saying how long the original was."""
    items = _placed(program)

    def fails(rest: list[_Placed]) -> tuple[ParallelProgram, Failure] | None:
        smaller = _program(program, rest)
        if len(smaller.suffixes) < 2 and program.kill is None:
            return None  # no longer concurrent: not the program this property runs
        found = attempt(smaller)
        return None if found is None else (smaller, found)

    shrunk = shrink(items, (program, failed), fails, budget)
    smallest, found = shrunk.failure
    if smallest is program:
        return program, failed
    message = f"{found.message}\n{shrunk.sentence()}"
    evidence = found.evidence and shrunk_evidence(found.evidence, len(items), shrunk.after)
    return smallest, Failure(message, evidence)


@dataclass(frozen=True)
class Failure:
    """A failed history: its message, and its evidence (``models.history_evidence``)."""

    message: str
    evidence: Evidence | None = None


def check_lease_history(history: Sequence[Operation]) -> Verdict:
    """Linearizability of a lease-worker history, from an empty queue."""
    return check(history, LeaseSpec(), Snapshot())


def check_jobs_history(history: Sequence[Operation], policy: RetryPolicy = JOB_POLICY) -> Verdict:
    """Linearizability of a JobQueue history, under either reading of ``retry_dead``.

    A target takes one reading (clears ``last_error`` or keeps it) for the whole run,
    so the history passes if it is linearizable under one of them.
    """
    verdicts = [check(history, JobQueueSpec(policy, clear), JobState()) for clear in (False, True)]
    passing = [v for v in verdicts if v.linearizable]
    return passing[0] if passing else max(verdicts, key=lambda v: len(v.order))


def failure(
    name: str, program: ParallelProgram, verdict: Verdict, seed: int, target: str = "",
    profile: str = "ci",
) -> Failure:  # fmt: skip
    """``failure_message`` with the history as evidence."""
    summary = f"{name}: no sequential order explains this concurrent history"
    message = failure_message(name, program, verdict, seed, target, profile)
    jobs = any(isinstance(op.call, JobOp) for op in verdict.history)
    initial = JobState() if jobs else Snapshot()  # check_jobs_history, check_lease_history
    evidence = history_evidence(verdict, summary, initial, JOB_POLICY if jobs else None)
    return Failure(message, evidence)


def failure_message(
    name: str, program: ParallelProgram, verdict: Verdict, seed: int, target: str = "",
    profile: str = "ci",
) -> str:  # fmt: skip
    """What a user reads when a parallel history has no linearization."""
    return "\n".join(
        [
            f"{name}: the concurrent history cannot be explained by any sequential order "
            "of its operations (linearizability violated).",
            "Program (Hypothesis shrinks it, then leasecheck drops the commands it left that"
            " the failure does not need; the same program replays the same interleaving):",
            repr(program),
            verdict.report(),
            f"Replay: leasecheck check{target} --profile {profile} --seed {seed} (the same seed "
            "generates the same programs and schedules).",
        ]
    )
