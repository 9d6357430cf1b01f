"""Real-clock leases sized by the library's measured call latency (issue 27, item 3).

On a library that reads a clock nobody can move (``clock="real"``), the agreement
machine leases for ``REAL_SCALE`` (0.1) of each printed lease: the shortest lasts
15 ms. A call that runs across a lease's end cannot be judged (``adapters.timing``),
and on a loaded machine a PostgreSQL round trip takes 5-50 ms, so most programs were
cut short and the row read "not checked" under load but held on a quiet machine: an
honest verdict, but not the same across runs.

Here the machine's leases and clock moves are stretched, in proportion, until the
shortest lease is ``CALLS_PER_LEASE`` calls long, by the slowest calls of a probe run
just before the property (``call_latency_ms``: enqueue, claim, observe and ack on a
store of its own; ``observe``, which the machine calls after every step, is the slow
one on a server: several round trips on nats-jetstream). The stretch never goes below
``REAL_SCALE`` nor above ``MAX_SCALE`` (a program sleeps about 1.5 s x scale), and the
row prints it with the latency it came from.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from leasecheck.adapters.protocol import QueueLibrary, SharedClock, Unsupported, destroy_store
from leasecheck.stateful_tests.queue_machine import LEASES_MS, REAL_SCALE, QueueMachine

__all__ = ["CALLS_PER_LEASE", "MAX_SCALE", "RealScale", "call_latency_ms", "real_scale", "scaled"]

CALLS_PER_LEASE = 10
"""How many of the probe's slow calls the shortest real lease must outlast."""
MAX_SCALE = 0.5
"""The largest stretch: the shortest lease 75 ms, a program's sleeps about 0.75 s."""
PROBE_ROUNDS = 8
"""enqueue + claim + observe + ack rounds of the probe (32 calls)."""
QUANTILE = 0.9
"""Which of the probe's calls sizes the leases: the slowest but the slowest tenth."""


@dataclass(frozen=True)
class RealScale:
    """The stretch chosen for a real-clock library, and the latency that chose it."""

    scale: float
    latency_ms: float

    def text(self) -> str:
        return (
            f"leases at {self.scale:.2g} of their printed length (call latency "
            f"p{round(QUANTILE * 100)} {self.latency_ms:.1f} ms)"
        )


def call_latency_ms(library: QueueLibrary, server: str | None) -> float:
    """The ``QUANTILE`` of single call durations (ms) over ``PROBE_ROUNDS`` enqueue,
    claim (a 60 s lease), observe and ack rounds on a fresh store of ``library``."""
    directory = Path(tempfile.mkdtemp(prefix="leasecheck-latency-"))
    clock = SharedClock.of(directory / "clock", library.capabilities)
    location = library.create(directory, server)
    queue = library.connect(location, clock)
    took: list[float] = []

    def timed(call: Callable[[], Any]) -> Any:
        started = time.monotonic()
        value = call()
        took.append((time.monotonic() - started) * 1000)
        return value

    try:
        for number in range(PROBE_ROUNDS):
            timed(lambda: queue.enqueue(f"p{number}", "latency probe"))  # noqa: B023
            claim = timed(lambda: queue.claim("probe", 60.0))
            with contextlib.suppress(Unsupported):  # AMQP has no read-only view
                timed(queue.observe)
            if claim is not None:
                timed(lambda: queue.ack(claim))  # noqa: B023
    finally:
        queue.close()
        clock.close()
        destroy_store(library, location)
        shutil.rmtree(directory, ignore_errors=True)
    took.sort()
    return took[min(len(took) - 1, int(QUANTILE * len(took)))]


def real_scale(latency_ms: float) -> RealScale:
    """The stretch for calls this slow: the shortest lease ``CALLS_PER_LEASE`` of them."""
    wanted = CALLS_PER_LEASE * latency_ms / min(LEASES_MS)
    return RealScale(min(MAX_SCALE, max(REAL_SCALE, wanted)), latency_ms)


def scaled(machine: type[QueueMachine], scale: float) -> type[QueueMachine]:
    """``machine`` whose real leases and clock moves last ``scale`` of their printed
    length (the machine's ``REAL_SCALE``, replaced once it is built)."""

    def __init__(self: QueueMachine) -> None:
        machine.__init__(self)
        self.scale = scale

    return type("QueueMachine", (machine,), {"__init__": __init__})  # the name Hypothesis prints
