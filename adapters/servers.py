"""The one server starter: throw-away PostgreSQL, Redis, beanstalkd, NATS and RabbitMQ
servers for a single run.

Each server comes from the OS packages, runs on a free loopback port with its data in
a fresh temp directory, is waited for with a bounded readiness check, and is stopped
(and its directory removed) in ``finally``. A missing binary is ``ServerMissing``,
whose message is the command that installs it. ``Server.kill()`` and
``Server.restart()`` exist for the faults that need them: SIGKILL of the server
itself, then a restart on the same data to see what survived.

PostgreSQL refuses to run as root, so under root the data directory is given to the
``postgres`` system user and the server runs as that user.

RabbitMQ is an Erlang node: besides its AMQP port it needs Erlang's port mapper (epmd)
and a distribution port. Both are put on loopback and on free ports, and the epmd is
started here (not daemonised by the node), so it is a child that is stopped with the
server instead of a daemon that outlives the run.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import psutil

from leasecheck.adapters.protocol import Capabilities

__all__ = [
    "FAKETIME_INSTALL",
    "Server",
    "ServerError",
    "ServerKind",
    "ServerMissing",
    "beanstalkd",
    "beanstalkd_server",
    "create_database",
    "die_with_parent",
    "faketime_library",
    "free_port",
    "nats",
    "owned_temp_dir",
    "postgres",
    "rabbitmq",
    "reap_orphans",
    "redis",
    "remove_stale_faketime_entries",
    "start",
    "start_for",
]

PG_INSTALL = "apt-get install -y postgresql"
REDIS_INSTALL = "apt-get install -y redis-server"
BEANSTALKD_INSTALL = "apt-get install -y beanstalkd"
NATS_INSTALL = "apt-get install -y nats-server"
RABBITMQ_INSTALL = "apt-get install -y rabbitmq-server"
_RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
"""The node script itself: ``/usr/sbin/rabbitmq-server`` is a wrapper that switches to
the ``rabbitmq`` user and writes its logs under ``/var/log``."""
_PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


class ServerError(Exception):
    """A server did not start, or did not answer within its bound."""


class ServerMissing(ServerError):
    """The server binary is not installed; the message is the command that installs it."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _binary(name: str, install: str) -> str:
    if Path(name).is_absolute():
        if not Path(name).exists():
            raise ServerMissing(f"{name} is not installed; install it with: {install}")
        return name
    found = shutil.which(name) or next(
        (str(d / name) for d in _PG_BIN_DIRS if (d / name).exists()), None
    )
    if found is None:
        raise ServerMissing(f"{name} is not installed; install it with: {install}")
    return found


PAUSE_BOUND = 10.0
"""Seconds ``Server.pause`` waits for the kernel to show the server's processes stopped."""


