"""The HTTP receiving server of lease-worker.md, with its deduplicating inbox.

A dispatcher's ``send`` POSTs ``{"id", "qty"}`` to ``/deliveries``. The receiver
records the delivery in its own SQLite inbox and applies its effect (adds qty to
the id's ledger total) in ONE ``BEGIN IMMEDIATE`` transaction, once per id:

- new id → 200 ``applied``; the same id and qty again → 200 ``duplicate`` (no second
  effect); the same id with another qty → 409 ``conflict`` (nothing changes);
- a malformed request → 4xx and the inbox and ledger do not change: wrong path
  (404), wrong method (405), missing Content-Length (411), body over
  ``MAX_BODY`` bytes (413), a bad Content-Length, a body that is not UTF-8 JSON, not
  an object, has other keys than id and qty (or a repeated key), an id that is not
  an identifier, or a qty that is not an exact int 1..1000 (400);
- the database failing (e.g. locked past the busy timeout) → 503, which ``send``
  treats as retryable.

Every request that reaches a handler, except ``GET /stats``, is logged in the
``requests`` table in its own transaction, so duplicate arrivals are countable.
``after_commit(id, qty)`` runs after an ``applied`` effect commits and before the
response is written (the crash harness SIGKILLs the dispatcher there); if it raises,
no response is written and the client sees a dropped connection, as if the receiver
died right after committing.

Run it alone with ``python -m queue_impl.receiver --db PATH [--port N]``. Its client,
``make_send``, lives in ``queue_impl.send_client`` and is re-exported here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import socket
import sqlite3
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from leasecheck.queue_impl.send_client import make_send

__all__ = ["DELIVERIES_PATH", "MAX_BODY", "STATS_PATH", "Receiver", "main", "make_send"]

DELIVERIES_PATH = "/deliveries"
STATS_PATH = "/stats"
MAX_BODY = 4096
HOST = "127.0.0.1"
DB_TIMEOUT_S = 5.0
SOCKET_TIMEOUT_S = 5.0
JOIN_TIMEOUT_S = 10.0
LINGER_S = 1.0  # how long a closing connection waits for the client to stop sending
LINGER_CHUNKS = 16  # at most 64 KiB read while lingering
POLL_INTERVAL_S = 0.02  # how soon serve_forever notices stop(); the stdlib's 0.5 s slows tests
_IDENTIFIER = re.compile(r"[A-Za-z0-9_-]{1,64}")

SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox (id TEXT PRIMARY KEY, qty INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS ledger (id TEXT PRIMARY KEY, total INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS requests (seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT, qty INTEGER, outcome TEXT);
"""

AfterCommit = Callable[[str, int], None]


@dataclass(frozen=True)
class _Reply:
    """What a request gets: status, outcome word (also logged) and a sentence for humans."""

    status: int
    outcome: str
    detail: str
    id: str | None = None
    qty: int | None = None


class _Rejected(Exception):
    """A malformed request; carries the reply to send."""

    def __init__(self, reply: _Reply) -> None:
        super().__init__(reply.detail)
        self.reply = reply


def _bad(
    detail: str, status: int = HTTPStatus.BAD_REQUEST, outcome: str = "malformed"
) -> _Rejected:
    return _Rejected(_Reply(status, outcome, detail))


def _connect(db_path: Path, busy_timeout: float = DB_TIMEOUT_S) -> sqlite3.Connection:
    return sqlite3.connect(db_path, isolation_level=None, timeout=busy_timeout)


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise _bad(f"the JSON object repeats the key(s) {repeated}; send each key once")
    return dict(pairs)


def parse_delivery(body: bytes) -> tuple[str, int]:
    """The (id, qty) of a delivery body, or ``_Rejected`` saying what is wrong with it."""
    try:
        event = json.loads(body.decode("utf-8"), object_pairs_hook=_no_repeated_keys)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise _bad(
            f"the body is not UTF-8 JSON ({error}); send an object with id and qty"
        ) from error
    if not isinstance(event, dict) or set(event) != {"id", "qty"}:
        raise _bad(f"the body must be an object with exactly the keys id and qty, got {event!r}")
    event_id, qty = event["id"], event["qty"]
    if not isinstance(event_id, str) or not _IDENTIFIER.fullmatch(event_id):
        raise _bad(f"id must be 1-64 ASCII letters, digits, _ or - but got id={event_id!r}")
    if type(qty) is not int or not 1 <= qty <= 1000:
        raise _bad(f"qty must be an int from 1 to 1000 (not bool) but got qty={qty!r}")
    return event_id, qty


