"""Adapters: real queue libraries, seen through one protocol (``adapters.protocol``).

``adapters.servers`` starts the throw-away PostgreSQL and Redis servers that the
server-backed libraries need. ``adapters.registry`` maps ``--adapter NAME`` to an
adapter (imported lazily) and loads a user's adapter file; ``adapters.lease_worker``
is the adapter of our own bundled worker, and ``adapters.planted`` its planted-bug
variants, one per generic property.
"""

from leasecheck.adapters.protocol import (
    GENERIC_PROPERTIES,
    AdapterError,
    Capabilities,
    Claim,
    Promise,
    Promises,
    QueueAdapter,
    QueueClock,
    QueueLibrary,
    SharedClock,
    StoredJob,
    Unsupported,
)

__all__ = [
    "GENERIC_PROPERTIES",
    "AdapterError",
    "Capabilities",
    "Claim",
    "Promise",
    "Promises",
    "QueueAdapter",
    "QueueClock",
    "QueueLibrary",
    "SharedClock",
    "StoredJob",
    "Unsupported",
]
