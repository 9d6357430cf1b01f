"""jobs.threads: many threads poll, complete and fail one JobQueue at once.

job-queue.md: "with many threads polling at once, a job is never leased to two
workers at the same time; all methods are safe to call from many threads". This
module is the runner: it hammers a target in short rounds, logging every call with
the clock values it read (``SwitchingTime`` records them per thread) and what it
returned or raised. Each round is then judged from what the threads saw, never from
timing, by ``stateful_tests._job_threads_judge`` (which says what the calls must
satisfy: no double lease, no reused token, no stale token accepted, only the errors
the spec allows, final views and dead letters as the model's).

To make races likely, ``sys.setswitchinterval`` is set very low (restored
afterwards) and every clock read yields the GIL and now and then moves time, so
leases expire while threads still hold them. Threads are daemons joined with a
deadline: a target that deadlocks gets a verdict naming the method, never a hang.
"""

from __future__ import annotations

import itertools
import random
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from leasecheck.models.job_ops import JobOp
from leasecheck.queue_impl.jobs import Lease, RetryPolicy
from leasecheck.stateful_tests._job_threads_judge import FinishedRound, ThreadCall, judge

__all__ = ["HammerConfig", "HammerReport", "SwitchingTime", "hammer", "run_round"]

SWITCH_INTERVAL = 1e-6


@dataclass(frozen=True)
class HammerConfig:
    """The shape of one round; the defaults catch an unlocked poll in well under a second."""

    threads: int = 8
    jobs_per_thread: int = 8
    polls_per_thread: int = 120
    lease_millis: tuple[int, int] = (4, 16)
    tick_every: int = 12
    """The clock moves 1 ms every this many reads (by any thread)."""
    policy: RetryPolicy = field(default_factory=lambda: RetryPolicy(3, 2, 6))
    join_seconds: float = 10.0
    """How long all threads together may take before the verdict is "possible deadlock"."""


@dataclass(frozen=True)
class HammerReport:
    rounds: int
    calls: int
    leases: int

    def __str__(self) -> str:
        return f"{self.rounds} rounds, {self.calls} calls, {self.leases} leases"


class SwitchingTime:
    """A thread-safe fake ``TimeSource`` that is also a switching point.

    Every read first yields the GIL (``time.sleep(0)``), so a target that reads the
    clock while choosing a job lets other threads run right there; every
    ``tick_every``-th read moves time by 1 ms. The values a thread reads during a
    call are collected by ``reading()``.
    """

    def __init__(self, tick_every: int, now: int = 0) -> None:
        self.tick_every = tick_every
        self._now = now
        self._reads = itertools.count(1)
        self._lock = threading.Lock()
        self._local = threading.local()

    def now_millis(self) -> int:
        time.sleep(0)
        with self._lock:
            if next(self._reads) % self.tick_every == 0:
                self._now += 1
            now = self._now
        seen: list[int] | None = getattr(self._local, "seen", None)
        if seen is not None:
            seen.append(now)
        return now

    def peek(self) -> int:
        """The current time, without counting as a read."""
        return self._now

    @contextmanager
    def reading(self) -> Iterator[list[int]]:
        """Collect the values this thread reads inside the block."""
        seen: list[int] = []
        self._local.seen = seen
        try:
            yield seen
        finally:
            self._local.seen = None


