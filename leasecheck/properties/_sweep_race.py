"""Calls that ran beside the library's own sweep inside another process's call: set aside.

rq's worker runs its maintenance (``clean_registries``, the sweep of ``recover``) inside
its dequeue, so in ``queue.linearizable``'s races one racer's claim may sweep while
another racer acks, nacks or extends a job whose lease ran out. rq's sweep reads which
jobs are stale, then fails or requeues them by id: whether the ack lands in between is
the OS's choice, so a history that judged that call flipped between runs (issue 27:
rq-defaults read holds in some runs, "not promised" in others). That race is judged
where its schedule is chosen, not left to the OS: ``queue.interleavings``' ``sweep-ack``
(VIOLATED on rq and rq-defaults in every run).

Here such a call's outcome is made unknown (it may or may not have had its effect:
``Operation.outcome=None``, with a note), decided by observation: the library logs the
window of every sweep its verbs run (``ReportsSweeps``), and a call is set aside only if
its interval overlaps one and its lease had run out by the shared clock (a sweep takes
only leases that ran out; on a real clock every overlapping call is set aside). Every
other operation is judged as before, and the count is printed in the row.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from leasecheck.adapters.protocol import QueueLibrary, ReportsSweeps
from leasecheck.models._history import Operation

__all__ = ["SweepWindows", "logged_sweeps", "set_aside"]

SweepWindows = list[tuple[int, int]]
"""(started_ns, ended_ns) of every sweep the library's verbs ran, ``time.monotonic_ns``."""

_VERBS = ("ack", "nack", "extend")
"""The calls a non-atomic sweep can undo or overtake: a holder's, on its own job."""


@contextmanager
def logged_sweeps(library: QueueLibrary, path: Path) -> Iterator[Path | None]:
    """While inside, ``library``'s connections log their sweeps to ``path``; ``None``
    for a library whose verbs never sweep (``ReportsSweeps``)."""
    if not isinstance(library, ReportsSweeps):
        yield None
        return
    library.log_sweeps(path)
    try:
        yield path
    finally:
        library.log_sweeps(None)


def read_sweeps(path: Path | None) -> SweepWindows:
    """The windows logged so far (every run's: they never overlap another run's calls)."""
    if path is None or not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [(int(w["started_ns"]), int(w["ended_ns"])) for w in map(json.loads, lines)]


def set_aside(
    history: list[Operation], sweeps: SweepWindows, real_time: bool
) -> tuple[list[Operation], int]:
    """``history`` with the outcome of each call that ran beside a sweep on a lease that
    had run out made unknown; how many were."""
    if not sweeps:
        return history, 0
    now = 0  # the shared clock (ms)
    until: dict[str, int] = {}  # each claim's lease end
    judged: list[Operation] = []
    for op in history:
        cid = str(op.args.get("cid", ""))
        if op.name == "advance":
            now += int(op.args["ms"])
        elif op.name in _VERBS and op.process != "H":
            ran_out = real_time or now >= until.get(cid, now + 1)
            if ran_out and _overlaps(op, sweeps):
                op = replace(op, outcome=None, note=_NOTE)
        if op.name in ("claim", "extend") and _took(op):
            until[cid] = now + int(op.args["lease_ms"])
        judged.append(op)
    return judged, sum(op.note == _NOTE for op in judged)


_NOTE = "set aside: ran beside the library's own sweep in another process, lease run out"


def _took(op: Operation) -> bool:
    """A claim that got a job, or an extend the library took."""
    if not op.ok:
        return False
    return op.result is not None if op.name == "claim" else op.result is True


def _overlaps(op: Operation, sweeps: SweepWindows) -> bool:
    end = op.invoked_ns if op.returned_ns is None else op.returned_ns
    return any(op.invoked_ns < ended and started < end for started, ended in sweeps)
