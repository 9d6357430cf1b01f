"""Timelines of generic queue-machine programs (``queue.no-loss``, ``queue.stale-ack``).

The program is replayed on the run's own library (``queue_replay.py`` says why). One
lane per job: each claim's lease is a bar on its job's lane, labelled with the claim
and the worker that made it (``w0``, ``w1``: the machine's two connections), from the
step that made it to the step that ended it: the holder's ack or nack, a recovery,
another claim of the job, or the first step whose clock reaches the lease's end
(drawn as expired). A job lane rather than a worker lane because the machine's
workers hold several claims at once, and the failures are about one job: a stale ack
lands on the job's lane next to its new holder's live bar. Acks, nacks and extends are
marks on the job's lane (● taken, ○ refused), enqueues, recoveries and empty claims
on the ``queue`` lane, clock moves on ``clock``; the steps the machine's teardown runs
to drain the queue (``queue.no-loss``) are columns too, marked "drain". The red line
is the step after which the library and the model disagreed, on the job it names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from leasecheck.report.queue_replay import LibraryCall, QueueReplay, QueueStep, replay_queue
from leasecheck.report.timeline import Disagreement, Interval, Mark, Tick, Timeline, headline
from leasecheck.report.trace import Trace
from stateful_tests.queue_machine import Held

__all__ = ["queue_timeline"]

QUEUE, CLOCK = "queue", "clock"
_JOB = re.compile(r"job '([^']+)'")


@dataclass(frozen=True)
class _Lease:
    cid: str
    job: str
    worker: str
    start: int
    until: int


@dataclass
class _Builder:
    lanes: list[str] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    intervals: list[Interval] = field(default_factory=list)
    open: dict[str, _Lease] = field(default_factory=dict)
    jobs: dict[str, str] = field(default_factory=dict)
    """claim id -> its job (the lane its lease is drawn on)."""

    def lane(self, name: str) -> str:
        if name not in self.lanes:
            self.lanes.append(name)
        return name

    def mark(self, lane: str, step: QueueStep, label: str, kind: str) -> None:
        detail = f"#{step.number} at t={step.time} ms: {_said(step)}"
        self.marks.append(Mark(self.lane(lane), step.number, label, kind, step.number, detail))

    def close(self, cid: str, end: float, kind: str, note: str, open_end: bool = False) -> None:
        lease = self.open.pop(cid)
        label = f"{cid} · {lease.worker} · until t={lease.until}"
        detail = f"claim {cid} of job {lease.job!r} by {lease.worker}, lease until "
        detail += f"t={lease.until} ms; {note}"
        self.intervals.append(
            Interval(lease.job, lease.start, end, label, kind, lease.start, detail, open_end)
        )

    def step(self, step: QueueStep) -> None:
        for cid, lease in list(self.open.items()):
            if step.time >= lease.until and step.number > lease.start:
                self.close(cid, step.number - 0.5, "expired", f"expired at t={lease.until} ms")
        self.describe(step)
        for cid, lease in list(self.open.items()):
            job = step.after.job(lease.job)
            if job is None or job.holder != cid or job.state != "leased":
                now = job.state if job is not None else "gone"
                self.close(cid, step.number, "lease", f"ended at step {step.number} ({now})")
            elif job.until != lease.until:  # extended
                self.open[cid] = _Lease(cid, lease.job, lease.worker, lease.start, job.until)

    def describe(self, step: QueueStep) -> None:
        method, result = step.method, step.result
        if method == "advance_clock":
            self.mark(CLOCK, step, f"+{step.arguments.get('ms')} ms", "clock")
        elif method in ("enqueue", "first_job"):
            key = next((str(c.arguments[0]) for c in step.calls if c.method == "enqueue"), "")
            self.mark(QUEUE, step, f"enqueue {key}".strip(), "enqueue")
            self.lane(key or QUEUE)
        elif method == "claim":
            self.claimed(step, result)
        elif method == "recover":
            self.mark(QUEUE, step, f"recover → {_result(step, 'recover')}", "note")
        elif method in ("ack", "nack", "extend"):
            self.finished(step)

    def claimed(self, step: QueueStep, result: object) -> None:
        worker = f"w{step.arguments.get('conn', 0)}"
        if not isinstance(result, Held) or result.claim is None:
            self.mark(QUEUE, step, f"{worker} claim → None", "claim")
            return
        key = result.claim.job
        job = step.after.job(key)
        until = job.until if job is not None else step.time
        self.jobs[result.cid] = key
        self.open[result.cid] = _Lease(result.cid, key, worker, step.number, until)
        self.mark(key, step, f"{worker} claim {result.cid}", "claim")

    def finished(self, step: QueueStep) -> None:
        held = step.arguments.get("held")
        cid = held.cid if isinstance(held, Held) else "?"
        lane = held.claim.job if isinstance(held, Held) and held.claim is not None else QUEUE
        taken = _result(step, step.method) is True
        verb = step.method if step.method != "extend" else f"extend +{step.arguments['lease_ms']}"
        label = f"{verb} {cid} ✓" if taken else f"{verb} {cid} refused"
        self.mark(lane, step, label, "commit" if taken else "refused")


def _result(step: QueueStep, method: str) -> object:
    """What the library's ``method`` call returned in ``step`` (an error: the error)."""
    found: LibraryCall | None = next((c for c in step.calls if c.method == method), None)
    return found.result if found is not None else None


