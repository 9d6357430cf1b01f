"""The adapter protocol: any lease (visibility-timeout) queue, seen through five verbs.

A real library names things its own way (``get``/``ack``/``nack`` in persist-queue,
``pop``/``done`` in litequeue, ``fetch``/``complete`` in a job server). leasecheck's
generic properties need one vocabulary, so an adapter maps its library onto:

- ``enqueue(job, payload)``: add a job under leasecheck's own key ``job``;
- ``claim(worker, lease)``: take one job for ``lease`` seconds, or ``None``;
- ``ack(claim)`` / ``nack(claim)``: finish it, or give it back;
- ``extend(claim, lease)``: renew the lease (``Unsupported`` where the library cannot);
- ``recover()``: the library's own sweep of dead workers' jobs;
- ``observe()``: a read-only view of every job's state.

One ``QueueAdapter`` object is one connection, opened in one process; a property
that races processes opens one per process on the same ``location`` (a file path or
a server URL); a library may also ``destroy(location)`` a store once every connection
to it is closed (optional, ``DestroysStores``). Time is whatever ``QueueClock`` says: every
adapter makes its library read the clock it was given, so a test can expire a lease
without waiting, and processes that share a store share the clock.

Each adapter also declares what its library *promises* (``Promises``), each promise
with the place in the library's own docs or code that makes it. That decides a
failing property's verdict: VIOLATED where promised, "not promised" otherwise.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, Protocol, runtime_checkable

__all__ = [
    "GENERIC_PROPERTIES",
    "AdapterError",
    "Capabilities",
    "Claim",
    "DestroysStores",
    "Lost",
    "Promise",
    "Promises",
    "QueueAdapter",
    "QueueClock",
    "QueueLibrary",
    "ReportsLosses",
    "ReportsSweeps",
    "SharedClock",
    "StoredJob",
    "Unsupported",
    "destroy_store",
]

_RENAMED = {"JobView": "StoredJob", "Clock": "QueueClock"}
"""Names an adapter written before 2026-12 imports: each is the renamed class itself
(``JobView`` was one job of the store; ``Clock`` the shared clock's protocol), served
with a DeprecationWarning so that those adapters keep working."""


def __getattr__(name: str) -> object:
    if name in _RENAMED:
        import warnings

        new = _RENAMED[name]
        warnings.warn(
            f"leasecheck.adapters.protocol.{name} is now {new}; import {new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


JobState = Literal["ready", "leased", "done", "failed", "gone"]
"""``ready``: claimable now or after its delay; ``leased``: held by a live claim;
``done``: acknowledged; ``failed``: given up (dead letter); ``gone``: the library keeps
no trace of it (e.g. deleted on ack), which a property reads as done only where the
adapter's ``Capabilities.ack_deletes`` says so."""

GENERIC_PROPERTIES = (
    "queue.ack-final",
    "queue.no-loss",
    "queue.exclusive",
    "queue.stale-ack",
    "queue.linearizable",
)
"""The generic lease-queue properties, in the order they are reported:

- ``queue.ack-final``: an acknowledged job is never delivered again and ends done, even
  when any process is SIGKILLed at any instant;
- ``queue.no-loss``: after every lease expires and recovery runs, every enqueued job is
  done, failed or claimable;
- ``queue.exclusive``: no job ever has two live leases (real processes racing);
- ``queue.stale-ack``: an ack from a worker whose lease expired and whose job was claimed
  again is refused, or changes nothing;
- ``queue.linearizable``: histories of concurrent processes are linearizable against the
  generic model.
"""


class AdapterError(Exception):
    """An adapter cannot run: the library is missing, or the call makes no sense for it."""


class Unsupported(AdapterError):
    """The library has no such operation (e.g. no way to extend a lease)."""


@dataclass(frozen=True)
class Promise:
    """Whether the library promises one generic property, and where it says so."""

    promised: bool
    source: str
    """Where the library says it (docs URL and section, or ``file.py:function``)."""
    note: str = ""


@dataclass(frozen=True)
class Promises:
    """What a library promises, one ``Promise`` per generic property, plus its settings."""

    properties: Mapping[str, Promise]
    delivery: Literal["at-least-once", "at-most-once", "exactly-once"]
    fencing: str
    """How (or whether) a stale ack is told from a current one."""
    recovery: str
    """How a dead worker's job comes back (lease expiry on claim, a sweep call, ...)."""
    ordering: str
    durability: str
    """Journal mode, synchronous setting, fsync policy: what a commit survives."""

    def of(self, prop: str) -> Promise:
        if prop not in self.properties:
            return Promise(False, "not mentioned in the library's docs or code")
        return self.properties[prop]


@dataclass(frozen=True)
class Capabilities:
    """What the adapter can do with its library."""

    clock: Literal["injected", "now-parameter", "patched", "real"]
    """How the library's time is moved: a clock it accepts, a ``now`` argument, its time
    function patched inside the adapter, or real time with very short leases."""
    extend: bool = False
    nack: bool = True
    multiprocess: bool = True
    """Several processes may open the same ``location`` at once."""
    ack_deletes: bool = False
    """An acknowledged job disappears from the store (``gone`` then means done)."""
    server: Literal["postgres", "redis", "beanstalkd", "nats", "rabbitmq"] | None = None
    """The server its store needs (started by ``adapters.servers.start``)."""
    lease_granularity: float = 0.001
    """The smallest lease, in seconds, the library can express."""
    one_lease: bool = False
    """A lease is the *claimer's* staleness threshold, compared with the job's last
    heartbeat (pgqueuer's ``heartbeat_timeout``), not a deadline stamped on the job: it
    means one thing only when every claim asks for the same, so the engines then give
    every claim and extend of a run one lease."""
    server_lease: float | None = None
    """The lease is one setting of the *server*, fixed when it starts (seconds): every
    claim of a run gets it, whatever it asks (RabbitMQ's broker-wide ``consumer_timeout``).
    The harness starts the server with it (``adapters.servers.start``), and the engines
    lease for exactly this on real time."""
    lease_slack: float = 0.0
    """How much later than its length a lease may really end (seconds): a server that
    checks leases on a tick ends one within ``[server_lease, server_lease + lease_slack]``
    of its delivery. The engines treat that whole window as the lease's end."""
    skips_locked: bool = False
    """A claim passes over a job another transaction holds locked instead of waiting for it
    (PostgreSQL's ``FOR UPDATE SKIP LOCKED``, as the library documents): beside concurrent
    calls it may answer None while such a job is ready (``models._queue_spec.QueueSpec``)."""

    @property
    def real_time(self) -> bool:
        """The library reads a clock nobody can move: leases really run out."""
        return self.clock == "real"

    def time_scale(self) -> int:
        """How much the generic properties stretch every lease and clock move (>= 1), so
        that each lease is a whole number of the library's smallest lease (50 ms units)."""
        return max(1, math.ceil(self.lease_granularity / 0.05))

    def real_lease_ms(self, wanted_ms: int) -> int:
        """The lease (ms) an engine on real time gets when it wants ``wanted_ms``: the
        server's one lease where it has one (``server_lease``), else ``wanted_ms``."""
        if self.server_lease is None:
            return wanted_ms
        return round(self.server_lease * 1000)

    @property
    def slack_ms(self) -> int:
        """``lease_slack`` in whole milliseconds (rounded up)."""
        return math.ceil(self.lease_slack * 1000)


@dataclass(frozen=True)
class Claim:
    """One delivery of a job to a worker."""

    job: str
    """leasecheck's key for the job (what ``enqueue`` was given)."""
    worker: str
    handle: object = field(compare=False)
    """Whatever the library needs to ack this delivery (message id, job object, ...)."""
    token: int | str | None = None
    """The library's fencing token or attempt number, where it has one."""
    lease_until: float | None = None
    """When the lease ends by the shared clock, where the library says."""


@dataclass(frozen=True)
class StoredJob:
    """One job as the store holds it, read without changing anything."""

    job: str
    state: JobState
    attempts: int | None = None
    lease_until: float | None = None


@runtime_checkable
class QueueClock(Protocol):
    """Seconds since an arbitrary start, moved only by ``advance`` (or real time)."""

    def now(self) -> float: ...

    def advance(self, seconds: float) -> None: ...


class SharedClock:
    """A clock every process on the same store reads: eight bytes in a file, mmapped.

    ``advance`` adds to the stored time; other processes see it at their next ``now``.
    With ``real=True`` it follows ``time.time()`` and ``advance`` sleeps, for libraries
    whose time cannot be moved (their adapter declares ``clock="real"``).
    """

    _FORMAT = "<d"
    START = 1_000_000.0
    """The stored clock's first reading (seconds): model time 0 of a harness's run."""

    def __init__(self, path: Path, start: float = START, real: bool = False) -> None:
        self.path, self.real = path, real
        if not path.exists():
            path.write_bytes(struct.pack(self._FORMAT, start))
        self._file = path.open("r+b")
        self._map = mmap.mmap(self._file.fileno(), struct.calcsize(self._FORMAT))

    def now(self) -> float:
        if self.real:
            return time.time()
        value: float = struct.unpack_from(self._FORMAT, self._map)[0]
        return value

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock only moves forward; advance({seconds!r}) was asked")
        if self.real:
            time.sleep(seconds)
            return
        struct.pack_into(self._FORMAT, self._map, 0, self.now() + seconds)

    @classmethod
    def of(cls, path: Path, capabilities: Capabilities) -> SharedClock:
        """The clock a library's processes share at ``path``: real time where the library
        declares ``clock="real"``, else the stored time."""
        return cls(path, real=capabilities.real_time)

    def close(self) -> None:
        self._map.close()
        self._file.close()


class QueueAdapter(Protocol):
    """One open connection to a queue store, in one process."""

    def enqueue(self, job: str, payload: str) -> None:
        """Add job ``job``; ``payload`` is opaque text the library stores with it."""

    def claim(self, worker: str, lease: float) -> Claim | None:
        """Take the next claimable job for ``lease`` seconds, or ``None`` if none is."""

    def ack(self, claim: Claim) -> bool:
        """Finish ``claim``'s job; ``False`` (or a library error) where it was refused."""

    def nack(self, claim: Claim) -> bool:
        """Give ``claim``'s job back to be delivered again; ``False`` where refused."""

    def extend(self, claim: Claim, lease: float) -> bool:
        """Renew the lease for ``lease`` seconds; raises ``Unsupported`` if impossible."""

    def recover(self) -> int:
        """Run the library's own recovery of expired leases; how many jobs it returned
        (``-1`` where the library recovers lazily and cannot say)."""

    def observe(self) -> list[StoredJob]:
        """Every job the store knows, in enqueue order, read-only."""

    def close(self) -> None:
        """Close every connection and file this adapter opened."""


class QueueLibrary(Protocol):
    """A library, as leasecheck sees it: its name, version, promises and stores."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    promises: ClassVar[Promises]

    def version(self) -> str:
        """The installed library's version (``AdapterError`` with the pip command if absent)."""

    def create(self, directory: Path, server: str | None) -> str:
        """Make an empty store in ``directory`` (or on ``server``, a URL); its location."""

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        """Open one connection to the store at ``location``, reading time from ``clock``."""


@runtime_checkable
class DestroysStores(Protocol):
    """The optional member of a ``QueueLibrary``: remove a store it made.

    ``destroy(location)`` is called once per store, after every connection to it was
    closed (and, where processes were killed, after they are gone), with the location
    ``create`` returned. It removes what ``create`` made outside ``directory`` (which
    leasecheck removes itself): a database, a key prefix, a stream. Without it, a server
    keeps every store of a run until the run stops it: harmless, but a run that makes
    hundreds of PostgreSQL databases pays for them in the server's shutdown and in
    removing its data directory. A store already gone is no error.
    """

    def destroy(self, location: str) -> None: ...


@dataclass(frozen=True)
class Lost:
    """A claim whose delivery the library lost before the claim answered it: its worker's
    connection or channel ended (a broker requeues every unacknowledged delivery of a
    channel or connection that closes), so its lease ended early, by the library's own
    documented rule."""

    worker: str
    job: str
    at_ns: int
    """``time.monotonic_ns()`` when the adapter saw the loss (the broker's requeue came
    at or before it)."""
    why: str
    """What ended it, as the adapter saw it (an exception's type: ``ConnectionError``)."""


@runtime_checkable
class ReportsLosses(Protocol):
    """The optional member of a connection whose library can lose a live claim's delivery
    (``Lost``). ``lost()`` returns every loss any connection to the store recorded so far
    (the racers are other processes): the engines set such a claim aside, counted, and
    never judge its lease past the loss."""

    def lost(self) -> list[Lost]: ...


@runtime_checkable
class ReportsSweeps(Protocol):
    """The optional member of a ``QueueLibrary`` whose verbs may run the library's own
    recovery sweep as a side effect (rq's worker runs its maintenance, the sweep of
    ``recover``, inside its dequeue). After ``log_sweeps(path)``, every connection opened
    (in any process) appends one JSON line ``{"started_ns": N, "ended_ns": N}``
    (``time.monotonic_ns()``) to ``path`` for each such sweep; ``log_sweeps(None)`` stops.
    A sweep that runs beside another process's ack is a race the OS decides: the race
    engines set those calls aside, counted, where a schedule engine judges the race."""

    def log_sweeps(self, path: Path | None) -> None: ...


def destroy_store(library: QueueLibrary, location: str) -> None:
    """Remove the store at ``location`` if ``library`` can (``DestroysStores``): the one
    place the harness drops a store, after its connections are closed.

    A store that cannot be removed (its server was killed by a fault, a library error)
    is left to the server's end: it lives in the server's temp directory, which is
    removed with the server. Cleanup never turns into a verdict."""
    if isinstance(library, DestroysStores):
        with contextlib.suppress(Exception):
            library.destroy(location)
