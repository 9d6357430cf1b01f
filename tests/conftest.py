"""Shared fixtures for the unit tests: queue files on tmpfs and connections that never leak.

Keep this file additive: each fixture owns its cleanup, and other test modules may add
their own fixtures below.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from leasecheck.adapters import servers
from leasecheck.crash_harness.engine import Engine
from leasecheck.queue_impl import worker


def is_open(con: sqlite3.Connection) -> bool:
    """False once ``con.close()`` has been called."""
    try:
        con.total_changes  # noqa: B018 -- any attribute read fails on a closed connection
    except sqlite3.ProgrammingError:
        return False
    return True


def open_files_under(directory: Path) -> list[str]:
    """Paths under ``directory`` that this process still holds open."""
    return [f.path for f in psutil.Process().open_files() if Path(f.path).is_relative_to(directory)]


@pytest.fixture
def scratch_open_files(scratch: Path) -> Callable[[], list[str]]:
    """``scratch_open_files()``: the files under the scratch directory this process holds open."""
    return lambda: open_files_under(scratch)


@pytest.fixture
def queue_file(scratch: Path) -> Path:
    """Where the test's queue lives (not created yet)."""
    return scratch / "queue.db"


@pytest.fixture
def connect(scratch: Path, queue_file: Path) -> Iterator[Callable[..., sqlite3.Connection]]:
    """``connect(path=queue_file)``: ``worker.open_queue``; every connection is closed at the end.

    At teardown it fails if a connection was left inside a transaction, or if any file
    under the scratch directory is still open (a connection leaked by the code under test).
    """
    opened: list[sqlite3.Connection] = []

    def open_one(path: Path | None = None) -> sqlite3.Connection:
        con = worker.open_queue(path or queue_file)
        opened.append(con)
        return con

    yield open_one
    left_open = [con for con in opened if is_open(con) and con.in_transaction]
    for con in opened:
        con.close()
    assert not left_open, f"{len(left_open)} connection(s) were left inside a transaction"
    assert open_files_under(scratch) == [], "a connection to a scratch file was not closed"


def pytest_configure(config: pytest.Config) -> None:
    """leasecheck's own suite runs under its plugin's settings (profile, seed, shrink
    bound); the plugin applies them only to sessions that ask (``activate``)."""
    from leasecheck.plugin import activate

    activate(config)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the mutant kill table gathered by tests/test_mutant_catalogue.py."""
    from leasecheck.mutants import by_name
    from leasecheck.selfcheck import Kill, kill_table

    kills = []
    for report in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get(
        "failed", []
    ):
        recorded = dict(getattr(report, "user_properties", [])).get("kill")
        if recorded is not None and report.when == "call":  # [mutant name, *Kill fields]
            name, *fields = recorded
            kills.append(Kill(by_name(name), *fields))
    if kills:
        terminalreporter.section("mutant kill table (ci profile, seed 0)")
        terminalreporter.write_line(kill_table(sorted(kills, key=lambda k: k.mutant.name)))


@pytest.fixture(autouse=True)
def _isolated_example_database(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every ``leasecheck check`` a test starts saves and replays examples in a fresh
    directory (never the developer's ``.leasecheck/examples`` or ``$LEASECHECK_DB``), so
    no test's verdict depends on what an earlier test found."""
    from leasecheck.scratch import scratch_dir

    monkeypatch.delenv("LEASECHECK_DB", raising=False)
    with scratch_dir("leasecheck-test-examples-") as directory:
        monkeypatch.setenv("LEASECHECK_EXAMPLES", str(directory))
        yield


@pytest.fixture
def engine(no_leaked_children: None) -> Iterator[Engine]:
    """The fork engine with its default deadline; every child reaped and checked with psutil."""
    with Engine() as running:
        yield running


@contextlib.contextmanager
def _server_url(kind: servers.ServerKind) -> Iterator[str]:
    """A throw-away server of ``kind`` on a free port (``servers.start``, not durable);
    one that is not installed fails the test with the command that installs it."""
    try:
        with servers.start(kind, durable=False) as server:
            yield server.url
    except servers.ServerMissing as missing:  # pragma: no cover - CI installs it
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """One Redis for the test module that asks for it."""
    with _server_url("redis") as url:
        yield url


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """One PostgreSQL for the test module that asks for it."""
    with _server_url("postgres") as url:
        yield url


@pytest.fixture(scope="module")
def nats_url() -> Iterator[str]:
    """One nats-server (JetStream) for the test module that asks for it."""
    with _server_url("nats") as url:
        yield url
