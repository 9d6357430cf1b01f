"""The generic lease-queue model: what any lease (visibility-timeout) queue may do.

Libraries differ in ordering, in when an expired lease comes back (lazily on the
next claim, or only when a sweep runs) and in what a late ack does, so the model
never predicts one outcome: each operation, given the outcome the library reported,
returns *every* state the queue may be in afterwards (empty: no explanation). A
caller keeps the set of possible states and narrows it with each ``observe``.

The model allows exactly what the generic properties allow (``GENERIC_PROPERTIES``
in ``adapters.protocol``):

- ``claim`` may return any *ready* job or any job whose lease has expired, and
  ``None`` only when no job is ready (an unclaimed ready job then must have been
  given up: ``failed``), except a job the claim may have skipped because another
  call held it locked (``skippable``: a library that claims with PostgreSQL's
  ``FOR UPDATE SKIP LOCKED``, beside a concurrent call; it stays as it was). A job
  under a live lease, a done job or an unknown job is a ``Mismatch``;
- ``ack`` that succeeds makes the holder's job done, and that is final, whether its
  lease was live or had run out (an ack that returned True is never undone: a sweep
  or a claim that brings the job back is a ``queue.ack-final`` mismatch); from a claim
  whose job was claimed again since, it must change nothing; a refused ack never
  changes anything.
  On a library that deletes a job on ack, such a stale ack that deletes the job is a
  ``queue.stale-ack`` finding (``Job.stale_ack``), not a lost job;
- ``nack`` gives the holder's job back (``ready``) or gives it up (``failed``);
- ``extend`` renews the holder's lease: a live one, or one that ran out while nobody
  else claimed the job (the library may renew it or refuse);
- ``recover`` returns expired leases to ``ready`` (``-1``: the library recovers
  lazily and the leases stay claimable as they are);
- a job that is not done and not under a live lease may become ``failed`` at any
  time (dead-lettering after a deadline or too many attempts), and an expired
  lease may read as ``ready``.

A job's ``holder`` is its latest delivery until the next claim (or a nack) replaces
it: a lease that ran out, read as ``ready`` or recovered, keeps its holder, so the
same claim's later extend or ack is never taken for a zombie's.

A ``Mismatch`` names the property its disagreement breaks, so a check that
enforces only some properties can adopt what the library did for the others.
Times are integer milliseconds since the start, so equality is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

__all__ = [
    "Job",
    "Mismatch",
    "QueueState",
    "Step",
    "ack",
    "across",
    "advance",
    "claim",
    "enqueue",
    "extend",
    "nack",
    "observe",
    "recover",
]

ModelState = Literal["ready", "leased", "done", "failed"]


@dataclass(frozen=True)
class Job:
    """One job as the model sees it; ``holder`` is the claim id of its latest delivery."""

    key: str
    state: ModelState = "ready"
    holder: str | None = None
    until: int = 0
    """When the holder's lease ends (ms); meaningful only while ``leased``."""
    stale_ack: str | None = None
    """The claim that acked this job after it was claimed again (``leased`` only): where
    the library deletes on ack, the store may read ``gone`` because of it."""

    def live(self, now: int) -> bool:
        return self.state == "leased" and now < self.until

    def expired(self, now: int) -> bool:
        return self.state == "leased" and now >= self.until

    def holder_name(self) -> str:
        """The holder for a message (the store may say leased where the model saw no claim)."""
        return "a claim the model never saw" if self.holder is None else self.holder

    def describe(self, now: int) -> str:
        if self.state != "leased":
            return f"{self.key!r} {self.state}"
        left = "live" if self.live(now) else "expired"
        return f"{self.key!r} leased to {self.holder_name()} until t={self.until} ms ({left})"


@dataclass(frozen=True)
class QueueState:
    """Every job in enqueue order, and the clock (ms since the start)."""

    jobs: tuple[Job, ...] = ()
    now: int = 0

    def job(self, key: str) -> Job | None:
        return next((job for job in self.jobs if job.key == key), None)

    def put(self, job: Job) -> QueueState:
        return replace(self, jobs=tuple(job if j.key == job.key else j for j in self.jobs))

    def describe(self) -> str:
        lines = [f"  t={self.now} ms"] + [f"  {job.describe(self.now)}" for job in self.jobs]
        return "\n".join(lines)


