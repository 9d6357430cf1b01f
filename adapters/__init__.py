"""Adapters: real queue libraries, seen through one protocol (``adapters.protocol``).

``adapters.servers`` starts the throw-away PostgreSQL and Redis servers that the
server-backed libraries need.
"""

from adapters.protocol import (
    GENERIC_PROPERTIES,
    AdapterError,
    Capabilities,
    Claim,
    Clock,
    JobView,
    Promise,
    Promises,
    QueueAdapter,
    QueueLibrary,
    SharedClock,
    Unsupported,
)

__all__ = [
    "GENERIC_PROPERTIES",
    "AdapterError",
    "Capabilities",
    "Claim",
    "Clock",
    "JobView",
    "Promise",
    "Promises",
    "QueueAdapter",
    "QueueLibrary",
    "SharedClock",
    "Unsupported",
]
