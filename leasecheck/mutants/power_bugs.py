"""Planted bugs that only a power cut shows: a SIGKILL never loses a committed transaction.

Each changes the pragmas of ``open_queue`` away from lease-worker.md's
``journal_mode=DELETE, synchronous=FULL``; ``lease.power-loss`` must catch each one
(even in its default mode, which excuses only the spec's own documented loss).
"""

from __future__ import annotations

from ._catalogue import Mutant

__all__ = ["MUTANTS"]

_SYNC = '        con.execute("PRAGMA synchronous=FULL")\n'
_JOURNAL = '        con.execute("PRAGMA journal_mode=DELETE")\n'


def _worker(name: str, bug_class: str, real_world: str, *edits: tuple[str, str]) -> Mutant:
    return Mutant(name, "worker", bug_class, real_world, "lease.power-loss", tuple(edits))


MUTANTS: tuple[Mutant, ...] = (
    _worker(
        "synchronous-off",
        "open_queue sets synchronous=OFF: SQLite never fsyncs, a power cut loses or tears commits",
        "'PRAGMA synchronous=OFF' pasted from a bulk-load speed tip into a production queue",
        (_SYNC, '        con.execute("PRAGMA synchronous=OFF")\n'),
    ),
    _worker(
        "journal-memory",
        "open_queue sets journal_mode=MEMORY: the rollback journal never reaches the disk",
        "journal_mode=MEMORY chosen for speed; a power cut mid-commit corrupts the file",
        (_JOURNAL, '        con.execute("PRAGMA journal_mode=MEMORY")\n'),
    ),
    _worker(
        "wal-normal",
        "open_queue uses WAL with synchronous=NORMAL: the WAL is not synced at commit",
        "the common 'WAL + synchronous=NORMAL' tuning, which SQLite documents may lose the "
        "last commits on power loss",
        (_JOURNAL, '        con.execute("PRAGMA journal_mode=WAL")\n'),
        (_SYNC, '        con.execute("PRAGMA synchronous=NORMAL")\n'),
    ),
)
