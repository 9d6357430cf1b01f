"""queue.ack-final under SIGKILL: an acknowledged job is never delivered again and ends done.

Round after round, worker processes forked by the engine (``crash_harness.engine``)
claim and ack jobs of one store as fast as they can, and report each ack the library
accepted. At a random instant (seeded) every worker is SIGKILLed, wherever it is:
inside the library's claim, its ack, its commit. Then the harness lets every lease
run out, runs the library's own recovery, and claims until nothing is left. No job
whose ack was reported, in that round or an earlier one, may be delivered again, and
each must read ``done`` (or be gone where acking deletes). A job whose ack was in
flight at the kill is unknown and not judged. A failure prints the job's story as
numbered steps (claimed, acked, SIGKILL, recovery, delivered again).

On a real clock (``clock="real"``) the workers lease for ``REAL_LEASE_S`` and letting
leases run out is a sleep. The kill window adapts to the library: before the rounds the
harness times one connect, claim and ack (``kill_window``).
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from leasecheck.adapters.protocol import (
    QueueAdapter,
    QueueLibrary,
    SharedClock,
    Unsupported,
    destroy_store,
)
from leasecheck.crash_harness.engine import Channel, Child, ChildDied, Engine, Message
from leasecheck.models.evidence import Evidence, Recorder, attach

__all__ = ["AckFinalReport", "check_ack_final"]

JOBS_PER_ROUND = 12
WORKERS = 2
LEASE_S = 30.0
REAL_LEASE_S = 0.1
"""On real time: long beside a worker's claim and ack (about a millisecond)."""
Stories = dict[str, list[str]]
"""Acknowledged jobs, each with what happened to it so far, in order."""
Moments = dict[str, list[tuple[str, str, int, str]]]
"""The same, as data: (worker, what, ``time.monotonic_ns()``, result) per event."""
KILL_WINDOW_S = 0.03
"""The shortest kill window: kills fall uniformly in it after the workers start."""
KILL_SPAN = 1.5
"""The window is at least this many times what a round's work takes the library (a
connection, then its share of the round's claims and acks, measured once per run), so
that a slow library (a server round trip per call) is killed mid-work, not before it."""
MAX_KILL_WINDOW_S = 2.0


@dataclass
class AckFinalReport:
    rounds: int = 0
    kills: int = 0
    acked: int = 0
    redelivered_checked: int = 0
    window_ms: float = KILL_WINDOW_S * 1000
    """The kill window this run used (``kill_window``)."""

    def render(self) -> str:
        return (
            f"{self.rounds} rounds, {self.kills} SIGKILLs in a {self.window_ms:.0f} ms window, "
            f"{self.acked} acks reported before the kills, {self.redelivered_checked} jobs "
            f"delivered after recovery (none acked)"
        )


def _lease(library: QueueLibrary) -> float:
    """Every worker's lease (s): short on real time, else stretched by the time scale."""
    if library.capabilities.real_time:  # the server's own lease, where it has one
        return library.capabilities.real_lease_ms(round(REAL_LEASE_S * 1000)) / 1000
    return LEASE_S * library.capabilities.time_scale()


def kill_window(library: QueueLibrary, location: str, clock: SharedClock, lease: float) -> float:
    """The kill window (s) for this library: ``KILL_SPAN`` times its measured connect plus
    one worker's share of a round's claim-and-ack calls, within the bounds. Measured on a
    probe job the harness enqueues, claims and acks on its own connection."""
    started = time.perf_counter()
    queue = library.connect(location, clock)
    connected = time.perf_counter()
    try:
        queue.enqueue(PROBE, "leasecheck's measure of one claim and ack")
        took = time.perf_counter()
        claim = queue.claim("probe", lease)
        if claim is not None:
            queue.ack(claim)
        call = time.perf_counter() - took
    finally:
        queue.close()
    work = (connected - started) + call * JOBS_PER_ROUND / WORKERS
    return min(MAX_KILL_WINDOW_S, max(KILL_WINDOW_S, KILL_SPAN * work))


PROBE = "probe"
"""The job ``kill_window`` acks before the rounds (never among a round's jobs)."""


def _worker_body(
    library: QueueLibrary, location: str, clock_path: Path, name: str, lease: float
) -> Callable[[Channel], int]:
    def body(channel: Channel) -> int:
        clock = SharedClock.of(clock_path, library.capabilities)
        queue = library.connect(location, clock)
        count = 0
        while (claim := queue.claim(name, lease)) is not None:
            channel.send("event", ("claimed", claim.job, None, time.monotonic_ns()))
            acked = queue.ack(claim) is True
            channel.send("event", ("acked", claim.job, acked, time.monotonic_ns()))
            count += 1
        queue.close()
        clock.close()
        return count

    return body


def _events(child: Child) -> list[tuple[object, ...]]:
    """SIGKILL ``child`` (or collect it, if it already ended) and return its events."""
    try:
        left = child.kill()
    except ChildDied:  # it had finished on its own before the kill
        left = child.drain()
    messages: list[Message] = [m for m in left if m.kind == "event"]
    return [tuple(m.value) for m in messages] + [tuple(v) for v in child.events]


