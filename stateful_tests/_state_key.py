"""A fingerprint of an object graph, for the thread scheduler's state cache.

Two scheduling states are the same when the shared objects and every thread's
frames serialize to the same bytes. The serializer is ``pickle`` (its C pickler
is far faster than a walk in Python): it writes each value, and an object met a
second time as a reference to the first, so aliasing (a thread's local ``job``
*is* the queue's job object) is part of the fingerprint, and equal bytes mean
isomorphic graphs. Objects that are not plain data (generators, frames, code) and
the harness's own objects (the scenario's clock) are written by identity or by type,
so they never make two different states look equal (functions pickle by name, and
a lambda makes the state uncacheable); they only stop them from merging.
Equal objects that happen not to be shared (two equal strings) may make equal
states look different; that too only costs a merge.
"""

from __future__ import annotations

import copyreg
import io
import pickle
import types
from typing import Any

__all__ = ["state_key"]

_BY_IDENTITY = (types.GeneratorType, types.FrameType, types.CoroutineType, types.CodeType)


def _by_type(value: object) -> tuple[Any, ...]:
    return (str, (type(value).__qualname__,))


def _by_identity(value: object) -> tuple[Any, ...]:
    return (int, (id(value),))


def _table(atoms: tuple[type, ...]) -> dict[type, Any]:
    table: dict[type, Any] = dict(copyreg.dispatch_table)
    table.update({kind: _by_identity for kind in _BY_IDENTITY})
    table.update({kind: _by_type for kind in atoms})
    return table


_TABLES: dict[tuple[type, ...], dict[type, Any]] = {}


def state_key(parts: object, atoms: tuple[type, ...] = ()) -> bytes | None:
    """The bytes of ``parts``; ``atoms`` (harness objects) are written by type alone.
    None when something in it cannot be written at all (the state is not cached)."""
    stream = io.BytesIO()
    pickler = pickle.Pickler(stream, protocol=pickle.HIGHEST_PROTOCOL)
    table = _TABLES.get(atoms)
    if table is None:
        table = _TABLES[atoms] = _table(atoms)
    pickler.dispatch_table = table
    try:
        pickler.dump(parts)
    except Exception:  # an object pickle refuses (a lambda): do not cache this state
        return None
    return stream.getvalue()
