"""Planted adapters: the bundled lease worker with one bug each, and look-alikes that are fine.

Every generic property must be seen to fail. Each ``PLANTED`` entry wraps the
lease-worker adapter (``adapters.lease_worker``), keeps its promises (all five, so a
failure is VIOLATED) and changes one operation the way real queues have got it wrong.

A verdict must also not blame a library for leasecheck's own reading of it. Each
``CONTROLS`` entry changes the lease worker in a way that real libraries do and that
breaks no generic property (it deletes a job on ack, it renews a lease that ran out
while nobody else claimed the job): every property must hold on it.

Check one with ``leasecheck check --adapter planted:NAME``; ``leasecheck mutants
--list`` lists them after the source mutants.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import ClassVar

from leasecheck.adapters.lease_worker import (
    LeaseWorker,
    LeaseWorkerAdapter,
    claim_of,
    lease_ms,
    now_ms,
)
from leasecheck.adapters.protocol import Capabilities, Claim, QueueAdapter, QueueClock, StoredJob
from leasecheck.queue_impl import worker

__all__ = ["CONTROLS", "PLANTED", "PlantedBug", "PlantedControl", "planted_library"]

PICK_PAUSE_S = 0.005
"""The pause between a non-atomic claim's pick and its lease (a log call, an RPC)."""


class AckIgnoresLease(LeaseWorkerAdapter):
    """ack completes the job by its id alone: no token, no lease check."""

    def ack(self, claim: Claim) -> bool:
        done = self.con.execute(
            "UPDATE jobs SET status = 'done', owner = NULL, lease_until = NULL "
            "WHERE id = ? AND status != 'done'",
            (claim.job,),
        )
        return done.rowcount == 1


class LeaseInMinutes(LeaseWorkerAdapter):
    """claim converts the lease to whole minutes and truncates it: a 30 s lease is 1 ms."""

    def claim(self, worker_name: str, lease: float) -> Claim | None:
        minutes_ms = max(1, int(lease / 60) * 60000)
        return super().claim(worker_name, minutes_ms / 1000)


class RecoverDeletesExpired(LeaseWorkerAdapter):
    """recover deletes expired leases instead of making them claimable again."""

    def recover(self) -> int:
        gone = self.con.execute(
            "DELETE FROM jobs WHERE status = 'leased' AND lease_until <= ?", (now_ms(self.clock),)
        )
        return gone.rowcount


class ClaimPicksOutsideLock(LeaseWorkerAdapter):
    """claim picks its job with an autocommit read, pauses, then leases it in a transaction."""

    def claim(self, worker_name: str, lease: float) -> Claim | None:
        now = now_ms(self.clock)
        row = self.con.execute(worker.NEXT_CLAIMABLE, {"now": now}).fetchone()
        if row is None:
            return None
        time.sleep(PICK_PAUSE_S)
        self.con.execute("BEGIN IMMEDIATE")
        try:
            ticket = worker._lease(self.con, row[0], worker_name, now, max(1, int(lease * 1000)))
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        return claim_of(ticket)


class RecoverRevivesDone(LeaseWorkerAdapter):
    """recover requeues every row whose lease_until is NULL or past: done rows included."""

    def recover(self) -> int:
        back = self.con.execute(
            "UPDATE jobs SET status = 'pending', owner = NULL, lease_until = NULL "
            "WHERE status != 'pending' AND (lease_until IS NULL OR lease_until <= ?)",
            (now_ms(self.clock),),
        )
        return back.rowcount


class AckDeletesById(LeaseWorkerAdapter):
    """ack deletes the job's row by its id alone: no token, no lease check."""

    def ack(self, claim: Claim) -> bool:
        gone = self.con.execute("DELETE FROM jobs WHERE id = ?", (claim.job,))
        return gone.rowcount == 1


class NackIgnoresLease(LeaseWorkerAdapter):
    """nack makes the job claimable by its id alone, whoever holds it now."""

    def nack(self, claim: Claim) -> bool:
        back = self.con.execute(
            "UPDATE jobs SET status = 'pending', owner = NULL, lease_until = NULL "
            "WHERE id = ? AND status = 'leased'",
            (claim.job,),
        )
        return back.rowcount == 1


class AckAfterExpiryDropped(LeaseWorkerAdapter):
    """ack of a claim whose lease has run out answers True and finishes nothing, so the
    job is claimable again and is delivered again after recovery."""

    def ack(self, claim: Claim) -> bool:
        if claim.lease_until is not None and now_ms(self.clock) / 1000 >= claim.lease_until:
            return True
        return super().ack(claim)


class AckDeletesFenced(LeaseWorkerAdapter):
    """ack finishes the claim as the lease worker does (its ticket must be current), then
    deletes the finished row: a library that keeps no trace of acknowledged jobs."""

    def ack(self, claim: Claim) -> bool:
        if not super().ack(claim):
            return False
        self.con.execute("DELETE FROM jobs WHERE id = ? AND status = 'done'", (claim.job,))
        return True