class _Round:
    """One round: a fresh queue, its jobs, the worker threads and their log."""

    def __init__(self, target_class: type[Any], config: HammerConfig, seed: int) -> None:
        self.config = config
        self.seed = seed
        self.clock = SwitchingTime(config.tick_every)
        self.queue = target_class(self.clock, config.policy)
        self.log: list[ThreadCall] = []
        self.inside: dict[str, str] = {}
        """worker -> the method it is inside right now (for the deadlock verdict)."""
        self.crashed: list[BaseException] = []
        rng = random.Random(seed)
        self.submitted: list[tuple[str, str, str, int]] = []
        for number in range(config.threads * config.jobs_per_thread):
            priority = rng.randrange(3)
            job_id = self.queue.submit("email", f"p{number}", priority, 0)
            self.submitted.append((job_id, "email", f"p{number}", priority))

    def call(self, record: ThreadCall) -> Any:
        """Run the record's call on the queue, noting the instants it read."""
        self.inside[record.worker] = record.method
        before = self.clock.peek()
        with self.clock.reading() as seen:
            try:
                result = record.call.apply(self.queue)
            except Exception as error:  # judged later: which errors the spec allows
                record.raised, result = error, None
        record.reads, record.clock = seen, (before, self.clock.peek())
        self.inside[record.worker] = "-"
        self.log.append(record)
        return result

    def work(self, worker: str) -> None:
        try:
            self._work(worker)
        except BaseException as error:  # reported as a checker failure, not swallowed
            self.crashed.append(error)

    def _work(self, worker: str) -> None:
        rng = random.Random(f"{self.seed}-{worker}")
        mine: list[Lease] = []
        for _ in range(self.config.polls_per_thread):
            if mine and rng.random() < 0.1:
                self._end(worker, rng.choice(mine), rng)  # a zombie: an old lease of mine
            millis = rng.randint(*self.config.lease_millis)
            record = ThreadCall(worker, JobOp.of("poll", worker, millis))
            lease = self.call(record)
            if not isinstance(lease, Lease):
                continue
            record.lease = lease
            mine.append(lease)
            if rng.random() < 0.8:
                self._end(worker, lease, rng)

    def _end(self, worker: str, lease: Lease, rng: random.Random) -> None:
        if rng.random() < 0.5:
            self.call(ThreadCall.ending(worker, "complete", lease))
            return
        error = rng.choice(["boom", None])
        self.call(ThreadCall.ending(worker, "fail", lease, error))

    def run(self) -> None:
        """Start every worker at once; wait for all of them, at most ``join_seconds``."""
        workers = [f"w{n}" for n in range(1, self.config.threads + 1)]
        threads = [
            threading.Thread(target=self.work, args=(w,), name=f"jobs.threads {w}", daemon=True)
            for w in workers
        ]
        previous = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL)
        try:
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + self.config.join_seconds
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
        finally:
            sys.setswitchinterval(previous)
        stuck = [w for w, t in zip(workers, threads, strict=True) if t.is_alive()]
        if stuck:
            raise AssertionError(self._deadlock(stuck))
        if self.crashed:
            raise RuntimeError("a jobs.threads worker thread crashed") from self.crashed[0]

    def finished(self) -> FinishedRound:
        """What the judge reads of this round, once every thread has finished."""
        return FinishedRound(
            seed=self.seed,
            threads=self.config.threads,
            policy=self.config.policy,
            log=self.log,
            submitted=self.submitted,
            queue=self.queue,
            final_now=self.clock.peek(),
        )

    def _deadlock(self, stuck: Sequence[str]) -> str:
        methods = sorted({self.inside.get(w, "-") for w in stuck} - {"-"}) or ["between calls"]
        where = ", ".join(f"{w} in {self.inside.get(w, '-')}" for w in stuck)
        return (
            f"threads did not finish within {self.config.join_seconds:g} s: possible deadlock "
            f"in {' / '.join(methods)} ({where}); every call of a correct JobQueue returns "
            f"promptly, check that each lock taken is released (also on exceptions)"
        )


def run_round(target_class: type[Any], config: HammerConfig, seed: int) -> _Round:
    """Run one round on a fresh queue and check it; raise AssertionError on a violation."""
    hammered = _Round(target_class, config, seed)
    hammered.run()
    judge(hammered.finished())
    return hammered


def hammer(
    target_class: type[Any], rounds: int, seed: int, config: HammerConfig | None = None
) -> HammerReport:
    """``rounds`` rounds (at least one); raise on the first violation.

    A count of rounds, not a time budget: how many rounds a budget of seconds allowed
    fell with the machine's load, and an unlocked poll a quiet machine caught in its
    first rounds went unseen in a loaded CI run.
    """
    config = config or HammerConfig()
    rounds = max(1, rounds)
    calls = leases = 0
    for number in range(rounds):
        done = run_round(target_class, config, seed * 1_000_003 + number)
        calls += len(done.log)
        leases += sum(1 for c in done.log if c.method == "poll" and c.lease is not None)
    return HammerReport(rounds, calls, leases)