def apply_delivery(con: sqlite3.Connection, event_id: str, qty: int) -> _Reply:
    """Insert the inbox row and apply the effect in one transaction, once per id."""
    con.execute("BEGIN IMMEDIATE")
    try:
        row = con.execute("SELECT qty FROM inbox WHERE id = ?", (event_id,)).fetchone()
        if row is None:
            con.execute("INSERT INTO inbox (id, qty) VALUES (?, ?)", (event_id, qty))
            con.execute(
                "INSERT INTO ledger (id, total) VALUES (?, ?)"
                " ON CONFLICT (id) DO UPDATE SET total = total + excluded.total",
                (event_id, qty),
            )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    if row is None:
        return _Reply(HTTPStatus.OK, "applied", f"applied {qty} for {event_id!r}", event_id, qty)
    if row[0] == qty:
        return _Reply(
            HTTPStatus.OK, "duplicate", f"{event_id!r} was already applied", event_id, qty
        )
    return _Reply(
        HTTPStatus.CONFLICT,
        "conflict",
        f"{event_id!r} was already delivered with qty={row[0]}; qty={qty} was refused",
        event_id,
        qty,
    )


def read_stats(con: sqlite3.Connection) -> dict[str, int]:
    """Requests logged, inbox rows and the summed effect, read in one snapshot."""
    con.execute("BEGIN")
    try:
        (requests,) = con.execute("SELECT COUNT(*) FROM requests").fetchone()
        (inbox,) = con.execute("SELECT COUNT(*) FROM inbox").fetchone()
        (total,) = con.execute("SELECT COALESCE(SUM(total), 0) FROM ledger").fetchone()
    finally:
        con.execute("COMMIT")
    return {"requests": requests, "inbox": inbox, "effect_total": total}