@dataclass
class Server:
    """One running server: its URL, and how to kill and restart it."""

    kind: str
    port: int
    directory: Path
    command: Sequence[str]
    user: str | None = None
    ready_timeout: float = 30.0
    env: dict[str, str] | None = None
    """The server's whole environment, where it is configured through one (RabbitMQ)."""
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return _URLS[self.kind].format(port=self.port)

    @property
    def log_path(self) -> Path:
        """Its output (epmd beside RabbitMQ in one directory writes a log of its own)."""
        return self.directory / ("epmd.log" if self.kind == "epmd" else "server.log")

    @property
    def pid(self) -> int:
        assert self.process is not None, "the server is not running"
        return self.process.pid

    def start(self) -> None:
        """Start the server and wait (bounded) until it answers."""
        if _FAKETIME in (self.env or {}).get("LD_PRELOAD", ""):
            remove_stale_faketime_entries()
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            list(self.command), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, user=self.user, cwd=self.directory,
            env=_server_env(self.env), preexec_fn=die_with_parent,
        )  # fmt: skip
        log.close()
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise ServerError(f"{self.kind} exited at start: {self._log_tail()}")
            if _answers(self.kind, self.port):
                return
            time.sleep(0.05)
        self.stop()
        raise ServerError(
            f"{self.kind} on port {self.port} did not answer within {self.ready_timeout:.0f} s; "
            f"its log says: {self._log_tail()}"
        )

    def _log_tail(self) -> str:
        log = self.log_path
        lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
        return " | ".join(lines[-3:]) or "(no output)"

    def kill(self) -> None:
        """SIGKILL the server and every process it started (a crash, not a shutdown)."""
        if self.process is None:
            return
        _kill_tree(self.process)
        self._gone(self.process.pid)
        self.process = None

    def _gone(self, pid: int) -> None:
        """After the server process ``pid`` has ended: remove what it leaves in /dev/shm.
        libfaketime (preloaded for a driven clock) makes a shared-memory segment and a
        semaphore named by the pid and unlinks them only at a normal exit, which a
        SIGTERMed or SIGKILLed beanstalkd never reaches."""
        if _FAKETIME not in (self.env or {}).get("LD_PRELOAD", ""):
            return
        for name in _faketime_entries(pid):
            with contextlib.suppress(FileNotFoundError):
                (_SHM / name).unlink()

    def stop(self) -> None:
        """Stop the server: a fast shutdown (PostgreSQL's SIGINT disconnects its clients;
        SIGTERM would wait for them), a bounded wait, then SIGKILL whatever is left."""
        if self.process is None:
            return
        fast = signal.SIGINT if self.kind == "postgres" else signal.SIGTERM
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, fast)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        _kill_tree(self.process)
        self._gone(self.process.pid)
        self.process = None

    def pause(self, bound: float = PAUSE_BOUND) -> None:
        """SIGSTOP the server and every process it started (a VM or GC pause: its sockets
        stay open and nothing is read), and wait (bounded) until the kernel shows each of
        them stopped."""
        group = self.pid
        os.killpg(group, signal.SIGSTOP)
        deadline = time.monotonic() + bound
        while running := [p.pid for p in _group(group) if _runs(p)]:
            if time.monotonic() > deadline:
                os.killpg(group, signal.SIGCONT)
                raise ServerError(
                    f"{self.kind} processes {running} did not stop within {bound:g} s of SIGSTOP"
                )
            time.sleep(0.001)

    def resume(self) -> None:
        """SIGCONT the server's processes (after ``pause``)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGCONT)

    def restart(self) -> None:
        """Start the server again on the same data and port (after ``kill`` or ``stop``)."""
        self.kill()
        self.start()


def _group(group: int) -> list[psutil.Process]:
    """The live processes of process group ``group`` (a server started in a session of
    its own: the server and every process it started)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) == group:
                found.append(process)
    return found


def _runs(process: psutil.Process) -> bool:
    """The process is neither stopped nor gone."""
    try:
        return process.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


NODEID_ENV = "LEASECHECK_NODEID"
"""``leasecheck._processes.NODEID_ENV``: set while a property's test runs, and inherited by
what it starts, so the runner kills a test's processes once the test is over."""


def _server_env(env: dict[str, str] | None) -> dict[str, str]:
    """The server's environment (``env``, else ours) without the running test's name: a
    server belongs to the fixture that started it and outlives a test, so a restart
    inside one test (``queue.server-crash``) must not make it that test's leftover,
    killed a second after the test ends under the next test's workers."""
    chosen = dict(os.environ if env is None else env)
    chosen.pop(NODEID_ENV, None)
    return chosen


_FAKETIME, _SHM = "faketime", Path("/dev/shm")
_FAKETIME_PREFIXES = ("faketime_shm_", "sem.faketime_sem_")


def _faketime_entries(pid: int) -> tuple[str, ...]:
    """The /dev/shm names libfaketime gives a process' segment and semaphore."""
    return tuple(f"{prefix}{pid}" for prefix in _FAKETIME_PREFIXES)


def remove_stale_faketime_entries() -> list[str]:
    """Unlink our libfaketime entries in /dev/shm whose process is gone; the names removed.

    ``Server.kill``/``stop`` remove a server's two entries, but a harness that is itself
    SIGKILLed never gets there (its server dies by ``PR_SET_PDEATHSIG``), so the next
    start of a driven-clock server sweeps them. Only this user's entries, and only where
    no process has that pid: a live one may still use its segment.
    """
    removed = []
    for prefix in _FAKETIME_PREFIXES:
        for entry in _SHM.glob(f"{prefix}*"):
            pid = entry.name.removeprefix(prefix)
            with contextlib.suppress(OSError):
                if (
                    pid.isdigit()
                    and entry.stat().st_uid == os.getuid()
                    and not psutil.pid_exists(int(pid))
                ):
                    entry.unlink()
                    removed.append(entry.name)
    return removed


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """In a child, before exec: SIGKILL me (or send ``signum``) when the process that
    started me dies.

    A server runs in its own session (a Ctrl-C aimed at the test run must not reach it
    before the run has stopped it cleanly), so without this a harness that is itself
    SIGKILLed would leave its server running. Linux only (``PR_SET_PDEATHSIG``).
    """
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum)


