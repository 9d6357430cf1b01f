"""The generic lease-queue model as a ``SequentialSpec`` for the linearizability checker.

Operations (``Operation.name`` and ``args``), as the race harness records them:

- ``enqueue(job)``, ``advance(ms)``, ``recover()`` -> count: the harness's own calls;
- ``claim(cid, lease_ms)`` -> the job key or None;
- ``ack(cid, job)`` / ``nack(cid, job)`` -> True (taken) or False / raised (refused);
- ``extend(cid, job, lease_ms)`` -> the same (the interleavings of ``queue.interleavings``);
- ``observe()`` -> a tuple of (job, state) pairs read from the store.

Every ``Mismatch`` of ``models.queue_model`` means "no explanation" here: a history
is linearizable only if some order respects real time and keeps every generic
property, except those named in ``tolerate`` (what the library does not promise is
judged by that property alone, and adopted here). An unknown outcome (a process
killed mid-call) may or may not have had its effect; a raised ack is a refusal.
Claims read every job, so histories are never split per key. A stale ack (its job
claimed again since) that the library took may also have completed the job where
``queue.stale-ack`` is tolerated: adopted whenever it happened, not only when an
``observe`` read it before the next call on that job.

With ``skips_locked`` (a library whose claim is PostgreSQL's ``FOR UPDATE SKIP LOCKED``:
a row another transaction holds locked is passed over, not waited for) a claim that
returned None may have skipped the jobs the calls running beside it held locked: any
job beside another claim (its scan locks candidates it may not take), the call's own
job beside an ack, nack or extend. ``beside(history)`` finds them by the calls'
intervals; those jobs then may stay as they were instead of being given up.

With ``real_time`` (a library on the system clock) time is not moved by ``advance``
but read from the stamps: an operation runs at its invocation (ms), or at the time
the previous one in the order ran if that is later. The harness keeps every call
clear of the instants a lease may end (``adapters.timing``), so any instant of a
call's interval gives the same verdict.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from leasecheck.models import queue_model as qm
from leasecheck.models._history import Operation, SequentialSpec
from leasecheck.models.queue_ops import REFUSABLE, QueueOp, QueueOutcome

__all__ = ["QueueSpec"]

_REFUSABLE = REFUSABLE
"""Calls a library may refuse (False, or an error): a refusal changes nothing."""

_LOCKING = frozenset({"claim", "ack", "nack", "extend"})
"""Calls that lock rows of the store while they run (the harness's own calls run alone)."""

Locked = tuple[bool, frozenset[str]]
"""What the calls beside a claim may have held locked: every job (another claim ran), or
these jobs (acks, nacks, extends of them ran)."""


def queue_op(op: Operation) -> QueueOp:
    """The history entry's call, which a generic-queue history holds as the record."""
    call = op.call
    if not isinstance(call, QueueOp):
        raise TypeError(f"a generic-queue history holds {call!r} at {op.label()}")
    return call


def _no_effect(op: Operation) -> bool:
    """A claim or sweep that raised: the call took no effect (a refusable verb's error
    is a refusal instead)."""
    return op.error is not None and op.name not in _REFUSABLE


class QueueSpec(SequentialSpec[qm.QueueState]):
    """``models.queue_model`` for the checker; ``ack_deletes`` from the adapter's capabilities."""

    def __init__(
        self,
        ack_deletes: bool = False,
        tolerate: frozenset[str] = frozenset(),
        real_time: bool = False,
        skips_locked: bool = False,
    ) -> None:
        self.ack_deletes = ack_deletes
        self.tolerate = tolerate
        """Properties whose mismatches are adopted (the library does not promise them:
        they are judged by their own property, not counted again here)."""
        self.real_time = real_time
        self.skips_locked = skips_locked
        self.locked: Mapping[tuple[str, int], Locked] = {}
        """Per claim that returned None (process, index): what ran beside it (``beside``)."""

    def beside(self, history: Sequence[Operation]) -> QueueSpec:
        """This spec, knowing what ran beside each claim of ``history`` that returned None
        (unchanged unless ``skips_locked``)."""
        if not self.skips_locked:
            return self
        found: dict[tuple[str, int], Locked] = {}
        for op in history:
            if op.name == "claim" and op.ok and op.result is None:
                found[(op.process, op.index)] = _locked_beside(op, history)
        spec = copy.copy(self)
        spec.locked = found
        return spec

    def _step(self, state: qm.QueueState, op: Operation, value: Any) -> qm.Step:
        """The model's step for ``op`` had it reported ``value`` (the contract's record)."""
        if op.name == "claim" and value is None and (op.process, op.index) in self.locked:
            every, keys = self.locked[(op.process, op.index)]
            skippable = frozenset(job.key for job in state.jobs) if every else keys
            return qm.claim(state, op.args["cid"], op.args["lease_ms"], None, skippable)
        after, mismatch = queue_op(op).step(
            state, QueueOutcome(value), self.ack_deletes, self.real_time
        )
        if op.name == "ack" and value is True and mismatch is None:
            after = [*after, *self._stale_completes(state, op)]
        return list(dict.fromkeys(after)), mismatch

    def _stale_completes(self, state: qm.QueueState, op: Operation) -> list[qm.QueueState]:
        """A stale ack the library took (its job claimed again since) that completed the job:
        what a library that does not promise ``queue.stale-ack`` may do (pgqueuer's ack
        deletes by job id alone). The model keeps it as a possibility, so that whether
        it is adopted does not depend on an ``observe`` coming before the next call on
        the job (the holder's nack of a deleted job changes nothing)."""
        job = state.job(op.args["job"])
        if "queue.stale-ack" not in self.tolerate or job is None:
            return []
        if job.state != "leased" or job.holder == op.args["cid"]:
            return []
        return [state.put(qm.Job(job.key, "done"))]

    def _value(self, op: Operation) -> Any:
        if op.outcome is None:
            return None
        if op.outcome.error is None:
            return op.outcome.result
        return False if op.name in _REFUSABLE else None

    def _at(self, state: qm.QueueState, op: Operation) -> qm.QueueState:
        """Real time: ``state`` read at ``op``'s invocation (never earlier than it is)."""
        if not self.real_time:
            return state
        return qm.advance(state, max(0, op.invoked_ns // 1_000_000 - state.now))[0][0]

    def step(self, state: qm.QueueState, op: Operation) -> Sequence[qm.QueueState]:
        state = self._at(state, op)
        if _no_effect(op):
            return [state]  # a claim or sweep that raised (e.g. busy) took no effect
        if op.outcome is None:
            return self._unknown(state, op)
        after, mismatch = self._step(state, op, self._value(op))
        return [] if mismatch is not None and mismatch.prop not in self.tolerate else after

    def _unknown(self, state: qm.QueueState, op: Operation) -> list[qm.QueueState]:
        """A killed call: no effect, or the effect of any outcome it could have had."""
        found = [state]
        if op.name in _REFUSABLE:
            found += self._step(state, op, True)[0]
        elif op.name == "claim":
            for job in state.jobs:
                after, mismatch = self._step(state, op, job.key)
                found += [] if mismatch is not None else after
        return list(dict.fromkeys(found))

    def mismatch(self, state: qm.QueueState, op: Operation) -> qm.Mismatch | None:
        """What the model refuses in ``op``'s outcome from ``state`` (the property, as data)."""
        if op.outcome is None or _no_effect(op):
            return None
        return self._step(self._at(state, op), op, self._value(op))[1]

    def explain(self, state: qm.QueueState, op: Operation) -> str:
        state = self._at(state, op)
        if op.outcome is not None and op.outcome.error is None:
            _, mismatch = self._step(state, op, op.outcome.result)
            if mismatch is not None:
                return f"{mismatch.prop}: {mismatch.text}"
        return "the generic model does not allow this outcome here"

    def describe_state(self, state: qm.QueueState) -> str:
        return state.describe()


def _locked_beside(claim: Operation, history: Sequence[Operation]) -> Locked:
    """What the other processes' calls that overlapped ``claim`` in time may have locked."""
    every, keys = False, set()
    for op in history:
        if op.process == claim.process or op.name not in _LOCKING or not _overlap(op, claim):
            continue
        if op.name == "claim":
            every = True
        else:
            keys.add(str(op.args["job"]))
    return every, frozenset(keys)


def _overlap(first: Operation, second: Operation) -> bool:
    """The two calls' intervals meet (a call that never returned runs to the end)."""
    never = 2**63
    first_end = never if first.returned_ns is None else first.returned_ns
    second_end = never if second.returned_ns is None else second.returned_ns
    return first.invoked_ns <= second_end and second.invoked_ns <= first_end
