"""Evidence: what a failing property saw, as data, beside its message.

A harness that finds a bug builds one ``Evidence`` from the values it already holds
(never from its own message text) and attaches it to the error it raises
(``attach``); ``leasecheck.counterexample`` carries it across the process boundary as
JSON (``to_json`` / ``from_json``) and the report draws it. It says:

- the **actors**: processes, threads, connections or workers, one lane each;
- the **steps**: each operation with its time (model ms, or wall ms since the run
  began: ``unit``), the actor that ran it, and each side's result (the target's, the
  model's, equal when they agree);
- the **leases**: (job, token, holder, from, until) as the target recorded them
  (``side="target"``) and as the model expects them (``side="model"``);
- the **events**: kills, power cuts, clock moves;
- the **deadlines** of the jobs involved;
- ``parted``: the index of the step where the target and the model part (or where the
  property's check fails).

This module sits in ``models`` so that every harness can import it; it imports nothing
of the project.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, TypeVar

__all__ = [
    "Actor",
    "Deadline",
    "Event",
    "Evidence",
    "Lease",
    "Recorder",
    "Step",
    "Token",
    "Unit",
    "attach",
    "evidence_of",
    "shrunk_evidence",
]

Side = Literal["target", "model"]
Token = int | str | None
"""A lease's token: the lease worker's and the JobQueue's fencing token, or a generic
queue library's own (an attempt number, a delivery tag, a receipt), where it has one."""
Unit = Literal["model ms", "wall ms", "step"]
"""What a step's times count: model milliseconds, wall milliseconds since the first
call, or scheduling steps of a controlled interleaving."""
EVENT_KINDS = ("kill", "pause", "power-cut", "clock")
ATTRIBUTE = "leasecheck_evidence"
"""The attribute of a raised error that holds its ``Evidence``."""


@dataclass(frozen=True)
class Actor:
    """One lane of the picture: a process, thread, connection or worker."""

    name: str
    kind: str = "worker"
    """'process', 'thread', 'connection', 'worker', or 'queue' (what no worker does)."""


@dataclass(frozen=True)
class Step:
    """One operation: who ran it, when, and what each side said it returned."""

    index: int
    actor: str
    operation: str
    """The call as a user would type it (``claim('w1', now_ms=0, lease_ms=5)``)."""
    kind: str
    """The operation's name (``claim``, ``finish``, ``ack``): the picture's glyph."""
    start: float
    end: float | None = None
    """None for an operation with no duration (model time: it happens at ``start``)."""
    target: str | None = None
    """What the target returned (``returned 'done'``, ``raised Conflict``)."""
    model: str | None = None
    """What the model expects (``parted`` says where the two disagree)."""
    job: str | None = None
    token: Token = None
    """The job and token the operation names (a finish's ticket, a claim's result)."""
    call: Mapping[str, Any] | None = field(default=None, compare=False)
    """The operation as its contract's record, in JSON (``LeaseOp.to_json()``,
    docs/operations.md), where the harness ran one; ``operation`` is its line."""


@dataclass(frozen=True)
class Lease:
    """A lease as one side holds it: job, token, holder, from ``start`` to ``until``."""

    side: Side
    job: str
    token: Token
    holder: str
    start: float
    until: float
    step: int | None = None
    """The step that created it."""
    ended: float | None = None
    """When it stopped being live before ``until`` (finished, taken over), else None."""

    @property
    def end(self) -> float:
        return self.until if self.ended is None else min(self.ended, self.until)

    def same_lease(self, other: Lease) -> bool:
        """The same lease on both sides (everything but the side)."""
        return (self.job, self.token, self.holder, self.start, self.until, self.ended) == (
            other.job, other.token, other.holder, other.start, other.until, other.ended
        )  # fmt: skip


@dataclass(frozen=True)
class Event:
    """A kill, a power cut or a clock move, on one actor's lane."""

    kind: str
    """One of ``EVENT_KINDS`` (``pause``: SIGSTOP)."""
    actor: str
    at: float
    label: str
    step: int | None = None


