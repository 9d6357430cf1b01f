"""The reference model of the lease worker contract (lease-worker.md), with no SQLite.

The state is a ``Snapshot``: both tables as plain tuples, rows in ``seq`` order.
Each operation is a pure function ``op(state, ...) -> Step``: the state after the
commit, the result, and the hook points it passes, in order. A point listed before
``COMMIT`` is one where a raising fault rolls everything back; the model keeps the
committed state only for hooks in ``Step.after_commit``. ``LeaseModel`` wraps the
functions as a mutable ``LeaseQueue`` so a state machine can drive it next to a
target; the explorer and the linearizability checker use the functions directly.

Every rule below is a sentence of lease-worker.md; where the spec leaves a choice
open (the order in which several invalid arguments are reported, behaviour past
token 10**15), the model takes one reading and the checks accept every reading.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from leasecheck.models.contracts import ClockFunction, Fault, JobRow, RedriveRow, Send, Snapshot

__all__ = [
    "MAX_NOW",
    "BadAck",
    "Conflict",
    "LeaseModel",
    "Permanent",
    "Retryable",
    "Step",
    "claim",
    "enqueue",
    "finish",
    "holds_lease",
    "is_time",
    "redrive",
    "retry_delay",
    "retry_delay_readings",
]

MAX_NOW = 10**15 - 60000
MAX_TOKEN = 10**15
EVENT_KEYS = frozenset({"id", "qty"})
TICKET_KEYS = frozenset({"id", "qty", "owner", "token", "attempt", "lease_until"})
OUTCOMES = ("ok", "retry", "permanent")
_IDENTIFIER = re.compile(r"[A-Za-z0-9_-]{1,64}")


class Conflict(Exception):
    """Same id enqueued again with another qty."""


class Retryable(Exception):
    """A send failed in a way worth retrying."""


class Permanent(Exception):
    """A send was refused for good."""


class BadAck(Exception):
    """A send returned something other than exactly True."""


@dataclass(frozen=True)
class Step:
    """What one operation does: the committed state, its result and its hook points.

    ``before_commit`` hooks run inside the transaction (a raising fault there rolls
    back to the old state); ``after_commit`` hooks run after it (the new state stays).
    """

    state: Snapshot
    result: Any
    before_commit: tuple[str, ...] = ()
    after_commit: tuple[str, ...] = ()


# --- value rules -------------------------------------------------------------


def is_identifier(value: object) -> bool:
    return type(value) is str and _IDENTIFIER.fullmatch(value) is not None


def is_int_in(value: object, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def is_time(value: object) -> bool:
    return is_int_in(value, 0, MAX_NOW)


def _identifier(name: str, value: object) -> str:
    if not is_identifier(value):
        raise ValueError(
            f"expected {name} to be an identifier (1-64 ASCII letters, digits, _ or -)"
            f" but got {name}={value!r}"
        )
    assert isinstance(value, str)
    return value


def _int(name: str, value: object, low: int, high: int) -> int:
    if not is_int_in(value, low, high):
        raise ValueError(
            f"expected {name} to be an int from {low} to {high} but got {name}={value!r}"
        )
    assert isinstance(value, int)
    return value


def _time(name: str, value: object) -> int:
    return _int(name, value, 0, MAX_NOW)


def _jitter(value: object) -> float:
    # The range before isfinite: an int past a float's range (10**400) is out of range,
    # a ValueError, where math.isfinite would raise OverflowError converting it.
    if type(value) not in (int, float) or not 0 <= value <= 1 or not math.isfinite(value):  # type: ignore[arg-type, operator]
        raise ValueError(
            f"expected jitter to be an int or float from 0 to 1 but got jitter={value!r}"
        )
    assert isinstance(value, int | float)
    return value


# --- retry_delay ---------------------------------------------------------------


def _capped(attempt: object, base_ms: object, cap_ms: object) -> int:
    n = _int("attempt", attempt, 1, 16)
    base = _int("base_ms", base_ms, 1, 60000)
    cap = _int("cap_ms", cap_ms, base, 60000)
    doubled: int = base * 2 ** (n - 1)
    return min(cap, doubled)


def retry_delay(attempt: object, base_ms: object, cap_ms: object, jitter: object) -> int:
    """floor(min(cap_ms, base_ms * 2**(attempt-1)) * jitter): cap, then jitter, then floor."""
    capped = _capped(attempt, base_ms, cap_ms)
    return math.floor(capped * _jitter(jitter))


def retry_delay_readings(
    attempt: object, base_ms: object, cap_ms: object, jitter: object
) -> set[int]:
    """Every result a correct target may give for these arguments.

    The spec says floor(capped * jitter) but not in which arithmetic: floating point
    (1000 * 0.7 == 700.0), the exact binary value of the float (699.99... -> 699) or
    the decimal the user wrote (0.7 -> 700). For dyadic jitters (0.25, 0.5, ...) all
    three agree, which is why the state machines draw run_once's jitter from those.
    """
    capped, ratio = _capped(attempt, base_ms, cap_ms), _jitter(jitter)
    return {
        math.floor(capped * ratio),
        math.floor(capped * Fraction(ratio)),
        math.floor(capped * Fraction(repr(ratio))),
    }


# --- operations -------------------------------------------------------------------


def _with_job(state: Snapshot, index: int, row: JobRow) -> Snapshot:
    return replace(state, jobs=(*state.jobs[:index], row, *state.jobs[index + 1 :]))


def _index(state: Snapshot, job_id: object) -> int | None:
    return next((i for i, row in enumerate(state.jobs) if row.id == job_id), None)


def _exact_dict(name: str, value: object, keys: frozenset[str]) -> dict[str, Any]:
    if type(value) is not dict or set(value) != keys:
        raise ValueError(
            f"expected {name} to be a dict with exactly the keys {sorted(keys)}"
            f" but got {name}={value!r}"
        )
    return value


def enqueue(
    state: Snapshot, event: object, now_ms: object, ttl_ms: object, max_attempts: object = 3
) -> Step:
    """Insert a new pending job; the same id and qty again changes nothing."""
    checked = _exact_dict("event", event, EVENT_KEYS)
    job_id = _identifier("event['id']", checked["id"])
    qty = _int("event['qty']", checked["qty"], 1, 1000)
    now = _time("now_ms", now_ms)
    ttl = _int("ttl_ms", ttl_ms, 1, 60000)
    budget = _int("max_attempts", max_attempts, 1, 16)
    existing = state.job(job_id)
    if existing is not None:
        if existing.qty != qty:
            raise Conflict(
                f"job {job_id!r} exists with qty {existing.qty}; enqueue with qty {qty} refused"
            )
        return Step(state, False)
    row = JobRow(job_id, qty, "pending", 0, budget, 0, available_at=now, deadline=now + ttl)
    return Step(replace(state, jobs=(*state.jobs, row)), True)


def _open_at(row: JobRow, now_ms: int) -> bool:
    """Pending, or leased with its lease over: the rows that quarantine and claim look at."""
    expired = row.status == "leased" and row.lease_until is not None and row.lease_until <= now_ms
    return row.status == "pending" or expired


def _claimable(row: JobRow, now_ms: int) -> bool:
    return _open_at(row, now_ms) and (row.status == "leased" or row.available_at <= now_ms)


def _quarantine(state: Snapshot, now_ms: int) -> Snapshot:
    """Open rows past their deadline (this wins) or out of budget become dead."""
    rows = []
    for row in state.jobs:
        if _open_at(row, now_ms) and (row.deadline <= now_ms or row.attempts >= row.max_attempts):
            reason = "deadline" if row.deadline <= now_ms else "exhausted"
            row = replace(row, status="dead", reason=reason, owner=None, lease_until=None)
        rows.append(row)
    return replace(state, jobs=tuple(rows))


def claim(state: Snapshot, owner: object, now_ms: object, lease_ms: object = 1000) -> Step:
    """Quarantine, then lease the lowest-seq claimable job to ``owner``."""
    who = _identifier("owner", owner)
    now = _time("now_ms", now_ms)
    lease = _int("lease_ms", lease_ms, 1, 60000)
    state = _quarantine(state, now)
    index = next((i for i, row in enumerate(state.jobs) if _claimable(row, now)), None)
    if index is None:
        return Step(state, None)  # the quarantine still commits; no hook
    row = state.jobs[index]
    leased = replace(
        row, attempts=row.attempts + 1, token=row.token + 1, status="leased", owner=who,
        lease_until=min(now + lease, row.deadline), reason=None,
    )  # fmt: skip
    ticket = {
        "id": leased.id, "qty": leased.qty, "owner": who, "token": leased.token,
        "attempt": leased.attempts, "lease_until": leased.lease_until,
    }  # fmt: skip
    return Step(_with_job(state, index, leased), ticket, ("after-claim",), ("after-commit",))


def _check_ticket(ticket: object) -> dict[str, Any]:
    checked = _exact_dict("ticket", ticket, TICKET_KEYS)
    _identifier("ticket['id']", checked["id"])
    _identifier("ticket['owner']", checked["owner"])
    _int("ticket['qty']", checked["qty"], 1, 1000)
    _int("ticket['token']", checked["token"], 1, MAX_TOKEN)
    _int("ticket['attempt']", checked["attempt"], 1, 16)
    _int("ticket['lease_until']", checked["lease_until"], 1, MAX_TOKEN)
    return checked


def holds_lease(state: Snapshot, ticket: dict[str, Any], now_ms: int) -> bool:
    """True if ``ticket`` is its job's live lease at ``now_ms`` (a finish would accept it)."""
    row = state.job(ticket["id"])
    return row is not None and _is_current(row, ticket, now_ms)