class ExtendAfterExpiry(LeaseWorkerAdapter):
    """extend renews the claim's lease while its token is current, even after the lease ran
    out (nobody else has claimed the job, or the token would differ); observe reads an
    expired lease as ``ready``, as a visibility-timeout queue shows it."""

    def extend(self, claim: Claim, lease: float) -> bool:
        ticket = claim.handle
        assert isinstance(ticket, dict), f"a lease-worker claim's handle is its ticket: {ticket!r}"
        until = now_ms(self.clock) + lease_ms(lease)
        renewed = self.con.execute(
            "UPDATE jobs SET lease_until = ? WHERE id = ? AND token = ? AND owner = ? "
            "AND status = 'leased'",
            (until, claim.job, ticket["token"], ticket["owner"]),
        )
        if renewed.rowcount != 1:
            return False
        ticket["lease_until"] = until  # finish compares the whole ticket, lease included
        return True

    def observe(self) -> list[StoredJob]:
        now = now_ms(self.clock) / 1000
        return [
            replace(view, state="ready", lease_until=None)
            if view.state == "leased" and view.lease_until is not None and view.lease_until <= now
            else view
            for view in super().observe()
        ]


DELETES_ON_ACK = replace(LeaseWorker.capabilities, ack_deletes=True)
EXTENDS = replace(LeaseWorker.capabilities, extend=True)


@dataclass(frozen=True)
class PlantedBug:
    """One planted bug: its adapter, what it gets wrong, and the property that catches it."""

    name: str
    bug_class: str
    real_world: str
    caught_by: str
    adapter: type[LeaseWorkerAdapter]
    capabilities: Capabilities = LeaseWorker.capabilities


@dataclass(frozen=True)
class PlantedControl:
    """A look-alike of a bug that breaks no generic property: every one must hold."""

    name: str
    behaviour: str
    why_fine: str
    """Which sentence of the generic properties allows it."""
    adapter: type[LeaseWorkerAdapter]
    capabilities: Capabilities = LeaseWorker.capabilities


PLANTED: tuple[PlantedBug, ...] = (
    PlantedBug(
        "ack-ignores-lease",
        "ack completes a job by its id, without checking the claim's lease or token",
        "a consumer that deletes by message id instead of by receipt handle: a zombie's "
        "late ack completes the job its successor is still working on",
        "queue.stale-ack",
        AckIgnoresLease,
    ),
    PlantedBug(
        "lease-truncated-to-minutes",
        "the lease is converted to whole minutes and truncated, so it ends at once",
        "a visibility timeout passed in the wrong unit: every job is delivered again to the "
        "next poller while its first worker still runs it",
        "queue.linearizable",
        LeaseInMinutes,
    ),
    PlantedBug(
        "recover-deletes-expired",
        "recover deletes jobs whose lease expired instead of returning them",
        "a reaper meant to move timed-out jobs to a retry table that deletes them first",
        "queue.no-loss",
        RecoverDeletesExpired,
    ),
    PlantedBug(
        "claim-picks-outside-lock",
        "claim reads the next job outside the write lock, then leases it",
        "SELECT ... then UPDATE without FOR UPDATE / BEGIN IMMEDIATE: two workers take the "
        "same job",
        "queue.exclusive",
        ClaimPicksOutsideLock,
    ),
    PlantedBug(
        "recover-revives-done",
        "recover requeues rows whose lease_until is NULL, and done rows have NULL",
        "a sweeper whose NULL check meant 'lease lost' and resurrects finished jobs",
        "queue.ack-final",
        RecoverRevivesDone,
    ),
    PlantedBug(
        "ack-deletes-by-id",
        "ack deletes the job by its id, without checking the claim's lease or token",
        "a queue that deletes a message on ack by message id: a zombie's late ack deletes "
        "the job its successor is still working on, and the job is never finished",
        "queue.stale-ack",
        AckDeletesById,
        DELETES_ON_ACK,
    ),
    PlantedBug(
        "nack-ignores-lease",
        "nack makes a job claimable by its id, without checking the claim's lease or token",
        "a worker that timed out releases 'its' message by id after another worker took it: "
        "the next poller gets it while that worker still holds a live lease",
        "queue.exclusive",
        NackIgnoresLease,
    ),
    PlantedBug(
        "ack-after-expiry-dropped",
        "ack of a claim whose lease ran out answers True but finishes nothing",
        "a consumer API that answers success to an ack whose lease (visibility timeout) has "
        "lapsed and drops it: the job the worker was told is finished is delivered again",
        "queue.linearizable",
        AckAfterExpiryDropped,
    ),
)

CONTROLS: tuple[PlantedControl, ...] = (
    PlantedControl(
        "ack-deletes-fenced",
        "ack deletes the job once its current claim finishes it; a stale ack is refused",
        "queue.stale-ack allows a stale ack to be refused; a deleted job reads 'gone', which "
        "Capabilities.ack_deletes says is done",
        AckDeletesFenced,
        DELETES_ON_ACK,
    ),
    PlantedControl(
        "extend-after-expiry",
        "extend renews a lease that ran out while nobody else claimed the job; observe reads "
        "an expired lease as ready",
        "no second claim exists, so the claim is no zombie and nobody holds a second lease",
        ExtendAfterExpiry,
        EXTENDS,
    ),
)


def planted_library(bug: PlantedBug | PlantedControl) -> type[LeaseWorker]:
    """A ``QueueLibrary`` class for ``bug``: the lease worker's promises, the bug's adapter
    and capabilities."""

    class Planted(LeaseWorker):
        name: ClassVar[str] = f"planted:{bug.name}"
        capabilities: ClassVar[Capabilities] = bug.capabilities

        def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
            return bug.adapter(location, clock)

    Planted.__name__ = Planted.__qualname__ = "Planted_" + bug.name.replace("-", "_")
    what = bug.bug_class if isinstance(bug, PlantedBug) else bug.behaviour
    Planted.__doc__ = f"The lease worker with a planted change: {what}."
    return Planted
