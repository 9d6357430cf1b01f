"""One lease-worker operation, and what it did: the records every harness shares.

lease-worker.md's functions are the operations: ``LEASE_KINDS`` lists each with its
parameters in the spec's order (the connection and the ``fault`` hook left out: the
harness supplies them). A ``LeaseOp`` is one call as data: it runs on a target
(``apply``), on the model (``step``, ``expect``), prints as the one line every message
and picture uses (``describe``), and crosses processes as JSON. A ``LeaseOutcome`` is
what one side's call returned or raised (and, where a harness observed them, the hooks
it called, what it sent and the stored state after).

``fault`` on an op is a point name (``'after-claim'``, ...): the harness's hook raises
``InjectedFault`` there (the explorer's fault choices); a harness that pauses at hooks
passes its own callable to ``apply`` instead.

``run_once`` and ``run_file`` take data here, not callables: a clock that reads
``now_ms`` each time and a send that acknowledges (``True``), with jitter 0.5. The
agreement machine, which generates clocks and sends, calls the functions itself.

To add an argument to an operation, add it to its ``Kind`` in ``LEASE_KINDS`` (and to the
model function and the target's, which the contract fixes): ``apply``, ``step``, the
JSON form and ``describe`` read the table.
"""

from __future__ import annotations

import copy
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, cast

from leasecheck.models import lease_model as lm
from leasecheck.models._values import Held, Kind, bind, from_json_value, register, to_json_value
from leasecheck.models.contracts import (
    JOB_COLUMNS,
    REDRIVE_COLUMNS,
    Fault,
    InjectedFault,
    JobRow,
    LeaseQueue,
    RedriveRow,
    Snapshot,
    same,
    shown,
)

__all__ = [
    "LEASE_KINDS",
    "MODEL_ERRORS",
    "Held",
    "LeaseKind",
    "LeaseOp",
    "LeaseOutcome",
    "snapshot_from_json",
    "snapshot_to_json",
]

LeaseKind = Literal["enqueue", "claim", "finish", "redrive", "run_once", "run_file"]

LEASE_KINDS: Mapping[str, Kind] = {
    "enqueue": Kind("enqueue", ("event", "now_ms", "ttl_ms", "max_attempts"), {"max_attempts": 3}),
    "claim": Kind("claim", ("owner", "now_ms", "lease_ms"), {"lease_ms": 1000}, hooked=True),
    "finish": Kind(
        "finish", ("ticket", "outcome", "now_ms", "delay_ms"), {"delay_ms": 0}, hooked=True
    ),
    "redrive": Kind("redrive", ("job_id", "now_ms", "ttl_ms", "note"), hooked=True),
    "run_once": Kind("run_once", ("owner", "now_ms", "lease_ms"), {"lease_ms": 1000}),
    "run_file": Kind("run_file", ("owner", "now_ms", "lease_ms"), {"lease_ms": 1000}),
}
"""Every lease-worker operation and its parameters, in the spec's order: the one table."""

RUN_JITTER = 0.5
"""The jitter ``run_once``/``run_file`` records pass (their send acknowledges: unused)."""

MODEL_ERRORS: tuple[type[Exception], ...] = (
    lm.Conflict,
    lm.Retryable,
    lm.Permanent,
    lm.BadAck,
    ValueError,
)
"""What the model raises, most specific first (the contract names them by class name)."""


def _run_once(state: Snapshot, owner: object, now_ms: object, lease_ms: object = 1000) -> lm.Step:
    """``run_once`` with a clock that reads ``now_ms`` and a send that acknowledges: claim
    at ``now_ms``, then finish 'ok' at ``now_ms``, as one step (with one clock reading the
    lease cannot run out between them, so nothing else can change the job in between)."""
    claimed = lm.claim(state, owner, now_ms, lease_ms)
    ticket = claimed.result
    if ticket is None:
        return claimed
    done = lm.finish(claimed.state, ticket, "ok", now_ms, 0)
    status = "stale" if done.result is False else done.result
    result = {"id": ticket["id"], "token": ticket["token"], "status": status}
    return replace(done, result=result)


_MODEL: Mapping[str, Callable[..., lm.Step]] = {
    "enqueue": lm.enqueue,
    "claim": lm.claim,
    "finish": lm.finish,
    "redrive": lm.redrive,
    "run_once": _run_once,
    "run_file": _run_once,  # on an existing file run_file is run_once on a new connection
}


_OWN_COPY: frozenset[type] = frozenset({int, float, bool, str, bytes, type(None)})
"""Types whose values ``copy.deepcopy`` returns as they are (immutable, no contents)."""


