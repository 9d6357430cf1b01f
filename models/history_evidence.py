"""The evidence of a history no sequential order explains (``models.linearizability``).

Each operation is a step on its process's lane, from its invocation to its response
in wall milliseconds since the first invocation (one clock domain: ``_history``);
the target's side is what the operation returned, the model's is the checker's
reason for each operation that may come next but is not explained. The step where
they part is the first such operation. A lease worker's or JobQueue's leases are not
drawn unless the caller gives the model's state before the history.

A lease worker's or JobQueue's history (a controlled schedule of ``lease.interleavings``
or ``jobs.interleavings``, whose axis counts schedule steps, or a linearizability
history in wall ms), given the model's state before it, draws each lease on its
claimer's lane, on both sides. The target's lease is what a ``claim`` or ``run_once``
(a ticket dict: id, token, lease_until) or a ``poll`` (a ``Lease``: job_id, token,
lease_until) returned. The model's is what the model's own step of that call returned,
the model stepping every contract call of the history once, in the order the calls
returned (each op's record: ``LeaseOp.expect``, ``JobOp.step``). A bar starts where its
call began. Its ``until`` is where the model clock (each call's ``now_ms`` or ``now``)
first reaches the lease's end: the start of the first later call that reads a clock at
or past it, or the history's end when none does. It stops being live before that
(``ended``) at the return of a finish (``run_once``'s own, unless stale), complete or
fail of its job and token that the same side accepted; on the model's side at the start
of a later lease of its job, on the target's only where the model's lease from the same
call had ended by then (so two live leases of one job stay visible, overlapping).

A generic queue's controlled schedule (``queue.interleavings``) draws each claim's lease
on its claimer's lane, as the library reported it (``Granted``: its token, its end where
the library says one, else the lease it was asked for) and as the generic model expects
it (the lease asked for, from the model clock at the claim). That clock moves only at
``advance`` steps, so a lease ends at the step whose advance passes its end, or, if it
outlives the history, at the history's end; it stops being live before that when its
claim's ack or nack is taken, and an extend that is taken renews it. A second claim of
the job does not end it: two live leases of one job are what a picture must show.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from leasecheck.models._history import Operation
from leasecheck.models.contracts import Snapshot
from leasecheck.models.evidence import Evidence, Lease, Recorder, Side, Token, Unit
from leasecheck.models.job_model import JobState
from leasecheck.models.job_ops import JobOp
from leasecheck.models.lease_ops import LeaseOp
from leasecheck.models.linearizability import Verdict
from leasecheck.models.queue_model import QueueState
from leasecheck.models.queue_ops import Granted, QueueOutcome
from leasecheck.queue_impl.jobs import Lease as JobLease
from leasecheck.queue_impl.jobs import RetryPolicy

__all__ = ["history_evidence", "queue_schedule_evidence", "schedule_evidence"]

_Leases = Callable[[Sequence[Operation], dict[tuple[str, int], int], Callable[[int], float]],
                   list[Lease]]  # fmt: skip
"""The leases of a sorted history, given each entry's step index and the time scale."""


def history_evidence(
    verdict: Verdict,
    summary: str,
    initial: Snapshot | JobState | QueueState | None = None,
    policy: RetryPolicy | None = None,
    origin: float | None = None,
) -> Evidence:
    """``verdict``'s history as evidence, parting at its first unexplained operation;
    given the model's state before it (and a JobQueue's ``policy``), with each claim's or
    poll's lease on both sides, as in ``schedule_evidence``. For a generic queue
    (``initial`` a ``QueueState``) each claim's lease is drawn as in
    ``queue_schedule_evidence``; ``origin`` is the shared clock's reading at model time 0
    (None on a real clock: the library's lease end is then drawn as the lease it was
    asked for)."""
    reasons = {
        (op.process, op.index): reason
        for op, reason in zip(verdict.conflicting, verdict.reasons, strict=True)
    }
    found = (
        _queue_leases_from(origin)
        if isinstance(initial, QueueState)
        else _leases_from(initial, policy)
    )
    return _evidence(verdict.history, summary, "wall ms", 1_000_000, reasons, verdict.conflicting,
                     leases=found)  # fmt: skip


