"""beanstalkd through greenstalk, on a server whose clock the shared clock drives.

The verbs are beanstalkd's own commands on one connection (one greenstalk ``Client``)
per adapter: a beanstalkd worker is a connection, and a reservation belongs to it.

- enqueue: ``put`` with the store's TTR (``TTR``) in the store's tube;
- claim: ``reserve-with-timeout 0`` (``TIMED_OUT`` and ``DEADLINE_SOON`` are "no job");
- ack: ``delete``; nack: ``release`` (back to ready, no delay); extend: ``touch``;
- recover: none: the server itself times out a reservation at its TTR (``-1``);
- observe: ``stats-job`` and ``peek`` for every job id the server gave out (ids count up
  from 1; ``stats`` says how many), a deleted job left out (``ack_deletes``); ``buried``
  reads ``failed``, ``delayed`` reads ``ready``.

**The lease and the TTR.** beanstalkd takes the lease (TTR, whole seconds) at ``put``,
from the producer, while leasecheck names it at each claim. The adapter declares
``one_lease`` (every claim and extend of a run asks the same lease ``L``) and maps the
clocks instead of the lengths: every job is put with ``TTR = 1_000_000`` s, and the
server's clock runs so that ``TTR`` server seconds are ``L`` seconds of the shared clock.
Server time stands still until the store's first claim, which records its time ``t0``
and ``L`` in the store directory; from then on the server reads
``floor((now - t0) * TTR / L)`` seconds (one server second is ``L / 10**6``: 0.35 us of
a 350 ms lease). Nothing else in beanstalkd depends on how long a second is, apart
from the one-second ``DEADLINE_SOON`` margin (then under a microsecond of the shared
clock) and delays, which the adapter never asks for.

**The server's clock.** beanstalkd reads time only through ``gettimeofday``; each store
gets its own server (``adapters.servers.beanstalkd_server``), started by ``create`` in
the store's directory with libfaketime preloaded, reading the frozen time from a file
the adapter rewrites (under a lock, never backwards) before every command, followed by
one cheap command (``list-tube-used``): the server handles it, then runs its tick with
the new time, timing out every reservation past its TTR before the verb itself is read
(``clock="patched"``). ``destroy`` stops the server; one still running when the process
ends is stopped then (and the kernel stops it if the process is SIGKILLed,
``die_with_parent``). The adapter declares ``server="beanstalkd"`` so that the harness
treats a store as a server's (it seeds each afresh instead of copying its files), but
it does not use the harness's server: one server has one clock, and each store needs
its own.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import fcntl
import functools
import importlib.metadata
import json
import os
import socket
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any, ClassVar

from leasecheck.adapters import servers
from leasecheck.adapters._libs import envelope, job_of
from leasecheck.adapters.protocol import (
    AdapterError,
    Capabilities,
    Claim,
    JobState,
    Promise,
    Promises,
    QueueAdapter,
    QueueClock,
    StoredJob,
)

__all__ = ["TTR", "Beanstalkd", "server_seconds", "server_stamp"]

BROKERS_EXTRA = "pip install 'leasecheck[brokers]'"
TUBE = "leasecheck"
TTR = 1_000_000
"""Every job's TTR in server seconds: ``L`` seconds of the shared clock (see above)."""
BASE = datetime.datetime(2001, 1, 1)
"""The server's time before a store's first claim (UTC)."""
_LEASE_FILE = "lease.json"
_CLOCK_FILE = "faketime"
_SECONDS_FILE = "server-seconds"
_SERVER_FILE = "server.json"

_DOC = "https://github.com/beanstalkd/beanstalkd/blob/v1.12/doc/protocol.txt"
PROMISES = Promises(
    properties={
        "queue.ack-final": Promise(
            True,
            f"{_DOC} (delete): 'The delete command removes a job from the server entirely.'",
        ),
        "queue.no-loss": Promise(
            True,
            f"{_DOC} (put, <ttr>): 'If the worker does not delete, release, or bury the job "
            "within <ttr> seconds, the job will time out and the server will release the "
            "job.' (reserve): 'When the job times out, the server will put the job back "
            "into the ready queue.'",
        ),
        "queue.exclusive": Promise(
            True,
            f"{_DOC} (Job Lifecycle): 'If this job is next in the queue, it will be "
            "reserved for the worker.' (reserve): 'Once a job is reserved for the client, "
            "the client has limited time to run (TTR) the job before the job times out.'",
        ),
        "queue.stale-ack": Promise(
            False,
            f"{_DOC} (delete): 'A client can delete jobs that it has reserved, ready jobs, "
            "delayed jobs, and jobs that are buried.'",
            "the fence is the connection: a delete from another connection of a job it "
            "reserved answers NOT_FOUND, but a ready job may be deleted by anyone, and a "
            "connection that reserved the job again deletes it with the first handle",
        ),
        "queue.linearizable": Promise(False, f"not mentioned in the protocol ({_DOC})"),
    },
    delivery="at-least-once",
    fencing="by connection: only the reserving connection may delete, release, touch or "
    "bury a reserved job; ready, delayed and buried jobs anyone may delete",
    recovery="the server times out a reservation at its TTR (whole seconds, fixed at put)",
    ordering="by priority, then FIFO within a priority",
    durability="in memory; with -b DIR a binlog (the harness's faults: -f 0, fsync each write)",
)


