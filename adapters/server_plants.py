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
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any, ClassVar

from leasecheck.adapters.pgqueuer import Pgqueuer, PgqueuerAdapter
from leasecheck.adapters.protocol import Claim, Promise, Promises, QueueAdapter, QueueClock
from leasecheck.adapters.rq import Rq, RqAdapter

__all__ = ["FencedPgqueuer", "FencedRq", "OverpromisingRq", "VolatilePgqueuer"]


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