@dataclass(frozen=True)
class Deadline:
    job: str
    at: float


@dataclass(frozen=True)
class Evidence:
    """One failure as data: actors, steps, leases, events, deadlines and the parting step."""

    unit: Unit
    summary: str
    """One sentence: what failed (the message's first line, from the same values)."""
    actors: tuple[Actor, ...] = ()
    steps: tuple[Step, ...] = ()
    leases: tuple[Lease, ...] = ()
    events: tuple[Event, ...] = ()
    deadlines: tuple[Deadline, ...] = ()
    parted: int | None = None
    """``Step.index`` of the step where target and model part (None: after the last)."""
    folded: int = 0
    """Steps the harness left out before recording (a shrunk or cut history says so)."""
    extra: Mapping[str, str] = field(default_factory=dict)
    """Named facts a picture may print under itself (``seed``, ``schedule``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "summary": self.summary,
            "actors": [vars(a) for a in self.actors],
            "steps": [vars(s) for s in self.steps],
            "leases": [vars(lease) for lease in self.leases],
            "events": [vars(e) for e in self.events],
            "deadlines": [vars(d) for d in self.deadlines],
            "parted": self.parted,
            "folded": self.folded,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Evidence:
        unit = data.get("unit")
        return cls(
            unit=unit if unit in ("wall ms", "step") else "model ms",
            summary=str(data.get("summary", "")),
            actors=tuple(Actor(**a) for a in _list(data, "actors")),
            steps=tuple(Step(**s) for s in _list(data, "steps")),
            leases=tuple(Lease(**lease) for lease in _list(data, "leases")),
            events=tuple(Event(**e) for e in _list(data, "events")),
            deadlines=tuple(Deadline(**d) for d in _list(data, "deadlines")),
            parted=data.get("parted"),
            folded=int(data.get("folded") or 0),
            extra={str(k): str(v) for k, v in dict(data.get("extra") or {}).items()},
        )

    def step(self, index: int | None) -> Step | None:
        return next((s for s in self.steps if s.index == index), None)


def _list(data: Mapping[str, Any], key: str) -> Sequence[Mapping[str, Any]]:
    value = data.get(key) or ()
    return [item for item in value if isinstance(item, Mapping)]


E = TypeVar("E", bound=BaseException)


def attach(error: E, evidence: Evidence) -> E:
    """``error`` carrying ``evidence`` (read back by ``evidence_of``); returns ``error``."""
    setattr(error, ATTRIBUTE, evidence)
    return error


def evidence_of(error: BaseException | None) -> Evidence | None:
    """The evidence attached to ``error`` or to an error it was raised ``from``."""
    seen = 0
    while error is not None and seen < 8:
        found = getattr(error, ATTRIBUTE, None)
        if isinstance(found, Evidence):
            return found
        error, seen = error.__cause__, seen + 1
    return None


class LeaseRow(Protocol):
    """A stored job row as both lease-worker sides describe it (``models.contracts.JobRow``;
    a queue without deadlines may leave ``deadline`` out)."""

    @property
    def id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def token(self) -> int: ...
    @property
    def owner(self) -> str | None: ...
    @property
    def lease_until(self) -> int | None: ...
    @property
    def deadline(self) -> int: ...


class Recorder:
    """Builds an ``Evidence`` as a harness goes: steps, the leases each side's rows show
    after each step, events and deadlines; ``evidence`` freezes what it holds."""

    def __init__(self, unit: Unit = "model ms") -> None:
        self.unit: Unit = unit
        self.actors: dict[str, Actor] = {}
        self.steps: list[Step] = []
        self.closed: list[Lease] = []
        self.live: dict[tuple[Side, str, Token], Lease] = {}
        self.events: list[Event] = []
        self.deadlines: dict[str, float] = {}

    @property
    def last(self) -> int | None:
        return self.steps[-1].index if self.steps else None

    def actor(self, name: str, kind: str = "worker") -> str:
        if name not in self.actors:  # the first kind named stays (every step names one)
            self.actors[name] = Actor(name, kind)
        return name

    def step(
        self,
        actor: str,
        operation: str,
        kind: str,
        at: float,
        job: str | None = None,
        token: Token = None,
        *,
        target: str | None = None,
        model: str | None = None,
        end: float | None = None,
        call: Mapping[str, Any] | None = None,
    ) -> int:
        """Record one operation; returns its index (counted from 1)."""
        self.actor(actor, "queue" if actor == "queue" else "worker")
        index = len(self.steps) + 1
        self.steps.append(
            Step(index, actor, operation, kind, at, end, target, model, job, token, call)
        )
        return index

    def answered(
        self,
        target: str | None,
        model: str | None,
        job: str | None = None,
        token: Token = None,
    ) -> None:
        """Set the results of the last step (known only after it ran), and the job and
        token it turned out to concern when the call did not name them."""
        if self.steps:
            last = self.steps[-1]
            self.steps[-1] = replace(
                last, target=target, model=model, job=last.job or job,
                token=last.token if last.token is not None else token,
            )  # fmt: skip

    def rows(self, side: Side, rows: Sequence[LeaseRow], at: float) -> None:
        """The leases stored lease-worker ``rows`` show after the last step."""
        for row in rows:
            self.deadlines.setdefault(row.id, row.deadline)
        held = [
            (row.id, row.token, row.owner or "?", row.lease_until)
            for row in rows
            if row.status == "leased" and row.lease_until is not None
        ]
        self.held(side, held, at)

    def held(self, side: Side, leases: Iterable[tuple[str, Token, str, float]], at: float) -> None:
        """The (job, token, holder, until) one side holds after the last step: new leases
        start at ``at``, leases no longer held end there."""
        seen: set[tuple[Side, str, Token]] = set()
        for job, token, holder, until in leases:
            key = (side, job, token)
            seen.add(key)
            old = self.live.get(key)
            if old is None or (old.holder, old.until) != (holder, until):
                if old is not None:
                    self.closed.append(_ended(old, at))
                self.actor(holder)
                self.live[key] = Lease(side, job, token, holder, at, until, self.last)
        for gone in [k for k in self.live if k[0] == side and k not in seen]:
            self.closed.append(_ended(self.live.pop(gone), at))

    def lease(self, lease: Lease) -> None:
        self.actor(lease.holder)
        self.closed.append(lease)

    def event(self, kind: str, actor: str, at: float, label: str) -> None:
        self.actor(actor, "clock" if kind == "clock" else "process")
        self.events.append(Event(kind, actor, at, label, self.last))

    def deadline(self, job: str, at: float) -> None:
        self.deadlines[job] = at

    def evidence(self, summary: str, parted: int | None = None, **extra: str) -> Evidence:
        leases = sorted([*self.closed, *self.live.values()], key=lambda x: (x.start, x.side, x.job))
        return Evidence(
            self.unit, summary, tuple(self.actors.values()), tuple(self.steps), tuple(leases),
            tuple(self.events), tuple(Deadline(j, at) for j, at in self.deadlines.items()),
            self.last if parted is None else parted, 0, extra,
        )  # fmt: skip


def _ended(lease: Lease, at: float) -> Lease:
    return Lease(
        lease.side, lease.job, lease.token, lease.holder, lease.start, lease.until, lease.step,
        at if at < lease.until else None,
    )  # fmt: skip


SHRUNK_FROM = "shrunk_from"
"""The ``extra`` key of a shrunk counterexample's evidence: how many operations the
failing program had before it was shrunk (``models.shrinking``)."""


def shrunk_evidence(evidence: Evidence, before: int, after: int | None = None) -> Evidence:
    """``evidence`` of a shrunk program, saying how long the original was (and, when
    given, how many operations the shrunk one has: ``extra['ops']``)."""
    extra = {**evidence.extra, SHRUNK_FROM: str(before)}
    if after is not None:
        extra["ops"] = str(after)
    return replace(evidence, extra=extra)
