"""The agreement machine: a target lease worker and the reference model, step by step.

``LeaseAgreement`` has the shape of Hypothesis' own ``test_database_agreement``:
every rule applies one operation of lease-worker.md to the target (a module and
an open connection, through ``LeaseTarget``) and to ``LeaseModel``, and
``_agree`` compares, in one place: the return value, the kind of error (a target
error iff a model error), the fault hook points each side called, the payloads
``send`` received, that the caller's dicts are unmodified, the whole stored state
(the target's rows == the model's snapshot) and that no connection is left inside
a transaction. Rules are named after the operations, so a shrunk failure reads
like a script.

Binding a target: the machine checks whatever module was bound last (default: the
bundled ``queue_impl/worker.py``)::

    from leasecheck.stateful_tests.lease_machine import *
    from leasecheck.targets.loader import load_worker

    LeaseAgreement.bind(load_worker("path/to/worker.py"))
    state = LeaseAgreement()
    state.enqueue(job='a', qty=1, now=When('now'), ttl_ms=10, max_attempts=3)
    (tickets_0,) = state.claim(owner='w1', now=When('now'), lease_ms=5, fault=None)
    state.finish(ticket=tickets_0, change=Shift('token', -1), outcome='ok', ...)
    state.teardown()

That is exactly a program Hypothesis prints for a failure, pasted after ``bind``:
``from stateful_tests.lease_machine import *`` brings every name such a program
uses (``When``, ``Hook``, ``Send``, ``Clock``, the ticket changes, ``nan``, ``inf``).
"""

from __future__ import annotations

import copy
import math
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, ClassVar, NoReturn

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    initialize,
    multiple,
    precondition,
    rule,
)

import leasecheck.models.lease_model as lease_model
from leasecheck.models.contracts import LeaseQueue, Snapshot, shown
from leasecheck.models.edges import DictSubclass, IntSubclass, StrSubclass
from leasecheck.models.evidence import Recorder, attach
from leasecheck.models.lease_model import MAX_NOW, MAX_TOKEN, LeaseModel, retry_delay_readings
from leasecheck.models.lease_ops import LeaseOp
from leasecheck.stateful_tests.program import check
from leasecheck.targets.lease_compare import (
    LeaseOutcome,
    differences,
    error_kind,
    same,
    state_difference,
)
from leasecheck.targets.lease_target import LeaseTarget, read_snapshot, write_snapshot
from leasecheck.targets.loader import load_worker

from . import _lease_strategies as s
from ._lease_values import (
    Bad,
    Change,
    Clock,
    Drop,
    Extra,
    Hook,
    InjectedFault,
    InjectedInterrupt,
    Keep,
    Put,
    Send,
    Shift,
    Start,
    Subclass,
    TicketDict,
    When,
)
from ._queue_files import files_for

__all__ = [
    "Bad",
    "Clock",
    "DictSubclass",
    "Drop",
    "Extra",
    "Hook",
    "InjectedFault",
    "InjectedInterrupt",
    "IntSubclass",
    "Keep",
    "LeaseAgreement",
    "Put",
    "Send",
    "Shift",
    "Start",
    "StrSubclass",
    "Subclass",
    "TicketDict",
    "When",
    "inf",
    "nan",
]

nan = math.nan
inf = math.inf
SideCall = Callable[[Any, "Side"], object]
"""How one side runs a step: ``(queue, side) -> result`` (a ``LeaseOp.call`` or a function)."""
EMPTY = Start()
"""The start of a program that names none (programs printed before start states existed)."""
SEND_JOB = {"id": "c", "qty": 1}
"""What the ``Send('enqueue')`` script enqueues while a delivery is in flight."""


@dataclass
class Side:
    """One side of a step: who it is, its exception classes, what its callbacks saw."""

    name: str
    """'target' or 'model'."""
    errors: Any
    """The module whose ``Retryable``/``Permanent`` this side's ``send`` raises."""
    hooks: list[str] = field(default_factory=list)
    """Every point at which the fault hook was called, in order."""
    sends: list[object] = field(default_factory=list)
    """A copy of every payload ``send`` received, taken before any mutation."""


