"""What the Redis adapters share: one key prefix per store on a shared server.

A store's location is the server URL with the store's prefix as its fragment
(``redis://127.0.0.1:6390/0#lc-1a2b``), so stores on one server never share a key
and a location is still one string, as the protocol wants.
"""

from __future__ import annotations

import uuid

from leasecheck.adapters._libs import split_at_hash
from leasecheck.adapters.protocol import AdapterError

__all__ = ["REDIS_EXTRA", "drop_location", "new_location", "split_location"]

REDIS_EXTRA = "pip install 'leasecheck[redis]'"


def new_location(server: str | None, library: str) -> str:
    """A fresh prefix on ``server`` for one store of ``library``; its location."""
    if not server:
        raise AdapterError(
            f"{library} keeps its queue in Redis: give create() the server URL "
            "(adapters.servers.redis() starts a throw-away one)"
        )
    return f"{server}#lc-{library}-{uuid.uuid4().hex[:12]}"


def split_location(location: str) -> tuple[str, str]:
    """``(server URL, prefix)`` of a location made by ``new_location``."""
    return split_at_hash(location, "prefix")


def drop_location(location: str) -> None:
    """Delete every key of the store at ``location``: each key that names its prefix (the
    libraries' own keys and the adapters' side keys all do)."""
    import redis

    url, prefix = split_location(location)
    client = redis.Redis.from_url(url, socket_timeout=30)
    try:
        keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start : start + 1000])
    finally:
        client.close()