def _is_current(row: JobRow, ticket: dict[str, Any], now_ms: int) -> bool:
    """The ticket is the job's live lease: every marker field matches and time is left."""
    marker = (row.qty, row.owner, row.token, row.attempts, row.lease_until)
    wanted = (
        ticket["qty"],
        ticket["owner"],
        ticket["token"],
        ticket["attempt"],
        ticket["lease_until"],
    )
    return (
        row.status == "leased"
        and marker == wanted
        and row.lease_until is not None
        and now_ms < row.lease_until
        and now_ms < row.deadline
    )


def _finished(row: JobRow, outcome: str, now_ms: int, delay_ms: int) -> JobRow:
    if outcome == "ok":
        status, reason = "done", None
    elif outcome == "permanent":
        status, reason = "dead", "permanent"
    elif row.attempts >= row.max_attempts:
        status, reason = "dead", "exhausted"
    elif now_ms + delay_ms >= row.deadline:
        status, reason = "dead", "deadline"
    else:
        status, reason = "pending", "retry"
    available_at = now_ms + delay_ms if status == "pending" else now_ms
    return replace(
        row, status=status, reason=reason, available_at=available_at, owner=None, lease_until=None
    )


def finish(
    state: Snapshot, ticket: object, outcome: object, now_ms: object, delay_ms: object = 0
) -> Step:
    """Record the outcome of the current lease; a stale or late ticket changes nothing."""
    checked = _check_ticket(ticket)
    if type(outcome) is not str or outcome not in OUTCOMES:
        raise ValueError(
            f"expected outcome to be 'ok', 'retry' or 'permanent' but got outcome={outcome!r}"
        )
    now = _time("now_ms", now_ms)
    delay = _int("delay_ms", delay_ms, 0, 60000)
    index = _index(state, checked["id"])
    if index is None or not _is_current(state.jobs[index], checked, now):
        return Step(state, False)
    done = _finished(state.jobs[index], outcome, now, delay)
    return Step(_with_job(state, index, done), done.status, ("after-finish",), ("after-commit",))