def schedule_evidence(
    history: Sequence[Operation],
    summary: str,
    step_ns: int,
    kind: str,
    initial: Snapshot | JobState | None = None,
    policy: RetryPolicy | None = None,
) -> Evidence:
    """A controlled schedule's history (``lease.interleavings``, ``jobs.interleavings``),
    whose clock counts scheduling steps of ``step_ns`` each: one lane per ``kind``
    (process or thread), each call a bar from the step it began to the step it returned;
    it parts after the last step (the check that failed judges the whole schedule).

    Given ``initial``, the model's state before the history (a lease worker's seeded
    ``Snapshot``, or a ``JobState`` with the queue's retry ``policy``), each claim's or
    poll's lease is drawn on both sides (the module's docstring says where a bar ends)."""
    return _evidence(history, summary, "step", step_ns, {}, (), kind, _leases_from(initial, policy))


def _leases_from(initial: Snapshot | JobState | None, policy: RetryPolicy | None) -> _Leases | None:
    """The leases of a lease-worker or JobQueue history from ``initial`` (None: none)."""
    if initial is None:
        return None
    start = initial

    def leases(
        ops: Sequence[Operation], index_of: dict[tuple[str, int], int], at: Callable[[int], float]
    ) -> list[Lease]:
        return _contract_leases(ops, index_of, at, start, policy)

    return leases


def queue_schedule_evidence(
    history: Sequence[Operation], summary: str, step_ns: int, origin: float
) -> Evidence:
    """``schedule_evidence`` of a generic queue's schedule, with each claim's lease on
    both sides; ``origin`` is the shared clock's reading at model time 0 (a library's
    lease end, ``Granted.until``, is in the clock's seconds)."""
    return _evidence(
        history, summary, "step", step_ns, {}, (), "process", _queue_leases_from(origin)
    )


def _queue_leases_from(origin: float | None) -> _Leases:
    """The leases of a generic queue's history, the library's lease ends read from the
    shared clock's ``origin`` (None: unknown, the asked lease is drawn)."""

    def leases(
        ops: Sequence[Operation], index_of: dict[tuple[str, int], int], at: Callable[[int], float]
    ) -> list[Lease]:
        return _queue_leases(ops, index_of, at, origin)

    return leases


def _evidence(
    ops: Sequence[Operation],
    summary: str,
    unit: Unit,
    per_unit_ns: int,
    reasons: dict[tuple[str, int], str],
    conflicting: Sequence[Operation],
    kind: str = "process",
    leases: _Leases | None = None,
) -> Evidence:
    history = sorted(ops, key=lambda op: (op.invoked_ns, op.process, op.index))
    origin = min((op.invoked_ns for op in history), default=0)
    last = max((op.returned_ns or op.invoked_ns for op in history), default=origin)

    def at(ns: int) -> float:
        return _scaled(ns, origin, per_unit_ns)

    record = Recorder(unit)
    index_of: dict[tuple[str, int], int] = {}
    for op in history:
        record.actor(op.process, kind)
        job, token = _job_token(op)
        end = op.returned_ns if op.returned_ns is not None else last
        index_of[(op.process, op.index)] = record.step(
            op.process, f"{op.label()} {op.call_text()}", op.name,
            _scaled(op.invoked_ns, origin, per_unit_ns), job, token, target=op.outcome_text(),
            model=reasons.get((op.process, op.index)), end=_scaled(end, origin, per_unit_ns),
            call=op.call.to_json(),
        )  # fmt: skip
    for lease in [] if leases is None else leases(history, index_of, at):
        record.lease(lease)
    parted = min((index_of[(op.process, op.index)] for op in conflicting), default=None)
    return record.evidence(summary, parted)


def _scaled(ns: int, origin: int, per_unit_ns: int) -> float:
    return round((ns - origin) / per_unit_ns, 3)


def _job_token(op: Operation) -> tuple[str | None, Token]:
    """The job and token an operation names (a ticket argument) or got (its result)."""
    granted = _granted(op)
    if granted is not None:
        return granted.job, granted.token
    value = op.result
    for ticket in (op.args.get("ticket"), op.args.get("lease"), value):
        if isinstance(ticket, dict) and isinstance(ticket.get("id"), str):
            token = ticket.get("token")
            return ticket["id"], token if type(token) is int else None
        job = getattr(ticket, "job_id", None) or getattr(ticket, "job", None)
        if isinstance(job, str):
            token = getattr(ticket, "token", None)
            return job, token if type(token) is int else None
    job = op.args.get("job_id") or op.args.get("job")
    return (job if isinstance(job, str) else None), None


