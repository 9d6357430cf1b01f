"""Store lifecycle (issue 22, item 5): the optional ``destroy(location)`` of the adapter
protocol removes what ``create`` made on a server, and the harness calls it for every
store it made; every phase of a property's tests reports its seconds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from leasecheck.adapters import servers
from leasecheck.adapters.pgqueuer import Pgqueuer
from leasecheck.adapters.protocol import DestroysStores, QueueLibrary, SharedClock, destroy_store
from leasecheck.adapters.registry import load_library
from leasecheck.adapters.rq import Rq
from leasecheck.cli import main


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with servers.postgres(fsync=False) as running:
        yield running.url


@pytest.fixture(scope="module")
def redis() -> Iterator[str]:
    with servers.redis() as running:
        yield running.url


def _databases(url: str) -> set[str]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute("SELECT datname FROM pg_database").fetchall()
    return {str(row[0]) for row in rows}


def _used(library: QueueLibrary, location: str, tmp_path: Path) -> None:
    """Put a job in the store and claim it, so the store holds something to remove."""
    clock = SharedClock.of(tmp_path / "clock", library.capabilities)
    queue = library.connect(location, clock)
    try:
        queue.enqueue("j0", "payload")
        queue.claim("w1", 5.0)
    finally:
        queue.close()
        clock.close()


def test_a_pgqueuer_store_is_a_database_that_destroy_drops(postgres: str, tmp_path: Path) -> None:
    library = Pgqueuer()
    location = library.create(tmp_path, postgres)
    name = location.rsplit("/", 1)[1]
    _used(library, location, tmp_path)
    assert name in _databases(postgres)
    destroy_store(library, location)
    assert name not in _databases(postgres)
    destroy_store(library, location)  # already gone: no error


def test_an_rq_store_is_a_prefix_whose_every_key_destroy_deletes(
    redis: str, tmp_path: Path
) -> None:
    import redis as redis_client

    library = Rq()
    location = library.create(tmp_path, redis)
    other = library.create(tmp_path, redis)
    _used(library, location, tmp_path)
    _used(library, other, tmp_path)
    prefix, kept = location.partition("#")[2], other.partition("#")[2]
    client = redis_client.Redis.from_url(redis)
    try:
        assert list(client.scan_iter(match=f"*{prefix}*"))
        destroy_store(library, location)
        assert not list(client.scan_iter(match=f"*{prefix}*"))
        assert list(client.scan_iter(match=f"*{kept}*")), "destroy removed another store's keys"
    finally:
        client.close()


def test_destroy_is_optional() -> None:
    """A library without ``destroy`` (every file-backed one) still satisfies the protocol;
    the harness then leaves the store to ``directory``'s removal."""
    litequeue = load_library("litequeue")
    assert not isinstance(litequeue, DestroysStores)
    destroy_store(litequeue, "/nonexistent/queue.db")  # nothing to call: no error
    assert isinstance(Pgqueuer(), DestroysStores) and isinstance(Rq(), DestroysStores)


def test_the_machine_drops_every_store_it_made(postgres: str) -> None:
    """One queue.no-loss run on pgqueuer: no program's database is left on the server."""
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    from leasecheck.stateful_tests.queue_machine import QueueMachine

    before = _databases(postgres)
    machine = QueueMachine.bound(Pgqueuer(), frozenset({"queue.no-loss"}), postgres)
    run_state_machine_as_test(
        machine, settings=settings(max_examples=3, stateful_step_count=5, deadline=None)
    )
    assert machine.programs[0] >= 3
    assert _databases(postgres) == before


def test_the_summary_and_json_show_setup_and_teardown_seconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "run.json"
    code = main([
        "check", "--adapter", "lease-worker", "--property", "queue.stale-ack", "--profile",
        "quick", "-n", "0", "--json", str(record),
    ])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    header = next(line for line in out.splitlines() if line.strip().startswith("property"))
    assert header.split()[-3:] == ["time", "setup", "teardown"]
    (prop,) = json.loads(record.read_text())["properties"]
    assert set(prop["phases"]) == {"setup", "call", "teardown"}
    assert prop["phases"]["call"] > 0 and prop["phases"]["setup"] >= 0
    assert 0 < prop["cpu"] <= prop["seconds"] * (os.cpu_count() or 1) + 1
