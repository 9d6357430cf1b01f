"""Faults of the world around a queue library: its server crashes, a worker freezes, clocks drift.

Three faults beyond a worker's SIGKILL, each run on a fresh store of a real server
(``adapters.servers``) with real worker processes (``server_agents.Agent``):

- ``queue.server-crash``: jobs are enqueued, some claimed and acknowledged, then the
  server itself is SIGKILLed and restarted on the same data. Every enqueued job must
  still be known, every acknowledged one done, and none of those delivered again.
- ``queue.zombie-pause``: a worker claims a job and is frozen with SIGSTOP past its
  lease (a GC pause); another worker recovers and claims the job; the frozen worker is
  resumed and acknowledges. That stale ack must be refused or change nothing.
- ``queue.clock-skew``: a worker whose clock runs ahead by twice the lease runs
  recovery and claims while the first worker's lease is live by the true clock. A
  library that compares client clocks hands out a second live lease.
- ``queue.server-pause``: the server itself is frozen with SIGSTOP (a VM or GC pause)
  while a worker acknowledges a claimed job, past the job's lease, then woken. The ack
  must say what happened: accepted, and the job is never delivered again
  (``queue.ack-final``); refused, and it is delivered again (``queue.no-loss``); no
  other job may vanish. Judged as after a server crash (``restart_problem``,
  ``_after_restart``), by the promise of the property it breaks.

Each result carries the library's own promise for the fault (``Promises.of``), so a
failure reads VIOLATED where the library promises the property and "not promised"
elsewhere. ``run_server_faults`` is the hook ``leasecheck check --adapter`` calls.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from leasecheck.adapters._loop import LoopTimeout
from leasecheck.adapters.protocol import Promise, QueueLibrary, SharedClock, destroy_store
from leasecheck.adapters.servers import Server, ServerError, owned_temp_dir
from leasecheck.crash_harness.server_agents import Agent, AgentError, AgentRefused
from leasecheck.models.evidence import Evidence, Lease, Recorder

__all__ = [
    "BROKE",
    "FAULTS",
    "FaultNotRun",
    "FaultResult",
    "Scenario",
    "restart_problem",
    "run_fault",
    "run_server_faults",
]

SERVER_CRASH, ZOMBIE_PAUSE, CLOCK_SKEW, SERVER_PAUSE = (
    "queue.server-crash",
    "queue.zombie-pause",
    "queue.clock-skew",
    "queue.server-pause",
)
FAULTS = (SERVER_CRASH, ZOMBIE_PAUSE, CLOCK_SKEW, SERVER_PAUSE)
PROMISE_OF = {
    SERVER_CRASH: SERVER_CRASH, ZOMBIE_PAUSE: "queue.stale-ack", CLOCK_SKEW: CLOCK_SKEW,
    SERVER_PAUSE: "queue.ack-final",
}  # fmt: skip
"""Which of the library's promises decides each fault's verdict: a zombie's ack is the
stale-ack promise (``adapters.protocol.GENERIC_PROPERTIES``); a paused server's is the
generic property its run breaks (``BROKE``: ack-final, or no-loss for a lost job); the
other two are their own."""
BROKE = {"lost": "queue.no-loss", "acked": "queue.ack-final"}
"""``queue.server-pause``: the generic property each kind of problem breaks (what
``_after_restart`` found, as data)."""
SENT_S = 0.2
"""Seconds of real time the paused-server fault lets the worker send its ack to the frozen
server (on a driven clock the lease is advanced past at once)."""
ROUNDS = {"quick": 1, "ci": 2, "deep": 5}
"""Rounds of ``queue.server-crash`` per profile (each a different seeded history); the
other two faults are one fixed schedule, run once."""
REAL_LEASE, PATCHED_LEASE = 2.0, 10.0
"""Leases in seconds: real ones (server-clock libraries) are waited out, so short;
patched ones are advanced past instantly."""


class FaultNotRun(Exception):
    """The harness could not carry a fault through (a worker process that did not start or
    answer, a call past its bound, a server that did not come back, a real-time lease
    that ran out before the check): nothing was judged, so no verdict (exit 2)."""


_HARNESS_FAILURES = (AgentError, LoopTimeout, ServerError, TimeoutError)
"""What ends a fault run without a verdict; a worker's refusal (``AgentRefused``) is the
library's answer, not one of them."""


