"""A TCP proxy between a library and its server that holds every command until told to go.

``queue.interleavings`` starts one in each process it schedules (a thread of that
process, listening on a free 127.0.0.1 port; the process's location points the library
at it). For every command the library sends, the proxy calls ``hold(text)`` before it
forwards the command's bytes, and ``hold`` blocks until the scheduler releases it: so
each command is a scheduling point the engine knows about positively (the process said
"I sent C and wait"), never by silence. Replies flow back unheld.

A command is the unit the server acts on:

- Redis (RESP): one command (an array of bulk strings); a ``MULTI`` ... ``EXEC`` block is
  one command, since the server queues what is between and acts at ``EXEC``. Connection
  set-up that touches no key (``HELLO``, ``AUTH``, ``CLIENT``, ``SELECT``, ``PING``...) is
  forwarded without holding: it commutes with every other process's step.
- PostgreSQL (frontend protocol 3): a simple ``Query`` ('Q'), or an extended-protocol
  group (Parse/Bind/Describe/Execute/Close up to ``Sync`` or ``Flush``). The start-up
  phase (SSL and GSS requests, the startup message, password messages) and ``Terminate``
  pass unheld.

Every wait is bounded by the socket timeouts; a connection the library closes ends its
two pump threads, and ``close`` ends the listener and every connection.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from typing import Literal

__all__ = ["WIRE_DIALECTS", "Dialect", "WireProxy", "dialect_of"]

Dialect = Literal["redis", "postgres"]
WIRE_DIALECTS: tuple[Dialect, ...] = ("postgres", "redis")
"""The servers whose wire leasecheck speaks: the one list (``queue.interleavings`` wires a
library on these, and schedules one on any other server, beanstalkd or NATS, at its verbs
only; ``_queue_scenarios.SERVER_BOUNDS`` has a plan for each)."""

_REDIS_UNHELD = frozenset(
    {"HELLO", "AUTH", "CLIENT", "SELECT", "PING", "ECHO", "READONLY", "SCRIPT", "QUIT"}
)
"""Commands that read or change no key (``SCRIPT LOAD`` only caches a script's text)."""
_PG_GROUP = frozenset(b"PBDECH")
_PG_SPECIAL = (80877103, 80877104)  # SSLRequest, GSSENCRequest: one more untyped message
_SHOWN = 60
_LONGEST = 400
"""A held command's text, as reported, is cut here (a MULTI block can be long)."""
IO_TIMEOUT_S = 60.0


def dialect_of(server: str | None) -> Dialect | None:
    """The wire dialect of a library's server (``Capabilities.server``), or None if
    leasecheck speaks none for it (no server, beanstalkd, NATS)."""
    for dialect in WIRE_DIALECTS:
        if server == dialect:
            return dialect
    return None


class _Closed(Exception):
    """The library closed its side."""


class _Reader:
    """Exact reads from a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, bytearray()

    def exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise _Closed
            self.buffer += chunk
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def line(self) -> bytes:
        while (end := self.buffer.find(b"\r\n")) < 0:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise _Closed
            self.buffer += chunk
        data = bytes(self.buffer[: end + 2])
        del self.buffer[: end + 2]
        return data


def _shown(arg: bytes) -> str:
    """An argument as a reader sees it: text (cut at ``_SHOWN``), or its size if binary."""
    try:
        text = arg.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(arg)} bytes>"
    if not text.isprintable():
        return f"<{len(arg)} bytes>"
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _redis_command(reader: _Reader) -> tuple[bytes, list[bytes]]:
    """One RESP command: its raw bytes and its words."""
    head = reader.line()
    if not head.startswith(b"*"):  # an inline command
        return head, head.split()
    raw, words = [head], []
    for _ in range(int(head[1:-2])):
        size_line = reader.line()
        data = reader.exactly(int(size_line[1:-2]) + 2)
        raw += [size_line, data]
        words.append(data[:-2])
    return b"".join(raw), words


def _redis_text(words: list[bytes]) -> str:
    return " ".join([words[0].decode(errors="replace").upper(), *map(_shown, words[1:])])


def _pg_sql(kind: int, body: bytes) -> str | None:
    """The SQL text of a Query or Parse message."""
    if kind == ord("Q"):
        return body.rstrip(b"\0").decode(errors="replace")
    if kind == ord("P"):
        _name, _, rest = body.partition(b"\0")
        return rest.partition(b"\0")[0].decode(errors="replace")
    return None


class WireProxy:
    """Listens on 127.0.0.1 (``port``) and relays to ``upstream``, holding each command."""

    def __init__(
        self, dialect: Dialect, upstream: tuple[str, int], hold: Callable[[str], None],
        rename: Callable[[str], str] = str,
    ) -> None:  # fmt: skip
        self.dialect, self.upstream, self._hold, self.rename = dialect, upstream, hold, rename
        self.holding = False
        """Commands pass unheld until the scheduler starts (the process's own set-up)."""
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._closed = False
        self._threads = [threading.Thread(target=self._accept, daemon=True, name="wire-accept")]
        self._threads[0].start()

    def hold(self, text: str) -> None:
        """One command at a time reports and waits (a library's background task too)."""
        if self.holding:
            shown = self.rename(" ".join(text.split()))
            if len(shown) > _LONGEST:
                shown = shown[: _LONGEST - 3] + "..."
            with self._lock:
                self._hold(shown)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream, timeout=IO_TIMEOUT_S)
            client.settimeout(IO_TIMEOUT_S)
            self._sockets += [client, server]
            for target, args in ((self._commands, (client, server)), (_pump, (server, client))):
                thread = threading.Thread(target=target, args=args, daemon=True, name="wire")
                thread.start()
                self._threads.append(thread)

    def _commands(self, client: socket.socket, server: socket.socket) -> None:
        reader = _Reader(client)
        try:
            if self.dialect == "redis":
                self._redis(reader, server)
            else:
                self._postgres(reader, server)
        except (_Closed, OSError):
            pass
        finally:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_WR)

    def _redis(self, reader: _Reader, server: socket.socket) -> None:
        block: list[bytes] = []
        texts: list[str] = []
        while True:
            raw, words = _redis_command(reader)
            name = words[0].upper() if words else b""
            if block or name == b"MULTI":
                block.append(raw)
                texts.append(_redis_text(words))
                if name in (b"EXEC", b"DISCARD"):
                    self.hold("; ".join(texts))
                    server.sendall(b"".join(block))
                    block, texts = [], []
                continue
            if words and name.decode(errors="replace") not in _REDIS_UNHELD:
                self.hold(_redis_text(words))
            server.sendall(raw)

    def _postgres(self, reader: _Reader, server: socket.socket) -> None:
        while True:  # the start-up phase: untyped messages
            (size,) = struct.unpack(">I", head := reader.exactly(4))
            body = reader.exactly(size - 4)
            server.sendall(head + body)
            if struct.unpack(">I", body[:4])[0] not in _PG_SPECIAL:
                break
        group: list[bytes] = []
        sql: list[str] = []
        while True:
            kind_byte = reader.exactly(1)
            (size,) = struct.unpack(">I", head := reader.exactly(4))
            message = kind_byte + head + (body := reader.exactly(size - 4))
            kind = kind_byte[0]
            if (text := _pg_sql(kind, body)) is not None:
                sql.append(text)
            if kind == ord("Q"):
                self.hold(text or "")
                server.sendall(message)
                sql = []
            elif kind in _PG_GROUP or kind == ord("S"):
                group.append(message)
                if kind in (ord("S"), ord("H")):
                    self.hold("; ".join(sql) or "(a prepared statement)")
                    server.sendall(b"".join(group))
                    group, sql = [], []
            else:  # password, Terminate, copy data: not commands of the queue
                server.sendall(message)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()


def _pump(source: socket.socket, target: socket.socket) -> None:
    """Copy the server's replies to the library as they come."""
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)