@dataclass(frozen=True)
class Mismatch:
    """The library did something the model does not allow; ``prop`` is what it breaks."""

    prop: str
    text: str


Step = tuple[list[QueueState], Mismatch | None]
"""The possible states after an operation, or a mismatch and the state that adopts it."""


def _ok(*states: QueueState) -> Step:
    return list(dict.fromkeys(states)), None


def enqueue(state: QueueState, key: str) -> Step:
    if state.job(key) is not None:
        raise ValueError(f"enqueue({key!r}): the harness reused a job key")
    return _ok(replace(state, jobs=(*state.jobs, Job(key))))


def advance(state: QueueState, ms: int) -> Step:
    return _ok(replace(state, now=state.now + ms))


def claim(
    state: QueueState, cid: str, lease_ms: int, got: str | None,
    skippable: frozenset[str] = frozenset(),
) -> Step:  # fmt: skip
    """``cid`` claimed for ``lease_ms`` and the library returned job ``got`` (or None).
    ``skippable``: the jobs another call may have held locked while this claim ran, which
    a claim that skips locked rows passes over (a None then leaves them as they were)."""
    if got is None:
        failed = [replace(j, state="failed") if j.state == "ready" else j for j in state.jobs]
        if not skippable:
            return _ok(replace(state, jobs=tuple(failed)))
        skipped = [j if j.key in skippable else f for j, f in zip(state.jobs, failed, strict=True)]
        return _ok(replace(state, jobs=tuple(failed)), replace(state, jobs=tuple(skipped)))
    job = state.job(got)
    leased = Job(got, "leased", cid, state.now + lease_ms)
    if job is None:
        return [replace(state, jobs=(*state.jobs, leased))], Mismatch(
            "queue.linearizable", f"claim by {cid} returned job {got!r}, which was never enqueued"
        )
    if job.state == "ready" or job.expired(state.now):
        return _ok(state.put(leased))
    return [state.put(leased)], _claim_mismatch(state, job, cid)


def _claim_mismatch(state: QueueState, job: Job, cid: str) -> Mismatch:
    if job.state == "done":
        return Mismatch(
            "queue.ack-final",
            f"claim by {cid} delivered job {job.key!r} again, but it was acknowledged",
        )
    if job.state == "failed":
        return Mismatch(
            "queue.linearizable", f"claim by {cid} delivered job {job.key!r}, which had failed"
        )
    return Mismatch(
        "queue.exclusive",
        f"claim by {cid} got job {job.key!r} at t={state.now} ms while {job.holder_name()} "
        f"held a lease on it live until t={job.until} ms: two live leases on one job",
    )


def ack(state: QueueState, cid: str, key: str, accepted: bool) -> Step:
    """``cid``'s ack of job ``key``; ``accepted`` is whether the library said it took it."""
    job = state.job(key)
    if job is not None and job.state == "leased" and job.holder != cid:
        state = state.put(replace(job, stale_ack=cid))  # claimed again since: a zombie's ack
    if not accepted or job is None or job.state == "done":
        return _ok(state)
    done = state.put(replace(job, state="done", holder=None))
    if job.holder == cid and job.state in ("leased", "ready"):
        # The holder's ack that the library took is final, its lease live or run out (read
        # as ready or recovered, nobody claimed the job since): queue.ack-final.
        return _ok(done)
    if job.state == "leased":  # claimed again since: a stale ack must change nothing
        return _ok(state)
    return _ok(done, state)


def nack(state: QueueState, cid: str, key: str, accepted: bool) -> Step:
    job = state.job(key)
    if not accepted or job is None or job.state in ("done", "failed"):
        return _ok(state)
    ready = state.put(replace(job, state="ready", holder=None))
    failed = state.put(replace(job, state="failed", holder=None))
    if job.holder == cid and job.state == "leased":
        return _ok(ready, failed) if job.live(state.now) else _ok(ready, failed, state)
    if job.state == "leased":
        return _ok(state)
    return _ok(state, failed)


