"""Whether a process waits at the server for a lock another process holds, as the server says.

A process whose command was released by its wire proxy but that another (paused)
process's open transaction blocks never reaches its next command. The engine must know
that positively: it asks PostgreSQL (``pg_stat_activity``) whether a backend of one of
the process's own connections waits for a lock. The process's connections are its TCP
sockets (``/proc/PID/fd``, ``/proc/PID/net/tcp``), matched by the server's
``client_port``.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["PgWaits"]

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

    def released(self, pid: int) -> None:
        """Process ``pid`` was let go: a command takes a round trip or more, so the server
        is asked about it from ``CHECK_EVERY_S`` on."""
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
