"""Planted variants of the server-backed adapters, so every server fault can be seen to
fail and to hold (the server-side counterpart of ``leasecheck/mutants``).

- ``VolatilePgqueuer``: pgqueuer installed with its ``volatile`` durability (UNLOGGED
  tables, which PostgreSQL empties after a crash): ``queue.server-crash`` must fail.
- ``FencedPgqueuer``: pgqueuer whose ack first checks that the claimer still owns the
  row (``queue_manager_id``): the zombie's ack is refused, ``queue.zombie-pause`` holds.
- ``OverpromisingRq``: rq that claims the stale-ack promise it does not keep: the same
  counterexample becomes VIOLATED (exit 1), which is how a failing run is exercised.
- ``FencedRq``: rq whose ack and nack first check that the claim's execution is still
  the job's current one in rq's ``StartedJobRegistry`` (``job_id:execution_id``): a
  recovered claim's late ack is refused, so ``queue.stale-ack`` holds (the fixed library
  an exported replay of ``OverpromisingRq``'s counterexample passes on).
- ``ForgetfulRq``: rq whose ``observe`` lists only jobs not yet acknowledged, declaring
  ``ack_deletes`` (a library that deletes on ack, seen the way ``observe`` allows: "every
  job the store knows"). Every fault must judge it as it judges rq: an acknowledged job
  that is simply absent is done, an unacknowledged one absent is lost.
- ``AckDroppingRq``: rq-defaults whose ack of a claim whose lease ran out answers True
  and finishes nothing (``planted:ack-after-expiry-dropped`` on rq): ``queue.linearizable``
  must still fail with its sweeps logged, since the set-aside of acks that ran beside
  rq's own sweep (``leasecheck/properties/_sweep_race.py``) must not hide it.
- ``ResettingNats``: nats-jetstream whose every new connection deletes the store's durable
  pull consumer (a worker's start-up that "resets" its consumer): the deliveries another
  connection holds are forgotten, and the next claim takes the same message again: a
  live claim is given up (``queue.interleavings``' ``open-while-own-claim``, which opens a
  connection beside P1's live claim, must say so).
- ``SweeplessRq``: rq that delivers each job once: a claim of a job claimed before gets
  nothing, so an expired claim's job never reaches a second worker and
  ``queue.zombie-pause`` meets no zombie: it must say "not checked", not "holds".
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from pathlib import Path
from typing import Any, ClassVar

from leasecheck.adapters._patched_time import current_clock
from leasecheck.adapters.nats_jetstream import CONSUMER, NatsAdapter, NatsJetstream
from leasecheck.adapters.pgqueuer import Pgqueuer, PgqueuerAdapter
from leasecheck.adapters.protocol import (
    Capabilities,
    Claim,
    Promise,
    Promises,
    QueueAdapter,
    QueueClock,
    StoredJob,
)
from leasecheck.adapters.rq import Rq, RqAdapter, RqDefaults

__all__ = [
    "AckDroppingRq",
    "FencedPgqueuer",
    "FencedRq",
    "ForgetfulRq",
    "OverpromisingRq",
    "ResettingNats",
    "SweeplessRq",
    "VolatilePgqueuer",
]


class VolatilePgqueuer(Pgqueuer):
    """pgqueuer with every table UNLOGGED (its ``Durability.volatile``)."""

    name: ClassVar[str] = "pgqueuer-volatile"

    def create(self, directory: Path, server: str | None) -> str:
        url = super().create(directory, server)
        adapter = PgqueuerAdapter(url)
        try:
            for table in ("pgqueuer", "pgqueuer_log", "leasecheck_jobs"):
                adapter.session.rows(f"ALTER TABLE {table} SET UNLOGGED")
        finally:
            adapter.close()
        return url


class FencedPgqueuer(Pgqueuer):
    """pgqueuer whose ack is refused unless the claimer still owns the row."""

    name: ClassVar[str] = "pgqueuer-fenced"

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return _FencedAdapter(location)


class _FencedAdapter(PgqueuerAdapter):
    def ack(self, claim: Claim) -> bool:
        handle: Any = claim.handle
        owner = uuid.uuid5(uuid.NAMESPACE_URL, f"leasecheck:{claim.worker}")
        rows = self.session.rows(
            "SELECT 1 FROM pgqueuer WHERE id = %s AND queue_manager_id = %s", handle.id, owner
        )
        return bool(rows) and super().ack(claim)


class OverpromisingRq(Rq):
    """rq declaring a stale-ack promise (fencing) that rq does not make."""

    name: ClassVar[str] = "rq-overpromised"
    promises: ClassVar[Promises] = dataclasses.replace(
        Rq.promises,
        properties={
            **Rq.promises.properties,
            "queue.stale-ack": Promise(True, "planted: adapters/server_plants.py", "planted"),
        },
    )


class FencedRq(OverpromisingRq):
    """rq whose ack and nack are refused unless the claim's execution is still current."""

    name: ClassVar[str] = "rq-fenced"

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return _FencedRqAdapter(location, clock)