@dataclass(frozen=True)
class FaultResult:
    """What one fault did to one library."""

    fault: str
    library: str
    version: str
    holds: bool
    promise: Promise
    steps: tuple[str, ...] = ()
    problem: str = ""
    checked: str = ""
    evidence: Evidence | None = None
    """The failing round as data (its commands on each worker's lane)."""
    unexercised: str = ""
    """Why the fault met nothing to judge (the property then reads "not checked")."""
    judged_by: str = ""
    """The library's promise that decides the verdict (``PROMISE_OF``, or ``BROKE``)."""

    @property
    def verdict(self) -> str:
        if self.unexercised:
            return "not checked"
        if self.holds:
            return "holds"
        return "VIOLATED" if self.promise.promised else "not promised"

    def report(self) -> str:
        """The failure as a reader wants it: what broke, the steps, and who promised what."""
        said = "promises" if self.promise.promised else "does not promise"
        lines = [f"{self.verdict}: {self.fault} on {self.library} {self.version}", self.problem]
        lines += ["  " + step for step in self.steps]
        lines.append(f"{self.library} {said} it: {self.promise.source}; {self.promise.note}")
        return "\n".join(lines)


@dataclass
class Scenario:
    """One fault run: a fresh store, a shared clock, the worker processes and the script."""

    library: QueueLibrary
    server: Server
    directory: Path
    spec: str | None = None
    """How the worker processes load the library (``--adapter``'s value); default: its
    ``module:Class``."""
    steps: list[str] = field(default_factory=list)
    record: Recorder = field(default_factory=lambda: Recorder("wall ms"))
    """Each command on its worker's lane, in ms since the scenario began (plus every
    clock advance of a patched clock), and the leases the claims got."""

    def __post_init__(self) -> None:
        self.began, self.advanced = time.monotonic(), 0.0
        self.unexercised = ""
        """Set by a fault that met nothing to judge: why."""
        self.outcome = ""
        """What a holding run saw, for the ``checked`` column (e.g. the zombie's answer)."""
        self.broke = ""
        """What ``_after_restart`` found, as data: ``lost`` or ``acked`` (``BROKE``)."""
        self.real = self.library.capabilities.real_time
        caps = self.library.capabilities
        # A lease that is the server's one setting (RabbitMQ's consumer_timeout) is that.
        self.lease = (
            caps.real_lease_ms(round(REAL_LEASE * 1000)) / 1000 if self.real else PATCHED_LEASE
        )
        self.slack = caps.lease_slack
        self.location = self.library.create(self.directory, self.server.url)
        self.clock = SharedClock.of(self.directory / "clock", self.library.capabilities)
        if self.spec is None:
            self.spec = f"{type(self.library).__module__}:{type(self.library).__qualname__}"

    def agent(self, name: str, offset: float = 0.0) -> Agent:
        """Start worker process ``name`` whose clock is ``offset`` seconds ahead."""
        skew = f", clock {offset:+g} s" if offset else ""
        self.steps.append(f"{name} = worker process{skew}")
        assert self.spec is not None  # set in __post_init__
        return Agent(self.spec, self.location, self.clock.path, self.real, offset, name,
                     self.directory / f"{name}.stderr")  # fmt: skip

    def do(self, agent: Agent, op: str, **args: Any) -> Any:
        """One command, written into the script with its answer (a refusal is an answer)."""
        call = f"{agent.name}.{op}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
        try:
            value = agent.call(op, **args)
        except AgentRefused as refused:
            self.steps.append(f"{call}  # refused: {str(refused).rsplit(': ', 1)[-1]}")
            raise
        self.steps.append(f"{call}  # -> {value!r}" if value is not None else call)
        self._recorded(agent.name, call, op, args, value)
        return value

    def ms(self) -> float:
        return round((time.monotonic() - self.began + self.advanced) * 1000, 3)

    def _recorded(self, who: str, call: str, op: str, args: dict[str, Any], value: Any) -> None:
        job = value.get("job") if isinstance(value, dict) else args.get("job")
        at = self.ms()
        self.record.step(who, call, op, at, job, target=f"returned {value!r}")
        if op == "claim" and isinstance(job, str):
            until = at + self.lease * 1000
            self.record.lease(Lease("target", job, None, who, at, until, self.record.last))

    def event(self, kind: str, who: str, label: str) -> None:
        """A kill or a pause of a process, on its lane, now."""
        self.record.event(kind, who, self.ms(), label)

    def note(self, step: str) -> None:
        self.steps.append(step)

    def advance(self, seconds: float) -> None:
        """Move every worker's time on: the shared clock, or real time where it cannot move."""
        self.note(f"sleep({seconds:g})" if self.real else f"clock.advance({seconds:g})")
        self.clock.advance(seconds)
        self.advanced += 0 if self.real else seconds
        self.record.event("clock", "clock", self.ms(), f"+{seconds:g} s")

    def states(self, agent: Agent) -> dict[str, str] | None:
        """Every job's state as the store holds it; ``None`` where the library has no
        read-only view (then the faults judge by what claims deliver)."""
        seen = self.do(agent, "observe")
        return None if seen is None else {job: state for job, state in seen}

    def close(self) -> None:
        self.clock.close()
        destroy_store(self.library, self.location)