@dataclass(frozen=True, slots=True)
class LeaseOp:
    """One call of lease-worker.md as data: ``kind(**args)``, the hook raising at ``fault``.

    ``args`` are (parameter, value) pairs in the order of ``LEASE_KINDS[kind]``, only the
    ones the caller gave (omitted ones take the contract's defaults). Build one with
    ``LeaseOp.of('claim', 'w1', 5)`` or ``LeaseOp.of('claim', owner='w1', now_ms=5)``.
    """

    kind: LeaseKind
    args: tuple[tuple[str, Any], ...]
    fault: str | None = None

    @classmethod
    def of(cls, kind: str, *args: object, fault: str | None = None, **kwargs: object) -> LeaseOp:
        if kind not in LEASE_KINDS:
            raise ValueError(f"{kind!r} is no lease-worker operation ({', '.join(LEASE_KINDS)})")
        return cls(cast(LeaseKind, kind), bind(LEASE_KINDS[kind], args, kwargs), fault)

    @property
    def spec(self) -> Kind:
        return LEASE_KINDS[self.kind]

    def __deepcopy__(self, memo: dict[int, Any]) -> LeaseOp:
        """A copy whose argument values share nothing with this one's: what
        ``copy.deepcopy`` makes, without its generic route through ``__reduce_ex__`` (the
        lease machine copies every call twice). Values of the immutable built-in types
        are their own copy; any other type, a look-alike subclass too, is deep-copied."""
        args = tuple(
            (name, value if type(value) in _OWN_COPY else copy.deepcopy(value, memo))
            for name, value in self.args
        )
        return LeaseOp(self.kind, args, self.fault)

    def arguments(self) -> dict[str, Any]:
        """The given arguments by name."""
        return dict(self.args)

    def value(self, name: str) -> Any:
        """One argument, or the contract's default where it was omitted."""
        given = self.arguments()
        return given[name] if name in given else self.spec.defaults[name]

    def positional(self) -> tuple[Any, ...]:
        """The given arguments in call order (they are always a prefix of the parameters)."""
        return tuple(value for _, value in self.args)

    def resolve(self, held: Sequence[Mapping[str, Any]]) -> LeaseOp | None:
        """This call with a ``Held`` ticket replaced by the one the process holds (a
        copy); None when it holds too few."""
        ticket = self.arguments().get("ticket")
        if not isinstance(ticket, Held):
            return self
        if ticket.back >= len(held):
            return None
        real = dict(held[-1 - ticket.back])
        return LeaseOp(self.kind, tuple((n, real if n == "ticket" else v) for n, v in self.args),
                       self.fault)  # fmt: skip

    # -- the two sides ---------------------------------------------------------------------

    def apply(
        self, module: ModuleType, con: sqlite3.Connection, fault: Fault = None,
        path: Path | str | None = None,
    ) -> Any:  # fmt: skip
        """Run on a target module over ``con`` (``run_file``: over ``path``). ``fault`` is
        the hook to pass; None with ``self.fault`` set: a hook raising there."""
        hook = fault if fault is not None else self._raising_hook()
        function = getattr(module, self.kind)
        if self.kind in ("run_once", "run_file"):
            where: object = con if self.kind == "run_once" else str(path)
            now = self.value("now_ms")
            return function(where, self.value("owner"), lambda: now, lambda event: True,
                            RUN_JITTER, self.value("lease_ms"))  # fmt: skip
        if self.spec.hooked:
            return function(con, *self.positional(), fault=hook)
        return function(con, *self.positional())

    def call(self, queue: LeaseQueue, fault: Fault = None) -> Any:
        """Run on any ``LeaseQueue`` (a ``LeaseTarget`` or the stateful ``LeaseModel``),
        passing ``fault`` (None with ``self.fault`` set: a hook raising there). For
        ``enqueue``, ``claim``, ``finish`` and ``redrive``: ``run_once`` and ``run_file``
        take callables, which a harness passes itself."""
        if self.kind in ("run_once", "run_file"):
            raise TypeError(f"{self.kind} takes a clock and a send: call the queue itself")
        hook = fault if fault is not None else self._raising_hook()
        function = getattr(queue, self.kind)
        if self.spec.hooked:
            return function(*self.positional(), fault=hook)
        return function(*self.positional())

    def _raising_hook(self) -> Fault:
        if self.fault is None:
            return None
        point = self.fault

        def hook(name: str) -> None:
            if name == point:
                raise InjectedFault(point)

        return hook

    def step(self, state: Snapshot) -> lm.Step:
        """The model's step from ``state`` (no fault); raises the model's error for a call
        the contract refuses."""
        return _MODEL[self.kind](state, **self.arguments())

    def expect(self, state: Snapshot) -> tuple[Snapshot, LeaseOutcome]:
        """What the model says this call does from ``state``, its ``fault`` included: the
        state after and the outcome (a fault before COMMIT rolls back, after it keeps)."""
        try:
            step = self.step(state)
        except MODEL_ERRORS as error:
            return state, LeaseOutcome.raised(error, MODEL_ERRORS)
        points = (*step.before_commit, *step.after_commit)
        if self.fault is None or self.fault not in points:
            return step.state, LeaseOutcome(step.result, hooks=points, state=step.state)
        index = points.index(self.fault)
        after = step.state if index >= len(step.before_commit) else state
        outcome = LeaseOutcome(
            error="InjectedFault", detail=self.fault, hooks=points[: index + 1], state=after
        )
        return after, outcome

    # -- words and data --------------------------------------------------------------------

    def describe(self) -> str:
        """The one line for this call: ``claim(owner='w1', now_ms=5)``, its fault after."""
        args = ", ".join(f"{name}={shown(value)}" for name, value in self.args)
        crash = f"; the fault hook raises at {self.fault!r}" if self.fault else ""
        return f"{self.kind}({args}){crash}"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "contract": "lease",
            "kind": self.kind,
            "args": {name: to_json_value(value) for name, value in self.args},
        }
        if self.fault is not None:
            data["fault"] = self.fault
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LeaseOp:
        args = {name: from_json_value(value) for name, value in data["args"].items()}
        return cls.of(data["kind"], fault=data.get("fault"), **args)

    @classmethod
    def from_move(cls, op: tuple[Any, ...], note: str = "n") -> LeaseOp | None:
        """The record of one of the explorer's move tuples (None for a clock tick, which
        calls nothing). ``note`` is the note the explorer's redrives use."""
        kind, *rest = op
        if kind == "enqueue":
            job_id, qty, now, ttl, budget = rest
            return cls.of("enqueue", {"id": job_id, "qty": qty}, now, ttl, budget)
        if kind == "claim":
            owner, now, lease, fault = rest
            return cls.of("claim", owner, now, lease, fault=fault)
        if kind == "finish":
            _, ticket, outcome, now, delay, fault = rest
            keys = ("id", "qty", "owner", "token", "attempt", "lease_until")
            return cls.of("finish", dict(zip(keys, ticket, strict=True)), outcome, now, delay,
                          fault=fault)  # fmt: skip
        if kind == "redrive":
            job_id, now, ttl, fault = rest
            return cls.of("redrive", job_id, now, ttl, note, fault=fault)
        return None


