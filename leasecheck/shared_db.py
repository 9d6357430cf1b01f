"""The shared example database: Hypothesis' ``RedisExampleDatabase`` named by a URL.

``leasecheck check --db redis://HOST:PORT/N`` and ``leasecheck hunt --db ...`` set
``LEASECHECK_DB``; ``profiles.example_database`` then stores and replays examples
there instead of the local directory, so every machine pointing at one Redis shares
what any of them found. Hypothesis documents this use: "This is particularly useful
for shared databases" (``hypothesis.extra.redis.RedisExampleDatabase``), and
HypoFuzz writes its failures "to the standard location in the Hypothesis database"
(HypoFuzz manual, *HypoFuzz database*), which is where ``check`` replays them from.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from hypothesis.database import ExampleDatabase

__all__ = ["DB_ENV", "FLEET_INSTALL", "SharedDatabaseError", "check_url", "open_database", "ping"]

DB_ENV = "LEASECHECK_DB"
FLEET_INSTALL = "pip install 'leasecheck[fleet]'"
PING_TIMEOUT = 5.0
_SCHEMES = ("redis", "rediss")


class SharedDatabaseError(Exception):
    """A database URL that cannot be used; the message says what to do instead."""


def check_url(url: str, where: str = "--db") -> str:
    """Reject anything but ``redis://HOST:PORT/N`` with a sentence naming the value."""
    parts = urlsplit(url)
    path = parts.path.strip("/")
    try:
        parts.port  # noqa: B018 (parsing it is the check: "redis://h:x" raises here)
    except ValueError:
        parts = parts._replace(scheme="")
    if parts.scheme not in _SCHEMES or not parts.hostname:
        raise SharedDatabaseError(
            f"{where} {url!r} is not a Redis URL; pass e.g. redis://127.0.0.1:6379/0"
        )
    if path and not path.isdigit():
        raise SharedDatabaseError(
            f"{where} {url!r} names database {path!r}; a Redis database is a number, "
            f"e.g. redis://{parts.netloc}/0"
        )
    return url


def _require_redis() -> None:
    if importlib.util.find_spec("redis") is None:
        raise SharedDatabaseError(
            f"a shared database needs the 'redis' package, which is not installed; "
            f"install it with: pip install redis (or {FLEET_INSTALL}, for hunts too)"
        )


def open_database(url: str, where: str = "--db") -> ExampleDatabase:
    """Hypothesis' Redis example database at ``url`` (the connection opens lazily)."""
    check_url(url, where)
    _require_redis()
    from hypothesis.extra.redis import RedisExampleDatabase
    from redis import Redis

    client = Redis.from_url(url, socket_timeout=30, socket_connect_timeout=PING_TIMEOUT)
    return RedisExampleDatabase(client)


def ping(url: str, where: str = "--db") -> None:
    """Fail now, with the URL in the message, if nothing answers at ``url``."""
    check_url(url, where)
    _require_redis()
    from redis import Redis
    from redis.exceptions import RedisError

    client = Redis.from_url(url, socket_timeout=PING_TIMEOUT, socket_connect_timeout=PING_TIMEOUT)
    try:
        client.ping()
    except RedisError as error:
        raise SharedDatabaseError(
            f"{where} {url!r}: no Redis answered within {PING_TIMEOUT:.0f} s ({error}); "
            f"start one (apt-get install -y redis-server) or fix the host and port"
        ) from None
    finally:
        client.close()