@contextlib.contextmanager
def _scenario(library: QueueLibrary, server: Server, spec: str | None) -> Iterator[Scenario]:
    directory = owned_temp_dir("leasecheck-fault-")
    scenario: Scenario | None = None
    try:
        scenario = Scenario(library, server, directory, spec)
        yield scenario
    finally:
        if scenario is not None:
            scenario.close()
        shutil.rmtree(directory, ignore_errors=True)


def _state(states: dict[str, str], job: str) -> str:
    """A job's observed state; one the store no longer lists is ``gone`` (``observe``
    returns "every job the store knows", so a deleted job may simply be absent)."""
    return states.get(job, "gone")


def _done(state: str, library: QueueLibrary) -> bool:
    return state == "done" or (state == "gone" and library.capabilities.ack_deletes)


def restart_problem(
    jobs: list[str], acked: list[str], states: dict[str, str], library: QueueLibrary
) -> str:
    """What the store lost in a server restart, judged from ``observe`` after it: an
    enqueued job that was not acknowledged must still be known; an acknowledged one must
    be done (``gone`` counts as done only where ``Capabilities.ack_deletes`` says so)."""
    lost = [job for job in jobs if job not in acked and _state(states, job) == "gone"]
    if lost:
        return f"enqueued jobs {lost} are gone after the restart (states: {states})"
    undone = [job for job in acked if not _done(_state(states, job), library)]
    if undone:
        return f"acknowledged jobs {undone} are not done after the restart: {states}"
    return ""


def server_crash(s: Scenario, rng: random.Random) -> str:
    """Acknowledged work must survive a SIGKILL of the server; no enqueued job may vanish."""
    jobs = [f"j{i}" for i in range(rng.randint(3, 6))]
    acked: list[str] = []
    with s.agent("w1") as w1:
        for job in jobs:
            s.do(w1, "enqueue", job=job)
        for _ in range(rng.randint(1, len(jobs))):
            got = s.do(w1, "claim", worker="w1", lease=s.lease)
            if got and rng.random() < 0.7 and s.do(w1, "ack", job=got["job"]):
                acked.append(got["job"])
        s.note("server.kill()  # SIGKILL of the server and all its processes")
        s.event("kill", "server", "SIGKILL of the server")
        s.server.kill()
        w1.kill()
    s.note("server.restart()  # same data directory, same port")
    s.server.restart()
    return _after_restart(s, jobs, acked)


def _after_restart(s: Scenario, jobs: list[str], acked: list[str]) -> str:
    with s.agent("w2") as w2:
        states = s.states(w2)
        if states is not None:
            problem = restart_problem(jobs, acked, states, s.library)
            if problem:
                s.broke = "lost" if problem.startswith("enqueued") else "acked"
                return problem
        s.advance(s.lease * 1.5 + s.slack)
        s.do(w2, "recover")
        again = _drain(s, w2, len(jobs) + 1)
        twice = sorted(set(again) & set(acked))
        if twice:
            s.broke = "acked"
            return f"acknowledged jobs {twice} were delivered again after the restart"
        if states is None:  # no view: every job not acknowledged must be delivered
            lost = [job for job in jobs if job not in acked and job not in again]
            if lost:
                s.broke = "lost"
                return (f"enqueued jobs {lost}, never acknowledged, were not delivered after "
                        f"the restart (delivered: {again})")  # fmt: skip
        return ""


def _drain(s: Scenario, agent: Agent, bound: int) -> list[str]:
    """Claim and acknowledge until nothing comes: the jobs delivered. Each is acknowledged
    before the next claim, since a consumer with a prefetch of one (Dramatiq's RabbitMQ
    consumer) is delivered nothing more while it holds an unacknowledged message."""
    delivered = []
    for _ in range(bound):
        got = s.do(agent, "claim", worker=agent.name, lease=s.lease)
        if got is None:
            break
        delivered.append(got["job"])
        with contextlib.suppress(AgentRefused):  # what it answers is not judged here
            s.do(agent, "ack", job=got["job"])
    return delivered