def extend(state: QueueState, cid: str, key: str, lease_ms: int, accepted: bool) -> Step:
    job = state.job(key)
    if not accepted or job is None or job.holder != cid or job.state not in ("leased", "ready"):
        return _ok(state)
    # The holder's lease, live or run out with nobody claiming the job since (a lease read
    # as ready, or recovered, keeps its holder): renewing it gives no one a second lease.
    renewed = state.put(replace(job, state="leased", until=state.now + lease_ms))
    return _ok(renewed) if job.live(state.now) else _ok(renewed, state)


def recover(state: QueueState, returned: int) -> Step:
    """The library's sweep; ``returned`` is its count, ``-1`` when it recovers lazily."""
    if returned < 0:
        return _ok(state)
    back = [replace(j, state="ready") if j.expired(state.now) else j for j in state.jobs]
    return _ok(replace(state, jobs=tuple(back)))


ObservedState = Literal["ready", "leased", "done", "failed", "gone"]


def observe(
    state: QueueState, seen: Iterable[tuple[str, ObservedState]], ack_deletes: bool
) -> Step:
    """Narrow ``state`` by what the store holds; adopt what the model allows to drift."""
    seen_map = dict(seen)
    jobs: list[Job] = []
    for job in state.jobs:
        observed = seen_map.pop(job.key, "gone")
        adopted, mismatch = _read(state.now, job, observed, ack_deletes)
        if mismatch is not None:
            return [_adopt(state, job, observed)], mismatch
        jobs.append(adopted)
    # A job the store reports "gone" is absent, as the model has it (acked where an ack
    # deletes); only a job the store really holds can be unknown.
    unknown = [key for key, seen_state in seen_map.items() if seen_state != "gone"]
    if unknown:
        extra = ", ".join(repr(key) for key in unknown)
        return [state], Mismatch("queue.linearizable", f"the store holds unknown jobs {extra}")
    return _ok(replace(state, jobs=tuple(jobs)))


def _read(
    now: int, job: Job, seen: ObservedState, ack_deletes: bool
) -> tuple[Job, Mismatch | None]:
    if seen == job.state or (job.state == "done" and seen == "gone" and ack_deletes):
        return job, None
    if job.state == "ready" and seen == "failed":
        return replace(job, state="failed"), None
    if job.expired(now) and seen == "ready":
        return replace(job, state="ready"), None  # the holder stays: nobody claimed it since
    if job.expired(now) and seen == "failed":
        return replace(job, state="failed", holder=None), None
    return job, _observe_mismatch(now, job, seen)


def _observe_mismatch(now: int, job: Job, seen: ObservedState) -> Mismatch:
    said = f"job {job.key!r} reads {seen!r} but the model has it {job.describe(now)}"
    if job.state == "done":
        return Mismatch("queue.ack-final", said + ": an acknowledged job must stay done")
    if seen == "gone" and job.state == "leased" and job.stale_ack is not None:
        return Mismatch(
            "queue.stale-ack",
            said + f": the ack from {job.stale_ack}, whose job was claimed again since, "
            f"deleted it while {job.holder_name()} held it",
        )
    if seen == "gone":
        return Mismatch("queue.no-loss", said + ": the job was lost")
    if job.state == "failed" and seen == "ready":
        return Mismatch("queue.no-loss", said + ": a claim returned None while it was claimable")
    if seen == "done" and job.state == "leased":
        return Mismatch("queue.stale-ack", said + ": an ack from a stale claim completed it")
    if job.live(now):
        return Mismatch("queue.exclusive", said + ": its live lease was given up")
    return Mismatch("queue.linearizable", said)


def _adopt(state: QueueState, job: Job, seen: ObservedState) -> QueueState:
    if seen == "gone":
        return replace(state, jobs=tuple(j for j in state.jobs if j.key != job.key))
    holder = job.holder if seen == "leased" else None
    return state.put(replace(job, state=seen, holder=holder))


def across(states: Sequence[QueueState], each: Callable[[QueueState], Step]) -> Step:
    """One operation applied to every possible state: the union of the states that explain
    it, or (when none does) the first state's mismatch and adoption."""
    found: list[QueueState] = []
    first: Step | None = None
    for state in states:
        after, mismatch = each(state)
        if mismatch is None:
            found += after
        elif first is None:
            first = (after, mismatch)
    if found or first is None:
        return list(dict.fromkeys(found)), None
    return first
