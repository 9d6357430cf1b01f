"""femtoqueue (``FemtoQueue``) seen through the adapter protocol.

femtoqueue keeps each task as one file in a data directory and moves it between
sub-directories with ``rename()``: ``pending/`` -> ``<node_id>/`` (in progress on that
worker node) -> ``done/`` or ``failed/``. Its README: "Each concurrent worker node
(library user) must have a stable identifier node_id", and ``pop()`` first returns the
node's own in-progress tasks ("If previous task processing was aborted ... this method
will return that incomplete task"), so a node works on one task at a time.

What maps to what:

- ``enqueue(job, payload)`` -> ``push(envelope)`` on a client of its own;
- ``claim(worker, lease)`` -> ``pop()`` on a **new node per claim**
  (``{worker}-{pid}-{n}``, ``timeout_stale_ms`` = the lease): leasecheck's workers hold
  several claims at once, and a node that pops while holding one gets that one again;
  the node client is the claim's handle;
- ``ack`` -> ``done(task)`` on the claim's node (refused, with an exception, when the
  task is no longer in that node's directory: a stale claim's ack is fenced by where the
  file is); femtoqueue has no call that gives a task back (``fail`` gives it up) and none
  that renews a lease: ``nack`` and ``extend`` are ``Unsupported``;
- ``recover()`` -> -1: "Stale tasks (i.e. in progress for too long) are moved back to
  pending automatically after a timeout ... These events are processed during a pop()
  call" (README, "Features"), so the next claim takes expired leases itself;
- ``observe()`` lists the directories (``pending/`` and ``scheduled/`` ready, a node's
  directory leased, ``done/``, ``failed/``) and reads each file's envelope.

The lease is the *releasing* node's ``timeout_stale_ms``, not a deadline stamped on the
claim, so every claim of a run asks for one lease (``one_lease``). femtoqueue measures
staleness from the number in the task's file name, which is its push time.

Time: femtoqueue reads ``time.monotonic()`` and ``time.time()`` through its module's
``time``; ``connect`` points ``femtoqueue.time`` at the given clock and ``close`` puts it
back (``clock="patched"``), each ``monotonic`` reading a microsecond after the last
(``_clock_module`` says why).

Sources cited in ``Femtoqueue.promises``: the README of femtoqueue 0.4.2 (the PyPI long
description, https://pypi.org/project/femtoqueue/0.4.2/) and ``femtoqueue.py`` 0.4.2.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

from leasecheck.adapters._libs import TimePatch, envelope, installed_version, job_of
from leasecheck.adapters.protocol import (
    Capabilities,
    Claim,
    JobState,
    Promise,
    Promises,
    QueueAdapter,
    QueueClock,
    StoredJob,
    Unsupported,
)

__all__ = ["Femtoqueue", "FemtoqueueAdapter"]

_README = "https://pypi.org/project/femtoqueue/0.4.2/ (README)"
_HEADER = 24
"""femtoqueue's file header: a version byte, 7 bytes of padding, an md5 of the data."""
_FIXED: dict[str, JobState] = {
    "pending": "ready", "scheduled": "ready", "done": "done", "failed": "failed",
}  # fmt: skip
_CLIENT = "leasecheck"
"""The node id of the client that pushes (it never pops, so it holds no task)."""


def _clock_module(current: Any) -> SimpleNamespace:
    """femtoqueue's ``time``, read from the clock. Each reading of ``monotonic`` or ``time``
    is one microsecond later than the last in this process: femtoqueue names a task by its
    push microsecond (plus the repr of a bound method, ``rand_bytes.hex``, not random bytes),
    so on a clock that stands still two pushes would get one name, which a real clock, a
    file write apart, never gives them.

    A reading lies in the middle of its microsecond (``n + 0.5`` us): femtoqueue truncates
    ``int(reading * 1_000_000)``, and a reading of ``now + k * 1e-6`` truncates to ``n - 1``
    for some ``k`` (float rounding), so two readings one tick apart could name one
    microsecond, and which ones did depended on how many readings the process had made
    before (its history), not on the program: a Hypothesis FlakyFailure of queue.no-loss
    (issue 27). ``time`` shares the ticks: a push on an empty ``pending/`` takes its name
    from ``time``, and on a standing clock it named the microsecond an earlier push had."""
    ticks = itertools.count()

    def reading() -> float:
        micros = round(float(current().now()) * 1_000_000) + next(ticks)
        return (micros + 0.5) / 1_000_000

    return SimpleNamespace(time=reading, monotonic=reading, sleep=time.sleep)


_TIME = TimePatch("femtoqueue", "time", _clock_module)


