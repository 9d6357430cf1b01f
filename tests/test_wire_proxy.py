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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from leasecheck.adapters import servers
from leasecheck.adapters.registry import load_library
from leasecheck.crash_harness._pg_snapshot import PgSnapshot
from leasecheck.crash_harness._queue_scenarios import (
    SERVER_BOUNDS,
    QueueScenario,
    Verb,
    queue_scenario,
)
from leasecheck.crash_harness._server_waits import PgWaits, RedisWaits, blocks_forever
from leasecheck.crash_harness._wire_proxy import WIRE_DIALECTS, WireProxy, dialect_of
from leasecheck.crash_harness.engine import Channel, Engine
from leasecheck.crash_harness.interleavings import DEADLINE_S, Run, run_schedules, run_with
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


def test_which_redis_commands_block_until_another_client_writes() -> None:
    """As the wire proxy shows them; only a block with no timeout counts (a timed one
    ends by itself, and whether the engine saw it blocked would depend on its speed)."""
    forever = ["BLPOP q 0", "BRPOP a b 0", "BRPOPLPUSH q active 0", "BLMOVE q a LEFT RIGHT 0",
               "BLMOVE q a LEFT RIGHT 0.0", "BZPOPMIN z 0", "BLMPOP 0 1 q LEFT",
               "XREADGROUP GROUP g c COUNT 1 BLOCK 0 STREAMS s >", "XREAD BLOCK 0 STREAMS s $",
               "WAIT 1 0", "blmove q a LEFT RIGHT 0"]  # fmt: skip
    timed = ["BLMOVE q a LEFT RIGHT 0.01", "BLPOP q 5", "BLMPOP 1 1 q LEFT", "WAIT 1 100",
             "XREADGROUP GROUP g c COUNT 1 STREAMS s >", "XREAD BLOCK 10 STREAMS s $",
             "LMOVE q a LEFT RIGHT", "LPOP q", "MULTI; BLPOP q 0; EXEC", "BLPOP", "GET 0",
             "claim"]  # fmt: skip
    assert [t for t in forever if not blocks_forever(t)] == []
    assert [t for t in timed if blocks_forever(t)] == []


def _redis_waiter(url: str, command: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", "import redis, sys\n"
         "c = redis.Redis.from_url(sys.argv[1], socket_timeout=60)\n"
         "c.ping(); print('connected', flush=True)\n"
         "print(c.execute_command(*sys.argv[2].split()), flush=True)", url, command],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_redis_says_which_process_a_blocking_command_holds(
    redis_server: servers.Server,
) -> None:
    """A real process blocked in ``BLPOP q 0`` is seen blocked (CLIENT LIST: flags ``b``,
    ``cmd=blpop``, by its socket's port), and no longer once another client pushes; one
    blocked in a timed ``BLPOP`` is not reported (it ends by itself)."""
    import redis

    url = redis_server.url
    pusher: Any = redis.Redis.from_url(url)
    waits = RedisWaits(url)
    forever = _redis_waiter(url, "BLPOP waits-q 0")
    timed = _redis_waiter(url, "BLPOP waits-timed 30")
    try:
        for waiter, text in ((forever, "BLPOP waits-q 0"), (timed, "BLPOP waits-timed 30")):
            assert waiter.stdout is not None and waiter.stdout.readline() == "connected\n"
            waits.released(waiter.pid, text)
        deadline = time.monotonic() + 20
        while not waits.still_waiting(forever.pid):
            assert time.monotonic() < deadline, "the BLPOP never showed blocked in CLIENT LIST"
            time.sleep(0.02)
        deadline = time.monotonic() + 20  # the timed one is blocked at the server too...
        while sum("b" in c["flags"] for c in pusher.client_list()) < 2:
            assert time.monotonic() < deadline, "the timed BLPOP never blocked"
            time.sleep(0.02)
        assert not waits.still_waiting(timed.pid)  # ...but it is not a wait for another
        pusher.rpush("waits-q", "x")
        assert forever.wait(20) == 0
        assert not waits.still_waiting(forever.pid)
        pusher.rpush("waits-timed", "y")
        assert timed.wait(20) == 0
    finally:
        waits.close()
        pusher.close()
        for waiter in (forever, timed):
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait(10)
            if waiter.stdout is not None:
                waiter.stdout.close()


def _push_and_pop(url: str, directory: Path) -> Callable[..., Run]:
    """Two processes through wire proxies: P1 ``BLPOP q 0``, P2 ``RPUSH q x``."""

    def body_of(name: str, program: tuple[Verb, ...]) -> Callable[[Channel], str]:
        def body(channel: Channel) -> str:
            import redis

            proxy = WireProxy("redis", _upstream(url), lambda t: channel.ask("wire", t))
            client = redis.Redis(port=proxy.port, socket_timeout=60)
            try:
                client.ping()
                channel.ask("ready")
                proxy.holding = True
                if name == "P1":
                    got: Any = client.blpop(["blocked-q"], 0)
                    assert got == (b"blocked-q", b"x"), got
                else:
                    client.rpush("blocked-q", "x")
                proxy.holding = False
            finally:
                client.close()
                proxy.close()
            return name

        return body

    scenario = QueueScenario("push-pop", (), ((Verb("pop"),), (Verb("push"),)))
    waits = RedisWaits(url)

    def one(prefix: tuple[str, ...], search: object, engine: Engine) -> Run:
        return run_with(body_of, scenario, directory, prefix, search, engine, waits)  # type: ignore[arg-type]

    one.waits = waits  # type: ignore[attr-defined]
    one.scenario = scenario  # type: ignore[attr-defined]
    return one


def test_a_process_blocked_in_blpop_lets_the_engine_run_the_other(
    redis_server: servers.Server, tmp_path: Path
) -> None:
    """The schedule where P1's ``BLPOP q 0`` goes first: the engine sees it blocked at the
    server, runs P2's ``RPUSH``, then P1 returns. Without the server's word it would wait
    for P1's next command until its deadline (``DEADLINE_S``) and call the target hung."""
    one = _push_and_pop(redis_server.url, tmp_path)
    started = time.monotonic()
    try:
        found = run_schedules(one, one.scenario, None, 10, prune=False)  # type: ignore[attr-defined]
    finally:
        one.waits.close()  # type: ignore[attr-defined]
    assert found.failure is None, found.failure and found.failure.problem
    assert found.explored == 2
    assert time.monotonic() - started < DEADLINE_S


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
