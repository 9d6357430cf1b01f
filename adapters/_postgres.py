"""What the PostgreSQL adapters share: one database per store, one async connection each.

A store is a fresh database on the server (``servers.create_database``), so stores on
one server never see each other's jobs. Each adapter talks to it through one psycopg
``AsyncConnection`` in autocommit mode (what both libraries require of a connection
they are handed), driven on the adapter's private event loop.
"""

from __future__ import annotations

import urllib.parse
import uuid
from typing import Any

from leasecheck.adapters import servers
from leasecheck.adapters._loop import PrivateLoop
from leasecheck.adapters.protocol import AdapterError

__all__ = ["PG_EXTRA", "PgSession", "drop_database", "new_database"]

PG_EXTRA = "pip install 'leasecheck[postgres]'"


def new_database(server: str | None, library: str) -> str:
    """A fresh, empty database on ``server`` for one store of ``library``; its URL."""
    if not server:
        raise AdapterError(
            f"{library} keeps its queue in PostgreSQL: give create() the server URL "
            "(adapters.servers.postgres() starts a throw-away one)"
        )
    safe = "".join(c if c.isalnum() else "_" for c in library)
    return servers.create_database(server, f"lc_{safe}_{uuid.uuid4().hex[:12]}")


def drop_database(url: str) -> None:
    """Drop the database ``url`` names (made by ``new_database``), closing any connection
    a killed or frozen worker left on it (``WITH (FORCE)``, PostgreSQL 13 and later)."""
    import psycopg

    parts = urllib.parse.urlsplit(url)
    name = parts.path.lstrip("/")
    if not name.startswith("lc_") or not name.replace("_", "").isalnum():
        raise AdapterError(f"{url!r} is not a store made by new_database; not dropping it")
    server = urllib.parse.urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(server, autocommit=True, connect_timeout=30) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class PgSession:
    """One autocommit psycopg connection to ``url``, on a private loop."""

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError as missing:
            raise AdapterError(
                f"psycopg is not installed; install it with: {PG_EXTRA}"
            ) from missing
        self.loop = PrivateLoop()
        try:
            self.connection: Any = self.loop.run(
                psycopg.AsyncConnection.connect(url, autocommit=True), f"connecting to {url}"
            )
        except BaseException:
            self.loop.close()
            raise

    def rows(self, sql: str, *args: object) -> list[tuple[Any, ...]]:
        """Run ``sql`` (``%s`` placeholders) and return its rows."""

        async def fetch() -> list[tuple[Any, ...]]:
            cursor = await self.connection.execute(sql, args or None)
            return list(await cursor.fetchall()) if cursor.description else []

        return self.loop.run(fetch(), sql.split()[0])

    def close(self) -> None:
        try:
            if not self.connection.closed:
                self.loop.run(self.connection.close(), "closing the connection")
        finally:
            self.loop.close()
