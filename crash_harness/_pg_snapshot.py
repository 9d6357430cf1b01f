"""A seeded PostgreSQL store put back as it was, in place, before every schedule.

``queue.interleavings`` runs each schedule from the same seeded store. A copy of a
database (``CREATE DATABASE ... TEMPLATE``) costs a checkpoint and a directory copy,
about a second on a loaded machine; this copies the rows instead. ``take`` copies every
table of the ``public`` schema into the schema ``leasecheck_seed`` of the same database
and notes each sequence's position; ``restore`` empties the tables and copies the rows
back (triggers off: ``session_replication_role = replica``, so the library's triggers
neither fire nor check foreign keys twice; identity columns keep their values) and puts
every sequence back. A row's times are copied as they are, so a lease that had run out
by the server's clock is still run out, and a live one still live.

Every wait is bounded: a lock a lingering backend of the last schedule holds is waited
for at most ``LOCK_TIMEOUT``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PgSnapshot"]

SEED_SCHEMA = "leasecheck_seed"
LOCK_TIMEOUT = "10s"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class PgSnapshot:
    """The rows and sequence positions of one database's ``public`` schema."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.connection: Any = psycopg.connect(url, autocommit=True, connect_timeout=30)
        self.connection.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
        self.tables: list[str] = []
        self.sequences: list[tuple[str, int, bool]] = []

    def take(self) -> None:
        run = self.connection.execute
        self.tables = [row[0] for row in run(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
        ).fetchall()]  # fmt: skip
        run(f"CREATE SCHEMA {SEED_SCHEMA}")
        for table in self.tables:
            run(f"CREATE TABLE {SEED_SCHEMA}.{_ident(table)} AS TABLE public.{_ident(table)}")
        self.sequences = [
            (name, int(last if last is not None else start), last is not None)
            for name, last, start in run(
                "SELECT sequencename, last_value, start_value FROM pg_sequences "
                "WHERE schemaname = 'public'"
            ).fetchall()
        ]

    def restore(self) -> None:
        if not self.tables:
            return
        with self.connection.transaction():
            run = self.connection.execute
            run("SET LOCAL session_replication_role = replica")
            listed = ", ".join(f"public.{_ident(table)}" for table in self.tables)
            run(f"TRUNCATE {listed}")
            for table in self.tables:
                run(f"INSERT INTO public.{_ident(table)} OVERRIDING SYSTEM VALUE "
                    f"SELECT * FROM {SEED_SCHEMA}.{_ident(table)}")  # fmt: skip
            for name, value, called in self.sequences:
                run("SELECT setval(%s, %s, %s)", (f"public.{_ident(name)}", value, called))

    def close(self) -> None:
        self.connection.close()
