"""The small scenarios ``queue.interleavings`` explores on a real library.

Each scenario is a seeded store (jobs enqueued, some claimed by the harness with a lease
that is still live or has run out) and one short program of adapter verbs per process.
They are the races issue 27 names, which the other queue properties never produce: a
recovery sweep (``recover()``) racing an ack, a nack or an extend of a claim whose lease
ran out; a claim racing a sweep; a store opened, or reopened, while another process holds
a live claim; and two claims racing for one job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from leasecheck.adapters.protocol import Capabilities
from leasecheck.crash_harness._wire_proxy import Dialect

__all__ = [
    "BOUNDS",
    "SERVER_BOUNDS",
    "VERB_BOUNDS",
    "QueueScenario",
    "Seed",
    "Verb",
    "queue_scenario",
]

Held = Literal["ready", "live", "expired"]


@dataclass(frozen=True)
class Seed:
    """One job of the seeded store; a ``live`` or ``expired`` one is claimed by the harness
    as claim ``c<job>`` (``expired``: its lease has run out when the processes start)."""

    job: str
    held: Held = "ready"

    @property
    def cid(self) -> str:
        return f"c{self.job}"


@dataclass(frozen=True)
class Verb:
    """One adapter call of a process: ``open`` (connect: a process whose program starts
    with it has no connection before), ``reopen`` (close, then connect again), ``claim``
    (as claim ``cid``), ``ack``/``nack``/``extend`` (of claim ``cid``), ``recover``."""

    name: str
    cid: str = ""

    def describe(self) -> str:
        return f"{self.name}({self.cid})"


@dataclass(frozen=True)
class QueueScenario:
    name: str
    seeds: tuple[Seed, ...]
    programs: tuple[tuple[Verb, ...], ...]

    @property
    def processes(self) -> int:
        return len(self.programs)

    def claimed(self) -> bool:
        """The seeded store holds a claim (live or run out)."""
        return any(seed.held != "ready" for seed in self.seeds)

    def runs_on(self, capabilities: Capabilities) -> bool:
        """The library has every verb the programs call."""
        verbs = {verb.name for program in self.programs for verb in program}
        return not (
            ("nack" in verbs and not capabilities.nack)
            or ("extend" in verbs and not capabilities.extend)
        )

    def describe(self) -> str:
        seeded = ", ".join(
            f"{s.job!r} {s.held}" + ("" if s.held == "ready" else f" (claim {s.cid})")
            for s in self.seeds
        )
        lines = [f"scenario {self.name!r}, from the seeded store: {seeded}"]
        for n, program in enumerate(self.programs, 1):
            lines.append(f"  P{n}: " + "; ".join(verb.describe() for verb in program))
        return "\n".join(lines)


def _v(name: str, cid: str = "") -> Verb:
    return Verb(name, cid)


_EXPIRED_A = (Seed("a", "expired"),)
SCENARIOS: tuple[QueueScenario, ...] = (
    QueueScenario("sweep-ack", _EXPIRED_A, ((_v("ack", "ca"),), (_v("recover"),))),
    QueueScenario("sweep-nack", _EXPIRED_A, ((_v("nack", "ca"),), (_v("recover"),))),
    QueueScenario("sweep-extend", _EXPIRED_A, ((_v("extend", "ca"),), (_v("recover"),))),
    QueueScenario("claim-sweep", (Seed("a", "expired"), Seed("b")),
                  ((_v("claim", "p1"),), (_v("recover"),))),
    QueueScenario("open-while-claimed", (Seed("a", "live"), Seed("b")),
                  ((_v("ack", "ca"),), (_v("open"), _v("claim", "p2")))),
    QueueScenario("reopen-while-claimed", (Seed("a", "live"), Seed("b")),
                  ((_v("ack", "ca"),), (_v("reopen"), _v("claim", "p2")))),
    QueueScenario("claim-claim", (Seed("a"), Seed("b")),
                  ((_v("claim", "p1"),), (_v("claim", "p2"),))),
    # The same two races where the live claim is P1's own, not the harness's: on a
    # broker scheduled at its verbs a claim's handle belongs to the client that made it.
    QueueScenario("open-while-own-claim", (Seed("a"), Seed("b")),
                  ((_v("claim", "ca"), _v("ack", "ca")), (_v("open"), _v("claim", "p2")))),
    QueueScenario("reopen-while-own-claim", (Seed("a"), Seed("b")),
                  ((_v("claim", "ca"), _v("ack", "ca")), (_v("reopen"), _v("claim", "p2")))),
    QueueScenario("sweep-ack-claim", _EXPIRED_A,
                  ((_v("ack", "ca"),), (_v("recover"),), (_v("claim", "p3"),))),
)  # fmt: skip

_OWN_CLAIMS = ("open-while-own-claim", "reopen-while-own-claim")
"""The variants for verb-scheduled brokers (``VERB_BOUNDS``); elsewhere the harness's
seeded claim makes the same race with fewer points."""
_TWO = [s.name for s in SCENARIOS if s.processes == 2 and s.name not in _OWN_CLAIMS]
BOUNDS: dict[str, tuple[tuple[str, int | None], ...]] = {
    "small": (("sweep-ack", 1), ("open-while-claimed", 1), ("claim-claim", 1)),
    "ci": tuple((name, 2) for name in _TWO),
    "deep": (*((name, None) for name in _TWO), ("sweep-ack-claim", 2)),
}
"""profile scope -> (scenario, preemption bound) pairs; None: every schedule (no bound)."""

VERB_BOUNDS: dict[str, tuple[tuple[str, int | None], ...]] = {
    "small": (("claim-claim", 1),),
    "ci": (("claim-claim", 2), ("open-while-own-claim", 2)),
    "deep": (("claim-claim", None), *((name, None) for name in _OWN_CLAIMS)),
}
"""The same on a server whose wire leasecheck does not speak (beanstalkd, NATS, RabbitMQ),
scheduled at its verbs: a claim the harness seeded belongs to the harness's client there,
so only scenarios whose claims the processes make themselves run. The sweep races do not:
these servers end leases themselves (``recover`` does nothing), on a timer no schedule
controls; ``queue.ack-final`` and ``queue.stale-ack`` meet that redelivery on real time."""

ServerPlan = tuple[tuple[str, int | None, int | None], ...]
_REDIS_CI: ServerPlan = (
    ("sweep-ack", 1, 12),
    ("open-while-claimed", 1, 6),
    ("claim-sweep", 1, 6),
    ("claim-claim", 0, None),
)
_POSTGRES_CI: ServerPlan = (("sweep-ack", 1, 6), ("open-while-claimed", 1, 6))
SERVER_BOUNDS: dict[Dialect, dict[str, ServerPlan]] = {
    "redis": {
        "small": (("sweep-ack", 1, 12),),
        "ci": _REDIS_CI,
        "deep": tuple((name, 2, None) for name in _TWO),
    },
    "postgres": {
        "small": (("sweep-ack", 1, 3),),
        "ci": _POSTGRES_CI,
        "deep": tuple((name, 2, None) for name in _TWO),
    },
}
"""The same on a server library, per server and profile scope, as (scenario, preemption
bound, at most this many schedules, cheapest first; None: no cap). Its scheduling points
are the commands on the wire (a verb sends 3-25 of them, where a SQLite library runs a
few statements) and its store is copied or seeded afresh for every schedule (a server's
store is no file): a PostgreSQL schedule costs 0.5-2.5 s on a loaded 2-core machine,
so PostgreSQL's ci runs the two scenarios issue 27 names for every library and deep
runs them all. One plan per server of ``_wire_proxy.WIRE_DIALECTS`` (keyed by it)."""


def queue_scenario(name: str) -> QueueScenario:
    for scenario in SCENARIOS:
        if scenario.name == name:
            return scenario
    known = ", ".join(s.name for s in SCENARIOS)
    raise KeyError(f"no queue interleaving scenario named {name!r}; known: {known}")
