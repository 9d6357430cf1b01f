"""Planted-bug adapters: the bundled lease worker with one bug each, one per generic property.

Every generic property must be seen to fail. Each entry wraps the lease-worker
adapter (``adapters.lease_worker``), keeps its promises (all five, so a failure is
VIOLATED) and changes one operation the way real queues have got it wrong. Check one
with ``leasecheck check --adapter planted:NAME``; ``leasecheck mutants --list`` lists
them after the source mutants.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

from adapters.lease_worker import LeaseWorker, LeaseWorkerAdapter, claim_of, now_ms
from adapters.protocol import Claim, Clock, QueueAdapter
from queue_impl import worker

__all__ = ["PLANTED", "PlantedBug", "planted_library"]

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


@dataclass(frozen=True)
class PlantedBug:
    """One planted bug: its adapter, what it gets wrong, and the property that catches it."""

    name: str
    bug_class: str
    real_world: str
    caught_by: str
    adapter: type[LeaseWorkerAdapter]


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
)


def planted_library(bug: PlantedBug) -> type[LeaseWorker]:
    """A ``QueueLibrary`` class for ``bug``: the lease worker's promises, the bug's adapter."""

    class Planted(LeaseWorker):
        name: ClassVar[str] = f"planted:{bug.name}"

        def connect(self, location: str, clock: Clock) -> QueueAdapter:
            return bug.adapter(location, clock)

    Planted.__name__ = Planted.__qualname__ = "Planted_" + bug.name.replace("-", "_")
    Planted.__doc__ = f"The lease worker with a planted bug: {bug.bug_class}."
    return Planted
