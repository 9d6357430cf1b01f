"""One operation on a generic lease queue (an adapter's verbs), and what it did.

``adapters.protocol.QueueAdapter`` gives every library the same verbs; ``QUEUE_KINDS``
lists them with their parameters as the histories record them. A claim is named by
the harness (``cid``, unique per run), and ``ack``/``nack``/``extend`` name the claim
they use, so a record is plain data: ``apply`` looks the library's ``Claim`` up in the
claims the harness holds. Leases and clock moves are integer milliseconds (the model's
unit); ``apply`` gives the library seconds. ``advance`` moves the shared clock and
``observe`` reads every job's state: both are harness steps the model also takes.

``step`` runs the generic model (``models.queue_model``), which never predicts one
outcome: it takes the outcome the library reported and returns every state the queue
may then be in, or a ``Mismatch``. ``QueueOutcome`` is that reported outcome; a claim's
also keeps the lease as the library reported it (``Granted``: job, token, lease end),
which the model does not read but a picture draws.

To add an argument to a verb, add it to its ``Kind`` in ``QUEUE_KINDS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, cast

from leasecheck.models import queue_model as qm
from leasecheck.models._values import Answer, Kind, bind, from_json_value, to_json_value

__all__ = [
    "QUEUE_KINDS",
    "REFUSABLE",
    "Granted",
    "QueueKind",
    "QueueOp",
    "QueueOutcome",
    "QueueTarget",
]

QueueKind = Literal["enqueue", "claim", "ack", "nack", "extend", "recover", "observe", "advance"]

QUEUE_KINDS: Mapping[str, Kind] = {
    "enqueue": Kind("enqueue", ("job", "payload"), {"payload": ""}),
    "claim": Kind("claim", ("cid", "lease_ms")),
    "ack": Kind("ack", ("cid", "job")),
    "nack": Kind("nack", ("cid", "job")),
    "extend": Kind("extend", ("cid", "job", "lease_ms")),
    "recover": Kind("recover"),
    "observe": Kind("observe", writes=False),
    "advance": Kind("advance", ("ms",)),
}
"""Every generic-queue verb and its parameters: the one table."""

REFUSABLE = frozenset({"ack", "nack", "extend"})
"""Verbs whose raised error means 'refused' (False), not 'no effect'."""


class QueueTarget(Protocol):
    """The part of ``adapters.protocol.QueueAdapter`` a record calls (structural: the
    models layer does not import the adapters)."""

    def enqueue(self, job: str, payload: str) -> None: ...

    def claim(self, worker: str, lease: float) -> Any: ...

    def ack(self, claim: Any) -> bool: ...

    def nack(self, claim: Any) -> bool: ...

    def extend(self, claim: Any, lease: float) -> bool: ...

    def recover(self) -> int: ...

    def observe(self) -> Sequence[Any]: ...


class _Advances(Protocol):
    def advance(self, seconds: float) -> None: ...


@dataclass(frozen=True, slots=True)
class QueueOp:
    """One generic-queue verb as data: ``kind(**args)``. Build one with
    ``QueueOp.of('claim', 'c1', 500)``."""

    kind: QueueKind
    args: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, kind: str, *args: object, **kwargs: object) -> QueueOp:
        if kind not in QUEUE_KINDS:
            raise ValueError(f"{kind!r} is no generic-queue verb ({', '.join(QUEUE_KINDS)})")
        return cls(cast(QueueKind, kind), bind(QUEUE_KINDS[kind], args, kwargs))

    def arguments(self) -> dict[str, Any]:
        return dict(self.args)

    def value(self, name: str) -> Any:
        given = self.arguments()
        return given[name] if name in given else QUEUE_KINDS[self.kind].defaults[name]

    def apply(
        self, queue: QueueTarget, claims: Mapping[str, Any], clock: _Advances | None = None,
        worker: str | None = None,
    ) -> Any:  # fmt: skip
        """Call the verb on an adapter. ``claims`` maps each claim id to the library's
        ``Claim``; the caller keeps a claim's result under its ``cid``. ``worker`` is the
        claimer's name (default: the claim id); ``clock`` is moved by ``advance``."""
        a = self.arguments()
        if self.kind == "enqueue":
            return queue.enqueue(a["job"], self.value("payload"))
        if self.kind == "claim":
            return queue.claim(worker or a["cid"], a["lease_ms"] / 1000)
        if self.kind in ("ack", "nack"):
            verb: Callable[[Any], bool] = getattr(queue, self.kind)
            return verb(claims[a["cid"]])
        if self.kind == "extend":
            return queue.extend(claims[a["cid"]], a["lease_ms"] / 1000)
        if self.kind == "recover":
            return queue.recover()
        if self.kind == "observe":
            return tuple((view.job, view.state) for view in queue.observe())
        if clock is None:
            raise ValueError("advance needs the shared clock")
        return clock.advance(a["ms"] / 1000)

    def run(
        self, queue: QueueTarget, claims: Mapping[str, Any], clock: _Advances | None = None,
        worker: str | None = None,
    ) -> tuple[Any, QueueOutcome]:  # fmt: skip
        """``apply``, and its outcome as the model reads it: a claim's result is its job's
        key (or None), with the lease the library reported (``granted``); a refused or
        failed verb's outcome is its error's class name."""
        got: list[Any] = []

        def call() -> object:
            got.append(self.apply(queue, claims, clock, worker))
            value = got[-1]
            return getattr(value, "job", None) if self.kind == "claim" else value

        outcome = QueueOutcome.running(call)
        if self.kind == "claim" and got and outcome.result is not None:
            outcome = QueueOutcome(outcome.result, granted=Granted.of(got[0]))
        return (got[0] if got else None), outcome

    def step(
        self, state: qm.QueueState, outcome: QueueOutcome, ack_deletes: bool = False,
        real_time: bool = False,
    ) -> qm.Step:  # fmt: skip
        """The states the generic model allows after this verb reported ``outcome``: an
        error of a refusable verb is a refusal (False), of any other verb no effect."""
        if outcome.error is not None and self.kind not in REFUSABLE:
            return [state], None
        value = False if outcome.error is not None else outcome.result
        a = self.arguments()
        if self.kind == "claim":
            return qm.claim(state, a["cid"], a["lease_ms"], cast("str | None", value))
        if self.kind in ("ack", "nack"):
            verb = qm.ack if self.kind == "ack" else qm.nack
            return verb(state, a["cid"], a["job"], value is True)
        if self.kind == "extend":
            return qm.extend(state, a["cid"], a["job"], a["lease_ms"], value is True)
        if self.kind == "enqueue":
            return qm.enqueue(state, a["job"])
        if self.kind == "advance":
            return qm.advance(state, 0 if real_time else a["ms"])
        if self.kind == "recover":
            return qm.recover(state, int(cast(int, value)))
        return qm.observe(state, cast("Sequence[tuple[str, Any]]", value), ack_deletes)

    def describe(self) -> str:
        """The one line for this verb: ``claim(cid='c1', lease_ms=500)``."""
        shown = ", ".join(f"{name}={value!r}" for name, value in self.args)
        return f"{self.kind}({shown})"

    def to_json(self) -> dict[str, Any]:
        return {
            "contract": "queue",
            "kind": self.kind,
            "args": {name: to_json_value(value) for name, value in self.args},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueueOp:
        args = {name: from_json_value(value) for name, value in data["args"].items()}
        return cls.of(data["kind"], **args)


@dataclass(frozen=True, slots=True)
class Granted:
    """A claim's lease as the library reported it (the adapter's ``Claim``): its job, its
    token (the library's fencing token, attempt number or receipt, where it has one) and
    when the lease ends by the shared clock, in its seconds (None: the library does not
    say)."""

    job: str
    token: int | str | None = None
    until: float | None = None

    @classmethod
    def of(cls, claim: object) -> Granted:
        """The lease of an adapter's ``Claim`` (read by name: models import no adapter)."""
        token, until = getattr(claim, "token", None), getattr(claim, "lease_until", None)
        return cls(
            str(getattr(claim, "job")),  # noqa: B009  # a Claim, structurally
            token if type(token) in (int, str) else None,
            float(until) if isinstance(until, int | float) else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {"job": self.job, "token": self.token, "until": self.until}


@dataclass(frozen=True, slots=True)
class QueueOutcome(Answer):
    """What one verb did: returned ``result`` (a claim reads as its job's key or None, an
    observe as (job, state) pairs), or raised (``error``: the exception's class name).
    ``granted`` is a claim's lease as the library reported it (None: no claim, or none
    recorded); the model reads only ``result``."""

    CONTRACT: ClassVar[str] = "queue"

    granted: Granted | None = None

    def to_json(self) -> dict[str, Any]:
        data = Answer.to_json(self)
        if self.granted is not None:
            data["granted"] = self.granted.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueueOutcome:
        granted = data.get("granted")
        return cls(
            from_json_value(data.get("result")), data.get("error"), data.get("detail", ""),
            None if granted is None else Granted(**granted),
        )  # fmt: skip

    @classmethod
    def running(cls, call: Callable[[], object]) -> QueueOutcome:
        """Run ``call`` and record what it did; a library error is recorded, not raised."""
        try:
            return cls(call())
        except Exception as error:
            return cls(error=type(error).__name__, detail=str(error))
