"""A long run of polls on one job: the JobQueue's tokens never repeat (``jobs.edges``).

job-queue.md: "every successful poll makes a token never issued before (by this queue)",
and of tokens "only uniqueness and equality count". A queue whose tokens are a counter
passes any run; one whose tokens are drawn at random repeats by the birthday bound: k
random bits repeat after about ``2**(k/2)`` polls, a 32-bit token (``secrets.token_hex(4)``,
``uuid4().hex[:8]``) after about 77,000, a 20-bit one after about a thousand. The machines
start a fresh queue every example and poll it a few dozen times, so they never get there.

This run polls one job over and over, the shortest path the contract allows between two
polls, with the clock standing still:

1. ``poll`` leases the job (it is PENDING and ready);
2. ``fail`` with that lease's token: the policy allows one attempt, so the job is DEAD;
3. ``retry_dead``: PENDING again, attempts 0, ready now (``run_at = now``).

Each token is compared, by equality, with every token issued before it. The number of
polls is the profile's (``Profile.token_polls``: 65,536 at ci, which finds any scheme with
up to about 2**25 values for certain, 2**20 at deep, up to about 2**33); a target much
slower than the bundled one stops at a CPU limit, and the run says how far it got. The
``random`` module is seeded for the run (and its state restored after), so a queue that
draws tokens from it repeats the same way on every run of the same seed; tokens from the
system's randomness (``secrets``, ``uuid``) cannot be seeded, and a scheme between those
bounds is found on some runs only.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Final

from leasecheck.queue_impl.jobs import RetryPolicy

__all__ = ["CPU_PER_POLL", "NOW", "TokenRun", "many_polls"]

NOW: Final = 1_000
"""The clock's one reading, all run long."""
LEASE_MILLIS: Final = 60_000
CPU_PER_POLL: Final = 1e-4
"""CPU seconds a cycle may take on average before the run stops early: about ten times
the bundled queue's (8.6 us a cycle, 2 cores, 7 Dec 2026). A queue that rescans every
token it ever issued gets slower with each poll and stops here, with its count."""
_UNHASHABLE_POLLS: Final = 1_024
"""Polls compared pairwise when a token cannot be hashed (the contract leaves the token's
type open): each is compared with every earlier one."""
_POLICY: Final = RetryPolicy(1, 1, 1)
"""One attempt: each failed lease makes the job DEAD, and retry_dead brings it back."""


class _StandingClock:
    """A ``TimeSource`` whose reading never moves."""

    def now_millis(self) -> int:
        return NOW


@dataclass
class TokenRun:
    """How far the run got: polls made and compared, whether the CPU limit stopped it."""

    asked: int
    polls: int = 0
    stopped_early: bool = False

    def describe(self) -> str:
        if self.polls == self.asked:
            return f"tokens unique over {self.polls:,} polls"
        why = "the CPU limit" if self.stopped_early else "unhashable tokens"
        return f"tokens unique over {self.polls:,} of {self.asked:,} polls (stopped by {why})"


def many_polls(target_class: type[Any], polls: int, seed: int) -> TokenRun:
    """Poll one job of a fresh ``target_class`` queue ``polls`` times (see the module);
    raise ``AssertionError`` when a token repeats or the queue leaves the contract's path."""
    state = random.getstate()
    random.seed(seed)
    try:
        return _run(target_class, polls)
    finally:
        random.setstate(state)


def _run(target_class: type[Any], polls: int) -> TokenRun:
    run = TokenRun(asked=polls)
    queue = _step("JobQueue(...)", 0, target_class, _StandingClock(), _POLICY)
    job = _step(f'submit("t", "p", 0, {NOW})', 0, queue.submit, "t", "p", 0, NOW)
    issued: dict[object, int] = {}
    unhashable: list[tuple[int, object]] = []
    limit = polls * CPU_PER_POLL
    started = time.process_time()
    for n in range(1, polls + 1):
        lease = _step("poll {n:,}", n, queue.poll, "w1", LEASE_MILLIS)
        if lease is None:
            raise AssertionError(
                _broke(f"poll {n:,} returned None, but job {job!r} was PENDING and ready: "
                          "retry_dead sets run_at = now, and the clock did not move")
            )  # fmt: skip
        token = lease.token
        earlier = _earlier(n, token, issued, unhashable)
        if earlier is not None:
            raise AssertionError(_repeated(n, earlier, job, token))
        run.polls = n
        if unhashable and n >= _UNHASHABLE_POLLS:
            return run
        _step("fail after poll {n:,}", n, queue.fail, lease.job_id, token, None)
        _step("retry_dead after poll {n:,}", n, queue.retry_dead, lease.job_id)
        if n % 1024 == 0 and time.process_time() - started > limit:
            run.stopped_early = True
            return run
    return run


def _earlier(
    n: int, token: object, issued: dict[object, int], unhashable: list[tuple[int, object]]
) -> int | None:
    """The number of the poll that issued a token equal to ``token``, if any; records poll
    ``n``'s."""
    try:
        earlier = issued.get(token)
    except TypeError:
        earlier = next((m for m, other in unhashable if other == token), None)
        unhashable.append((n, token))
        return earlier
    if earlier is None:
        issued[token] = n
    return earlier


def _step(what: str, n: int, call: Any, *args: object) -> Any:
    """``call(*args)``; an exception from it is the run's failure (``what``, formatted with
    the poll number ``n`` only then, names the call)."""
    try:
        return call(*args)
    except Exception as error:
        raise AssertionError(
            _broke(f"{what.format(n=n)} raised {type(error).__name__}: {str(error)[:200]}")
        ) from error


def _path() -> str:
    return (
        f"one job on a queue with {_POLICY!r} and the clock standing at {NOW}; each cycle "
        f"polls it (lease_millis={LEASE_MILLIS}), fails that lease with error None (one "
        "attempt allowed: the job is DEAD) and retries it with retry_dead (PENDING, attempts "
        "0, run_at = now)"
    )


def _broke(what: str) -> str:
    return (
        f"the long run of polls left the contract's path: {what}.\nThe run: {_path()}. "
        "job-queue.md: poll leases the best ready job (PENDING and run_at <= now); a failed "
        "attempt with attempts >= max_attempts is DEAD; retry_dead makes a DEAD job PENDING, "
        "attempts 0, ready now"
    )


def _repeated(n: int, earlier: int, job: object, token: object) -> str:
    return (
        f"poll {n:,} leased job {job!r} with the token {token!r}, which poll {earlier:,} had "
        f'already issued. job-queue.md: "every successful poll makes a token never issued '
        f'before (by this queue)".\nThe run: {_path()}.\nTokens drawn at random repeat by the '
        "birthday bound: k random bits after about 2**(k/2) polls (32 bits after about "
        "77,000); a counter, or 128 random bits (uuid4), does not"
    )
