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
Claims read every job, so histories are never split per key.

With ``real_time`` (a library on the system clock) time is not moved by ``advance``
but read from the stamps: an operation runs at its invocation (ms), or at the time
the previous one in the order ran if that is later. The harness keeps every call
clear of the instants a lease may end (``adapters.timing``), so any instant of a
call's interval gives the same verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from leasecheck.models import queue_model as qm
from leasecheck.models._history import Operation, SequentialSpec
from leasecheck.models.queue_ops import REFUSABLE, QueueOp, QueueOutcome

__all__ = ["QueueSpec"]

_REFUSABLE = REFUSABLE
"""Calls a library may refuse (False, or an error): a refusal changes nothing."""


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
    ) -> None:
        self.ack_deletes = ack_deletes
        self.tolerate = tolerate
        """Properties whose mismatches are adopted (the library does not promise them:
        they are judged by their own property, not counted again here)."""
        self.real_time = real_time

    def _step(self, state: qm.QueueState, op: Operation, value: Any) -> qm.Step:
        """The model's step for ``op`` had it reported ``value`` (the contract's record)."""
        return queue_op(op).step(state, QueueOutcome(value), self.ack_deletes, self.real_time)

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
