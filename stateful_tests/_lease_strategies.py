"""Strategies for the lease agreement machine: small alphabets, boundaries, bad values.

Values come from small sets so that collisions happen (three job ids, two owners)
and boundaries are hit (ttl 1, lease 1, max_attempts 1). Almost every argument is
one ``sampled_from`` draw over a finite tuple, weighted by repeating entries
(``weighted``): one choice per argument keeps a step cheap to generate and quick to
shrink, and the simplest value comes first, which is where Hypothesis shrinks to.
Every bad value is one the spec rejects with ``ValueError``: a bool for an int, a
float, an out-of-range int, a wrong type, a bad identifier, an extra or missing
dict key, a dict subclass.

The edges themselves (both ends of every range, both invalid neighbours, look-alike
types and subclasses, every printable character outside the identifier alphabet, the
start states near the bounds) come from one table, ``models.edges``.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable
from typing import Any, TypeVar

from hypothesis import strategies as st

from leasecheck.models import edges
from leasecheck.models.lease_model import MAX_NOW, MAX_TOKEN

from ._lease_values import (
    SEND_KINDS,
    Bad,
    Change,
    Clock,
    Drop,
    Extra,
    Hook,
    Keep,
    Put,
    Send,
    Shift,
    Start,
    Subclass,
    When,
)

T = TypeVar("T")

JOBS = ("a", "b", "c")
OWNERS = ("w1", "w2")
NOTES = ("n1", edges.IDENTIFIER_ENDS[1])
TICKET_KEYS = ("id", "qty", "owner", "token", "attempt", "lease_until")
DYADIC_JITTERS = (0.5, 0, 1, 0.25, 0.75, 0.125, 1.0, 0.0)

BAD_IDENTIFIERS = edges.BAD_IDENTIFIERS
BAD_JITTERS = (
    True, -0.5, 1.5, math.nan, math.inf, -math.inf, "0.5", None, False,
    math.nextafter(1.0, 2.0), math.nextafter(0.0, -1.0),
)  # fmt: skip


def weighted(*groups: tuple[int, Iterable[T]]) -> st.SearchStrategy[T]:
    """One draw; each group's values get ``weight`` shares of the draws between them.

    ``weighted((3, good), (1, bad))`` draws from ``good`` about three times in four.
    (Shares are rounded.) The first value of the first group is the simplest, where
    shrinking goes.
    """
    values = [list(group) for _, group in groups]
    base = max(len(group) for group in values)
    entries = [
        value
        for (weight, _), group in zip(groups, values, strict=True)
        for value in group * max(1, round(weight * base / len(group)))
    ]
    return st.sampled_from(entries)


bad_ints = edges.bad_ints


def bad_values_of(*groups: Iterable[object]) -> st.SearchStrategy[object]:
    """One group of bad values, each group equally likely, then one value of it."""
    return st.one_of(*(st.sampled_from(tuple(group)) for group in groups))


_NONE = st.none()
"""Built once: ``st.none()`` makes a new lazy strategy per call, and drawing from a new one
(validated first) took about 220 us against 57 us for this one, the same choices."""


def maybe_bad(
    **bad_values: Iterable[object] | st.SearchStrategy[object],
) -> st.SearchStrategy[Bad | None]:
    """Usually None (a valid call); else one argument, each equally likely, replaced by one
    of its bad values (a strategy, or a tuple drawn from uniformly)."""
    per_argument = [
        st.builds(
            Bad,
            st.just(name),
            values if isinstance(values, st.SearchStrategy) else bad_values_of(values),
        )
        for name, values in bad_values.items()
    ]
    bad = st.one_of(*per_argument)
    return st.sampled_from((False, False, False, True)).flatmap(
        lambda wanted: bad if wanted else _NONE
    )


bad_identifiers = bad_values_of(BAD_IDENTIFIERS, edges.OUTSIDE_IDENTIFIERS)
jobs = st.sampled_from(JOBS)
owners = st.sampled_from(OWNERS)
qtys = st.sampled_from((1, 2, 1000))
ttls = st.sampled_from((100, 1, 10, 60000))
leases = st.sampled_from((10, 1, 1000, 60000))
budgets = st.sampled_from((1, 3, 2, 16))
delays = weighted((3, (0, 1, 10, 50)), (1, (1000, 60000)))
outcomes = st.sampled_from(("ok", "retry", "permanent"))
notes = st.sampled_from(NOTES)
steps = weighted((3, (1, 5, 10)), (1, (100, 1000, 60000, 10**9)))

# Half the time ``now``; else a boundary (+-1) of the first open job or of a named job,
# or a little (or much) later than now.
ANCHORS = ("lease_until", "deadline", "available_at")
FIRST_JOB_BOUNDARIES = tuple(
    When(anchor, None, delta) for anchor, delta in itertools.product(ANCHORS, (0, -1, 1))
)
JOB_BOUNDARIES = tuple(
    When(anchor, job, delta) for anchor, job, delta in itertools.product(ANCHORS, JOBS, (0, -1, 1))
)
LATER = tuple(When("now", None, delta) for delta in (1, 5, 1000, MAX_NOW))
times = weighted((4, [When()]), (2, FIRST_JOB_BOUNDARIES), (1, JOB_BOUNDARIES), (1, LATER))

BAD_TIMES = bad_ints(0, MAX_NOW)
BAD_EVENTS = (
    *({"id": bad, "qty": 1} for bad in BAD_IDENTIFIERS),
    *({"id": bad, "qty": 1} for bad in edges.OUTSIDE_IDENTIFIERS[::5]),
    *({"id": "a", "qty": bad} for bad in bad_ints(1, 1000)),
    {"id": "a"},
    {"qty": 1},
    {"id": "a", "qty": 1, "extra": 1},
    [("id", "a"), ("qty", 1)],
    edges.DictSubclass({"id": "a", "qty": 1}),
)
BAD_OUTCOMES = ("OK", "done", "", None, True, b"ok")

enqueue_bad = maybe_bad(
    event=BAD_EVENTS, now=BAD_TIMES, ttl_ms=bad_ints(1, 60000), max_attempts=bad_ints(1, 16)
)
claim_bad = maybe_bad(owner=bad_identifiers, now=BAD_TIMES, lease_ms=bad_ints(1, 60000))
finish_bad = maybe_bad(outcome=BAD_OUTCOMES, now=BAD_TIMES, delay_ms=bad_ints(0, 60000))
redrive_bad = maybe_bad(
    job=bad_identifiers, now=BAD_TIMES, ttl_ms=bad_ints(1, 60000), note=bad_identifiers
)


def hooks_for(*points: str) -> st.SearchStrategy[Hook | None]:
    """No hook half the time; else a recording hook or one raising at one of ``points``."""
    return weighted((1, [None]), (1, [Hook(), *(Hook(point) for point in points)]))


HOOK_POINTS = {
    "claim": ("after-claim", "after-commit"),
    "finish": ("after-finish", "after-commit"),
    "redrive": ("after-audit", "after-redrive", "after-commit"),
}
"""Every fault point of the hooked operations, in call order (lease-worker.md)."""
claim_hooks = hooks_for(*HOOK_POINTS["claim"])
finish_hooks = hooks_for(*HOOK_POINTS["finish"])
redrive_hooks = hooks_for(*HOOK_POINTS["redrive"])


def _bad_ticket_values(key: str) -> tuple[object, ...]:
    if key in ("id", "owner"):
        return BAD_IDENTIFIERS
    return bad_ints(1, {"qty": 1000, "attempt": 16}.get(key, MAX_TOKEN))


# Half the time the ticket as claimed; else a near miss (one field off by one, another
# owner or job), or a ticket the spec rejects (a bad value, a key missing or added).
TOKEN_MISSES = (Shift("token", 1), Shift("token", -1))
NEAR_MISSES = (
    Shift("lease_until", -1),
    Shift("lease_until", 1),
    Shift("attempt", -1),
    Shift("attempt", 1),
    Shift("qty", 1),
    Put("owner", "w2"),
    Put("owner", "w1"),
    Put("id", "a"),
    Put("id", "b"),
)
MALFORMED: tuple[Change, ...] = (
    *(Put(key, value) for key in TICKET_KEYS for value in _bad_ticket_values(key)),
    *(Drop(key) for key in TICKET_KEYS),
    Extra("status"),
    Extra("seq"),
    Subclass(),
)
MALFORMED_KINDS = (  # one ticket key (or the dict itself) first, then its bad value
    *(tuple(c for c in MALFORMED if isinstance(c, Put) and c.key == key) for key in TICKET_KEYS),
    tuple(c for c in MALFORMED if not isinstance(c, Put)),
    tuple(Put(key, bad) for key in ("id", "owner") for bad in edges.OUTSIDE_IDENTIFIERS),
)
malformed = st.one_of(*(st.sampled_from(kind) for kind in MALFORMED_KINDS))
_just = functools.cache(st.just)
"""``st.just(value)``, built once per value (see ``_NONE``: 137 us a draw against 54 us)."""
changes = weighted((4, [Keep()]), (1, TOKEN_MISSES), (2, NEAR_MISSES), (1, [None])).flatmap(
    lambda change: malformed if change is None else _just(change)
)

sends = st.sampled_from(tuple(Send(kind) for kind in SEND_KINDS))
# Mostly now then now or a little later, or going back by 1 or 4; else any two times,
# or bad readings.
SIMPLE_CLOCKS = (
    Clock(When(), When()),
    Clock(When(), When("now", delta=1)),
    Clock(When("now", delta=1), When()),
    Clock(When("now", delta=5), When("now", delta=1)),
)
BAD_CLOCKS = (
    *(Clock(bad, When()) for bad in BAD_TIMES),
    *(Clock(When(), bad) for bad in BAD_TIMES),
)
clocks = st.one_of(
    weighted((6, SIMPLE_CLOCKS), (1, BAD_CLOCKS)),
    st.builds(Clock, times, times),
)
any_jitters = weighted((3, DYADIC_JITTERS), (1, BAD_JITTERS))
run_paths = weighted((2, ["queue"]), (1, ["missing", "directory", "fifo"]))
SEEDED_STARTS = tuple(Start(name) for name in edges.LEASE_STARTS if name != "empty")
starts = weighted((3, [Start()]), (1, SEEDED_STARTS))


def _with_bad(good: st.SearchStrategy[Any], bad: Iterable[object]) -> st.SearchStrategy[Any]:
    return st.one_of(good, st.sampled_from(tuple(bad)))


attempts = _with_bad(st.integers(1, 16), bad_ints(1, 16))
base_delays = _with_bad(st.integers(1, 60000), bad_ints(1, 60000))
cap_delays = _with_bad(st.integers(1, 60000), bad_ints(1, 60000))
delay_jitters = _with_bad(
    st.one_of(st.sampled_from(DYADIC_JITTERS), st.floats(0, 1), st.sampled_from((0.7, 0.3))),
    BAD_JITTERS,
)
