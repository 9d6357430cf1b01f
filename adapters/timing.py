"""Real time for libraries whose clock cannot be moved: keep every call clear of lease ends.

Most adapters make their library read the clock they are given, so time stands still
between the harness's moves and the model's ``now`` is exact. A library that reads the
system clock where no patch reaches (localqueue's Rust engine; a server's ``NOW()``)
declares ``clock="real"``, and the generic properties run it on very short real
leases instead. Then the only instants at which the model and the library may
disagree about a lease are around its end:

- a claim (or extend) that ran from ``t0`` to ``t1`` with a lease of ``L`` ms ends, by
  the library's clock, somewhere in ``[t0 + L, t1 + L]``, widened by ``MARGIN_MS`` each
  side for the library's rounding: that window is the lease's *end*;
- outside every end, the model (whose lease runs from the call's start, ``t0 + L``)
  and the library agree on which leases are live;
- so before each call the harness sleeps past any end that begins within its *room*
  (``Pacer.clear``), and a call whose own ``[t0, t1]`` still touched an end (the
  process was descheduled mid-call) is *ambiguous* (``Pacer.ambiguous``): the engines
  set it aside (the agreement machine rejects the example; a race history stops
  before that step). Every other call is judged exactly.

The room is ``ROOM_MS``, or, given the run's ``CallTimes``, the slow end of the calls
timed so far (``ROOM_QUANTILE``; never more than ``ROOM_SHARE`` of the shortest lease,
so a lease stays live for most of its length). A fixed 5 ms was enough on a quiet
machine; at load 5 the agreement machine's calls took 3 ms at the median and 10 ms at
p90 (``observe`` is several round trips on a server), and 19 of 30 nats-jetstream
programs had a call that started 6 to 27 ms before a lease end and ran across it.

Times are ``time.monotonic()`` milliseconds from the pacer's start: the same rate as the
wall clock the libraries read (both are slewed alike by NTP); a step of the system
clock during a run is the one thing this cannot see.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

__all__ = ["MARGIN_MS", "ROOM_MS", "CallTimes", "Pacer", "RealLeases"]

MARGIN_MS = 3
"""Rounding slack at a lease's end (localqueue stores milliseconds, servers microseconds)."""
ROOM_MS = 5
"""How close to a lease's end a call may start, at least: more than a call takes on a quiet
machine."""
ROOM_QUANTILE = 0.99
"""Which of the recent calls' durations the room covers: all but the slowest hundredth."""
ROOM_SHARE = 0.25
"""The room's bound, as a share of the shortest lease the pacer has seen."""
RECENT_CALLS = 400
"""How many of the latest calls ``CallTimes`` keeps (a few programs' worth: the load moves)."""


@dataclass
class CallTimes:
    """How long the latest calls of a run took (ms), shared by its pacers: the room a call
    needs follows the machine's load, which a fixed room does not."""

    recent: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT_CALLS))

    def add(self, took_ms: int) -> None:
        self.recent.append(took_ms)

    def slow_ms(self) -> int:
        """The ``ROOM_QUANTILE`` of the recent durations (0 before any call)."""
        if not self.recent:
            return 0
        ordered = sorted(self.recent)
        return ordered[min(len(ordered) - 1, int(ROOM_QUANTILE * len(ordered)))]


@dataclass(frozen=True)
class RealLeases:
    """The lease lengths and clock moves of an engine, in real milliseconds."""

    leases: tuple[int, ...]
    advances: tuple[int, ...]


@dataclass
class Pacer:
    """The real-time bookkeeping of one engine run: lease ends, and calls kept clear of them."""

    start: float = field(default_factory=time.monotonic)
    ends: list[tuple[int, int]] = field(default_factory=list)
    """Every lease end still to come, as ``(first, last)`` ms."""
    set_aside: int = 0
    """Calls found ambiguous (they touched a lease end)."""
    slack_ms: int = 0
    """How much later than its length a lease may end (``Capabilities.lease_slack``: a
    server that checks leases on a tick): each end is widened by it."""
    times: CallTimes | None = None
    """The run's call durations: the room follows them (else it is ``ROOM_MS``)."""
    shortest: int | None = None
    """The shortest lease remembered (ms): the room stays a ``ROOM_SHARE`` of it."""

    def now(self) -> int:
        """Milliseconds since the start, rounded down."""
        return math.floor((time.monotonic() - self.start) * 1000)

    def since_start(self, monotonic_ns: int) -> int:
        """A ``time.monotonic_ns()`` stamp as ms since the start (rounded down)."""
        return math.floor(monotonic_ns / 1e6 - self.start * 1000)

    def room(self) -> int:
        """How close to a lease end a call may start (ms)."""
        if self.times is None:
            return ROOM_MS
        room = max(ROOM_MS, self.times.slow_ms())
        if self.shortest is not None:
            room = min(room, max(ROOM_MS, math.floor(ROOM_SHARE * self.shortest)))
        return room

    def clear(self) -> int:
        """Sleep until no lease end begins within the room; the time then (ms)."""
        now = self.now()
        room = self.room()
        self.ends = [(first, last) for first, last in self.ends if last >= now]
        for first, last in sorted(self.ends):
            if first - room <= now <= last:
                time.sleep((last + 1 - now) / 1000)
                now = self.now()
        return now

    def leased(self, t0: int, t1: int, lease_ms: int) -> None:
        """A claim or extend ran over ``[t0, t1]`` for ``lease_ms``: remember its end."""
        self.ends.append((t0 + lease_ms - MARGIN_MS, t1 + lease_ms + self.slack_ms + MARGIN_MS))
        self.shortest = lease_ms if self.shortest is None else min(self.shortest, lease_ms)

    def ambiguous(self, t0: int, t1: int) -> bool:
        """Whether a call over ``[t0, t1]`` touched a lease end (counted in ``set_aside``)."""
        if self.times is not None:
            self.times.add(t1 - t0)
        touched = any(first <= t1 and t0 <= last for first, last in self.ends)
        self.set_aside += touched
        return touched

    def wait_out(self) -> int:
        """Sleep until every lease remembered has ended; the time then (ms)."""
        last = max((end for _, end in self.ends), default=-1)
        now = self.now()
        if last >= now:
            time.sleep((last + 1 - now) / 1000)
        self.ends.clear()
        return self.now()