def _has_ended_jobs(machine: LeaseAgreement) -> bool:
    """Redrive is for dead jobs; done ones must be refused. Either exists."""
    return any(row.status in ("dead", "done") for row in machine.model.snapshot().jobs)


def _valid_jitter(jitter: object) -> bool:
    try:
        lease_model.retry_delay(1, 1, 1, jitter)
    except ValueError:
        return False
    return True


class LeaseAgreement(RuleBasedStateMachine):
    """Drives the bound target worker and ``LeaseModel`` with the same operations."""

    target_module: ClassVar[ModuleType | None] = None
    first_failure_at: ClassVar[float | None] = None
    """``time.perf_counter()`` at the first disagreement seen (time to detection)."""
    tickets = Bundle("tickets")
    """Every ticket ever claimed, stale ones included."""
    housekeeping = Bundle("housekeeping")
    """Never filled. Hypothesis orders rules with a target after those without and
    draws the first rules more often; targeting this moves the argument-less
    connection rules behind the queue operations, so they do not crowd them out."""

    @classmethod
    def bind(cls, module: ModuleType) -> type[LeaseAgreement]:
        """Check ``module`` (from ``targets.loader.load_worker``) from now on."""
        cls.target_module = module
        return cls

    def __init__(self) -> None:
        super().__init__()
        self.module = type(self).target_module or load_worker()
        self.files = files_for(self.module)
        self.dir = self.files.dir
        self.missing, self.directory, self.fifo = (
            self.files.missing, self.files.directory, self.files.fifo
        )  # fmt: skip
        self.path = self.files.fresh()
        self.cons: list[sqlite3.Connection] = []
        self.cons = [self.module.open_queue(self.path)]
        """The open connections; the second is opened when a step first needs it."""
        self.active = 0
        self.model = LeaseModel()
        self.now = 0
        self.tokens: dict[str, int] = {}
        self.issued: dict[str, list[dict[str, Any]]] = {}
        self.redrives: tuple[object, ...] = ()
        self.seen = Snapshot()
        self.record = Recorder()
        """What each step did on both sides, attached to a failure as its evidence."""
        self.start = EMPTY
        """The program's start: a seeded one's rows, which its program does not show, are
        added to every failure."""

    @property
    def con(self) -> sqlite3.Connection:
        return self.cons[self.active]

    def _other(self) -> sqlite3.Connection:
        """The connection that is not active, opened on first use (the file already has
        its tables and rows by then: open_queue must leave them alone)."""
        if len(self.cons) < 2:
            self.cons.append(self.module.open_queue(self.path))
        return self.cons[1 - self.active]

    def teardown(self) -> None:
        try:
            for con in self.cons:
                con.close()
        finally:
            self.files.remove(self.path)

    # --- the one place where target and model are compared -------------------------------

    def _agree_on(self, op: LeaseOp, hook: Hook | None) -> LeaseOutcome:
        """Run the contract's record ``op`` on both sides with the machine's ``hook`` (the
        target gets the caller's values, the model a deep copy); compare everything."""
        copied = copy.deepcopy(op)
        return self._agree(
            op.describe(),
            lambda queue, side: op.call(queue, self._fault(hook, side)),
            lambda queue, side: copied.call(queue, self._fault(hook, side)),
            given=op,
        )

    def _agree(
        self,
        call: str,
        on_target: SideCall,
        on_model: SideCall | None = None,
        accept: frozenset[str] = frozenset(),
        given: LeaseOp | None = None,
    ) -> LeaseOutcome:
        """Run the operation on both sides, compare everything, return the model's outcome.

        ``on_target(queue, side)`` and ``on_model`` (default: the same function) run it;
        ``accept`` lists error kinds the spec leaves open between (each accepted for the
        other); ``given`` is the call's record, whose arguments must come back unmodified.
        """
        pristine = copy.deepcopy(given)
        target = self._attempt(Side("target", self.module), on_target, self._target())
        model = self._attempt(Side("model", lease_model), on_model or on_target, self.model)
        self.record.answered(target.describe(), model.describe(), *_job_token(target.result))
        self._compare(call, target, model, accept)
        if given is not None and pristine is not None:
            for (name, value), (_, before) in zip(given.args, pristine.args, strict=True):
                if not same(value, before):
                    self._fail(f"{call} modified the caller's {name}: {before!r} became {value!r}")
        self._check_state(call)
        return model

    def _target(self) -> LeaseQueue:
        return LeaseTarget(self.module, self.con)

    def _attempt(self, side: Side, operation: SideCall, queue: Any) -> LeaseOutcome:
        try:
            result = operation(queue, side)
        except (Exception, InjectedInterrupt) as error:  # no other BaseException: Ctrl-C stops
            kind = (
                self.model.error_kind(error)
                if side.name == "model"
                else error_kind(error, self.module)
            )
            text = f": {str(error)[:160]}" if str(error) else ""
            return LeaseOutcome(
                error=kind, detail=f"{type(error).__name__}{text}",
                hooks=tuple(side.hooks), sends=tuple(side.sends),
            )  # fmt: skip
        return LeaseOutcome(result=result, hooks=tuple(side.hooks), sends=tuple(side.sends))

    def _compare(
        self, call: str, target: LeaseOutcome, model: LeaseOutcome, accept: frozenset[str]
    ) -> None:
        for problem in differences(call, target, model, accept):
            self._fail(problem)

    def _check_state(self, call: str) -> None:
        # An open transaction first: the rows read then include what it has not committed.
        inside = [index for index, con in enumerate(self.cons) if con.in_transaction]
        if inside:
            self._fail(f"after {call} connection {inside} is still inside a transaction")
        target, model = read_snapshot(self.con), self.model.snapshot()
        at = self.record.steps[-1].start if self.record.steps else self.now
        self.record.rows("target", target.jobs, at)
        self.record.rows("model", model.jobs, at)
        if target != model:
            self._fail(state_difference(f"after {call}", target, model))
        self.seen = target

    def _fail(self, message: str) -> NoReturn:
        if LeaseAgreement.first_failure_at is None:
            LeaseAgreement.first_failure_at = time.perf_counter()
        lines = message.splitlines()
        said = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
        if self.start != EMPTY:
            now, state = self.start.state()
            message = (
                f"{message}\nthe program's {self.start!r} wrote these rows into the file "
                f"before its first step, with plain INSERTs through the connection the steps "
                f"then use (the one open_queue returned), the clock at now_ms={now}:"
                f"\n{state.describe()}"
            )
        raise attach(AssertionError(message), self.record.evidence(said))

    def _doing(
        self, actor: object, name: str, at: object, call: str, ticket: object = None
    ) -> None:
        """Record the step about to run: who runs it, the operation's name, the model time,
        and the job and token of the ticket it hands in."""
        self._record(actor, name, at, call, ticket, None)

    def _doing_op(self, actor: object, op: LeaseOp) -> None:
        """Record the step about to run ``op``: its line, its record, its ticket's job and token."""
        ticket = op.arguments().get("ticket")
        self._record(actor, op.kind, op.value("now_ms"), op.describe(), ticket, op.to_json())

    def _record(
        self, actor: object, name: str, at: object, call: str, ticket: object,
        record: dict[str, Any] | None,
    ) -> None:  # fmt: skip
        who = actor if isinstance(actor, str) and actor.strip() else "made-up"
        when = at if isinstance(at, int | float) and math.isfinite(at) else self.now
        self.record.step(who, call, name, float(when), *_job_token(ticket), call=record)

    # --- helpers that turn rule arguments into call arguments ---------------------------

    def _at(self, when: object) -> object:
        """A ``When`` resolved against the current state; a bad value passes unchanged."""
        if not isinstance(when, When):
            return when
        return when.resolve(self.now, self.model.snapshot().jobs)

    @staticmethod
    def _fault(hook: Hook | None, side: Side) -> Any:
        return None if hook is None else hook.bind(side.hooks)

    def _clock(self, script: Clock) -> Callable[[], Callable[[], object]]:
        """A factory of fresh clocks giving the same resolved readings on each side."""
        readings = script.readings(self._at)

        def make() -> Callable[[], object]:
            left = list(readings)

            def clock() -> object:
                return left.pop(0) if len(left) > 1 else left[0]

            return clock

        return make

    def _send(self, script: Send, side: Side) -> Callable[[Any], object]:
        def send(payload: Any) -> object:
            side.sends.append(copy.deepcopy(payload))
            return self._deliver(script.kind, side, payload)

        return send

    def _deliver(self, kind: str, side: Side, payload: Any) -> object:
        if kind in ("retryable", "permanent"):
            error: type[Exception] = getattr(side.errors, kind.capitalize())
            raise error(f"scripted send: {kind}")
        if kind == "error":
            raise RuntimeError("scripted send: an unexpected error")
        if kind == "mutate":
            payload["qty"] = 999
            payload.pop("id", None)
        elif kind == "enqueue" and side.name == "target":
            self._enqueue_elsewhere()
        elif kind == "enqueue":
            self.model.enqueue(dict(SEND_JOB), self.now, 60000)
        elif kind == "probe" and side.name == "target":
            return self._probe()
        return {"truthy": 1, "none": None}.get(kind, True)

    def _enqueue_elsewhere(self) -> None:
        """Enqueue through the other connection, failing at once if the file is locked."""
        other = self._other()  # opened before the step (run_once, run_file), so not locked
        other.execute("PRAGMA busy_timeout = 0")  # a locked file fails now, not in 1 s
        try:
            self.module.enqueue(other, dict(SEND_JOB), self.now, 60000)
        finally:
            other.execute("PRAGMA busy_timeout = 1000")  # what open_queue's timeout=1 set

    def _probe(self) -> object:
        """True if no connection holds a write transaction on the file (timeout 0)."""
        probe = sqlite3.connect(self.path, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
        except sqlite3.OperationalError as error:
            return f"the queue file was locked while send ran ({error})"
        finally:
            probe.close()
        return True

    # --- enqueue, claim, finish, redrive ---------------------------------------------------
    # Each takes ``bad``: None for a valid call, or a ``Bad`` that replaces one argument.

    @initialize(start=s.starts, job=s.jobs, qty=s.qtys, ttl_ms=s.ttls, max_attempts=s.budgets)
    def enqueue_first(
        self, job: str, qty: int, ttl_ms: int, max_attempts: int, start: Start = EMPTY
    ) -> None:
        """Every run starts with one job, even when Hypothesis switches ``enqueue`` off;
        from an empty queue or from rows near the bounds written straight into the file.
        (So claim, run_once and run_file need no "the queue has jobs" precondition: this
        valid enqueue always stores a row, and no operation removes one. Hypothesis would
        check it for every rule at every step, always True.)"""
        if start != Start():
            self.start = start
            self.now, state = start.state()
            write_snapshot(self.con, state)
            self.model = LeaseModel(state)
            self._check_state(f"the start {start!r}")
        self.enqueue(job, qty, When(), ttl_ms, max_attempts, None)

    @rule(
        job=s.jobs,
        qty=s.qtys,
        now=s.times,
        ttl_ms=s.ttls,
        max_attempts=s.budgets,
        bad=s.enqueue_bad,
    )
    def enqueue(
        self, job: str, qty: int, now: When, ttl_ms: int, max_attempts: int, bad: Bad | None
    ) -> None:
        event = {"id": job, "qty": qty}
        args = self._arguments(bad, event=event, now=now, ttl_ms=ttl_ms, max_attempts=max_attempts)
        op = LeaseOp.of("enqueue", *args.values())
        self._doing_op("queue", op)
        self._agree_on(op, None)

    @rule(
        target=tickets,
        owner=s.owners,
        now=s.times,
        lease_ms=s.leases,
        fault=s.claim_hooks,
        bad=s.claim_bad,
    )
    def claim(
        self, owner: str, now: When, lease_ms: int, fault: Hook | None, bad: Bad | None
    ) -> MultipleResults[dict[str, Any]]:
        args = self._arguments(bad, owner=owner, now=now, lease_ms=lease_ms)
        op = LeaseOp.of("claim", *args.values(), fault=_point(fault))
        self._doing_op(args["owner"], op)
        outcome = self._agree_on(op, fault)
        if outcome.error is not None or not isinstance(outcome.result, dict):
            return multiple()
        ticket = dict(outcome.result)
        self.issued.setdefault(ticket["id"], []).append(ticket)
        return multiple(ticket)

    @rule(
        ticket=tickets,
        change=s.changes,
        outcome=s.outcomes,
        now=s.times,
        delay_ms=s.delays,
        fault=s.finish_hooks,
        bad=s.finish_bad,
    )
    def finish(
        self,
        ticket: dict[str, Any],
        change: Change,
        outcome: str,
        now: When,
        delay_ms: int,
        fault: Hook | None,
        bad: Bad | None,
    ) -> None:
        args = self._arguments(bad, outcome=outcome, now=now, delay_ms=delay_ms)
        changed = change.apply(ticket)
        op = LeaseOp.of("finish", changed, *args.values(), fault=_point(fault))
        self._doing_op(changed.get("owner") if isinstance(changed, dict) else None, op)
        self._agree_on(op, fault)

    @precondition(_has_ended_jobs)
    @rule(
        job=s.jobs,
        now=s.times,
        ttl_ms=s.ttls,
        note=s.notes,
        fault=s.redrive_hooks,
        bad=s.redrive_bad,
    )
    def redrive(
        self, job: str, now: When, ttl_ms: int, note: str, fault: Hook | None, bad: Bad | None
    ) -> None:
        args = self._arguments(bad, job=job, now=now, ttl_ms=ttl_ms, note=note)
        op = LeaseOp.of("redrive", *args.values(), fault=_point(fault))
        before = self.model.snapshot().job(job)
        if before is not None and before.token >= MAX_TOKEN:
            return  # a claim after this redrive would go past 10**15: left open by the spec
        self._doing_op("queue", op)
        self._agree_on(op, fault)
        after = self.model.snapshot().job(job)
        if before is not None and after is not None and after.token != before.token:
            self._fail(
                f"{op.describe()} changed job {job!r}'s token from {before.token} to {after.token}"
            )

    def _arguments(self, bad: Bad | None, **arguments: object) -> dict[str, object]:
        """The call's arguments: ``bad`` applied, then every ``When`` resolved to a time."""
        chosen = bad.apply(arguments) if bad is not None else arguments
        return {name: self._at(value) for name, value in chosen.items()}

    # --- clock -------------------------------------------------------------------------

    @rule(ms=s.steps)
    def advance_clock(self, ms: int) -> None:
        self.now = min(self.now + ms, MAX_NOW)
        self.record.event("clock", "clock", self.now, f"+{ms} ms → t={self.now}")

    # --- run_once and run_file -----------------------------------------------------------

    # run_once and run_file put the ticket they worked under into ``tickets`` (rebuilt
    # with the pure model's ``claim``), so that later steps can finish with it, stale.

    @rule(
        target=tickets,
        owner=s.owners,
        clock=s.clocks,
        send=s.sends,
        jitter=s.any_jitters,
        lease_ms=s.leases,
    )
    def run_once(
        self, owner: str, clock: Clock, send: Send, jitter: object, lease_ms: int
    ) -> MultipleResults[dict[str, Any]]:
        clocks, readings = self._clock(clock), clock.readings(self._at)
        call = (
            f"run_once({owner!r}, clock={readings}, send={send!r}, jitter={jitter!r},"
            f" lease_ms={lease_ms})"
        )
        expected = self._would_claim(owner, readings[0], lease_ms)
        self._doing(owner, "run_once", readings[0], call)
        self._ready(send)
        self._agree(
            call,
            lambda queue, side: queue.run_once(
                owner, clocks(), self._send(send, side), jitter, lease_ms
            ),
        )
        return self._worked_under(expected)

    @rule(
        target=tickets,
        path=s.run_paths,
        owner=s.owners,
        clock=s.clocks,
        send=s.sends,
        jitter=s.any_jitters,
    )
    def run_file(
        self, path: str, owner: str, clock: Clock, send: Send, jitter: object
    ) -> MultipleResults[dict[str, Any]]:
        real = {
            "queue": self.path, "missing": self.missing, "directory": self.directory,
            "fifo": self.fifo,
        }[path]  # fmt: skip
        clocks, readings = self._clock(clock), clock.readings(self._at)
        call = f"run_file({path!r}, {owner!r}, clock={readings}, send={send!r}, jitter={jitter!r})"
        expected = self._would_claim(owner, readings[0], 1000) if path == "queue" else None
        self._doing(owner, "run_file", readings[0], call)
        self._ready(send)

        def on_target(queue: Any, side: Side) -> object:
            return self.module.run_file(real, owner, clocks(), self._send(send, side), jitter)

        def on_model(queue: LeaseModel, side: Side) -> object:
            if path != "queue":
                raise FileNotFoundError(f"{real} is not an existing regular file")
            return queue.run_once(owner, clocks(), self._send(send, side), jitter)

        # Left open by the spec: whether run_file checks the path or the jitter first.
        either_first = path != "queue" and not _valid_jitter(jitter)
        accept = frozenset({"FileNotFoundError", "ValueError"} if either_first else ())
        self._agree(call, on_target, on_model, accept)
        created = [p.name for p in (self.missing, *self.directory.iterdir()) if p.exists()]
        if created:
            self._fail(f"{call} created {created}; run_file must never create a queue")
        return self._worked_under(expected)

    def _ready(self, send: Send) -> None:
        """Open the other connection before a ``Send('enqueue')`` step, not inside its send
        (where a target holding the write lock would make the open wait)."""
        if send.kind == "enqueue":
            self._other()

    def _would_claim(self, owner: str, now: object, lease_ms: int) -> dict[str, Any] | None:
        """The ticket a claim at ``now`` would get (None if it would get none)."""
        try:
            ticket = lease_model.claim(self.model.snapshot(), owner, now, lease_ms).result
        except ValueError:
            return None
        return ticket if isinstance(ticket, dict) else None

    def _worked_under(self, ticket: dict[str, Any] | None) -> MultipleResults[dict[str, Any]]:
        """``ticket`` if its claim happened (the job's token reached it: tokens only grow)."""
        row = self.model.snapshot().job(ticket["id"]) if ticket else None
        if ticket is None or row is None or row.token != ticket["token"]:
            return multiple()
        self.issued.setdefault(ticket["id"], []).append(ticket)
        return multiple(ticket)

    # --- retry_delay ---------------------------------------------------------------------

    @rule(attempt=s.attempts, base_ms=s.base_delays, cap_ms=s.cap_delays, jitter=s.delay_jitters)
    def retry_delay(self, attempt: object, base_ms: object, cap_ms: object, jitter: object) -> None:
        call = f"retry_delay({shown(attempt)}, {shown(base_ms)}, {shown(cap_ms)}, {shown(jitter)})"
        self._doing("queue", "retry_delay", self.now, call)
        target = self._attempt(
            Side("target", self.module),
            lambda queue, side: queue.retry_delay(attempt, base_ms, cap_ms, jitter),
            self._target(),
        )
        model = self._attempt(
            Side("model", lease_model),
            lambda queue, side: retry_delay_readings(attempt, base_ms, cap_ms, jitter),
            self.model,
        )
        readings = model.result if isinstance(model.result, set) else set()
        agree = target.error == model.error and (
            target.error is not None or (type(target.result) is int and target.result in readings)
        )
        self.record.answered(target.describe(), model.describe())
        if not agree:
            wanted = model.describe() if model.error else f"returned one of {sorted(readings)}"
            self._fail(f"{call} {target.describe()} on the target but {wanted} on the model")

    # --- connections -----------------------------------------------------------------------

    @rule(target=housekeeping)
    def reopen(self) -> MultipleResults[object]:
        """Close the active connection and open the file again: nothing may change."""
        self.con.close()
        self.cons[self.active] = self.module.open_queue(self.path)
        self._doing(f"connection {self.active}", "reopen", self.now, "reopen()")
        self._check_state(f"reopen() of connection {self.active}")
        return multiple()

    @rule(target=housekeeping, index=st.sampled_from((1, 0)))
    def use_connection(self, index: int) -> MultipleResults[object]:
        """Switch to another open connection to the same file."""
        if index != self.active:
            self._other()
        self.active = index
        self._doing(f"connection {index}", "use_connection", self.now, f"use_connection({index})")
        self._check_state(f"use_connection({index})")
        return multiple()

    # --- invariants --------------------------------------------------------------------------

    @check
    def consistent(self) -> None:
        """Tokens never decrease; one live lease per job; redrives only grow; rows coherent."""
        for state in (self.model.snapshot(), self.seen):
            for row in state.jobs:
                problem = _row_problem(row)
                if problem:
                    self._fail(f"job {row.id!r} is inconsistent ({problem}):\n{state.describe()}")
        self._tokens_never_decrease()
        self._one_live_lease()
        self._redrives_only_grow()

    def _tokens_never_decrease(self) -> None:
        for row in self.model.snapshot().jobs:
            if row.token < self.tokens.get(row.id, 0):
                self._fail(
                    f"job {row.id!r}'s token went down from {self.tokens[row.id]} to {row.token}"
                )
            self.tokens[row.id] = row.token

    def _one_live_lease(self) -> None:
        for job_id, issued in self.issued.items():
            tokens = [ticket["token"] for ticket in issued]
            if tokens != sorted(set(tokens)):
                self._fail(
                    f"job {job_id!r} was leased with the tokens {tokens};"
                    " each claim must get a new, higher token"
                )
            row = self.model.snapshot().job(job_id)
            live = [
                t for t in issued if row is not None and row.status == "leased" and _marks(row, t)
            ]
            if len(live) > 1:
                self._fail(f"job {job_id!r} has {len(live)} live leases: {live}")

    def _redrives_only_grow(self) -> None:
        rows = self.model.snapshot().redrives
        if rows[: len(self.redrives)] != self.redrives:
            self._fail(f"the redrives table lost or changed rows: {self.redrives} became {rows}")
        self.redrives = rows


def _marks(row: Any, ticket: dict[str, Any]) -> bool:
    """The ticket carries the row's whole lease marker."""
    return (row.qty, row.owner, row.token, row.attempts, row.lease_until) == (
        ticket["qty"], ticket["owner"], ticket["token"], ticket["attempt"], ticket["lease_until"]
    )  # fmt: skip


_REASONS = {
    "pending": (None, "retry"),
    "leased": (None,),
    "done": (None,),
    "dead": ("deadline", "exhausted", "permanent"),
}


def _row_problem(row: Any) -> str | None:
    """What is wrong with a stored job row, from the spec's state rules, or None."""
    leased = row.status == "leased"
    if row.status not in _REASONS:
        return f"unknown status {row.status!r}"
    if row.reason not in _REASONS[row.status]:
        return f"a {row.status} job has reason {row.reason!r}"
    if (row.owner is not None, row.lease_until is not None) != (leased, leased):
        return f"status {row.status} with owner={row.owner!r}, lease_until={row.lease_until}"
    if leased and not (row.lease_until <= row.deadline and row.attempts >= 1):
        return "a lease past the deadline, or without an attempt"
    if not 0 <= row.attempts <= row.max_attempts or row.token < row.attempts:
        return f"attempts={row.attempts}, max_attempts={row.max_attempts}, token={row.token}"
    return None


def _point(hook: Hook | None) -> str | None:
    """The fault point at which the machine's ``hook`` raises (the record's ``fault``)."""
    return None if hook is None else hook.raise_at


def _job_token(ticket: object) -> tuple[str | None, int | None]:
    """The job and token a ticket (or a claim's result) names, where it names them."""
    if not isinstance(ticket, dict):
        return None, None
    job, token = ticket.get("id"), ticket.get("token")
    return (
        job if isinstance(job, str) else None,
        token if type(token) is int else None,
    )