class _Handler(BaseHTTPRequestHandler):
    """One HTTP request; HTTP/1.0, so every connection closes after its response."""

    server: _Server
    timeout = SOCKET_TIMEOUT_S

    def do_POST(self) -> None:
        if self.path != DELIVERIES_PATH:
            self._finish(_Reply(HTTPStatus.NOT_FOUND, "not-found", f"POST to {DELIVERIES_PATH}"))
            return
        try:
            event_id, qty = parse_delivery(self._read_body())
        except _Rejected as rejected:
            self._finish(rejected.reply)
            return
        try:
            reply = self.server.receiver.deliver(event_id, qty)
        except sqlite3.Error as error:
            self._finish(_Reply(HTTPStatus.SERVICE_UNAVAILABLE, "db-error", str(error)))
            return
        self._log(reply)
        if reply.outcome == "applied" and self.server.receiver.after_commit is not None:
            self.server.receiver.after_commit(event_id, qty)
        self._respond(reply)

    def do_GET(self) -> None:
        if self.path == STATS_PATH:
            self._respond_json(HTTPStatus.OK, self.server.receiver.stats())
        else:
            self._wrong_method()

    def do_PUT(self) -> None:
        self._wrong_method()

    def do_DELETE(self) -> None:
        self._wrong_method()

    def do_PATCH(self) -> None:
        self._wrong_method()

    def do_HEAD(self) -> None:
        self._wrong_method()

    def _wrong_method(self) -> None:
        status = HTTPStatus.METHOD_NOT_ALLOWED if self.path == DELIVERIES_PATH else 404
        detail = f"{self.command} {self.path} is not served; POST to {DELIVERIES_PATH}"
        self._finish(_Reply(status, "bad-method" if status == 405 else "not-found", detail))

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding") is not None:
            raise _bad("Transfer-Encoding is not supported; send a Content-Length body")
        length = self.headers.get("Content-Length")
        if length is None:
            raise _bad("Content-Length is missing", HTTPStatus.LENGTH_REQUIRED)
        if not length.isascii() or not length.isdigit():
            raise _bad(f"Content-Length must be a decimal number but got {length!r}")
        size = int(length) if len(length) <= 12 else MAX_BODY + 1  # int() of 5000 digits fails
        if size > MAX_BODY:
            raise _bad(
                f"the body has {length} bytes; at most {MAX_BODY} are accepted",
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                "too-large",
            )
        try:
            body = self.rfile.read(size)
        except TimeoutError as error:
            raise _bad("the body did not arrive in time", HTTPStatus.REQUEST_TIMEOUT) from error
        if len(body) != size:
            raise _bad(f"the body ended after {len(body)} of {size} bytes")
        return body

    def _finish(self, reply: _Reply) -> None:
        self._log(reply)
        self._respond(reply)

    def _log(self, reply: _Reply) -> None:
        """Log the request; a database that cannot log must not stop the reply (e.g. a 503)."""
        try:
            self.server.receiver.log_request(reply.id, reply.qty, reply.outcome)
        except sqlite3.Error as error:
            self.log_error("request not logged (%s): %s", reply.outcome, error)

    def _respond(self, reply: _Reply) -> None:
        payload = {"outcome": reply.outcome, "detail": reply.detail}
        self._respond_json(reply.status, payload)

    def _respond_json(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.receiver.verbose:
            super().log_message(format, *args)


class _Server(ThreadingHTTPServer):
    """Serves each request in a daemon thread that ``Receiver.stop`` joins with a deadline."""

    daemon_threads = True

    def __init__(self, port: int, receiver: Receiver) -> None:
        self.receiver = receiver
        self.handlers: set[threading.Thread] = set()
        self.handlers_lock = threading.Lock()
        super().__init__((HOST, port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread, args=(request, client_address), daemon=True
        )
        with self.handlers_lock:
            self.handlers = {t for t in self.handlers if t.is_alive()} | {thread}
        thread.start()

    def shutdown_request(self, request: Any) -> None:
        """Lingering close: read what the client still sends (a body we refused unread)
        before closing, so that it reads our reply instead of a connection reset."""
        with contextlib.suppress(OSError):
            request.shutdown(socket.SHUT_WR)
            request.settimeout(LINGER_S)
            for _ in range(LINGER_CHUNKS):
                if not request.recv(4096):
                    break
        self.close_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (e.g. a SIGKILLed dispatcher) is expected, not an error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Receiver:
    """The receiving server: ``with Receiver(db).start() as r: ... r.url ... r.stats()``."""

    def __init__(
        self,
        db_path: str | Path,
        *,
        port: int = 0,
        after_commit: AfterCommit | None = None,
        busy_timeout: float = DB_TIMEOUT_S,
        verbose: bool = False,
    ) -> None:
        if str(db_path) == ":memory:" or str(db_path) == "":
            raise ValueError(f"Receiver needs a database file path but got {str(db_path)!r}")
        self.db_path = Path(db_path)
        self.after_commit = after_commit
        self.busy_timeout = busy_timeout
        self.verbose = verbose
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Receiver:
        """Create the tables, bind 127.0.0.1 and serve in a daemon thread."""
        if self._server is not None:
            raise RuntimeError(f"receiver for {str(self.db_path)!r} is already started")
        con = _connect(self.db_path, self.busy_timeout)
        try:
            con.executescript(SCHEMA)
        finally:
            con.close()
        self._server = _Server(self._port, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            args=(POLL_INTERVAL_S,),
            name=f"receiver:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the receiver is not running; call start() first")
        port: int = self._server.server_address[1]
        return port

    @property
    def url(self) -> str:
        """Where ``send`` delivers, e.g. ``http://127.0.0.1:40123/deliveries``."""
        return f"http://{HOST}:{self.port}{DELIVERIES_PATH}"

    def stop(self) -> None:
        """Stop serving, join every thread (bounded), close the socket; idempotent."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._server = self._thread = None
        server.shutdown()
        server.server_close()
        thread.join(JOIN_TIMEOUT_S)
        with server.handlers_lock:
            handlers = list(server.handlers)
        for handler in handlers:
            handler.join(JOIN_TIMEOUT_S)
        stuck = [t for t in [thread, *handlers] if t.is_alive()]
        if stuck:
            raise RuntimeError(
                f"receiver threads {[t.name for t in stuck]} still run {JOIN_TIMEOUT_S} s "
                f"after stop(); is after_commit blocking forever?"
            )

    def __enter__(self) -> Receiver:
        return self if self._server is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def deliver(self, event_id: str, qty: int) -> _Reply:
        """Apply one valid delivery (the handler's transaction), on a fresh connection."""
        con = _connect(self.db_path, self.busy_timeout)
        try:
            return apply_delivery(con, event_id, qty)
        finally:
            con.close()

    def log_request(self, event_id: str | None, qty: int | None, outcome: str) -> None:
        """Append one row to ``requests`` in its own transaction."""
        con = _connect(self.db_path, self.busy_timeout)
        try:
            con.execute(
                "INSERT INTO requests (id, qty, outcome) VALUES (?, ?, ?)",
                (event_id, qty, outcome),
            )
        finally:
            con.close()

    def stats(self) -> dict[str, int]:
        """``{"requests": n, "inbox": n, "effect_total": n}`` read from the database file."""
        con = _connect(self.db_path, self.busy_timeout)
        try:
            return read_stats(con)
        finally:
            con.close()

    def request_log(self) -> list[tuple[str | None, int | None, str]]:
        """Every logged request as (id, qty, outcome), in arrival order."""
        con = _connect(self.db_path, self.busy_timeout)
        try:
            return con.execute("SELECT id, qty, outcome FROM requests ORDER BY seq").fetchall()
        finally:
            con.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Serve in the foreground until SIGINT or SIGTERM; print the URL first."""
    parser = argparse.ArgumentParser(
        prog="python -m queue_impl.receiver",
        description="Serve the deduplicating HTTP receiver on 127.0.0.1 until SIGINT/SIGTERM.",
    )
    parser.add_argument("--db", required=True, type=Path, help="SQLite inbox file to use")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: ephemeral)")
    args = parser.parse_args(argv)
    if not args.db.parent.is_dir():
        parser.error(f"--db {str(args.db)!r}: its directory does not exist; create it first")
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    # Blocked before any thread starts: threads inherit the mask, so only sigwait sees them.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        try:
            receiver = Receiver(args.db, port=args.port, verbose=True).start()
        except (OSError, sqlite3.Error) as error:
            parser.error(f"cannot serve {str(args.db)!r} on port {args.port}: {error}")
        with receiver:
            print(receiver.url, flush=True)
            received = signal.sigwait(stop_signals)
            print(f"stopping on {signal.Signals(received).name}", file=sys.stderr, flush=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