def _said(step: QueueStep) -> str:
    calls = "; ".join(
        f"connection {c.connection}: {c.method}{_args(c)} → {c.result!r}" for c in step.calls
    )
    return f"{step.line or step.method}" + (f" ({calls})" if calls else "")


def _args(call: LibraryCall) -> str:
    return "(" + ", ".join(repr(a) for a in call.arguments) + ")"


def queue_timeline(trace: Trace) -> Timeline:
    """Replay ``trace.program`` on ``trace.adapter`` and draw its leases and the failure."""
    run = replay_queue(_adapter(trace), trace.property, trace.program)
    builder = _Builder()
    if any(step.method == "advance_clock" for step in run.steps):
        builder.lane(CLOCK)
    builder.lane(QUEUE)
    for step in run.steps:
        builder.step(step)
    last = run.failed_after
    for cid in list(builder.open):
        builder.close(cid, last + 0.5, "lease", "still held when the run stopped", True)
    ticks = tuple(
        Tick(s.number, f"#{s.number}", f"t={s.time}" + (" drain" if s.drain else ""))
        for s in run.steps
    )
    failing = next((s for s in run.steps if s.number == last), None)
    text = _failure_text(run, trace)
    lane = _blamed(builder, run, failing)
    return Timeline(
        f"{trace.property}: the shrunk program, replayed on {run.adapter}", "steps",
        tuple(builder.lanes), ticks, tuple(builder.intervals), tuple(builder.marks),
        Disagreement(builder.lane(lane), last, last, text), _caption(run),
    )  # fmt: skip


def _adapter(trace: Trace) -> str:
    """The run's ``--adapter``; else the library name the failure names (``violated by X``)."""
    if trace.adapter:
        return trace.adapter
    for line in trace.message:
        if " violated by " in line:
            return line.split(" violated by ", 1)[1].split(": ", 1)[0].split(" (", 1)[0]
    return "lease-worker"


def _blamed(builder: _Builder, run: QueueReplay, step: QueueStep | None) -> str:
    """The lane of the job the failure names, else of the failing step's job."""
    named = _JOB.search(run.failure)
    if named and named.group(1) in builder.lanes:
        return named.group(1)
    if step is None:
        return QUEUE
    held = step.arguments.get("held")
    if isinstance(held, Held) and held.claim is not None:
        return held.claim.job
    if isinstance(step.result, Held) and step.result.claim is not None:
        return step.result.claim.job
    return CLOCK if step.method == "advance_clock" else QUEUE


def _failure_text(run: QueueReplay, trace: Trace) -> str:
    said = (run.failure.splitlines() or [headline(trace)])[0]
    said = said.split(" violated by ", 1)[-1].split(": ", 1)[-1] if run.failure else said
    if run.in_check:
        return f"the check after step {run.failed_after} failed: {said}"
    return said


def _caption(run: QueueReplay) -> str:
    text = (
        f"One column per operation of the program (the observe() checks left out), replayed "
        f"on {run.adapter}, with the model's clock (ms) under it; 'drain' columns are the "
        "teardown's recovery. One lane per job; bars are its leases (claim · worker), from "
        "the claim to the step that ended them; the red line is where the library and "
        "the model disagree."
    )
    return f"{text} Note: {run.problem}" if run.problem else text