@functools.cache
def _server_version() -> str:
    binary = servers._binary("beanstalkd", servers.BEANSTALKD_INSTALL)
    done = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=10, check=False)
    return done.stdout.strip().removeprefix("beanstalkd ") or "unknown"


def _import_greenstalk() -> Any:
    try:
        import greenstalk
    except ImportError as missing:
        raise AdapterError(
            f"greenstalk is not installed; install it with: {BROKERS_EXTRA}"
        ) from missing
    return greenstalk


def _needs_servers() -> None:
    try:
        _server_version()
        servers.faketime_library()
    except servers.ServerMissing as missing:
        raise AdapterError(str(missing)) from missing


_RUNNING: dict[str, servers.Server] = {}
"""The servers this process started, by store location, until ``destroy``."""
_PARKED: dict[str, list[Any]] = {}
"""Connections closed while holding reservations, kept open by the process that made
the store until ``destroy`` (see ``BeanstalkdAdapter.close``)."""
_KEEPERS: dict[str, socket.socket] = {}
"""Each store's keeper: the listening socket that takes other processes' parked ones."""


@atexit.register
def _stop_all() -> None:
    for location in list(_RUNNING):
        _stop(location)


def _stop(location: str) -> None:
    keeper = _KEEPERS.pop(location, None)
    if keeper is not None:
        with contextlib.suppress(OSError):
            keeper.shutdown(socket.SHUT_RDWR)
        keeper.close()
    for client in _PARKED.pop(location, []):
        client.close()
    running = _RUNNING.pop(location, None)
    if running is not None:
        running.stop()


class Beanstalkd:
    """beanstalkd 1.12 through greenstalk: one server per store, on the shared clock."""

    name: ClassVar[str] = "beanstalkd"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="patched", extend=True, nack=True, ack_deletes=True, one_lease=True,
        lease_granularity=0.001, server="beanstalkd",
    )  # fmt: skip
    promises: ClassVar[Promises] = PROMISES
    server_faults_elsewhere: ClassVar[str] = (
        "a server per store, each on its store's clock; the faults that apply are "
        "tests/test_beanstalkd_faults.py (kill -9 and restart on the binlog, SIGSTOP zombie)"
    )
    """Read by the server faults (``--servers``), which would kill the harness's server,
    one this adapter does not use: they do not run here, rather than pass vacuously."""

    def version(self) -> str:
        _import_greenstalk()
        _needs_servers()
        return f"{_server_version()} (greenstalk {importlib.metadata.version('greenstalk')})"

    def create(self, directory: Path, server: str | None) -> str:
        _import_greenstalk()
        _needs_servers()
        (directory / _SECONDS_FILE).write_text("0")
        (directory / _CLOCK_FILE).write_text(server_stamp(0))
        running = servers.beanstalkd_server(directory, clock_file=directory / _CLOCK_FILE)
        _RUNNING[str(directory)] = running
        keeper = f"\0leasecheck-beanstalkd-{uuid.uuid4().hex}"
        _keep(str(directory), keeper)
        (directory / _SERVER_FILE).write_text(
            json.dumps({"port": running.port, "keeper": keeper, "pid": os.getpid()})
        )
        return str(directory)

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return BeanstalkdAdapter(Path(location), clock)

    def destroy(self, location: str) -> None:
        _stop(location)