def check_ack_final(
    library: QueueLibrary, directory: Path, rounds: int, seed: int, server: str | None = None
) -> AckFinalReport:
    """Run ``rounds`` kill rounds on a store in ``directory`` (or on ``server``); raise
    AssertionError naming the acked job delivered again."""
    rng = random.Random(f"queue.ack-final:{seed}")
    report = AckFinalReport()
    clock = SharedClock.of(directory / "clock", library.capabilities)
    lease = _lease(library)
    location = library.create(directory, server)
    window = kill_window(library, location, clock, lease)
    report.window_ms = window * 1000
    queue = library.connect(location, clock)
    try:
        with Engine() as engine:
            acked: Stories = {}
            moments: Moments = {}
            for number in range(rounds):
                fresh = _round(
                    engine, library, location, clock, lease, rng, number, window, moments
                )
                acked |= fresh
                report.acked += len(fresh)
                report.kills += WORKERS
                clock.advance(lease * 1.1 + 0.01 + library.capabilities.lease_slack)
                queue.recover()
                moments["recovery"] = [("queue", "recover", time.monotonic_ns(), "")]
                try:
                    report.redelivered_checked += _drain(queue, acked, number, library.name, lease)
                except AssertionError as error:
                    attach(error, _evidence(moments, str(error)))
                    raise
                _all_done(queue, acked, number, library)
                report.rounds += 1
    finally:
        queue.close()
        clock.close()
        destroy_store(library, location)
    return report


def _round(
    engine: Engine,
    library: QueueLibrary,
    location: str,
    clock: SharedClock,
    lease: float,
    rng: random.Random,
    number: int,
    window: float,
    moments: Moments,
) -> Stories:
    """Enqueue jobs, start the workers, SIGKILL them at a random instant; the acked jobs,
    each with what happened to it. The producer reads the harness's own ``clock``: a
    patched library (rq, saq) keeps the clock it was given for the whole process."""
    producer = library.connect(location, clock)
    try:
        for index in range(JOBS_PER_ROUND):
            producer.enqueue(f"r{number}j{index}", f"round {number} job {index}")
    finally:
        producer.close()
    workers = [
        engine.fork(f"w{i}", _worker_body(library, location, clock.path, f"w{i}", lease))
        for i in range(WORKERS)
    ]
    pause = rng.uniform(0, window)
    time.sleep(pause)
    stories: Stories = {}
    acked: set[str] = set()
    killed_ns = time.monotonic_ns()
    for worker in workers:
        for event in _events(worker):
            job = str(event[1])
            moments.setdefault(job, []).append(
                (worker.name, str(event[0]), int(str(event[-1])), repr(event[2]))
            )
            said = "claimed" if event[0] == "claimed" else "acked"
            result = "" if event[0] == "claimed" else f" -> {event[2]}"
            stories.setdefault(job, []).append(f"{worker.name} {said} job {job!r}{result}")
            if event[0] == "acked" and event[2] is True:
                acked.add(job)
    killed = f"SIGKILL w0 and w1, {pause * 1000:.1f} ms after they started (round {number})"
    for job in acked:
        moments[job] += [(w.name, "kill", killed_ns, killed) for w in workers]
    return {job: [*stories[job], killed] for job in sorted(acked)}


def _evidence(moments: Moments, message: str) -> Evidence:
    """The redelivered job's claims and acks on its workers' lanes, the kills, the
    recovery, and the drainer's claim that delivered it again (wall ms)."""
    job = next((j for j in moments if j != "recovery" and f"job {j!r}" in message), "")
    told = [*moments.get(job, []), *moments.get("recovery", [])]
    origin = min((ns for _, _, ns, _ in told), default=0)
    record = Recorder("wall ms")
    for worker, what, ns, said in sorted(told, key=lambda m: m[2]):
        at = round((ns - origin) / 1e6, 3)
        if what == "kill":
            record.event("kill", worker, at, "SIGKILL")
        else:
            record.step(worker, f"{what} {job}", what.removesuffix("ed"), at, job or None,
                        target=said or None)  # fmt: skip
    last = max((ns for _, _, ns, _ in told), default=origin)
    at = round((last - origin) / 1e6, 3) + 1
    said = f"delivered {job!r} again"
    record.step("drainer", f"claim() -> {job!r}", "claim", at, job or None,
                target=said, model="never: it was acked")  # fmt: skip
    return record.evidence(message.splitlines()[0])


def _drain(queue: QueueAdapter, acked: Stories, number: int, name: str, lease: float) -> int:
    """Claim (and ack) until the library has nothing; no acked job may come back."""
    delivered = 0
    for _ in range(JOBS_PER_ROUND * (number + 1) + 1):
        claim = queue.claim("drainer", lease)
        if claim is None:
            return delivered
        delivered += 1
        if claim.job in acked:
            raise AssertionError(
                f"queue.ack-final violated by {name}: job {claim.job!r} was acknowledged "
                f"(ack returned True) before its worker was SIGKILLed, yet after every lease "
                f"expired and recover() ran, claim delivered it again (round {number}):\n"
                + _steps(
                    [
                        *acked[claim.job],
                        _recovered(number),
                        f"drainer claimed job {claim.job!r} again",
                    ]
                )
            )
        with contextlib.suppress(Exception):
            queue.ack(claim)
    return delivered


def _all_done(queue: QueueAdapter, acked: Stories, number: int, library: QueueLibrary) -> None:
    try:
        views = {view.job: view.state for view in queue.observe()}
    except Unsupported:
        # No read-only view (AMQP): the drain's claims, which delivered none of the acked
        # jobs again, are the whole judgement.
        return
    ok = {"done", "gone"} if library.capabilities.ack_deletes else {"done"}
    for job in sorted(acked):
        state = views.get(job, "gone")
        if state not in ok:
            raise AssertionError(
                f"queue.ack-final violated by {library.name}: job {job!r} was acknowledged "
                f"before a SIGKILL, but after recovery the store holds it as {state!r}:\n"
                + _steps(
                    [*acked[job], _recovered(number), f"the store holds job {job!r} as {state!r}"]
                )
            )


def _recovered(number: int) -> str:
    return f"every lease ran out and recover() ran (round {number})"


def _steps(story: list[str]) -> str:
    """The numbered steps a reader follows (the picture draws the evidence, not these)."""
    return "\n".join(f"  {number}. {line}" for number, line in enumerate(story, 1))
