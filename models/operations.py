"""Every contract's operation record and outcome, read back from its JSON by the
contract it names.

A harness puts an operation's record beside its evidence as JSON (``Step.call``:
``LeaseOp.to_json()``, ``JobOp.to_json()``, ``QueueOp.to_json()`` or a history's
``HarnessStep``); ``record_from_json`` gives the record back, so a reader (the report)
prints the record's own line and kind, never a harness's words about it.
``outcome_from_json`` does the same for what a call did (``LeaseOutcome``,
``JobOutcome``, ``QueueOutcome``: the outcomes a history's entries hold).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leasecheck.models._history import HarnessStep, Outcome
from leasecheck.models.job_ops import JobOp, JobOutcome
from leasecheck.models.lease_ops import LeaseOp, LeaseOutcome
from leasecheck.models.queue_ops import QueueOp, QueueOutcome

__all__ = ["Outcome", "Record", "outcome_from_json", "record_from_json"]

Record = LeaseOp | JobOp | QueueOp | HarnessStep
"""One operation of a contract (or a step of the harness's own)."""


def record_from_json(data: Mapping[str, Any]) -> Record | None:
    """The record ``data`` is the JSON of; None when it names no contract or does not
    bind (written by another version of leasecheck)."""
    contract, kind = data.get("contract"), data.get("kind")
    try:
        if contract == "lease":
            return LeaseOp.from_json(data)
        if contract == "jobs":
            return JobOp.from_json(data)
        if contract == "queue":
            return QueueOp.from_json(data)
        if contract == "harness" and kind in ("snapshot", "open", "reopen"):
            return HarnessStep(kind)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return None


_OUTCOMES: Mapping[str, type[LeaseOutcome] | type[JobOutcome] | type[QueueOutcome]] = {
    "lease": LeaseOutcome,
    "jobs": JobOutcome,
    "queue": QueueOutcome,
}


def outcome_from_json(data: Mapping[str, Any]) -> Outcome | None:
    """The outcome ``data`` is the JSON of, by the contract it names; None when it names
    none or does not read back (written by another version of leasecheck)."""
    cls = _OUTCOMES.get(str(data.get("contract")))
    if cls is None:
        return None
    try:
        return cls.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