def redrive(state: Snapshot, job_id: object, now_ms: object, ttl_ms: object, note: object) -> Step:
    """Give a dead job a fresh budget, with its token kept and an audit row written."""
    name = _identifier("job_id", job_id)
    now = _time("now_ms", now_ms)
    ttl = _int("ttl_ms", ttl_ms, 1, 60000)
    text = _identifier("note", note)
    index = _index(state, name)
    if index is None or state.jobs[index].status != "dead":
        found = "missing" if index is None else state.jobs[index].status
        raise ValueError(f"redrive needs a dead job, but job {name!r} is {found}")
    row = state.jobs[index]
    audit = RedriveRow(id=row.id, token=row.token, at_ms=now, note=text)
    fresh = replace(
        row, status="pending", attempts=0, available_at=now, deadline=now + ttl,
        owner=None, lease_until=None, reason=None,
    )  # fmt: skip
    after = replace(_with_job(state, index, fresh), redrives=(*state.redrives, audit))
    return Step(after, True, ("after-audit", "after-redrive"), ("after-commit",))


# --- the mutable wrapper ----------------------------------------------------------


class LeaseModel:
    """The model as a ``LeaseQueue``: applies each ``Step``, honouring raising faults."""

    def __init__(self, state: Snapshot | None = None) -> None:
        self.state = state or Snapshot()

    def _apply(self, step: Step, fault: Fault) -> Any:
        if fault is not None:
            for point in step.before_commit:
                fault(point)  # raising here discards ``step.state``: a rollback
        self.state = step.state
        if fault is not None:
            for point in step.after_commit:
                fault(point)
        return step.result

    def enqueue(
        self, event: object, now_ms: object, ttl_ms: object, max_attempts: object = 3
    ) -> object:
        return self._apply(enqueue(self.state, event, now_ms, ttl_ms, max_attempts), None)

    def claim(
        self, owner: object, now_ms: object, lease_ms: object = 1000, fault: Fault = None
    ) -> object:
        return self._apply(claim(self.state, owner, now_ms, lease_ms), fault)

    def finish(
        self,
        ticket: object,
        outcome: object,
        now_ms: object,
        delay_ms: object = 0,
        fault: Fault = None,
    ) -> object:
        return self._apply(finish(self.state, ticket, outcome, now_ms, delay_ms), fault)

    def redrive(
        self, job_id: object, now_ms: object, ttl_ms: object, note: object, fault: Fault = None
    ) -> object:
        return self._apply(redrive(self.state, job_id, now_ms, ttl_ms, note), fault)

    def retry_delay(self, attempt: object, base_ms: object, cap_ms: object, jitter: object) -> int:
        return retry_delay(attempt, base_ms, cap_ms, jitter)

    def run_once(
        self,
        owner: object,
        clock: ClockFunction,
        send: Send,
        jitter: object,
        lease_ms: object = 1000,
    ) -> object:
        """Claim, send outside any transaction, read the clock again, finish."""
        ratio = _jitter(jitter)
        first = clock()
        ticket = self.claim(owner, first, lease_ms)
        if ticket is None:
            return None
        assert isinstance(ticket, dict) and isinstance(first, int)
        kept = dict(ticket)  # whatever send does, finish gets the claim's ticket
        try:
            ack = send({"id": kept["id"], "qty": kept["qty"]})
        except Retryable:
            outcome = "retry"
        except Permanent:
            outcome = "permanent"
        else:
            if ack is not True:
                raise BadAck(f"send returned {ack!r}, not True; job {kept['id']!r} stays leased")
            outcome = "ok"
        second = _int("the second clock value", clock(), first, MAX_NOW)
        delay = retry_delay(kept["attempt"], 100, 1000, ratio) if outcome == "retry" else 0
        status = self.finish(kept, outcome, second, delay)
        return {"id": kept["id"], "token": kept["token"], "status": status or "stale"}

    def snapshot(self) -> Snapshot:
        return self.state

    def error_kind(self, error: BaseException) -> str:
        for cls in (Conflict, Retryable, Permanent, BadAck, FileNotFoundError, ValueError):
            if isinstance(error, cls):
                return cls.__name__
        return f"unexpected {type(error).__name__}"