_PR_SET_PDEATHSIG = 1


def _kill_tree(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(psutil.NoSuchProcess):
        children = psutil.Process(process.pid).children(recursive=True)
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        psutil.wait_procs(children, timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


_URLS = {
    "postgres": "postgresql://postgres@127.0.0.1:{port}/postgres",
    "redis": "redis://127.0.0.1:{port}/0",
    "beanstalkd": "beanstalk://127.0.0.1:{port}",
    "nats": "nats://127.0.0.1:{port}",
    "rabbitmq": "amqp://guest:guest@127.0.0.1:{port}//",
    "epmd": "epmd://127.0.0.1:{port}",
}

_AMQP_HEADER = b"AMQP\x00\x00\x09\x01"
"""AMQP 0-9-1's protocol header; a ready broker answers with a Connection.Start frame."""


def _answers(kind: str, port: int) -> bool:
    """True once the server accepts a connection and answers its protocol's hello."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            if kind == "redis":
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
            if kind == "beanstalkd":
                sock.sendall(b"stats\r\n")
                return sock.recv(16).startswith(b"OK ")
            if kind == "nats":
                # The server greets first; JetStream must be on (``-js``) for it to count.
                hello = _read_line(sock)
                return hello.startswith(b"INFO ") and b'"jetstream":true' in hello
            if kind == "rabbitmq":
                sock.sendall(_AMQP_HEADER)
                return sock.recv(1) == b"\x01"  # a method frame: Connection.Start
            if kind == "epmd":
                return True
            return _pg_ready(port)
    except OSError:
        return False


def _read_line(sock: socket.socket, limit: int = 65536) -> bytes:
    data = b""
    while not data.endswith(b"\r\n") and len(data) < limit:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _pg_ready(port: int) -> bool:
    ready = shutil.which("pg_isready") or _binary("pg_isready", PG_INSTALL)
    done = subprocess.run(
        [ready, "-q", "-h", "127.0.0.1", "-p", str(port), "-t", "1"],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False,
    )  # fmt: skip
    return done.returncode == 0


def owned_temp_dir(prefix: str) -> Path:
    """A fresh temp directory marked with its owner, after removing the orphans of ``prefix``.

    A run stopped by SIGKILL cannot remove its directories (its servers die with it, see
    ``die_with_parent``), so each new directory records the process that made it, and the
    next run removes every ``prefix`` directory whose recorded process is gone.
    """
    reap_orphans(Path(tempfile.gettempdir()), prefix)
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    me = psutil.Process()
    (directory / _OWNER).write_text(f"{me.pid} {me.create_time()}")
    return directory


_OWNER = "leasecheck-owner"


def reap_orphans(root: Path, prefix: str = "leasecheck-") -> None:
    """Remove every ``prefix`` directory under ``root`` whose owner is gone, and the
    System V shared memory segment a SIGKILLed PostgreSQL in it left behind."""
    for stale in root.glob(f"{prefix}*"):
        if stale.is_dir() and not _owner_alive(stale):
            _release_shared_memory(stale / "data")
            shutil.rmtree(stale, ignore_errors=True)


def _release_shared_memory(data: Path) -> None:
    """A PostgreSQL that was SIGKILLed keeps its System V segment (the key and id on line 7
    of ``postmaster.pid``; a clean shutdown removes the file and the segment itself).
    Remove it, if the key still names that very segment."""
    try:
        line = (data / "postmaster.pid").read_text().splitlines()[6]
        key, shmid = (int(value) for value in line.split())
    except (OSError, ValueError, IndexError):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.shmget(key, 0, 0) == shmid:
        libc.shmctl(shmid, _IPC_RMID, None)


_IPC_RMID = 0


def _owner_alive(directory: Path) -> bool:
    owner = directory / _OWNER
    if not owner.exists():
        # Being made this instant by another run, or left by a run older than owner files.
        return time.time() - directory.stat().st_mtime < _UNOWNED_GRACE
    try:
        pid, started = owner.read_text().split()
        return psutil.Process(int(pid)).create_time() == float(started)
    except (OSError, ValueError, psutil.Error):
        return False


_UNOWNED_GRACE = 3600.0


def _temp_dir(prefix: str) -> Path:
    # Server data lives on disk, not tmpfs: durability is what these servers are for.
    return owned_temp_dir(prefix)


def _run_as(user: str | None, command: list[str], directory: Path) -> None:
    done = subprocess.run(
        command, capture_output=True, text=True, user=user, cwd=directory,
        stdin=subprocess.DEVNULL, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise ServerError(f"{command[0]} failed: {done.stderr.strip()[-500:]}")


@contextlib.contextmanager
def postgres(*, ready_timeout: float = 60.0, fsync: bool = True) -> Iterator[Server]:
    """A fresh PostgreSQL cluster (``initdb``) on a free port; user ``postgres``, trust auth."""
    initdb, server = _binary("initdb", PG_INSTALL), _binary("postgres", PG_INSTALL)
    user = "postgres" if os.geteuid() == 0 else None
    directory = _temp_dir("leasecheck-pg-")
    running: Server | None = None
    try:
        data = directory / "data"
        if user is not None:
            ids = pwd.getpwnam(user)
            os.chown(directory, ids.pw_uid, ids.pw_gid)
        _run_as(
            user, [initdb, "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync"],
            directory,
        )  # fmt: skip
        port = free_port()
        command = [
            server, "-D", str(data), "-p", str(port), "-h", "127.0.0.1",
            "-k", str(directory), "-c", f"fsync={'on' if fsync else 'off'}",
            # Dynamic shared memory as files in the data directory, removed with it: the
            # default (POSIX segments in /dev/shm) outlives a SIGKILLed server.
            "-c", "dynamic_shared_memory_type=mmap",
        ]  # fmt: skip
        running = Server("postgres", port, directory, command, user, ready_timeout)
        running.start()
        yield running
    finally:
        if running is not None:
            running.stop()
        _release_shared_memory(directory / "data")
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def redis(*, durable: bool = False, ready_timeout: float = 20.0) -> Iterator[Server]:
    """A fresh Redis on a free port; ``durable`` turns on the AOF with fsync at every write."""
    binary = _binary("redis-server", REDIS_INSTALL)
    directory = _temp_dir("leasecheck-redis-")
    running: Server | None = None
    try:
        port = free_port()
        command = [
            binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
            "--save", "", "--daemonize", "no", "--protected-mode", "yes",
            "--appendonly", "yes" if durable else "no",
            "--appendfsync", "always" if durable else "everysec",
        ]  # fmt: skip
        running = Server("redis", port, directory, command, None, ready_timeout)
        running.start()
        yield running
    finally:
        if running is not None:
            running.stop()
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def beanstalkd(
    *, durable: bool = False, clock_file: Path | None = None, ready_timeout: float = 10.0
) -> Iterator[Server]:
    """A fresh beanstalkd on a free port; ``durable`` keeps its binlog in the temp
    directory with an fsync at every write (``-b DIR -f 0``), so a restart replays it.
    ``clock_file``: the server reads its time from that file (``beanstalkd_server``)."""
    directory = _temp_dir("leasecheck-beanstalkd-")
    running: Server | None = None
    try:
        running = beanstalkd_server(directory, durable=durable, clock_file=clock_file,
                                    ready_timeout=ready_timeout)  # fmt: skip
        yield running
    finally:
        if running is not None:
            running.stop()
        shutil.rmtree(directory, ignore_errors=True)


def beanstalkd_server(
    directory: Path,
    *,
    durable: bool = False,
    clock_file: Path | None = None,
    ready_timeout: float = 10.0,
) -> Server:
    """A started beanstalkd with its data in ``directory`` (which the caller owns, and
    stops the server before removing).

    ``clock_file`` gives the server a clock that only its caller moves: beanstalkd reads
    time through ``gettimeofday`` alone (``time.c``, ``nanoseconds``), and libfaketime
    (preloaded, re-reading the file at every reading: ``FAKETIME_NO_CACHE``) answers it
    with the frozen UTC time written in the file as ``YYYY-MM-DD hh:mm:ss``. The file
    must exist before the start. The server sleeps on real time between events; a
    client that moved the clock sends any command, after which the server's next tick
    (``prottick``) reads the new time and times out every reservation past its TTR."""
    binary = _binary("beanstalkd", BEANSTALKD_INSTALL)
    port = free_port()
    command = [binary, "-l", "127.0.0.1", "-p", str(port)]
    if durable:
        (directory / "binlog").mkdir(exist_ok=True)
        command += ["-b", str(directory / "binlog"), "-f", "0"]
    env = None
    if clock_file is not None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TZ": "UTC",
            "LD_PRELOAD": faketime_library(), "FAKETIME_TIMESTAMP_FILE": str(clock_file),
            "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }  # fmt: skip
    running = Server("beanstalkd", port, directory, command, None, ready_timeout, env)
    running.start()
    return running


FAKETIME_INSTALL = "apt-get install -y faketime"


def faketime_library() -> str:
    """The path of libfaketime's preload library (``ServerMissing`` naming the install)."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    found += [Path(p) for p in ("/usr/lib/faketime/libfaketime.so.1",) if Path(p).exists()]
    if not found:
        raise ServerMissing(f"libfaketime is not installed; install it with: {FAKETIME_INSTALL}")
    return str(found[0])


@contextlib.contextmanager
def nats(*, ready_timeout: float = 15.0) -> Iterator[Server]:
    """A fresh nats-server with JetStream (``-js``), its store in the temp directory."""
    binary = _binary("nats-server", NATS_INSTALL)
    directory = _temp_dir("leasecheck-nats-")
    running: Server | None = None
    try:
        port = free_port()
        command = [
            binary, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(directory / "js"),
            "--server_name", f"leasecheck-{port}",
        ]  # fmt: skip
        running = Server("nats", port, directory, command, None, ready_timeout)
        running.start()
        yield running
    finally:
        if running is not None:
            running.stop()
        shutil.rmtree(directory, ignore_errors=True)


RABBITMQ_CONSUMER_TIMEOUT_MS = 60_000
"""The broker's ``consumer_timeout`` for a run: a delivery not acked within it closes its
channel and the message is requeued (the broker's own lease)."""
RABBITMQ_TICK_MS = 60_000
"""How often each channel checks its deliveries against ``consumer_timeout``
(``channel_tick_interval``, RabbitMQ's default): the lease really ends at the first
check after the timeout, so a 1 s timeout ends after up to 61 s unless this is lowered."""


RABBITMQ_READY_S = 120.0
"""How long a check waits for its node to answer, at the start and at a restart after a
kill -9 (which recovers the message store): 40 s was too little on a loaded machine."""


@contextlib.contextmanager
def rabbitmq(
    *,
    consumer_timeout_ms: int = RABBITMQ_CONSUMER_TIMEOUT_MS,
    tick_ms: int = RABBITMQ_TICK_MS,
    ready_timeout: float = 40.0,
) -> Iterator[Server]:
    """A fresh RabbitMQ node on loopback: AMQP, distribution and epmd on free ports, its
    Mnesia database, logs and cookie in the temp directory. Starting takes 4 to 15 s.

    ``consumer_timeout_ms`` goes into ``rabbitmq.conf``; ``tick_ms`` into
    ``advanced.config`` as ``channel_tick_interval`` (no ``rabbitmq.conf`` key sets it),
    so with both small a delivery's lease ends within ``tick_ms`` of its timeout."""
    script = _binary(str(_RABBITMQ_SERVER), RABBITMQ_INSTALL)
    epmd_binary = _binary("epmd", RABBITMQ_INSTALL)
    directory = _temp_dir("leasecheck-rabbitmq-")
    epmd: Server | None = None
    running: Server | None = None
    try:
        epmd_port, port, dist_port = free_port(), free_port(), free_port()
        (directory / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{port}\nconsumer_timeout = {consumer_timeout_ms}\n"
        )
        (directory / "advanced.config").write_text(
            f"[{{rabbit, [{{channel_tick_interval, {tick_ms}}}]}}].\n"
        )
        (directory / "enabled_plugins").write_text("[].\n")
        (directory / "rabbitmq-env.conf").write_text("")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(directory),  # the Erlang cookie goes here
            "LANG": "C.UTF-8",
            "ERL_EPMD_PORT": str(epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_CONF_ENV_FILE": str(directory / "rabbitmq-env.conf"),
            "RABBITMQ_NODENAME": f"leasecheck-{port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_MNESIA_BASE": str(directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(directory / "log"),
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_CONFIG_FILE": str(directory / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(directory / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(directory / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(directory / "rabbitmq.pid"),
        }
        epmd_command = [epmd_binary, "-port", str(epmd_port), "-address", "127.0.0.1"]
        epmd = Server("epmd", epmd_port, directory, epmd_command, None, 10.0, env)
        epmd.start()
        running = Server("rabbitmq", port, directory, [script], None, ready_timeout, env)
        running.start()
        yield running
    finally:
        if running is not None:
            running.stop()
        if epmd is not None:
            epmd.stop()
        shutil.rmtree(directory, ignore_errors=True)


ServerKind = Literal["postgres", "redis", "beanstalkd", "nats", "rabbitmq"]
"""The servers a library's store may need (``Capabilities.server``)."""


def start(
    kind: ServerKind, *, durable: bool, lease_ms: int | None = None, tick_ms: int | None = None
) -> contextlib.AbstractContextManager[Server]:
    """The starter of a ``kind`` server; ``durable`` asks for what a crash should survive
    (PostgreSQL's fsync, Redis' append-only file, beanstalkd's binlog; NATS and RabbitMQ
    always keep their stores on disk). ``lease_ms`` and ``tick_ms``: the server's one
    lease and the tick it checks it on, for a server whose lease is its own setting
    (RabbitMQ's ``consumer_timeout`` and ``channel_tick_interval``; ignored elsewhere)."""
    if kind == "postgres":
        return postgres(fsync=durable)
    if kind == "redis":
        return redis(durable=durable)
    if kind == "beanstalkd":
        return beanstalkd(durable=durable)
    if kind == "nats":
        return nats()
    if kind == "rabbitmq":
        return rabbitmq(
            consumer_timeout_ms=lease_ms or RABBITMQ_CONSUMER_TIMEOUT_MS,
            tick_ms=tick_ms or RABBITMQ_TICK_MS,
            ready_timeout=RABBITMQ_READY_S,
        )
    raise ServerError(f"no starter for a {kind!r} server; the kinds are {', '.join(_KINDS)}")


_KINDS = ("postgres", "redis", "beanstalkd", "nats", "rabbitmq")


def start_for(
    capabilities: Capabilities, *, durable: bool
) -> contextlib.AbstractContextManager[Server]:
    """The starter of the server a library declares (``Capabilities.server``), with the
    lease the library declares the server's own (``server_lease``, ended on a tick of
    ``lease_slack`` at most: RabbitMQ's tick is set to a quarter of the slack, the rest
    is room for the broker's scheduling on a loaded machine)."""
    if capabilities.server is None:
        raise ServerError("the library keeps its queue on no server")
    if capabilities.server_lease is None:
        return start(capabilities.server, durable=durable)
    lease_ms = round(capabilities.server_lease * 1000)
    tick_ms = max(1, capabilities.slack_ms // 4)
    return start(capabilities.server, durable=durable, lease_ms=lease_ms, tick_ms=tick_ms)


def create_database(url: str, name: str) -> str:
    """Create database ``name`` on the PostgreSQL server at ``url``; the new database's URL.

    One database per test keeps tests on a shared server apart without a new cluster
    (an ``initdb`` costs a second; a ``createdb`` a few milliseconds).
    """
    if not name.replace("_", "").isalnum():
        raise ValueError(f"database name {name!r} must be letters, digits and underscores")
    parts = urllib.parse.urlsplit(url)
    createdb = _binary("createdb", PG_INSTALL)
    done = subprocess.run(
        [createdb, "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432),
         "-U", parts.username or "postgres", name],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise ServerError(f"createdb {name} on {url} failed: {done.stderr.strip()[-300:]}")
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
