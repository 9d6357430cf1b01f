"""What the three PyPI-library adapters share: the install check and the job envelope.

Each library stores an opaque payload; leasecheck needs its own job key back from a
claim and from ``observe()``. So every adapter stores the same JSON envelope,
``{"job": <key>, "payload": <text>}``, and reads the key back with ``job_of``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from leasecheck.adapters.protocol import AdapterError, QueueClock

__all__ = [
    "BROKERS_EXTRA",
    "INSTALL",
    "TimePatch",
    "envelope",
    "installed_version",
    "job_of",
    "read_rows",
]

INSTALL = "pip install 'leasecheck[real]'"
"""The command that installs every first-wave library (the ``real`` extra)."""
BROKERS_EXTRA = "pip install 'leasecheck[brokers]'"
"""The command that installs the broker clients (kombu, Dramatiq, nats-py, greenstalk)."""


def installed_version(distribution: str, module: str, install: str = INSTALL) -> str:
    """The installed version of ``distribution``, or ``AdapterError`` naming ``install``.

    ``module`` is the import name (``persistqueue`` for the ``persist-queue`` distribution);
    both must be present, so a half-removed install is reported the same way. A module
    imported as one without a ``__spec__`` (kombu swaps its module for a lazy one, on which
    ``find_spec`` raises) counts as present.
    """
    try:
        found = importlib.util.find_spec(module) is not None
        version = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        found = False
    except ValueError:  # imported already, as a module without a spec (kombu's lazy one)
        found = module in sys.modules
        version = importlib.metadata.version(distribution)
    if not found:
        raise AdapterError(f"{distribution} is not installed; install it with: {install}")
    return version


def split_at_hash(location: str, part: str) -> tuple[str, str]:
    """``(server URL, part)`` of a server store's location ``URL#PART`` (a Redis key
    prefix, a RabbitMQ queue name): ``AdapterError`` if the ``#part`` is missing."""
    url, _, name = location.partition("#")
    if not name:
        raise AdapterError(
            f"location {location!r} has no '#{part}'; make one with the library's create()"
        )
    return url, name


def envelope(job: str, payload: str) -> str:
    """The text stored in the library for job ``job``."""
    return json.dumps({"job": job, "payload": payload}, sort_keys=True)


def job_of(stored: Any) -> str:
    """leasecheck's job key from what the library gives back (text, bytes or a decoded dict)."""
    if isinstance(stored, bytes):
        stored = stored.decode("utf-8")
    if isinstance(stored, str):
        with contextlib.suppress(json.JSONDecodeError):
            stored = json.loads(stored)
    if not isinstance(stored, dict) or not isinstance(stored.get("job"), str):
        raise AdapterError(
            f"the store holds {stored!r}, which leasecheck did not enqueue "
            f"(expected a {{'job': ..., 'payload': ...}} envelope); use a fresh store"
        )
    job: str = stored["job"]
    return job


def read_rows(database: Path, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` read through a read-only connection, closed before returning."""
    con = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10.0)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


class TimePatch:
    """Points a library's module-level time function at the clock of the open adapters.

    ``build(current)`` makes the replacement once; it must read time through
    ``current()``, the clock of the most recently attached adapter (processes that share
    a store share one clock, so in practice there is one). The original is put back when
    the last adapter detaches, so nothing outlives the adapters that needed it.
    """

    def __init__(
        self, module: str, attribute: str, build: Callable[[Callable[[], QueueClock]], Any]
    ):
        self.module, self.attribute, self.build = module, attribute, build
        self._clocks: list[QueueClock] = []
        self._original: Any = None

    def attach(self, clock: QueueClock) -> None:
        target = sys.modules[self.module]
        if not self._clocks:
            self._original = getattr(target, self.attribute)
            setattr(target, self.attribute, self.build(lambda: self._clocks[-1]))
        self._clocks.append(clock)

    def detach(self, clock: QueueClock) -> None:
        if clock in self._clocks:
            self._clocks.remove(clock)
        if not self._clocks and self._original is not None:
            setattr(sys.modules[self.module], self.attribute, self._original)
            self._original = None