def _keep(location: str, address: str) -> None:
    """Listen at ``address`` (an abstract Unix socket) for connections other processes of
    the store park (``BeanstalkdAdapter.close``); keep each until ``destroy``."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(16)
    _KEEPERS[location] = listener

    def serve() -> None:
        while True:
            try:
                peer, _ = listener.accept()
            except OSError:
                return  # destroy closed the listener
            with peer:
                _, fds, _, _ = socket.recv_fds(peer, 16, 64)
                kept = [socket.socket(fileno=fd) for fd in fds]
                _PARKED.setdefault(location, []).extend(kept)
                peer.sendall(b"k")

    threading.Thread(target=serve, name=f"beanstalkd-keeper {location}", daemon=True).start()


def server_stamp(seconds: int) -> str:
    """The clock file's text for ``seconds`` after ``BASE``: libfaketime's frozen UTC time."""
    return (BASE + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")


def server_seconds(now_us: int, t0_us: int, lease_us: int) -> int:
    """The server's time (seconds after ``BASE``) at shared time ``now_us``, for a store
    whose first claim at ``t0_us`` leased for ``lease_us``: ``TTR`` per lease."""
    return max(0, (now_us - t0_us) * TTR // lease_us)


class BeanstalkdAdapter:
    """One connection to a store's beanstalkd; its time written before every command."""

    def __init__(self, directory: Path, clock: QueueClock) -> None:
        self.greenstalk = _import_greenstalk()
        self.directory, self.clock = directory, clock
        found = json.loads((directory / _SERVER_FILE).read_text())
        port, self.keeper, self.owner = found["port"], found["keeper"], found["pid"]
        self.client: Any = self.greenstalk.Client(("127.0.0.1", port), use=TUBE, watch=TUBE)
        self.lease: tuple[int, int] | None = None
        """``(t0_us, lease_us)`` once the store's first claim recorded them."""
        self.held: set[int] = set()
        """The job ids this connection reserved and has not deleted or released."""

    def _now_us(self) -> int:
        return round(self.clock.now() * 1_000_000)

    def _recorded(self) -> tuple[int, int] | None:
        if self.lease is None:
            with contextlib.suppress(FileNotFoundError):
                data = json.loads((self.directory / _LEASE_FILE).read_text())
                self.lease = (int(data["t0_us"]), int(data["lease_us"]))
        return self.lease

    def _record(self, lease: float) -> None:
        """The store's lease: the first claim's, kept; any other is not beanstalkd's."""
        wanted = round(lease * 1_000_000)
        if self._recorded() is None:
            path = self.directory / _LEASE_FILE
            text = json.dumps({"t0_us": self._now_us(), "lease_us": wanted})
            with contextlib.suppress(FileExistsError), path.open("x") as made:
                made.write(text)  # the first claimer of any process wins
            self.lease = None
        recorded = self._recorded()
        assert recorded is not None
        if recorded[1] != wanted:
            raise AdapterError(
                f"beanstalkd's TTR is fixed at put: this store leases {recorded[1] / 1e6} s "
                f"(its first claim's), not {lease} s; the adapter declares one_lease"
            )

    def _tick(self) -> None:
        """Bring the server's clock to the shared clock's now, then let it tick once."""
        recorded = self._recorded()
        seconds = 0 if recorded is None else server_seconds(self._now_us(), *recorded)
        with (self.directory / f"{_SECONDS_FILE}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if seconds > int((self.directory / _SECONDS_FILE).read_text()):
                staged = self.directory / f"{_CLOCK_FILE}.{os.getpid()}"
                staged.write_text(server_stamp(seconds))
                os.replace(staged, self.directory / _CLOCK_FILE)
                (self.directory / _SECONDS_FILE).write_text(str(seconds))
        self.client.using()  # a command: the server's tick after it reads the new time

    def enqueue(self, job: str, payload: str) -> None:
        self._tick()
        self.client.put(envelope(job, payload), ttr=TTR)

    def claim(self, worker: str, lease: float) -> Claim | None:
        self._record(lease)
        self._tick()
        try:
            got = self.client.reserve(timeout=0)
        except (self.greenstalk.TimedOutError, self.greenstalk.DeadlineSoonError):
            return None
        self.held.add(got.id)
        return Claim(job_of(got.body), worker, got, got.id)

    def _answered(self, call: Any, claim: Claim, ends: bool) -> bool:
        self._tick()
        try:
            call(claim.handle)
        except self.greenstalk.NotFoundError:
            return False
        if ends:
            self.held.discard(int(str(claim.token)))
        return True

    def ack(self, claim: Claim) -> bool:
        return self._answered(self.client.delete, claim, ends=True)

    def nack(self, claim: Claim) -> bool:
        return self._answered(self.client.release, claim, ends=True)

    def extend(self, claim: Claim, lease: float) -> bool:
        self._record(lease)
        return self._answered(self.client.touch, claim, ends=False)

    def recover(self) -> int:
        self._tick()
        return -1

    def observe(self) -> list[StoredJob]:
        self._tick()
        views = []
        for job_id in range(1, int(self.client.stats()["total-jobs"]) + 1):
            try:
                state = str(self.client.stats_job(job_id)["state"])
                body = self.client.peek(job_id).body
            except self.greenstalk.NotFoundError:
                continue  # deleted: absent reads done (ack_deletes)
            views.append(StoredJob(job_of(body), _STATES[state]))
        return views

    def close(self) -> None:
        """Close the connection, or park it where it still holds reservations.

        beanstalkd releases a connection's reservations the moment it closes, lease or no
        lease, while leasecheck's claims outlive the connection that made them (the harness
        seeds claims and hands them to other processes; a process that is done closes
        while its leases run). So a connection that still holds reservations is handed
        to the process that made the store (its socket passed over a Unix socket,
        ``SCM_RIGHTS``) and kept open, unused, until ``destroy``: its reservations then end
        at their TTR, as an idle worker's do. A worker that is SIGKILLed never gets here:
        its connection closes and its jobs are ready at once, as beanstalkd does."""
        location = str(self.directory)
        if not self.held:
            self.client.close()
        elif os.getpid() == self.owner:  # (a forked child inherits _RUNNING: not this test)
            _PARKED.setdefault(location, []).append(self.client)
        else:
            sock = self.client._sock
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as keeper:
                keeper.settimeout(10)
                keeper.connect(self.keeper)
                socket.send_fds(keeper, [b"p"], [sock.fileno()])
                if keeper.recv(1) != b"k":
                    raise AdapterError(f"the keeper of {location} did not take a connection")
            self.client.close()


_STATES: dict[str, JobState] = {
    "ready": "ready", "delayed": "ready", "reserved": "leased", "buried": "failed",
}  # fmt: skip
