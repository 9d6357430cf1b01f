"""Whether a process waits at the server for another process, as the server says.

A process whose command was released by its wire proxy but that another (paused)
process's open transaction blocks never reaches its next command. The engine must know
that positively, never by silence: it asks the server about the process's own
connections, which are its TCP sockets (``/proc/PID/fd``, ``/proc/PID/net/tcp``; the
proxy's upstream sockets are the process's), matched by the port the server sees.

- PostgreSQL (``PgWaits``): ``pg_stat_activity`` says a backend of one of them waits for
  a lock (``wait_event_type = 'Lock'``, by ``client_port``).
- Redis (``RedisWaits``): no command waits for another client's lock, but a blocking one
  waits for another client's write: ``BLPOP``/``BRPOP``/``BRPOPLPUSH``/``BLMOVE``/
  ``BLMPOP``/``BZPOP*``/``BZMPOP``, ``XREAD``/``XREADGROUP ... BLOCK``, ``WAIT``/
  ``WAITAOF``. ``CLIENT LIST`` says so: the client (by ``addr``) has the ``b`` flag and
  its ``cmd`` is that command. Only a block with no timeout (``0``) counts: one with a
  timeout ends by itself (saq's claim blocks 10 ms on an empty queue), and seeing it
  blocked or not would depend on how fast the engine looks, so the engine waits for it
  like any command (its ``DEADLINE_S`` bounds that), and the schedule stays the same on
  every run.

Both are told which command the engine released (``released``), and asked afterwards
whether the process is still stuck in it (``waiting``, polled; ``still_waiting``, now).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["PgWaits", "RedisWaits", "blocks_forever"]

CHECK_EVERY_S = 0.02


def _socket_ports(pid: int) -> set[int]:
    """The local TCP ports of the sockets process ``pid`` holds open."""
    inodes = set()
    with contextlib.suppress(FileNotFoundError, PermissionError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class PgWaits:
    """One connection to the server that reads which backends wait for a lock."""

    def __init__(self, server: str) -> None:
        import psycopg

        self.connection: Any = psycopg.connect(server, autocommit=True, connect_timeout=30)
        self.last: dict[int, float] = {}

    def released(self, pid: int, text: str) -> None:
        """Process ``pid`` was let go (to run ``text``): a command takes a round trip or
        more, so the server is asked about it from ``CHECK_EVERY_S`` on."""
        self.last[pid] = time.monotonic()

    def waiting(self, pid: int) -> bool:
        """A connection of process ``pid`` waits at the server for a lock (asked at most
        every ``CHECK_EVERY_S`` per process: the caller polls)."""
        now = time.monotonic()
        if now - self.last.get(pid, 0.0) < CHECK_EVERY_S:
            return False
        self.last[pid] = now
        ports = sorted(_socket_ports(pid))
        if not ports:
            return False
        row = self.connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s) "
            "AND wait_event_type = 'Lock'",
            (ports,),
        ).fetchone()
        return bool(row and row[0])

    def still_waiting(self, pid: int) -> bool:
        """The same, asked now."""
        self.last.pop(pid, None)
        return self.waiting(pid)

    def close(self) -> None:
        self.connection.close()


_BLOCKING_LAST = frozenset(
    {"BLPOP", "BRPOP", "BRPOPLPUSH", "BLMOVE", "BZPOPMIN", "BZPOPMAX", "WAIT", "WAITAOF"}
)
"""Blocking commands whose timeout is their last argument (seconds; WAIT's milliseconds)."""
_BLOCKING_FIRST = frozenset({"BLMPOP", "BZMPOP"})
"""...whose timeout is their first."""


def _forever(timeout: str) -> bool:
    try:
        return float(timeout) == 0
    except ValueError:
        return False


def blocks_forever(text: str) -> bool:
    """The Redis command ``text`` (as the wire proxy shows it: the name, then the
    arguments) blocks with no timeout until another client writes. A ``MULTI`` block
    never blocks (the server runs a blocking command in it as non-blocking)."""
    if ";" in text:
        return False
    words = text.split()
    if len(words) < 2:
        return False
    name = words[0].upper()
    if name in _BLOCKING_LAST:
        return _forever(words[-1])
    if name in _BLOCKING_FIRST:
        return _forever(words[1])
    if name in ("XREAD", "XREADGROUP"):
        upper = [word.upper() for word in words]
        at = upper.index("BLOCK") if "BLOCK" in upper else -1
        return 0 <= at < len(words) - 1 and _forever(words[at + 1])
    return False


class RedisWaits:
    """One connection to the server that reads which clients are blocked, and in what."""

    def __init__(self, server: str) -> None:
        import redis

        self.client: Any = redis.Redis.from_url(server, socket_timeout=30)
        self.blocking: dict[int, str] = {}
        """pid -> the command with no timeout it was released to run."""
        self.last: dict[int, float] = {}

    def released(self, pid: int, text: str) -> None:
        """Process ``pid`` was let go to run ``text``: the server is asked about it only
        if ``text`` blocks with no timeout (every other command comes back by itself)."""
        self.blocking.pop(pid, None)
        if blocks_forever(text):
            self.blocking[pid] = text.split()[0].lower()
            self.last[pid] = time.monotonic()

    def waiting(self, pid: int) -> bool:
        """A connection of process ``pid`` is blocked in the command it was released to
        run (asked at most every ``CHECK_EVERY_S`` per process: the caller polls)."""
        if pid not in self.blocking:
            return False
        now = time.monotonic()
        if now - self.last.get(pid, 0.0) < CHECK_EVERY_S:
            return False
        self.last[pid] = now
        ports = _socket_ports(pid)
        if not ports:
            return False
        command = self.blocking[pid]
        return any(
            int(str(client.get("addr", ":0")).rsplit(":", 1)[1]) in ports
            and "b" in str(client.get("flags", ""))
            and str(client.get("cmd", "")).lower() == command
            for client in self.client.client_list()
        )

    def still_waiting(self, pid: int) -> bool:
        """The same, asked now."""
        self.last.pop(pid, None)
        return self.waiting(pid)

    def close(self) -> None:
        self.client.close()
