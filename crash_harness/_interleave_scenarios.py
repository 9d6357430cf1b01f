"""The small scenarios ``lease.interleavings`` explores: every write path, seeded queues.

Each scenario is a seeded queue state (written into the file before the processes
start) and one short program per process. The states are chosen so that the
processes compete for one job: two claims for the lowest-seq job, two finishes of one
ticket, two enqueues of one id, two redrives of one dead job, ``run_once`` and
``run_file`` (which opens its own connection, so its ``open_queue`` statements are
scheduled too) against a claim, and a worker restarted under the same name that
reclaims its expired job while its old ticket is finished (``reclaim-finish``). Every
clock reads ``NOW``; apart from the lease that has already run out at ``NOW``, no lease
can run out during a scenario, which is what lets ``run_once`` be judged as one step
(``models._linear_specs``).
"""

from __future__ import annotations

from dataclasses import dataclass

from leasecheck.crash_harness._interleave_child import HELD
from leasecheck.models.contracts import JobRow, Snapshot
from leasecheck.models.lease_ops import LeaseOp

__all__ = ["BOUNDS", "NOW", "SCENARIOS", "Scenario", "by_name"]

NOW = 1000
LEASE_MS = 1000
DEADLINE = NOW + 60_000


@dataclass(frozen=True)
class Scenario:
    """A seeded queue and the programs of its processes (P1, P2, ...)."""

    name: str
    initial: Snapshot
    programs: tuple[tuple[LeaseOp, ...], ...]

    @property
    def processes(self) -> int:
        return len(self.programs)

    def describe(self) -> str:
        lines = [f"scenario {self.name!r}, from the seeded queue:", self.initial.describe()]
        for n, program in enumerate(self.programs, 1):
            lines.append(f"  P{n}: " + "; ".join(call.describe() for call in program))
        return "\n".join(lines)


def _pending(job_id: str) -> JobRow:
    return JobRow(job_id, 1, "pending", 0, 3, 0, available_at=NOW - 10, deadline=DEADLINE)


_LEASED = JobRow("j1", 1, "leased", 1, 3, 1, NOW - 10, DEADLINE, "w0", NOW + LEASE_MS)
_EXPIRED = JobRow("j1", 1, "leased", 1, 3, 1, NOW - 1010, DEADLINE, "w0", NOW)
_OLD = {"id": "j1", "qty": 1, "owner": "w0", "token": 1, "attempt": 1, "lease_until": NOW}
"""A lease that ran out at NOW: a claim by the same owner name takes the job again."""
_TICKET = {"id": "j1", "qty": 1, "owner": "w0", "token": 1, "attempt": 1,
           "lease_until": NOW + LEASE_MS}  # fmt: skip


def _dead(job_id: str) -> JobRow:
    return JobRow(job_id, 1, "dead", 3, 3, 3, NOW - 10, DEADLINE, reason="exhausted")


def _claim(owner: str, now: int = NOW) -> LeaseOp:
    return LeaseOp.of("claim", owner=owner, now_ms=now, lease_ms=LEASE_MS)


def _finish(outcome: str, ticket: object = None) -> LeaseOp:
    return LeaseOp.of("finish", ticket=_TICKET if ticket is None else ticket, outcome=outcome,
                      now_ms=NOW)  # fmt: skip


def _enqueue(job_id: str) -> LeaseOp:
    return LeaseOp.of("enqueue", event={"id": job_id, "qty": 1}, now_ms=NOW, ttl_ms=60_000)


def _redrive(note: str, job_id: str = "j1") -> LeaseOp:
    return LeaseOp.of("redrive", job_id=job_id, now_ms=NOW, ttl_ms=60_000, note=note)


def _run(name: str, owner: str) -> LeaseOp:
    return LeaseOp.of(name, owner=owner, now_ms=NOW, lease_ms=LEASE_MS)


_TWO = Snapshot((_pending("j1"), _pending("j2")))
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("claim-claim", _TWO, ((_claim("w1"),), (_claim("w2"),))),
    Scenario("claim-reclaim", Snapshot((_pending("j1"),)),
             ((_claim("w1"),), (_claim("w2", NOW + LEASE_MS),))),
    Scenario("finish-finish", Snapshot((_LEASED,)), ((_finish("ok"),), (_finish("permanent"),))),
    Scenario("enqueue-enqueue", Snapshot((_pending("j1"),)),
             ((_enqueue("j2"),), (_enqueue("j2"),))),
    Scenario("redrive-redrive", Snapshot((_dead("j1"),)), ((_redrive("n1"),), (_redrive("n2"),))),
    Scenario("run_once-claim", Snapshot((_pending("j1"),)), ((_run("run_once", "w1"),),
                                                               (_claim("w2"),))),
    Scenario("run_file-run_once", Snapshot((_pending("j1"),)), ((_run("run_file", "w1"),),
                                                                 (_run("run_once", "w2"),))),
    Scenario("run_file-enqueue", Snapshot((_pending("j1"),)),
             ((_run("run_file", "w1"),), (_enqueue("j2"),))),
    Scenario("claim-finish-held", _TWO, ((_claim("w1"), _finish("ok", HELD)), (_claim("w2"),))),
    Scenario("enqueue-enqueue-claim", Snapshot((_pending("j1"),)),
             ((_enqueue("j2"),), (_enqueue("j2"),), (_claim("w3"),))),
    Scenario("reclaim-finish", Snapshot((_EXPIRED,)), ((_claim("w0"),), (_finish("ok", _OLD),))),
    Scenario("enqueue-claim-redrive", Snapshot((_pending("j1"), _dead("j2"))),
             ((_enqueue("j3"),), (_claim("w2"),), (_redrive("n3", "j2"),))),
    Scenario("finish-finish-finish", Snapshot((_LEASED,)),
             ((_finish("ok"),), (_finish("permanent"),), (_finish("retry"),))),
    Scenario("claim-claim-claim", _TWO, ((_claim("w1"),), (_claim("w2"),), (_claim("w3"),))),
    Scenario("finish-claim-redrive", Snapshot((_LEASED, _dead("j2"), _pending("j3"))),
             ((_finish("ok"),), (_claim("w2"),), (_redrive("n3", "j2"),))),
)  # fmt: skip

BOUNDS: dict[str, tuple[tuple[str, int | None], ...]] = {
    "small": (("claim-claim", None), ("finish-finish", None), ("enqueue-claim-redrive", 1)),
    "ci": (
        ("claim-claim", None), ("claim-reclaim", None), ("finish-finish", None),
        ("enqueue-enqueue", None),
        ("redrive-redrive", None), ("run_once-claim", None), ("run_file-enqueue", None),
        ("enqueue-enqueue-claim", 2),
    ),
    "deep": tuple((s.name, None) for s in SCENARIOS),
}  # fmt: skip
"""profile scope -> (scenario, preemption bound) pairs; None: every schedule (no bound)."""


def by_name(name: str) -> Scenario:
    for scenario in SCENARIOS:
        if scenario.name == name:
            return scenario
    known = ", ".join(s.name for s in SCENARIOS)
    raise KeyError(f"no interleaving scenario named {name!r}; known: {known}")
