"""The broker servers of ``adapters.servers``: beanstalkd, NATS with JetStream, RabbitMQ.

Each comes from its OS package (``apt-get install -y beanstalkd nats-server
rabbitmq-server``); a missing one fails here with that command, never skips. Each must
listen on loopback only, answer its own protocol, survive a kill and restart on the same
data where it keeps data, and leave no process behind: RabbitMQ's Erlang port mapper
(epmd) included, which a node left to itself would daemonise.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import psutil
import pytest

from leasecheck.adapters import servers

Starter = Callable[[], AbstractContextManager[servers.Server]]


def _listening(process: psutil.Process) -> set[tuple[str, int]]:
    found = set()
    for each in [process, *process.children(recursive=True)]:
        try:
            connections = each.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        found |= {(c.laddr.ip, c.laddr.port) for c in connections if c.status == "LISTEN"}
    return found


def _my_server_processes() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    before = _my_server_processes()
    yield
    left = _my_server_processes() - before
    assert not left, f"processes left running: {left}"


def _started(start: Starter) -> AbstractContextManager[servers.Server]:
    try:
        return start()
    except servers.ServerMissing as missing:  # pragma: no cover - CI installs them
        pytest.fail(str(missing), pytrace=False)


@pytest.mark.parametrize(
    "start",
    [lambda: servers.beanstalkd(durable=True), servers.nats],
    ids=["beanstalkd", "nats"],
)
def test_a_broker_listens_on_loopback_and_stops(start: Starter, no_leftovers: None) -> None:
    with _started(start) as server:
        listening = _listening(psutil.Process(server.pid))
        assert ("127.0.0.1", server.port) in listening
        assert all(ip in ("127.0.0.1", "::1") for ip, _ in listening), listening
        directory = server.directory
    assert not directory.exists(), "the server's temp directory was kept"


def test_beanstalkd_binlog_survives_a_kill(no_leftovers: None) -> None:
    with _started(lambda: servers.beanstalkd(durable=True)) as server:
        assert _beanstalk(server.port, b"put 0 0 60 2\r\nhi\r\n").startswith(b"INSERTED")
        server.kill()
        server.restart()
        assert _beanstalk(server.port, b"peek-ready\r\n").startswith(b"FOUND")


def test_a_driven_clock_leaves_nothing_in_dev_shm(tmp_path: Path, no_leftovers: None) -> None:
    """libfaketime names a shared-memory segment and a semaphore after the server's pid and
    unlinks them only at a normal exit: after a kill and after a stop both are gone."""
    clock = tmp_path / "clock"
    clock.write_text("2026-01-01 00:00:00")
    pids = []
    with _started(lambda: servers.beanstalkd(clock_file=clock)) as server:
        pids.append(server.pid)
        assert Path(f"/dev/shm/faketime_shm_{server.pid}").exists()  # what is cleaned up
        server.kill()
        server.restart()
        pids.append(server.pid)
    left = [p for pid in pids for p in Path("/dev/shm").glob(f"*faketime_*_{pid}")]
    assert left == [], left


def test_a_harness_killed_before_its_cleanup_leaves_nothing_at_the_next_start(
    tmp_path: Path, no_leftovers: None
) -> None:
    """A harness SIGKILLed mid-run never unlinks its driven server's two /dev/shm entries
    (the server dies by PR_SET_PDEATHSIG): the next driven-clock start removes entries
    whose process is gone, and keeps those of a live process."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = [
        Path(f"/dev/shm/faketime_shm_{dead.pid}"),
        Path(f"/dev/shm/sem.faketime_sem_{dead.pid}"),
    ]
    live = Path(f"/dev/shm/faketime_shm_{os.getpid()}")
    clock = tmp_path / "clock"
    clock.write_text("2026-01-01 00:00:00")
    try:
        for entry in [*stale, live]:
            entry.write_bytes(b"")
        with _started(lambda: servers.beanstalkd(clock_file=clock)):
            assert [entry for entry in stale if entry.exists()] == []
            assert live.exists(), "the entry of a live process was removed"
    finally:
        for entry in [*stale, live]:
            entry.unlink(missing_ok=True)


def test_a_server_restarted_inside_a_test_is_not_that_tests_process(
    monkeypatch: pytest.MonkeyPatch, no_leftovers: None
) -> None:
    """The runner kills what a test started once the test is over (it finds them by
    LEASECHECK_NODEID in their environment); a server is its fixture's, so neither its
    start nor a restart during a test (queue.server-crash) may carry the test's name."""
    with _started(servers.nats) as server:
        monkeypatch.setenv(servers.NODEID_ENV, "test_server_crash[nats-jetstream]")
        server.kill()
        server.restart()
        assert servers.NODEID_ENV not in psutil.Process(server.pid).environ()


def _beanstalk(port: int, command: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(command)
        return sock.recv(256)


def test_rabbitmq_epmd_and_distribution_stay_on_loopback(no_leftovers: None) -> None:
    with _started(servers.rabbitmq) as server:
        mine = _my_server_processes()
        names = {psutil.Process(pid).name() for pid in mine}
        assert {"epmd", "beam.smp"} <= names, names
        listening: set[tuple[str, int]] = set()
        for pid in mine:
            listening |= _listening(psutil.Process(pid))
        assert ("127.0.0.1", server.port) in listening
        assert len({port for _, port in listening}) == 3, listening  # AMQP, dist, epmd
        assert all(ip in ("127.0.0.1", "::1") for ip, _ in listening), listening
        server.kill()
        assert "beam.smp" not in {psutil.Process(p).name() for p in _my_server_processes()}
        server.restart()
        assert servers._answers("rabbitmq", server.port)


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(servers.ServerError, match="no starter"):
        servers.start("memcached", durable=False)  # type: ignore[arg-type]