def _granted(op: Operation) -> Granted | None:
    """The lease a generic queue's claim got, as the library reported it."""
    outcome = op.outcome
    if op.name != "claim" or not isinstance(outcome, QueueOutcome) or outcome.error:
        return None
    return outcome.granted


def _queue_leases(
    history: Sequence[Operation], index_of: dict[tuple[str, int], int],
    at: Callable[[int], float], origin: float | None,
) -> list[Lease]:  # fmt: skip
    """Each claim's lease on both sides (the module's docstring says how it is drawn)."""
    clock = _ModelClock(history, at)
    found = []
    for number, op in enumerate(history):
        granted = _granted(op)
        if granted is None:
            continue
        now, asked = clock.now(op.invoked_ns), int(op.args["lease_ms"])
        told = None
        if granted.until is not None and origin is not None:
            told = round((granted.until - origin) * 1000)
        ends: dict[Side, int] = {"target": now + asked if told is None else told,
                                 "model": now + asked}  # fmt: skip
        released, renewed = _released(history[number + 1 :], str(op.args["cid"]), clock)
        for side, until_ms in ends.items():
            until_ms = max(until_ms, renewed or 0)
            until = clock.when(until_ms)
            ended = released if released is not None and released < until else None
            found.append(Lease(side, granted.job, granted.token, op.process, at(op.invoked_ns),
                               until, index_of[(op.process, op.index)], ended))  # fmt: skip
    return found


def _released(
    later: Sequence[Operation], cid: str, clock: _ModelClock
) -> tuple[float | None, int | None]:
    """When the claim ``cid`` stopped being live (its ack or nack taken), and the latest
    end (model ms) an extend of it that was taken asked for."""
    renewed = None
    for op in later:
        if op.args.get("cid") != cid or op.result is not True:
            continue
        if op.name in ("ack", "nack"):
            return clock.at(op.returned_ns or op.invoked_ns), renewed
        if op.name == "extend":
            renewed = clock.now(op.invoked_ns) + int(op.args["lease_ms"])
    return None, renewed


class _ModelClock:
    """The generic model's clock over a schedule: moved only by the ``advance`` steps."""

    def __init__(self, history: Sequence[Operation], at: Callable[[int], float]) -> None:
        self.at = at
        self.moves: list[tuple[int, int, int]] = []
        """(invoked ns, returned ns, the clock after it in ms) of each advance."""
        total = 0
        for op in history:
            if op.name == "advance" and op.ok:
                total += int(op.args["ms"])
                self.moves.append((op.invoked_ns, op.returned_ns or op.invoked_ns, total))
        self.end = max((op.returned_ns or op.invoked_ns for op in history), default=0)

    def now(self, ns: int) -> int:
        """The clock (ms) at instant ``ns``: every advance that returned by then."""
        return max((total for _, returned, total in self.moves if returned <= ns), default=0)

    def when(self, ms: int) -> float:
        """Where on the axis the clock reaches ``ms``: the start of the advance that moves
        it there (the lease runs out during it), else the history's end."""
        moved = next((invoked for invoked, _, total in self.moves if total >= ms), None)
        return self.at(self.end if moved is None else moved)


_Said = tuple[bool, object]
"""What one side's call did: (it returned, what it returned)."""
_Got = tuple[str, Token, int, bool]
"""A lease a call got: (job, token, its end in model ms, finished by the call itself)."""