@dataclass(frozen=True, slots=True)
class LeaseOutcome:
    """What one call did on one side.

    ``error`` is the contract's name for what it raised (``None``: it returned
    ``result``). ``hooks``, ``sends`` and ``state`` are compared only when both sides
    recorded them (``None``: not observed by this harness).
    """

    result: object = None
    error: str | None = None
    detail: str = ""
    """The raised error's class and text, for messages."""
    hooks: tuple[str, ...] | None = None
    sends: tuple[object, ...] | None = None
    state: Snapshot | None = None

    @classmethod
    def raised(cls, error: BaseException, classes: tuple[type[BaseException], ...]) -> LeaseOutcome:
        """``error`` named by the first of ``classes`` it is an instance of."""
        name = next((c.__name__ for c in classes if isinstance(error, c)), type(error).__name__)
        return cls(error=name, detail=f"{type(error).__name__}: {error}")

    def describe(self) -> str:
        if self.error is None:
            return f"returned {self.result!r}"
        return f"raised {self.error} ({self.detail})" if self.detail else f"raised {self.error}"

    def agrees_with(self, model: LeaseOutcome, accept: frozenset[str] = frozenset()) -> bool:
        """Same result (strictly), or errors of one kind; ``accept`` lists kinds the spec
        leaves open between (each accepted for the other)."""
        kinds = {self.error, model.error}
        if self.error != model.error and not (None not in kinds and kinds <= accept):
            return False
        return self.error is not None or same(self.result, model.result)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"contract": "lease"}
        if self.error is None:
            data["result"] = to_json_value(self.result)
        else:
            data |= {"error": self.error, "detail": self.detail}
        if self.hooks is not None:
            data["hooks"] = list(self.hooks)
        if self.sends is not None:
            data["sends"] = [to_json_value(send) for send in self.sends]
        if self.state is not None:
            data["state"] = snapshot_to_json(self.state)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LeaseOutcome:
        hooks, sends, state = data.get("hooks"), data.get("sends"), data.get("state")
        return cls(
            from_json_value(data.get("result")),
            data.get("error"),
            data.get("detail", ""),
            None if hooks is None else tuple(hooks),
            None if sends is None else tuple(from_json_value(send) for send in sends),
            None if state is None else snapshot_from_json(state),
        )


def snapshot_to_json(state: Snapshot) -> dict[str, Any]:
    """Both tables as lists of rows (column name to value), in ``seq`` order."""
    return {
        "jobs": [{c: getattr(row, c) for c in JOB_COLUMNS} for row in state.jobs],
        "redrives": [{c: getattr(row, c) for c in REDRIVE_COLUMNS} for row in state.redrives],
    }


def snapshot_from_json(data: Mapping[str, Any]) -> Snapshot:
    return Snapshot(
        tuple(JobRow(**row) for row in data.get("jobs", ())),
        tuple(RedriveRow(**row) for row in data.get("redrives", ())),
    )


register("Snapshot", Snapshot, snapshot_to_json, snapshot_from_json)
"""A snapshot read's result (a history's last entry) has the JSON form of its tables."""
