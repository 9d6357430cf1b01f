"""The ``send`` client of lease-worker.md: POST one event to the receiving server.

``make_send(url)`` builds the ``send`` a dispatcher passes to ``run_once``: it POSTs
``{"id", "qty"}`` as JSON on a fresh connection per call and maps the answer to the
worker's contract (200 is an ack, a timeout, a connection error or a 5xx is
``Retryable``, any other answer ``Permanent``). The server is ``queue_impl.receiver``,
which re-exports ``make_send`` so ``from queue_impl.receiver import make_send`` keeps
working.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

__all__ = ["make_send"]


def make_send(
    url: str,
    timeout: float = 2.0,
    *,
    retryable: type[Exception] | None = None,
    permanent: type[Exception] | None = None,
) -> Callable[[dict[str, Any]], bool]:
    """A ``send`` for run_once: POST the event as JSON to ``url``, one connection per call.

    200 → ``True``; timeout, connection error or 5xx → ``retryable``; any other status
    (409 conflict, other 4xx, unexpected answers) → ``permanent``. The exception
    classes default to ``queue_impl.worker.Retryable`` and ``Permanent``.
    """
    if retryable is None or permanent is None:
        from leasecheck.queue_impl import worker

        retryable = retryable or worker.Retryable
        permanent = permanent or worker.Permanent
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None:
        raise ValueError(f"make_send needs an http:// URL but got url={url!r}")
    host, port, path = parts.hostname, parts.port or 80, parts.path or "/"
    retry_error, refusal = retryable, permanent

    def send(event: dict[str, Any]) -> bool:
        body = json.dumps(event).encode()
        try:
            status, answer = _post(host, port, path, body, timeout)
        except (OSError, http.client.HTTPException) as error:
            raise retry_error(f"POST {url} failed: {type(error).__name__}: {error}") from error
        if status == HTTPStatus.OK:
            return True
        message = f"POST {url} with {event!r} got HTTP {status}: {answer}"
        if status >= 500:
            raise retry_error(message)
        raise refusal(message)

    return send


def _post(host: str, port: int, path: str, body: bytes, timeout: float) -> tuple[int, str]:
    """One POST on a fresh connection that is always closed; returns (status, body text)."""
    con = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json", "Connection": "close"}
        con.request("POST", path, body=body, headers=headers)
        response = con.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        con.close()
