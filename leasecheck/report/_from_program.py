"""Timelines of agreement-machine programs (``lease.agreement``, ``jobs.agreement``).

The program is replayed (``replay.py``) to learn the model's state around every
step; a lease is drawn from the step that created it (a new ``(job, token)`` in the
leased/RUNNING state) to the step that ended it (finished, re-leased or quarantined)
or the first step whose time reaches its ``lease_until`` (drawn as expired). A
finish-like step that changed nothing in the model is drawn as refused: it is
exactly the step a buggy target accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from leasecheck.report.replay import Recorded, Replay, replay
from leasecheck.report.timeline import Disagreement, Interval, Mark, Tick, Timeline, headline
from leasecheck.report.trace import Trace
from queue_impl.jobs import Lease

__all__ = ["program_timeline"]

QUEUE, CLOCK = "queue", "clock"
_FINISHES = {"finish", "complete", "fail", "run_once", "run_file"}
_CLAIMS = {"claim", "poll", "run_once", "run_file"}
_QUEUE_OPS = {"enqueue", "enqueue_first", "submit", "start"}


@dataclass(frozen=True)
class _Lease:
    job: str
    token: int
    lease_until: int
    owner: str


def _leases(state: Any, owners: dict[tuple[str, object], str]) -> dict[tuple[str, int], _Lease]:
    """The live leases in a model state (lease Snapshot rows or JobQueue model jobs)."""
    found = {}
    for row in state.jobs:
        status = getattr(row.status, "value", row.status)
        if status in ("leased", "RUNNING") and row.token is not None:
            owner = getattr(row, "owner", None) or owners.get((row.id, row.token), "?")
            found[(row.id, row.token)] = _Lease(row.id, row.token, row.lease_until, owner)
    return found


def _status(state: Any, job: str) -> str:
    row = next((row for row in state.jobs if row.id == job), None)
    return str(getattr(row.status, "value", row.status)) if row is not None else "missing"


@dataclass
class _Builder:
    trace: Trace
    run: Replay
    lanes: list[str] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    intervals: list[Interval] = field(default_factory=list)
    open: dict[tuple[str, int], tuple[int, _Lease]] = field(default_factory=dict)
    owners: dict[tuple[str, object], str] = field(default_factory=dict)
    """(job, token) -> the worker that polled it (the JobQueue model keeps no owner)."""

    def lane(self, name: str) -> str:
        if name not in self.lanes:
            self.lanes.append(name)
        return name

    def mark(self, lane: str, step: Recorded, label: str, kind: str, detail: str = "") -> None:
        self.marks.append(Mark(self.lane(lane), step.step, label, kind, step.step, detail))

    def close(self, key: tuple[str, int], end: float, kind: str, note: str) -> None:
        start, lease = self.open.pop(key)
        label = f"{lease.job} · token {lease.token} · until t={lease.lease_until}"
        detail = f"job {lease.job!r} leased to {lease.owner!r} with token {lease.token} "
        detail += f"until t={lease.lease_until}; {note}"
        self.intervals.append(Interval(lease.owner, start, end, label, kind, start, detail))

    def step(self, step: Recorded) -> None:
        for key, (_, lease) in list(self.open.items()):
            if step.time >= lease.lease_until and step.step > self.open[key][0]:
                self.close(key, step.step - 0.5, "expired", f"expired at t={lease.lease_until}")
        actor = self.actor(step)
        if step.call.method == "poll" and isinstance(step.result, Lease):
            self.owners[(step.result.job_id, step.result.token)] = actor
        before, after = _leases(step.before, self.owners), _leases(step.after, self.owners)
        for key in before.keys() - after.keys():
            if key in self.open:
                status = _status(step.after, key[0])
                self.close(key, step.step, "lease", f"ended at step {step.step} ({status})")
        for key in after.keys() - before.keys():
            self.open[key] = (step.step, after[key])
            self.lane(after[key].owner)
        self.describe(step, actor, before, after)

    def actor(self, step: Recorded) -> str:
        arguments = step.arguments
        for name in ("owner", "worker"):
            if isinstance(arguments.get(name), str) and arguments[name].strip():
                return str(arguments[name])
        ticket = arguments.get("ticket") or arguments.get("lease")
        if isinstance(ticket, dict) and isinstance(ticket.get("owner"), str):
            return str(ticket["owner"])
        if isinstance(ticket, Lease):
            return self.owners.get((ticket.job_id, ticket.token), "?")
        if step.call.method in _FINISHES:
            return "made-up token"
        return CLOCK if step.call.method == "advance_clock" else QUEUE

    def describe(self, step: Recorded, actor: str, before: dict[Any, Any], after: Any) -> None:
        method, changed = step.call.method, step.before != step.after
        if method == "advance_clock":
            self.mark(CLOCK, step, _clock_label(step), "clock", step.call.line)
        elif method in _QUEUE_OPS:
            self.mark(QUEUE, step, method.removesuffix("_first"), "enqueue", step.call.line)
        elif method in _FINISHES and not (method in _CLAIMS and after.keys() - before.keys()):
            kind = "commit" if changed else "refused"
            label = f"{method} → {_ended(step)}" if changed else f"{method} refused"
            self.mark(actor, step, label, kind, step.call.line)
        elif method in _CLAIMS:
            new = after.keys() - before.keys()
            label = f"{method} → token {sorted(new)[0][1]}" if new else f"{method} → None"
            self.mark(actor, step, label, "claim", step.call.line)
        else:
            self.mark(QUEUE, step, method, "note", step.call.line)


def _ended(step: Recorded) -> str:
    changed = [
        _status(step.after, row.id) for row in step.after.jobs if row not in step.before.jobs
    ]
    return changed[0] if changed else "changed"


def _clock_label(step: Recorded) -> str:
    if "ms" in step.arguments:
        return f"+{step.arguments['ms']} ms"
    to, offset = step.arguments.get("to", "now"), step.arguments.get("offset", 0)
    return f"to {to} {offset:+d}"


def program_timeline(trace: Trace) -> Timeline:
    """Replay ``trace.program`` and draw its leases, finishes, clock moves and failure."""
    assert trace.machine is not None
    run = replay(trace.machine, trace.program)
    builder = _Builder(trace, run, lanes=[])
    if any(step.call.method == "advance_clock" for step in run.steps):
        builder.lane(CLOCK)
    builder.lane(QUEUE)
    for step in run.steps:
        builder.step(step)
    last = run.failed_after
    for key in list(builder.open):
        builder.close(key, last + 0.5, "lease", "still live when the run stopped")
        builder.intervals[-1] = _opened(builder.intervals[-1])
    ticks = tuple(Tick(s.step, f"#{s.step}", f"t={s.time}") for s in run.steps)
    failing = next((s for s in run.steps if s.step == last), None)
    lane = builder.actor(failing) if failing else QUEUE
    text = headline(trace)
    if run.invariant_failed:
        text = f"the check after step {last} failed: {text}"
    disagreement = Disagreement(builder.lane(lane), last, last, text)
    caption = _caption(run)
    return Timeline(
        f"{trace.property}: the shrunk program, replayed on the reference model",
        "steps", tuple(builder.lanes), ticks, tuple(builder.intervals),
        tuple(builder.marks), disagreement, caption,
    )  # fmt: skip


def _opened(interval: Interval) -> Interval:
    return Interval(
        interval.lane, interval.start, interval.end, interval.label, interval.kind,
        interval.step, interval.detail, open_end=True,
    )  # fmt: skip


def _caption(run: Replay) -> str:
    text = (
        "One column per operation of the program (invariant checks left out), with the "
        "time it ran at. Bars are leases (job · token) from their claim to their end; "
        "the red line is where the target and the model disagree."
    )
    return f"{text} Note: {run.problem}" if run.problem else text
