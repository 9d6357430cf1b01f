"""The order and spread of a ``leasecheck check`` run: longest properties first, one at a time.

The gate is about twenty tests of very unequal length (the agreement machines take
tens of seconds, the edge sweeps under one). Its wall time is set by the worker that
finishes last, so the long ones must start first: ``order`` sorts the collection by a
recorded cost (``COSTS``, seconds of the ci profile on 2 cores), and ``LongestFirst``
hands the tests out in that order, one per worker at a time, instead of xdist's
contiguous chunks (which gave the two longest properties to the same worker); the
test each worker holds behind its first is one of the shortest, so nothing long is
left waiting behind the longest.

Some properties mostly wait (children that block on a lock, a crash child's death,
a server's reply), so ``auto`` starts ``WAITING_WORKERS`` more workers than there are
cores: a waiting property then does not hold a core's worth of work back. One, not
more: every worker beyond the cores also makes the others slower (a worker's start-up,
and the Hypothesis machines' CPU grows when they share a core with other work).

Where a waiting property runs matters as much: at the end of a run, with only waiting
properties left, the cores idle. So the workers beyond the cores start with the
properties that wait most (``WAITS``), next to the longest ones (which then have the
cores to themselves), and the end of the run is left to short properties that compute.

Only ``leasecheck check`` loads this (through ``leasecheck._events``); a plain ``pytest -n
auto`` keeps xdist's own scheduling.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

import pytest
from xdist.scheduler import LoadScheduling
from xdist.workermanage import WorkerController

__all__ = [
    "COSTS",
    "DEFAULT_COST",
    "WAITING_WORKERS",
    "WAITS",
    "LongestFirst",
    "auto_workers",
    "order",
]

COSTS: Final[dict[str, float]] = {
    "jobs.agreement": 40.5,
    "lease.agreement": 27.1,
    "jobs.model-check": 10.4,
    "lease.model-check": 9.4,
    "lease.power-loss": 7.1,
    "lease.linearizable": 6.2,
    "lease.schedules": 5.5,
    "jobs.interleavings": 4.2,
    "jobs.threads": 3.4,
    "lease.single-winner": 3.4,
    "lease.crash-random": 2.7,
    "lease.interleavings": 2.6,
    "jobs.linearizable": 2.1,
    "lease.races": 2.0,
    "lease.crash-points": 1.4,
    "lease.configuration": 1.3,
    "lease.duplicate-send": 1.0,
    "lease.edges": 0.3,
    "jobs.edges": 0.1,
}
"""Recorded seconds of each property in the ci profile (bundled targets): only their order
matters. A property not listed counts ``DEFAULT_COST``. One ``leasecheck check --profile
ci -n 1`` on a slow 2-core machine (2026-12-05, main at 06dae0c), each property alone on
its worker: the model checks had grown past the schedule, interleavings and
linearizability properties the previous table (1d3ed9f) put before them."""
WAITS: Final[dict[str, float]] = {
    "lease.single-winner": 2.0,
    "jobs.threads": 1.2,
    "lease.configuration": 1.1,
}
"""Seconds a property waits (its wall time alone minus the CPU of it and its children),
where that is a second or more: the target's busy timeout of 1 s waited out
(lease.single-winner's held schedules) or timed (lease.configuration), the threads of
jobs.threads waiting for each other. One ``leasecheck check -n 1 --property P`` per
property on a 2-core machine (2026-12-06, main at f84f483), less the run's start-up.
The other properties compute at least three quarters of their time."""
DEFAULT_COST: Final = 3.0
"""A new property's guess: the middle of the table, neither first nor last."""
WAITING_WORKERS: Final = 1
"""Workers beyond the cores under ``-n auto``, for the properties that wait. Measured on 2
cores (``leasecheck check --profile ci``, 3 runs each, alternated): -n 2 30.9 s wall
(50.2 s CPU), -n 3 29.0 s (53.4 s), -n 4 29.5 s (55.2 s); medians."""


def cost(name: str | None) -> float:
    return COSTS.get(name or "", DEFAULT_COST)


def order(
    items: list[pytest.Item], name_of: Callable[[pytest.Item], str | None], workers: int = 1
) -> None:
    """Sort ``items`` in place for ``workers`` test processes: longest recorded cost first
    (stable among equals), except that with more workers than ``WAITING_WORKERS`` the
    waiting properties (``WAITS``, most waiting first) come right after the first
    ``workers - WAITING_WORKERS`` tests. ``LongestFirst`` hands the first ``workers``
    tests one to each worker, so the longest run on the cores' workers and the extra
    workers begin with the waits; each worker then takes the next test in this order."""
    items.sort(key=lambda item: -cost(name_of(item)))
    computing = workers - WAITING_WORKERS
    if computing < 1:
        return
    waiting = sorted(
        (item for item in items[computing:] if name_of(item) in WAITS),
        key=lambda item: -WAITS[name_of(item) or ""],
    )
    rest = [item for item in items[computing:] if name_of(item) not in WAITS]
    items[computing:] = waiting + rest


def auto_workers() -> int:
    """``-n auto`` for a check: the cores this process may use plus ``WAITING_WORKERS``."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) + WAITING_WORKERS
    return (os.cpu_count() or 1) + WAITING_WORKERS


class LongestFirst(LoadScheduling):  # type: ignore[misc]  # xdist ships no types
    """xdist's load scheduling, handing tests out one at a time, longest first.

    A worker runs a test only once it holds the next one (pytest needs ``nextitem``),
    so each worker is kept at two pending tests: the one it runs and the one after.
    The first round gives each worker one test, longest first, so the longest tests
    land on different workers. The second round gives each the shortest tests left
    (the worker with the longest test the shortest): the test a worker holds next was
    chosen when its first started, and a long one there would run after the longest
    (main's gate ran lease.linearizable after jobs.agreement: 7.8 s after the 30 s,
    while the other workers had finished). Every later test goes, longest first, to
    the worker that finished one.
    """

    collection: list[str] | None
    pending: list[int]

    def schedule(self) -> None:
        if self.collection is not None or not self._check_nodes_have_same_collection():
            super().schedule()
            return
        collection: list[str] = next(iter(self.node2collection.values()))
        self.collection = collection
        self.pending[:] = range(len(collection))
        for node in self.nodes:
            self._send_tests(node, 1)
        for node in self.nodes:
            if self.pending:
                self._send_last(node)
        if not self.pending:
            for node in self.nodes:
                node.shutdown()

    def _send_last(self, node: WorkerController) -> None:
        """Send ``node`` the shortest pending test (the last in collection order)."""
        index = self.pending.pop()
        self.node2pending[node].append(index)
        node.send_runtest_some([index])

    def check_schedule(self, node: WorkerController, duration: float = 0) -> None:
        """Top ``node`` up to two tests; with none left to send, a node holding one is
        shut down (so it runs it: pytest needs a next item or the end). A worker xdist
        starts in place of a crashed one begins with none and needs both."""
        if node.shutting_down:
            return
        while self.pending and len(self.node2pending[node]) < 2:
            self._send_tests(node, 1)
        if not self.pending and len(self.node2pending[node]) < 2:
            node.shutdown()
