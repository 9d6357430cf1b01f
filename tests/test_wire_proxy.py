"""The wire proxy of ``queue.interleavings``: each command held and reported, on real servers.

Real Redis and PostgreSQL servers (``adapters.servers``), real clients (redis-py, psycopg)
pointed at a proxy; and the sweep-versus-ack race the proxy exposes in rq, a schedule that
fails on every run.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from leasecheck.adapters import servers
from leasecheck.adapters.registry import load_library
from leasecheck.crash_harness._pg_snapshot import PgSnapshot
from leasecheck.crash_harness._queue_scenarios import SERVER_BOUNDS, queue_scenario
from leasecheck.crash_harness._server_waits import PgWaits
from leasecheck.crash_harness._wire_proxy import WIRE_DIALECTS, WireProxy, dialect_of
from leasecheck.crash_harness.queue_interleavings import explore_queue


def _started(start: object) -> Iterator[servers.Server]:
    try:
        with start() as server:  # type: ignore[operator]
            yield server
    except servers.ServerMissing as missing:
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[servers.Server]:
    yield from _started(lambda: servers.redis(durable=False))


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[servers.Server]:
    yield from _started(lambda: servers.postgres(fsync=False))


def _upstream(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 0


def test_redis_commands_are_held_one_by_one_and_a_transaction_as_one(
    redis_server: servers.Server,
) -> None:
    import redis

    held: list[str] = []
    proxy = WireProxy("redis", _upstream(redis_server.url), held.append, lambda t: t)
    proxy.holding = True
    client = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=10)
    try:
        client.set("wire-k", "1")
        client.set("wire-b", b"\x80\x00")
        pipe = client.pipeline(transaction=True)
        pipe.incr("wire-k")
        pipe.get("wire-k")
        assert pipe.execute() == [2, b"2"]
    finally:
        client.close()
        proxy.close()
    # connection set-up (CLIENT SETINFO, ...) touches no key and is not held
    assert held == [
        "SET wire-k 1", "SET wire-b <2 bytes>", "MULTI; INCRBY wire-k 1; GET wire-k; EXEC"
    ]  # fmt: skip


def test_a_held_command_reaches_the_server_only_when_released(
    redis_server: servers.Server,
) -> None:
    import redis

    at_hold, release = threading.Event(), threading.Event()

    def hold(text: str) -> None:
        at_hold.set()
        assert release.wait(10), "the test never released the command"

    proxy = WireProxy("redis", _upstream(redis_server.url), hold)
    proxy.holding = True
    client = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=10)
    direct = redis.Redis.from_url(redis_server.url, socket_timeout=10)
    try:
        direct.delete("wire-held")
        writer = threading.Thread(target=client.set, args=("wire-held", "x"))
        writer.start()
        assert at_hold.wait(10), "the proxy never reported the SET"
        assert direct.get("wire-held") is None  # held: the server has not seen it
        release.set()
        writer.join(10)
        assert direct.get("wire-held") == b"x"
    finally:
        release.set()
        client.close()
        direct.close()
        proxy.close()


def test_postgres_queries_and_extended_groups_are_held(
    postgres_server: servers.Server,
) -> None:
    import psycopg

    held: list[str] = []
    proxy = WireProxy("postgres", _upstream(postgres_server.url), held.append)
    parts = urllib.parse.urlsplit(postgres_server.url)
    netloc = parts.netloc.rpartition("@")
    url = urllib.parse.urlunsplit(
        parts._replace(netloc=f"{netloc[0]}{netloc[1]}127.0.0.1:{proxy.port}")
    )
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as connection:
            proxy.holding = True
            assert connection.execute("SELECT %s::int + 1", (41,)).fetchone() == (42,)
    finally:
        proxy.close()
    assert held[0] == "SELECT $1::int + 1"


def test_rq_sweep_re_readies_a_job_acknowledged_mid_sweep(redis_server: servers.Server) -> None:
    """rq's ``clean_registries`` reads the expired job, the ack runs, the sweep requeues it:
    found at one forced switch, the same schedule on every run."""
    library = load_library("rq")
    with tempfile.TemporaryDirectory(prefix="wire-test-") as directory:
        found = explore_queue(
            library, queue_scenario("sweep-ack"), Path(directory), 1, 12, redis_server.url
        )
    assert found.violated is not None
    assert found.violated.prop == "queue.ack-final"
    text = found.violated.run.interleaving()
    assert "P2 sent `ZRANGEBYSCORE rq:wip:<store>" in text
    assert "P1: ack(cid='ca', job='a') -> True" in text


def test_postgres_says_which_process_waits_for_a_row_lock(postgres_server: servers.Server) -> None:
    import psycopg

    url = postgres_server.url
    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute("CREATE TABLE IF NOT EXISTS wire_rows (id int PRIMARY KEY, v int)")
        setup.execute("INSERT INTO wire_rows VALUES (1, 0) ON CONFLICT DO NOTHING")
    holder = psycopg.connect(url)  # a transaction left open holds the row
    holder.execute("UPDATE wire_rows SET v = v + 1 WHERE id = 1")
    waiter = subprocess.Popen(
        [sys.executable, "-c", "import psycopg, sys\n"
         "c = psycopg.connect(sys.argv[1], autocommit=True)\n"
         "print('connected', flush=True)\n"
         "c.execute('UPDATE wire_rows SET v = v + 1 WHERE id = 1')", url],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    waits = PgWaits(url)
    try:
        assert waiter.stdout is not None and waiter.stdout.readline() == "connected\n"
        deadline = time.monotonic() + 20
        while not waits.still_waiting(waiter.pid):
            assert time.monotonic() < deadline, (
                "the waiting UPDATE never showed in pg_stat_activity"
            )
            time.sleep(0.02)
        holder.commit()
        assert waiter.wait(20) == 0
        assert not waits.still_waiting(waiter.pid)
    finally:
        waits.close()
        holder.close()
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait(10)
        if waiter.stdout is not None:
            waiter.stdout.close()


def test_one_list_says_which_servers_are_wired() -> None:
    """``WIRE_DIALECTS`` decides it once: a plan for each, none for another server, and
    the property and the harness both ask ``dialect_of`` (beanstalkd and NATS: verbs)."""
    assert set(SERVER_BOUNDS) == set(WIRE_DIALECTS) == {"postgres", "redis"}
    for name in ("pgqueuer", "procrastinate", "rq", "saq", "kombu-redis", "dramatiq-redis"):
        server = load_library(name, checkable=False).capabilities.server
        assert dialect_of(server) in WIRE_DIALECTS, name
    for other in (None, "beanstalkd", "nats", "rabbitmq", "POSTGRES"):
        assert dialect_of(other) is None, other


def test_every_server_library_runs_the_claimed_scenarios_in_ci() -> None:
    for server, scopes in SERVER_BOUNDS.items():
        for plan in scopes.values():
            for name, _bound, _cap in plan:
                queue_scenario(name)  # each named scenario exists
        ci = {name for name, _bound, _cap in scopes["ci"]}
        assert {"sweep-ack", "open-while-claimed"} <= ci, server
        deep = {name for name, _bound, _cap in scopes["deep"]}
        assert {"sweep-ack", "open-while-claimed", "claim-sweep", "claim-claim"} <= deep, server


def test_a_seeded_postgres_store_is_put_back_in_place(postgres_server: servers.Server) -> None:
    import psycopg

    base = postgres_server.url.rsplit("/", 1)[0] + "/postgres"
    url = servers.create_database(base, "wire_snapshot")
    with psycopg.connect(url, autocommit=True) as connection:
        run = connection.execute
        run("CREATE TABLE jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
            "status text, at timestamptz DEFAULT now())")  # fmt: skip
        run("CREATE TABLE events (n serial PRIMARY KEY, job bigint REFERENCES jobs (id))")
        run("CREATE FUNCTION note() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN INSERT INTO events (job) VALUES (NEW.id); RETURN NEW; END $$")  # fmt: skip
        run("CREATE TRIGGER noted AFTER INSERT OR UPDATE ON jobs "
            "FOR EACH ROW EXECUTE FUNCTION note()")  # fmt: skip
        run("INSERT INTO jobs (status) VALUES ('doing'), ('todo')")
        seeded = run("SELECT * FROM jobs ORDER BY id").fetchall()
        seeded_events = run("SELECT * FROM events ORDER BY n").fetchall()
        snapshot = PgSnapshot(url)
        try:
            snapshot.take()
            for _ in range(2):  # a schedule changes the store; the next one starts as seeded
                run("UPDATE jobs SET status = 'succeeded' WHERE id = 1")
                run("INSERT INTO jobs (status) VALUES ('todo')")
                snapshot.restore()
                assert run("SELECT * FROM jobs ORDER BY id").fetchall() == seeded
                assert run("SELECT * FROM events ORDER BY n").fetchall() == seeded_events
                new = run("INSERT INTO jobs (status) VALUES ('x') RETURNING id").fetchone()
                assert new == (3,)  # the identity sequence was put back too
                snapshot.restore()
        finally:
            snapshot.close()