class _FencedRqAdapter(RqAdapter):
    def _current(self, claim: Claim) -> bool:
        """The claim's (job id, execution id) is still in the started registry: nobody
        has recovered it (``clean_registries``) since it was claimed."""
        handle: Any = claim.handle
        job, queue, execution = handle
        started = queue.started_job_registry.get_job_and_execution_ids(cleanup=False)
        return (job.id, execution.id) in started

    def ack(self, claim: Claim) -> bool:
        return self._current(claim) and super().ack(claim)

    def nack(self, claim: Claim) -> bool:
        return self._current(claim) and super().nack(claim)


class ForgetfulRq(Rq):
    """rq whose finished jobs are absent from ``observe`` (``ack_deletes``)."""

    name: ClassVar[str] = "rq-forgetful"
    capabilities: ClassVar[Capabilities] = dataclasses.replace(Rq.capabilities, ack_deletes=True)

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return _ForgetfulRqAdapter(location, clock)


class _ForgetfulRqAdapter(RqAdapter):
    def observe(self) -> list[StoredJob]:
        return [view for view in super().observe() if view.state not in ("done", "gone")]


class SweeplessRq(Rq):
    """rq whose expired claims are never delivered again."""

    name: ClassVar[str] = "rq-sweepless"

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return _SweeplessRqAdapter(location, clock)


class _SweeplessRqAdapter(RqAdapter):
    def claim(self, worker: str, lease: float) -> Claim | None:
        got = super().claim(worker, lease)
        first = got is not None and self.redis.set(
            f"leasecheck:{self.prefix}:claimed:{got.job}", 1, nx=True
        )
        return got if first else None


class AckDroppingRq(RqDefaults):
    """rq-defaults whose ack of a claim whose lease ran out is answered and dropped."""

    name: ClassVar[str] = "rq-ack-dropped"

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return _AckDroppingRqAdapter(location, clock, defaults=True, sweep_log=self.sweep_log)


class _AckDroppingRqAdapter(RqAdapter):
    def ack(self, claim: Claim) -> bool:
        ran_out = claim.lease_until is not None and current_clock().now() >= claim.lease_until
        return True if ran_out else super().ack(claim)


class ResettingNats(NatsJetstream):
    """nats-jetstream whose connections delete the durable consumer when they open."""

    name: ClassVar[str] = "nats-resetting"

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return _ResettingNatsAdapter(location)


class _ResettingNatsAdapter(NatsAdapter):
    def __init__(self, location: str) -> None:
        super().__init__(location)
        from nats.js.errors import NotFoundError

        with contextlib.suppress(NotFoundError):  # no claim has made it yet
            self.run(self.js.delete_consumer(self.stream, CONSUMER), "resetting the consumer")
