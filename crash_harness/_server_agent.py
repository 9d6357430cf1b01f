"""A worker process for the server faults: one adapter connection, driven by commands.

Run as ``python -m crash_harness._server_agent SPEC LOCATION CLOCK REAL OFFSET``: it
loads the library ``SPEC`` (what ``--adapter`` takes: a bundled name or an adapter
file, through ``adapters.registry``; or ``module:Class``), connects to ``LOCATION`` reading
time from the shared clock file ``CLOCK`` shifted by ``OFFSET`` seconds (its own skew),
then answers one JSON line per JSON command line on stdin, until ``exit`` or end of
input. Being a real process is the point: the harness can SIGSTOP it (a GC pause) and
SIGCONT it, and its clock can disagree with its neighbours'.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

from leasecheck.adapters.protocol import Claim, QueueAdapter, QueueClock, SharedClock, Unsupported

__all__ = ["OffsetClock", "load_library", "main"]


class OffsetClock:
    """A clock ``offset`` seconds ahead of ``base`` (behind, when negative)."""

    def __init__(self, base: QueueClock, offset: float) -> None:
        self.base, self.offset = base, offset

    def now(self) -> float:
        return self.base.now() + self.offset

    def advance(self, seconds: float) -> None:
        self.base.advance(seconds)


def load_library(spec: str) -> Any:
    """The library ``spec`` names: ``module:Class``, or anything ``--adapter`` takes (a
    bundled name, ``planted:NAME``, an adapter file), loaded by the one registry."""
    from leasecheck.adapters.registry import BUNDLED, PLANTED_PREFIX
    from leasecheck.adapters.registry import load_library as load_adapter

    if spec in BUNDLED or spec.startswith(PLANTED_PREFIX) or spec.endswith(".py"):
        return load_adapter(spec)
    module_name, _, class_name = spec.partition(":")
    return getattr(importlib.import_module(module_name), class_name)()


class _Worker:
    """The commands a harness can send, over one adapter."""

    def __init__(self, adapter: QueueAdapter) -> None:
        self.adapter = adapter
        self.claims: dict[str, Claim] = {}

    def enqueue(self, job: str, payload: str = "") -> None:
        self.adapter.enqueue(job, payload)

    def claim(self, worker: str, lease: float) -> dict[str, Any] | None:
        got = self.adapter.claim(worker, lease)
        if got is None:
            return None
        self.claims[got.job] = got
        return {"job": got.job, "token": got.token}

    def ack(self, job: str) -> bool:
        return self.adapter.ack(self.claims[job])

    def nack(self, job: str) -> bool:
        return self.adapter.nack(self.claims[job])

    def recover(self) -> int:
        return self.adapter.recover()

    def observe(self) -> list[list[str]] | None:
        """Every job's state; ``None`` where the library has no read-only view
        (``Unsupported``: AMQP reads a message only by taking it)."""
        try:
            views = self.adapter.observe()
        except Unsupported:
            return None
        return [[view.job, view.state] for view in views]


def _answer(worker: _Worker, command: dict[str, Any]) -> dict[str, Any]:
    try:
        value = getattr(worker, command.pop("op"))(**command)
    except Exception as error:  # reported to the harness, which decides what it means
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}
    return {"ok": True, "value": value}


def main(argv: list[str]) -> int:
    spec, location, clock_path, real, offset = argv
    clock = OffsetClock(SharedClock(Path(clock_path), real=real == "1"), float(offset))
    adapter = load_library(spec).connect(location, clock)
    worker = _Worker(adapter)
    try:
        print(json.dumps({"ok": True, "value": "ready"}), flush=True)
        for line in sys.stdin:
            command = json.loads(line)
            if command.get("op") == "exit":
                break
            print(json.dumps(_answer(worker, command)), flush=True)
    finally:
        adapter.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