def _contract_leases(
    history: Sequence[Operation], index_of: dict[tuple[str, int], int],
    at: Callable[[int], float], initial: Snapshot | JobState, policy: RetryPolicy | None,
) -> list[Lease]:  # fmt: skip
    """Each lease a lease-worker or JobQueue call got, the model's first, then the
    target's (the module's docstring says how it is drawn); ``history`` is sorted by
    invocation."""
    said = _model_steps(history, initial, policy)

    def side_said(side: Side, number: int) -> _Said:
        op = history[number]
        return (op.ok, op.result) if side == "target" else said.get(number, (False, None))

    end = at(max((op.returned_ns or op.invoked_ns for op in history), default=0))
    model: dict[int, Lease] = {}
    found = []
    for side in ("model", "target"):
        for number, op in enumerate(history):
            got = _got(op, *side_said(side, number))
            if got is None:
                continue
            job, token, until_ms, done = got
            later = range(number + 1, len(history))
            reached = next((n for n in later if (_now(history[n]) or -1) >= until_ms), None)
            until = end if reached is None else at(history[reached].invoked_ns)
            stops = [op.returned_ns or op.invoked_ns] if done else []
            for other in later:
                stop = _ends(history[other], *side_said(side, other), job, token)
                if stop is None:
                    continue
                ns, taken_over = stop
                if taken_over and side == "target" and not _over(model.get(number), at(ns)):
                    continue  # a later lease of the job while the model holds this one: both live
                stops.append(ns)
            ended = min(stops, default=None)
            lease = Lease(side, job, token, op.process, at(op.invoked_ns), until,
                          index_of[(op.process, op.index)],
                          None if ended is None or at(ended) >= until else at(ended))  # fmt: skip
            if side == "model":
                model[number] = lease
            found.append(lease)
    return found


def _over(lease: Lease | None, at: float) -> bool:
    """The model's lease of the same call had ended by ``at`` (it has one)."""
    return lease is not None and lease.end <= at


def _model_steps(
    history: Sequence[Operation], initial: Snapshot | JobState, policy: RetryPolicy | None
) -> dict[int, _Said]:
    """The model's result of each contract call (by its position in ``history``),
    stepping every call once in the order the calls returned."""
    order = sorted(
        range(len(history)),
        key=lambda n: (history[n].returned_ns or math.inf, history[n].invoked_ns),
    )
    state: Snapshot | JobState = initial
    said: dict[int, _Said] = {}
    for number in order:
        call = history[number].call
        if isinstance(call, LeaseOp) and isinstance(state, Snapshot):
            state, outcome = call.expect(state)
            said[number] = (outcome.error is None, outcome.result)
        elif isinstance(call, JobOp) and isinstance(state, JobState):
            rules = policy if policy is not None else RetryPolicy(3, 0, 0)
            state, answer = call.step(state, rules)
            said[number] = (answer.error is None, answer.result)
    return said


def _got(op: Operation, ok: bool, value: object) -> _Got | None:
    """The lease a claim, ``run_once`` or poll got, on the side that said ``value``."""
    if not ok:
        return None
    if op.name == "poll" and isinstance(value, JobLease):
        return value.job_id, _token(value.token), value.lease_until, False
    if op.name not in ("claim", "run_once", "run_file") or not isinstance(value, dict):
        return None
    job, until = value.get("id"), value.get("lease_until")
    if not isinstance(job, str):
        return None
    if type(until) is not int:  # run_once's result: its lease is the one it asked for
        until = int(op.args["now_ms"]) + int(op.args.get("lease_ms", 1000))
    done = op.name != "claim" and value.get("status") != "stale"
    return job, _token(value.get("token")), until, done


def _ends(
    op: Operation, ok: bool, value: object, job: str, token: Token
) -> tuple[int, bool] | None:
    """Where (ns) ``op``, which one side says returned ``value`` (``ok``), ends that side's
    lease of ``job`` under ``token``: the return of a finish, complete or fail of it that
    was accepted, or the start of a later lease of the job (then True)."""
    if not ok:
        return None
    if op.name in ("finish", "complete", "fail") and _handed_in(op) == (job, token):
        return None if value is False else (op.returned_ns or op.invoked_ns, False)
    got = _got(op, ok, value)
    return None if got is None or got[0] != job else (op.invoked_ns, True)


def _handed_in(op: Operation) -> tuple[object, object]:
    """The job and token a finish's ticket, or a complete's or fail's arguments, name."""
    args = op.args
    ticket = args.get("ticket")
    if isinstance(ticket, dict):
        return ticket.get("id"), ticket.get("token")
    return args.get("job_id"), args.get("token")


def _now(op: Operation) -> int | None:
    """The model clock a call reads (its ``now_ms``, or a JobQueue call's ``now``)."""
    call = op.call
    if isinstance(call, JobOp):
        return call.now
    now = op.args.get("now_ms") if isinstance(call, LeaseOp) else None
    return now if type(now) is int else None


def _token(value: object) -> Token:
    return value if isinstance(value, int | str) else None