def zombie_pause(s: Scenario, rng: random.Random) -> str:
    """A worker frozen past its lease wakes up and acks a job someone else now holds."""
    with s.agent("w1") as w1, s.agent("w2") as w2:
        s.do(w1, "enqueue", job="a")
        s.do(w1, "claim", worker="w1", lease=s.lease)
        s.note("w1.pause()  # SIGSTOP: a GC pause longer than the lease")
        s.event("pause", "w1", "SIGSTOP: paused past its lease")
        w1.pause()
        s.advance(s.lease * 1.5)
        s.do(w2, "recover")
        taken = s.do(w2, "claim", worker="w2", lease=s.lease)
        started = time.monotonic()
        if taken is None:
            s.note("# nobody else got the job while w1 was frozen: nothing stale to ack")
            s.unexercised = (
                f"w2 got no job after w1 was frozen {s.lease * 1.5:g} s past its "
                f"{s.lease:g} s lease and a sweep ran: no zombie ack was sent"
            )
            w1.resume()
            return ""
        return _zombie_acks(s, w1, w2, started)


def _zombie_acks(s: Scenario, w1: Agent, w2: Agent, started: float) -> str:
    s.note("w1.resume(); w1.ack(job='a')  # SIGCONT: the zombie finishes its work")
    w1.send("ack", job="a")
    w1.resume()
    try:
        accepted = w1.reply("the zombie's ack")
    except AgentRefused as refused:
        s.note(f"# refused: {refused}")
        accepted = False
    states = s.states(w2)
    if s.real and time.monotonic() - started >= s.lease:
        raise TimeoutError(
            f"w2's {s.lease} s lease ran out before the check; rerun on an idle machine"
        )
    if states is None:  # no view: w2's own ack says whether 'a' was still its to finish
        s.outcome = f"w1's zombie ack answered {accepted!r}; nothing to observe"
        if accepted and not s.do(w2, "ack", job="a"):
            return ("the zombie w1's ack was accepted while w2 held a live lease on 'a': "
                    "w2's ack of 'a' was then refused")  # fmt: skip
        return ""
    s.outcome = f"w1's zombie ack answered {accepted!r}; 'a' then read {_state(states, 'a')!r}"
    if accepted and _done(_state(states, "a"), s.library):
        with contextlib.suppress(AgentRefused):
            s.do(w2, "ack", job="a")
        return (f"the zombie w1's ack was accepted while w2 held a live lease on 'a': "
                f"'a' became {_state(states, 'a')!r} under w2's feet")  # fmt: skip
    return ""


def clock_skew(s: Scenario, rng: random.Random) -> str:
    """A worker whose clock is ahead must not see a live lease as expired."""
    skew = 2 * s.lease
    with s.agent("w1") as w1, s.agent("w2", offset=skew) as w2:
        s.do(w1, "enqueue", job="a")
        s.do(w1, "claim", worker="w1", lease=s.lease)
        started = time.monotonic()
        s.do(w2, "recover")
        taken = s.do(w2, "claim", worker="w2", lease=s.lease)
        if taken is None:
            return ""
        if s.real and time.monotonic() - started >= s.lease:
            raise TimeoutError(f"w1's {s.lease} s lease ran out before w2 claimed; rerun idle")
        return (f"w2, whose clock is {skew:g} s ahead, claimed 'a' while w1's {s.lease:g} s "
                f"lease was live by the true clock: two live leases on one job")  # fmt: skip


def server_pause(s: Scenario, rng: random.Random) -> str:
    """A worker's ack sent to a frozen server, read when it wakes past the job's lease, must
    say what happened; no other job may vanish."""
    jobs = ["a", "b"]
    with s.agent("w1") as w1:
        for job in jobs:
            s.do(w1, "enqueue", job=job)
        got = s.do(w1, "claim", worker="w1", lease=s.lease)
        if got is None:
            raise TimeoutError("w1 got no job after enqueueing two: nothing to pause over")
        s.note("server.pause()  # SIGSTOP of the server: a VM or GC pause past the lease")
        s.event("pause", "server", "SIGSTOP of the server, past the lease")
        s.server.pause()
        try:
            s.note(f"w1.ack(job={got['job']!r})  # sent to the frozen server")
            w1.send("ack", job=got["job"])
            time.sleep(SENT_S)
            s.advance(s.lease * 1.5 + s.slack)
        finally:
            s.server.resume()
        s.note("server.resume()  # SIGCONT")
        try:
            accepted = w1.reply("w1's ack sent to the frozen server") is True
        except AgentRefused as refused:
            s.note(f"# refused: {refused}")
            accepted = False
        s.note(f"# w1's ack answered {accepted!r}")
    s.outcome = f"w1's ack to the frozen server answered {accepted!r}"
    return _after_restart(s, jobs, [got["job"]] if accepted else [])


