"""A private event loop behind a synchronous facade, for the asyncio libraries.

The adapter protocol is synchronous (one call, one result), while pgqueuer, procrastinate
and saq are asyncio libraries. Each adapter owns one ``PrivateLoop``: it runs the
library's coroutines to completion on a loop nobody else uses, with a bound on every
call so that a server that stops answering is a named error, never a hang.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from leasecheck.adapters.protocol import AdapterError

__all__ = ["CALL_TIMEOUT", "LoopTimeout", "PrivateLoop"]

T = TypeVar("T")

CALL_TIMEOUT = 30.0
"""Seconds one library call may take before it is declared stuck."""


class LoopTimeout(AdapterError):
    """A library call did not finish within its bound (the server may be down)."""


class PrivateLoop:
    """One event loop, owned by one adapter, driven one call at a time."""

    def __init__(self, timeout: float = CALL_TIMEOUT) -> None:
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()

    def run(self, coroutine: Coroutine[Any, Any, T], what: str) -> T:
        """Run ``coroutine`` to completion; ``LoopTimeout`` naming ``what`` past the bound."""
        try:
            return self._loop.run_until_complete(asyncio.wait_for(coroutine, self.timeout))
        except TimeoutError:
            raise LoopTimeout(
                f"{what} did not finish within {self.timeout:g} s; is the server still up?"
            ) from None

    def close(self) -> None:
        """Cancel whatever is left on the loop and close it."""
        if self._loop.is_closed():
            return
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        if pending:
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()