class FemtoqueueAdapter:
    """One femtoqueue data directory, with femtoqueue's time read from ``clock``."""

    def __init__(self, location: str, clock: QueueClock) -> None:
        import femtoqueue

        self.femtoqueue: Any = femtoqueue
        self.location, self.clock = location, clock
        self.numbers = itertools.count()
        _TIME.attach(clock)

    def _node(self, node_id: str, lease: float = 30.0) -> Any:
        stale_ms = max(1, round(lease * 1000))
        return self.femtoqueue.FemtoQueue(self.location, node_id, timeout_stale_ms=stale_ms)

    def enqueue(self, job: str, payload: str) -> None:
        self._node(_CLIENT).push(envelope(job, payload).encode())

    def claim(self, worker: str, lease: float) -> Claim | None:
        node = self._node(f"{worker}-{os.getpid()}-{next(self.numbers)}", lease)
        task = node.pop()
        if task is None:
            os.rmdir(node.dir_in_progress)  # keep the store to the nodes that hold a task
            return None
        return Claim(job_of(task.data), worker, (node, task))

    def ack(self, claim: Claim) -> bool:
        node, task = _handle(claim)
        node.done(task)  # raises when the task is no longer this node's
        return True

    def nack(self, claim: Claim) -> bool:
        raise Unsupported("femtoqueue has no call that gives a task back (fail gives it up)")

    def extend(self, claim: Claim, lease: float) -> bool:
        raise Unsupported("femtoqueue has no call that renews a task's timeout")

    def recover(self) -> int:
        return -1  # pop() moves stale tasks back to pending itself

    def observe(self) -> list[StoredJob]:
        views: list[tuple[str, StoredJob]] = []
        root = Path(self.location)
        for directory in sorted(p for p in root.iterdir() if p.is_dir()):
            if directory.name == "creating":
                continue  # written, not yet pushed
            state = _FIXED.get(directory.name, "leased")
            for path in directory.iterdir():
                data = path.read_bytes()[_HEADER:]
                views.append((path.name, StoredJob(job_of(data), state)))
        return [view for _, view in sorted(views, key=lambda item: item[0])]

    def close(self) -> None:
        _TIME.detach(self.clock)


def _handle(claim: Claim) -> tuple[Any, Any]:
    handle = claim.handle
    assert isinstance(handle, tuple), f"a femtoqueue claim's handle is (node, task): {handle!r}"
    return handle[0], handle[1]


class Femtoqueue:
    """The femtoqueue library (``pip install femtoqueue``), version 0.4.2 checked."""

    name: ClassVar[str] = "femtoqueue"
    capabilities: ClassVar[Capabilities] = Capabilities(
        clock="patched", extend=False, nack=False, multiprocess=True,
        lease_granularity=0.001, one_lease=True,
    )  # fmt: skip
    promises: ClassVar[Promises] = Promises(
        properties={
            "queue.ack-final": Promise(
                True,
                f"{_README}, 'Features': 'done(task: FemtoTask) | Mark a task as done' and "
                "'State changes are atomic since they use rename()'",
            ),
            "queue.no-loss": Promise(
                True,
                f"{_README}: 'durable, concurrent, retrying task queue' and 'Stale tasks "
                "(i.e. in progress for too long) are moved back to pending automatically "
                "after a timeout is reached'",
            ),
            "queue.exclusive": Promise(
                True,
                f"{_README}, 'Features': 'Stale tasks (i.e. in progress for too long) are "
                "moved back to pending automatically after a timeout' (a task in progress "
                "for less than the timeout stays its node's)",
            ),
            "queue.stale-ack": Promise(
                False,
                "not mentioned; femtoqueue.py:FemtoQueue.done raises 'Tried to complete a "
                "task that is not in progress' when the file has left the node's directory",
            ),
            "queue.linearizable": Promise(False, "not mentioned in femtoqueue's README"),
        },
        delivery="at-least-once",
        fencing="by place: done/fail rename the file out of the node's own directory, and "
        "fail if it is no longer there",
        recovery="lazy: pop() first renames other nodes' tasks older than timeout_stale_ms "
        "(by the push time in their file name) back to pending",
        ordering="pending files sorted by name: push time (monotonic, microseconds) first",
        durability="rename() per state change; fsync only with sync_after_write=True "
        "(off by default, off here)",
    )

    def version(self) -> str:
        return installed_version("femtoqueue", "femtoqueue", "pip install femtoqueue")

    def create(self, directory: Path, server: str | None) -> str:
        """An empty data directory ``directory/femtoqueue`` (femtoqueue needs no server)."""
        self.version()
        import femtoqueue

        path = directory / "femtoqueue"
        femtoqueue.FemtoQueue(str(path), _CLIENT)
        return str(path)

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        self.version()
        return FemtoqueueAdapter(location, clock)
