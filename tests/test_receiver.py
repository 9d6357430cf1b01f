"""The receiving server and its ``send`` client (queue_impl/receiver.py, send_client.py).

Every test talks to a real server on 127.0.0.1 through real sockets and reads the
receiver's real SQLite inbox (lease-worker.md, "The receiving server").
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from leasecheck.queue_impl import worker
from leasecheck.queue_impl.receiver import MAX_BODY, Receiver, make_send

Inbox = tuple[list[tuple[str, int]], list[tuple[str, int]]]


class Retry(Exception):
    """Stands for the worker's Retryable in the client tests."""


class Refused(Exception):
    """Stands for the worker's Permanent in the client tests."""


@pytest.fixture
def no_new_threads() -> Iterator[None]:
    """Fails the test if a thread it started (server, handler) is still alive at the end."""
    before = set(threading.enumerate())
    yield
    left = [t.name for t in threading.enumerate() if t not in before]
    assert not left, f"threads left running: {left}"


@pytest.fixture
def receiver(scratch: Path, no_new_threads: None) -> Iterator[Receiver]:
    with Receiver(scratch / "inbox.db").start() as running:
        yield running


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """Send one raw request (no automatic Content-Length) and return (status, JSON body)."""
    con = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        con.putrequest(method, path, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            con.putheader(name, value)
        con.endheaders(body)
        response = con.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        con.close()


def post(port: int, payload: object) -> tuple[int, dict[str, Any]]:
    body = json.dumps(payload).encode()
    return request(port, "POST", "/deliveries", body, {"Content-Length": str(len(body))})


def inbox(db: Path) -> Inbox:
    """Every inbox row and every ledger row, sorted."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT id, qty FROM inbox ORDER BY id").fetchall()
        ledger = con.execute("SELECT id, total FROM ledger ORDER BY id").fetchall()
        return rows, ledger
    finally:
        con.close()


# --- deliveries -----------------------------------------------------------------------------


def test_a_delivery_is_recorded_and_applied_once(receiver: Receiver) -> None:
    status, answer = post(receiver.port, {"id": "order-1", "qty": 7})
    assert (status, answer["outcome"]) == (200, "applied")
    assert inbox(receiver.db_path) == ([("order-1", 7)], [("order-1", 7)])
    assert receiver.stats() == {"requests": 1, "inbox": 1, "effect_total": 7}


def test_the_same_delivery_again_is_acknowledged_without_a_second_effect(
    receiver: Receiver,
) -> None:
    for _ in range(3):
        assert post(receiver.port, {"id": "a", "qty": 5})[0] == 200
    assert inbox(receiver.db_path) == ([("a", 5)], [("a", 5)])
    assert receiver.stats() == {"requests": 3, "inbox": 1, "effect_total": 5}
    assert [o for _, _, o in receiver.request_log()] == ["applied", "duplicate", "duplicate"]


def test_the_same_id_with_another_qty_is_refused_409(receiver: Receiver) -> None:
    post(receiver.port, {"id": "a", "qty": 5})
    status, answer = post(receiver.port, {"id": "a", "qty": 6})
    assert (status, answer["outcome"]) == (409, "conflict")
    assert answer["detail"] == "'a' was already delivered with qty=5; qty=6 was refused"
    assert inbox(receiver.db_path) == ([("a", 5)], [("a", 5)])
    assert receiver.stats()["requests"] == 2


def test_concurrent_duplicates_apply_the_effect_once(receiver: Receiver) -> None:
    send = make_send(receiver.url, retryable=Retry, permanent=Refused)
    results: list[object] = []
    start = threading.Barrier(8)

    def deliver() -> None:
        start.wait(timeout=10)
        results.append(send({"id": "dup", "qty": 3}))

    threads = [threading.Thread(target=deliver) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == [True] * 8
    assert receiver.stats() == {"requests": 8, "inbox": 1, "effect_total": 3}


def test_the_boundaries_of_a_valid_delivery_are_accepted(receiver: Receiver) -> None:
    for event in ({"id": "x" * 64, "qty": 1}, {"id": "A-z_0", "qty": 1000}):
        assert post(receiver.port, event)[0] == 200
    body = json.dumps({"id": "padded", "qty": 2}).encode().ljust(MAX_BODY)
    assert request(receiver.port, "POST", "/deliveries", body, {"Content-Length": "4096"})[0] == 200
    assert receiver.stats()["effect_total"] == 1003


def test_stats_over_http_match_the_python_api_and_are_not_logged(receiver: Receiver) -> None:
    post(receiver.port, {"id": "a", "qty": 4})
    post(receiver.port, {"id": "a", "qty": 9})
    status, stats = request(receiver.port, "GET", "/stats")
    assert status == 200
    assert stats == receiver.stats() == {"requests": 2, "inbox": 1, "effect_total": 4}


def test_a_restarted_receiver_keeps_its_inbox(scratch: Path, no_new_threads: None) -> None:
    db = scratch / "inbox.db"
    with Receiver(db).start() as first:
        post(first.port, {"id": "a", "qty": 2})
    with Receiver(db).start() as second:
        assert post(second.port, {"id": "a", "qty": 2})[1]["outcome"] == "duplicate"
        assert second.stats() == {"requests": 2, "inbox": 1, "effect_total": 2}


# --- after_commit: the crash harness's hook ----------------------------------------------------


def test_after_commit_runs_once_after_the_commit_and_before_the_response(
    scratch: Path, no_new_threads: None
) -> None:
    seen: list[tuple[str, int, dict[str, int]]] = []

    def after_commit(event_id: str, qty: int) -> None:
        seen.append((event_id, qty, running.stats()))
        raise RuntimeError("planted: the receiver dies after committing")

    with Receiver(scratch / "inbox.db", after_commit=after_commit).start() as running:
        send = make_send(running.url, retryable=Retry, permanent=Refused)
        with pytest.raises(Retry, match=r"RemoteDisconnected|ConnectionResetError"):
            send({"id": "a", "qty": 3})  # no response was written before the hook raised
        assert send({"id": "a", "qty": 3}) is True  # duplicate: no commit, no hook
        with pytest.raises(Refused):
            send({"id": "a", "qty": 4})
    assert seen == [("a", 3, {"requests": 1, "inbox": 1, "effect_total": 3})]


# --- malformed requests -------------------------------------------------------------------------

JSON = "application/json"
MALFORMED: list[tuple[str, str, str, bytes | None, dict[str, str], int]] = [
    # (name, method, path, body, headers, expected status)
    ("get deliveries", "GET", "/deliveries", None, {}, 405),
    ("put deliveries", "PUT", "/deliveries", b"{}", {"Content-Length": "2"}, 405),
    ("delete deliveries", "DELETE", "/deliveries", None, {}, 405),
    ("post elsewhere", "POST", "/other", b'{"id":"a","qty":1}', {"Content-Length": "18"}, 404),
    ("post with query", "POST", "/deliveries?x=1", b"{}", {"Content-Length": "2"}, 404),
    ("get unknown", "GET", "/", None, {}, 404),
    ("no content-length", "POST", "/deliveries", None, {}, 411),
    ("content-length text", "POST", "/deliveries", b"{}", {"Content-Length": "two"}, 400),
    ("content-length negative", "POST", "/deliveries", b"{}", {"Content-Length": "-2"}, 400),
    ("chunked", "POST", "/deliveries", b"0\r\n\r\n", {"Transfer-Encoding": "chunked"}, 400),
    ("huge content-length", "POST", "/deliveries", None, {"Content-Length": str(10**9)}, 413),
    ("5000-digit length", "POST", "/deliveries", None, {"Content-Length": "9" * 5000}, 413),
    ("body to a wrong path", "POST", "/x", b"{}" * 3000, {"Content-Length": "6000"}, 404),
]  # fmt: skip
BAD_BODIES: list[tuple[str, bytes]] = [
    ("empty", b""),
    ("form", b"id=a&qty=1"),
    ("not utf-8", b'{"id":"\xff","qty":1}'),
    ("array", b'["a", 1]'),
    ("string", b'"a"'),
    ("null", b"null"),
    ("missing qty", b'{"id":"a"}'),
    ("missing id", b'{"qty":1}'),
    ("extra key", b'{"id":"a","qty":1,"note":"x"}'),
    ("repeated key", b'{"id":"a","qty":1,"qty":1}'),
    ("id int", b'{"id":1,"qty":1}'),
    ("id empty", b'{"id":"","qty":1}'),
    ("id space", b'{"id":"a b","qty":1}'),
    ("id newline", b'{"id":"a\\n","qty":1}'),
    ("id non-ascii", b'{"id":"\xc3\xa9","qty":1}'),
    ("id 65 chars", b'{"id":"' + b"x" * 65 + b'","qty":1}'),
    ("qty zero", b'{"id":"a","qty":0}'),
    ("qty 1001", b'{"id":"a","qty":1001}'),
    ("qty negative", b'{"id":"a","qty":-1}'),
    ("qty float", b'{"id":"a","qty":1.0}'),
    ("qty exponent", b'{"id":"a","qty":1e2}'),
    ("qty string", b'{"id":"a","qty":"1"}'),
    ("qty true", b'{"id":"a","qty":true}'),
    ("qty null", b'{"id":"a","qty":null}'),
    ("qty NaN", b'{"id":"a","qty":NaN}'),
    ("deep nesting", b"[" * 3000),
]


@pytest.fixture
def primed(receiver: Receiver) -> Receiver:
    """A receiver whose inbox already holds id 'a' (qty 5), so a bad request could disturb it."""
    assert post(receiver.port, {"id": "a", "qty": 5})[0] == 200
    return receiver


def assert_refused_without_change(
    primed: Receiver, status: int, expected: int, answer: dict[str, Any]
) -> None:
    assert status == expected, f"expected HTTP {expected}, got {status}: {answer}"
    assert answer["detail"], "a refusal must say what was wrong"
    assert inbox(primed.db_path) == ([("a", 5)], [("a", 5)])
    assert primed.stats() == {"requests": 2, "inbox": 1, "effect_total": 5}


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "expected"),
    [case[1:] for case in MALFORMED],
    ids=[case[0] for case in MALFORMED],
)
def test_a_malformed_request_is_refused_and_changes_nothing(
    primed: Receiver,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
    expected: int,
) -> None:
    status, answer = request(primed.port, method, path, body, headers)
    assert_refused_without_change(primed, status, expected, answer)


@pytest.mark.parametrize("body", [b for _, b in BAD_BODIES], ids=[n for n, _ in BAD_BODIES])
def test_a_malformed_body_is_refused_400_and_changes_nothing(primed: Receiver, body: bytes) -> None:
    headers = {"Content-Length": str(len(body)), "Content-Type": JSON}
    status, answer = request(primed.port, "POST", "/deliveries", body, headers)
    assert_refused_without_change(primed, status, 400, answer)


def test_a_body_over_the_limit_is_refused_413(primed: Receiver) -> None:
    body = json.dumps({"id": "big", "qty": 1}).encode().ljust(MAX_BODY + 1)
    headers = {"Content-Length": str(len(body))}
    status, answer = request(primed.port, "POST", "/deliveries", body, headers)
    assert_refused_without_change(primed, status, 413, answer)
    assert answer["detail"] == f"the body has {MAX_BODY + 1} bytes; at most {MAX_BODY} are accepted"


def test_a_body_cut_short_is_refused_400(primed: Receiver) -> None:
    with socket.create_connection(("127.0.0.1", primed.port), timeout=5) as sock:
        sock.sendall(b'POST /deliveries HTTP/1.0\r\nContent-Length: 50\r\n\r\n{"id":')
        sock.shutdown(socket.SHUT_WR)
        reply = b"".join(iter(lambda: sock.recv(4096), b""))
    status, answer = parse_reply(reply)
    assert_refused_without_change(primed, status, 400, answer)
    assert answer["detail"] == "the body ended after 6 of 50 bytes"


def parse_reply(reply: bytes) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of a raw HTTP/1.0 response read off a socket."""
    head, _, body = reply.partition(b"\r\n\r\n")
    version, status = head.split(b" ", 2)[:2]
    assert version == b"HTTP/1.0", f"not an HTTP/1.0 response: {reply!r}"
    return int(status), json.loads(body)


def test_a_malformed_id_does_not_trigger_after_commit(scratch: Path, no_new_threads: None) -> None:
    calls: list[tuple[str, int]] = []
    with Receiver(scratch / "inbox.db", after_commit=lambda i, q: calls.append((i, q))) as running:
        assert post(running.port, {"id": "a b", "qty": 1})[0] == 400
        assert post(running.port, {"id": "ok", "qty": 1})[0] == 200
    assert calls == [("ok", 1)]


# --- the send client ----------------------------------------------------------------------------


def test_send_maps_ack_conflict_and_bad_request(receiver: Receiver) -> None:
    send = make_send(receiver.url, retryable=Retry, permanent=Refused)
    assert send({"id": "a", "qty": 1}) is True
    assert send({"id": "a", "qty": 1}) is True
    with pytest.raises(Refused, match=r"got HTTP 409: .*qty=1; qty=2 was refused"):
        send({"id": "a", "qty": 2})
    with pytest.raises(Refused, match="got HTTP 400"):
        send({"id": "a", "qty": 0})


def test_send_defaults_to_the_worker_exceptions(receiver: Receiver) -> None:
    send = make_send(receiver.url)
    with pytest.raises(worker.Permanent):
        send({"id": "a", "qty": 0})


def test_send_treats_a_locked_inbox_503_as_retryable(scratch: Path, no_new_threads: None) -> None:
    with Receiver(scratch / "inbox.db", busy_timeout=0.05).start() as running:
        send = make_send(running.url, retryable=Retry, permanent=Refused)
        holder = sqlite3.connect(running.db_path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(Retry, match="got HTTP 503"):
                send({"id": "a", "qty": 1})
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        assert send({"id": "a", "qty": 1}) is True
        assert running.stats()["effect_total"] == 1


class _FixedStatus(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(int(self.path.strip("/")))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def fixed_status_port(no_new_threads: None) -> Iterator[int]:
    """A real HTTP server answering ``POST /<status>`` with that status."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _FixedStatus)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,))
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.mark.parametrize(
    ("status", "raised"),
    [
        *[(status, Retry) for status in (500, 502, 503)],
        *[(status, Refused) for status in (400, 409, 422, 201, 204, 302)],
    ],
)
def test_send_maps_5xx_to_retryable_and_any_other_non_200_to_permanent(
    fixed_status_port: int, status: int, raised: type[Exception]
) -> None:
    send = make_send(
        f"http://127.0.0.1:{fixed_status_port}/{status}", retryable=Retry, permanent=Refused
    )
    with pytest.raises(raised, match=f"got HTTP {status}"):
        send({"id": "a", "qty": 1})


def test_send_connection_refused_is_retryable(no_new_threads: None) -> None:
    with socket.socket() as bound:  # bound but not listening: connecting is refused
        bound.bind(("127.0.0.1", 0))
        send = make_send(
            f"http://127.0.0.1:{bound.getsockname()[1]}/deliveries",
            retryable=Retry,
            permanent=Refused,
        )
        with pytest.raises(Retry, match="ConnectionRefusedError"):
            send({"id": "a", "qty": 1})


def test_send_timeout_is_retryable() -> None:
    with socket.socket() as silent:  # accepts connections in the kernel, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/deliveries"
        send = make_send(url, timeout=0.2, retryable=Retry, permanent=Refused)
        with pytest.raises(Retry, match="timed out"):
            send({"id": "a", "qty": 1})


def test_send_closes_its_connection_every_call(receiver: Receiver) -> None:
    send = make_send(receiver.url, retryable=Retry, permanent=Refused)
    for qty in (1, 1, 2):
        with contextlib.suppress(Refused):
            send({"id": "a", "qty": qty})
    connections = psutil.Process().net_connections("tcp")
    mine = [c for c in connections if c.raddr and c.raddr[1] == receiver.port]
    assert mine == [], f"client connections left open: {mine}"


def test_make_send_rejects_a_non_http_url() -> None:
    with pytest.raises(ValueError, match="make_send needs an http:// URL but got url='ftp://x/'"):
        make_send("ftp://x/", retryable=Retry, permanent=Refused)


# --- lifecycle ----------------------------------------------------------------------------------


def test_stop_releases_the_port_and_every_thread(scratch: Path, no_new_threads: None) -> None:
    running = Receiver(scratch / "inbox.db").start()
    port, url = running.port, running.url
    assert url == f"http://127.0.0.1:{port}/deliveries"
    post(port, {"id": "a", "qty": 1})
    running.stop()
    running.stop()  # idempotent
    with socket.socket() as probe:  # a listening socket on the port would make this bind fail
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
    with pytest.raises(Retry, match="ConnectionRefusedError"):
        make_send(url, retryable=Retry, permanent=Refused)({"id": "a", "qty": 1})
    with pytest.raises(RuntimeError, match="call start\\(\\) first"):
        running.port  # noqa: B018
    assert not [f for f in psutil.Process().open_files() if f.path.startswith(str(scratch))]


def test_start_twice_and_memory_databases_are_refused(scratch: Path, no_new_threads: None) -> None:
    with pytest.raises(ValueError, match="needs a database file path but got ':memory:'"):
        Receiver(":memory:")
    with (
        Receiver(scratch / "inbox.db").start() as running,
        pytest.raises(RuntimeError, match="already started"),
    ):
        running.start()


# --- python -m queue_impl.receiver --------------------------------------------------------------


def read_line(proc: subprocess.Popen[str], seconds: float, waiting_for: str) -> str:
    """One line of the child's stdout, or a failure naming what never came."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    assert ready, f"no {waiting_for} on stdout within {seconds} s"
    return proc.stdout.readline().strip()


@pytest.fixture
def spawn(no_leaked_children: None) -> Iterator[list[subprocess.Popen[str]]]:
    """Children started by the test; any still running at the end is killed and reaped."""
    children: list[subprocess.Popen[str]] = []
    yield children
    for child in children:
        if child.poll() is None:
            child.kill()
        child.communicate(timeout=10)


@pytest.mark.parametrize("stop_with", [signal.SIGTERM, signal.SIGINT])
def test_the_command_prints_its_url_and_stops_cleanly(
    scratch: Path, spawn: list[subprocess.Popen[str]], stop_with: signal.Signals
) -> None:
    command = [
        sys.executable,
        "-m",
        "leasecheck.queue_impl.receiver",
        "--db",
        str(scratch / "in.db"),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    spawn.append(proc)
    url = read_line(proc, 30, "receiver URL")
    assert url.startswith("http://127.0.0.1:") and url.endswith("/deliveries")
    assert make_send(url, retryable=Retry, permanent=Refused)({"id": "a", "qty": 2}) is True
    proc.send_signal(stop_with)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert f"stopping on {stop_with.name}" in err
    survived = Receiver(scratch / "in.db").stats()  # read from the file, no server started
    assert survived == {"requests": 1, "inbox": 1, "effect_total": 2}


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "leasecheck.queue_impl.receiver", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)


def test_the_command_without_db_is_a_usage_error(no_leaked_children: None) -> None:
    done = run_command()
    assert done.returncode == 2
    assert "the following arguments are required: --db" in done.stderr


def test_the_command_names_a_missing_directory(scratch: Path, no_leaked_children: None) -> None:
    done = run_command("--db", str(scratch / "nowhere" / "in.db"))
    assert done.returncode == 2
    assert "nowhere/in.db': its directory does not exist; create it first" in done.stderr


def test_the_command_names_a_busy_port(scratch: Path, no_leaked_children: None) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        done = run_command("--db", str(scratch / "in.db"), "--port", port)
    assert done.returncode == 2
    assert f"cannot serve '{scratch / 'in.db'}' on port {port}: [Errno 98]" in done.stderr