_FAULT_RUNS: dict[str, Callable[[Scenario, random.Random], str]] = {
    SERVER_CRASH: server_crash, ZOMBIE_PAUSE: zombie_pause, CLOCK_SKEW: clock_skew,
    SERVER_PAUSE: server_pause,
}  # fmt: skip


def run_fault(
    fault: str,
    library: QueueLibrary,
    server: Server,
    profile: str,
    seed: int,
    spec: str | None = None,
) -> FaultResult:
    """Run ``fault`` against ``library`` on ``server``; the first failing round, else holds.
    ``spec`` is how the worker processes load the library (default: its ``module:Class``)."""
    if fault not in _FAULT_RUNS:
        raise ValueError(f"unknown fault {fault!r}; use one of {', '.join(FAULTS)}")
    rounds = ROUNDS.get(profile, 1) if fault == SERVER_CRASH else 1
    version, promise = library.version(), library.promises.of(PROMISE_OF[fault])
    outcomes: list[str] = []
    for round_ in range(rounds):
        rng = random.Random(f"{seed}:{fault}:{round_}")
        stopped = _harness_failures(f"{fault} on {library.name}, round {round_}")
        with stopped, _scenario(library, server, spec) as scenario:
            problem = _FAULT_RUNS[fault](scenario, rng)
            if scenario.unexercised:
                steps, why = tuple(scenario.steps), scenario.unexercised
                return FaultResult(
                    fault, library.name, version, True, promise, steps, unexercised=why
                )
            if scenario.outcome:
                outcomes.append(scenario.outcome)
            if problem:
                steps = (f"# {fault}, seed {seed}, round {round_}", *scenario.steps)
                evidence = scenario.record.evidence(problem)
                judged_by = _judged_by(fault, scenario)
                return FaultResult(
                    fault, library.name, version, False, library.promises.of(judged_by),
                    steps, problem, evidence=evidence, judged_by=judged_by,
                )  # fmt: skip
    checked = SCHEDULES.get(fault) or f"{rounds} round{'s' if rounds > 1 else ''}"
    if outcomes:
        checked += " (" + "; ".join(outcomes) + ")"
    return FaultResult(
        fault, library.name, version, True, promise, checked=checked,
        judged_by=PROMISE_OF[fault],
    )  # fmt: skip


def _judged_by(fault: str, scenario: Scenario) -> str:
    """The promise that decides a failing run: a paused server's by what broke."""
    if fault == SERVER_PAUSE and scenario.broke:
        return BROKE[scenario.broke]
    return PROMISE_OF[fault]


SCHEDULES = {
    ZOMBIE_PAUSE: (
        "1 schedule: w1 claims, is SIGSTOPped past its lease, w2 recovers and claims, "
        "w1 resumes and acks"
    ),
    CLOCK_SKEW: "1 schedule: w1 claims, w2 with its clock 2 leases ahead recovers and claims",
    SERVER_PAUSE: (
        "1 schedule: w1 claims, the server is SIGSTOPped, w1 acks, the lease runs out, the "
        "server resumes, w2 drains"
    ),
}
"""What the one-schedule faults did, for the ``checked`` column of a run that holds."""


@contextlib.contextmanager
def _harness_failures(what: str) -> Iterator[None]:
    """Turn what stops the harness (``_HARNESS_FAILURES``) into ``FaultNotRun``."""
    try:
        yield
    except AgentRefused:
        raise
    except _HARNESS_FAILURES as failure:
        raise FaultNotRun(f"{what}: {type(failure).__name__}: {failure}") from failure


def run_server_faults(
    library: QueueLibrary, server: Server, profile: str, seed: int
) -> list[FaultResult]:
    """Every server fault against ``library`` on its running ``server`` (the lead's hook)."""
    return [run_fault(fault, library, server, profile, seed) for fault in FAULTS]
