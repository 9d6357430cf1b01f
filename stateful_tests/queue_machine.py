"""The generic agreement machine: a real queue library and ``models.queue_model`` side by side.

The shape of ``stateful_tests/lease_machine.py``: every rule applies one queue
operation to the library (through its adapter, two connections on one store) and
to the set of model states that are still possible; ``observe`` after every step
narrows that set by what the store holds. Rules are named after the operations
(``enqueue``, ``claim``, ``ack``, ``zombie_ack``, ``nack``, ``extend``, ``recover``,
``advance_clock``, and ``lease_runs_out``: advance past the oldest lease, recover, claim
again), so a shrunk failure reads as a script.

A disagreement names the generic property it breaks (``Mismatch.prop``). The
machine *enforces* some properties and adopts what the library did for the others,
so ``queue.stale-ack`` fails only on a stale ack, not on an unrelated limitation.
With ``queue.no-loss`` enforced, teardown expires every lease, runs the library's
recovery and claims until nothing is left: every job must end done, failed or
delivered.

A library that reads the system clock itself (``clock="real"``) runs on real time,
every lease and clock move at ``REAL_SCALE`` of its printed length: the model's
``now`` is each call's start in real milliseconds, and ``adapters.timing.Pacer``
keeps every call clear of the instants at which a lease may end. A program whose
call was descheduled across one is judged no further (it runs on, so that Hypothesis
draws what it drew before), and the machine counts it in ``set_aside``. For the same
reason a claim that got no job stays in the bundle on a real clock, and ``zombie_ack``
is always drawable. A replay on real time need not do what the run did,
so a disagreement there is kept with the calls as they ran (``failures``), not shrunk.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NoReturn, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)

from leasecheck.adapters.protocol import (
    Claim,
    QueueAdapter,
    QueueLibrary,
    SharedClock,
    Unsupported,
    destroy_store,
)
from leasecheck.adapters.timing import CallTimes, Pacer
from leasecheck.models import queue_model as qm
from leasecheck.models.evidence import Evidence, Recorder, attach
from leasecheck.models.queue_ops import QueueOp, QueueOutcome

__all__ = ["REAL_SCALE", "Held", "QueueMachine"]

T = TypeVar("T")

LEASES_MS = (150, 350, 1050)
"""Lease lengths: each ends 50 ms off the 100 ms grid the clock moves on, so no lease
ever ends exactly at a reading of the clock (libraries differ at that boundary)."""
ONE_LEASE_MS = 350
"""Every claim's lease on a library whose lease is one setting (``one_lease``)."""
ADVANCES_MS = (100, 200, 500, 1000, 2000)
RUNS_OUT_MS = 1100
"""``lease_runs_out``'s clock move: past the end of every lease held (none is longer than
1050 ms from the call that gave it), on the 100 ms grid."""
MAX_ELAPSED_MS = 40_000
"""Simulated time a program may use (the lease worker gives a job at most 60 s)."""
REAL_SCALE = 0.1
"""On a real clock every lease and move lasts this share of its printed length (a
``lease_ms=150`` claim leases for 15 ms): long beside a call (well under 1 ms), short
enough that a program sleeps about 0.15 s."""


@dataclass(frozen=True)
class Held:
    """A claim the machine holds: ``cid`` is the model's name for that delivery."""

    cid: str
    claim: Claim | None = field(compare=False)
    """``None``: the claim got no job (kept on a real clock only, see ``claim``)."""

    def __repr__(self) -> str:
        if self.claim is None:
            return f"<claim {self.cid} of no job>"
        return f"<claim {self.cid} of job {self.claim.job!r}>"


class QueueMachine(RuleBasedStateMachine):
    """Bind a library with ``QueueMachine.bound(library, enforce)`` before running."""

    library: ClassVar[QueueLibrary]
    enforce: ClassVar[frozenset[str]] = frozenset()
    set_aside: ClassVar[list[int]] = [0]
    """Programs not judged past a call that ran across a lease's end (real clock only)."""
    failures: ClassVar[list[str]] = []
    """Real clock: each disagreement with the calls that led to it, as they ran."""
    programs: ClassVar[list[int]] = [0]
    """Programs begun (each one builds a machine), all runs of the property."""
    zombie_acks: ClassVar[list[int]] = [0]
    """Acks sent by a claim whose job was claimed again since (``zombie_ack``), all programs."""
    call_times: ClassVar[CallTimes] = CallTimes()
    """Real clock: how long the run's latest calls took, so the pacer's room follows the load."""
    claims = Bundle("claims")

    server: ClassVar[str | None] = None
    """The URL of the server the library keeps its stores on, if it needs one."""

    @classmethod
    def bound(
        cls, library: QueueLibrary, enforce: frozenset[str], server: str | None = None
    ) -> type[QueueMachine]:
        attributes: dict[str, Any] = {
            "library": library, "enforce": enforce, "server": server, "set_aside": [0],
            "failures": [], "zombie_acks": [0], "programs": [0], "call_times": CallTimes(),
        }  # fmt: skip
        return type("QueueMachine", (cls,), attributes)  # the name Hypothesis prints

    def __init__(self) -> None:
        super().__init__()
        self.programs[0] += 1
        real = self.library.capabilities.real_time
        caps = self.library.capabilities
        self.pacer = Pacer(slack_ms=caps.slack_ms, times=self.call_times) if real else None
        self.scale = REAL_SCALE if real else self.library.capabilities.time_scale()
        if real and caps.server_lease is not None:
            # The server's one lease stands for ONE_LEASE_MS: every clock move keeps its
            # proportion to the lease, so leases run out within programs as elsewhere.
            self.scale = caps.real_lease_ms(ONE_LEASE_MS) / ONE_LEASE_MS
        self.directory = Path(tempfile.mkdtemp(prefix="leasecheck-queue-", dir=_scratch_root()))
        self.clock = SharedClock.of(self.directory / "clock", self.library.capabilities)
        self.location = location = self.library.create(self.directory, self.server)
        self.connections: list[QueueAdapter] = [
            self.library.connect(location, self.clock) for _ in range(2)
        ]
        self.states = [qm.QueueState()]
        self.counts = {"jobs": 0, "claims": 0}
        self.advanced = 0
        """The clock moves of the program so far, as printed (ms before ``scale``)."""
        self.void = False
        """Real clock: a call ran across a lease's end, so nothing more is judged."""
        self.trace: list[str] = []
        """Every operation so far, as the failure messages name them."""
        self.held: list[Held] = []
        """Every claim that got a job, oldest first (``zombie_ack`` picks among them)."""
        self.stepping = False
        self.blind = False
        """The library has no ``observe`` (``Unsupported``): nothing is read between steps."""
        self.failed = False
        self.last = "the start"
        self.record = Recorder()
        """What each step did, attached to a failure as its evidence."""
        self.doing: tuple[str, str | None, int | None] = ("queue", None, None)
        """(connection, job, claim number) of the step being applied."""
        self.given: dict[str, tuple[str, str, int]] = {}
        """cid -> (job, connection, until): the leases the library handed out and holds."""
        self.owners: dict[str, str] = {}
        """cid -> the connection whose claim it is (the lane its acks are drawn on)."""

    # -- the one place target and model are compared --------------------------------------

    def _apply(self, what: str, op: QueueOp, answer: object = None) -> None:
        """Step every state the model allows by the verb ``op``, which the library answered
        ``answer`` (a claim: its job's key or None); fail on a mismatch the run enforces."""
        if self.void:
            return
        token = self.doing[2]  # ``_recorded`` resets it
        deletes = self.library.capabilities.ack_deletes
        outcome = QueueOutcome(answer)
        after, mismatch = qm.across(self.states, lambda s: op.step(s, outcome, deletes))
        if what != "observe()":
            self.last = what
            self.trace.append(f"t={self.states[0].now} ms: {what}")
            self._recorded(what, op, answer, mismatch)
        if mismatch is not None and mismatch.prop in self.enforce:
            self.failed = True
            if what == "observe()":  # the store showed it after the last step
                self.record.answered(self.record.steps[-1].target, f"observe: {mismatch.text}")
            self._disagree(
                f"{mismatch.prop} violated by {self.library.name}: at {what} after {self.last}, "
                f"{mismatch.text}\nthe model's state before it:\n{self.states[0].describe()}"
            )
        self.states = after
        if op.kind in ("ack", "nack") and answer is True:
            self.given = {c: g for c, g in self.given.items() if _number(c) != token}
        if what != "observe()" and after:
            self._leases_now(after[0])

    def _recorded(
        self, what: str, op: QueueOp, answer: object, mismatch: qm.Mismatch | None
    ) -> None:
        """Record the step being applied: who ran it, its record, what the library said,
        and whether some state of the model explains it."""
        who, job, token = self.doing
        if op.kind != "advance":
            self.record.step(
                who, what, op.kind, self.states[0].now, job, token,
                target=f"returned {answer!r}",
                model=mismatch.text if mismatch else "allows it", call=op.to_json(),
            )  # fmt: skip
        self.doing = ("queue", None, None)

    def _doing(self, who: str, job: str | None = None, cid: str = "") -> None:
        self.doing = (who, job, _number(cid) if cid else None)

    def _leases_now(self, state: qm.QueueState) -> None:
        """The leases the library handed out and still holds, beside the first possible
        state's (a lease's token is its claim's number)."""
        owners = self.owners
        target = [
            (job, _number(cid), conn, until) for cid, (job, conn, until) in self.given.items()
        ]
        model = [
            (j.key, _number(j.holder or ""), owners.get(j.holder or "", "?"), j.until)
            for j in state.jobs
            if j.state == "leased"
        ]
        self.record.held("target", target, state.now)
        self.record.held("model", model, state.now)

    @contextmanager
    def _step(self) -> Iterator[None]:
        self.stepping = True
        yield
        self.stepping = False

    def _ms(self, ms: int) -> int:
        return round(ms * self.scale)

    def _lease(self, lease_ms: int) -> int:
        """A claim's or extend's lease (ms): the one lease of the run where the library's
        lease is its claimer's threshold (``Capabilities.one_lease``)."""
        capabilities = self.library.capabilities
        if capabilities.server_lease is not None:  # the server's one lease, as it is
            return capabilities.real_lease_ms(lease_ms)
        return self._ms(ONE_LEASE_MS if capabilities.one_lease else lease_ms)

    def _call(self, call: Callable[[], T]) -> T:
        """Run one library call; on a real clock, clear of lease ends and at a known time."""
        if self.pacer is None:
            return call()
        start = self.pacer.clear()
        self._now(start)
        result = call()
        self.window = (start, self.pacer.now())
        if not self.void and self.pacer.ambiguous(*self.window):
            # The library may have seen a lease live or expired: the rest of the program
            # still runs (so Hypothesis draws what it drew before) but is not judged.
            self.void = True
            self.set_aside[0] += 1
        return result

    def _now(self, ms: int) -> None:
        """Real clock: every possible state reads ``ms`` (the time never runs backwards)."""
        self.states = [qm.advance(s, max(0, ms - s.now))[0][0] for s in self.states]

    def _leased(self, lease: int) -> None:
        if self.pacer is not None:
            self.pacer.leased(*self.window, lease)

    # -- rules ------------------------------------------------------------------------------

    @initialize()
    def first_job(self) -> None:
        """Every program starts with one job, so claims have something to race for."""
        self.enqueue()

    @rule()
    def enqueue(self) -> None:
        with self._step():
            key = f"j{self.counts['jobs']}"
            self.counts["jobs"] += 1
            op = QueueOp.of("enqueue", key, f"payload of {key}")
            self._call(lambda: op.apply(self.connections[0], {}))
            self._doing("queue", key)
            self._apply(f"enqueue({key!r})", op)

    @rule(target=claims, conn=st.integers(0, 1), lease_ms=st.sampled_from(LEASES_MS))
    def claim(self, conn: int, lease_ms: int) -> Any:
        with self._step():
            cid = f"c{self.counts['claims']}"
            self.counts["claims"] += 1
            lease = self._lease(lease_ms)
            op = QueueOp.of("claim", cid, lease)
            got = self._call(lambda: op.apply(self.connections[conn], {}, worker=f"w{conn}"))
            job = None if got is None else got.job
            self._doing(f"w{conn}", job, cid)
            if job is not None:
                self.given[cid] = (job, f"w{conn}", self.states[0].now + lease)
                self.owners[cid] = f"w{conn}"
            self._apply(f"claim {cid} -> {job!r}", op, job)
            self._leased(lease)
            if got is None:
                # On real time whether a claim gets a job depends on timing, and what
                # Hypothesis draws next must not: an empty claim stays in the bundle.
                return multiple() if self.pacer is None else Held(cid, None)
            self.held.append(Held(cid, got))
            return self.held[-1]

    @rule(held=claims, conn=st.integers(0, 1))
    def ack(self, held: Held, conn: int) -> None:
        if (claim := held.claim) is None:
            return
        with self._step():
            op = QueueOp.of("ack", held.cid, claim.job)
            connection, claims = self.connections[conn], {held.cid: claim}
            ok = self._call(lambda: _accepted(lambda: op.apply(connection, claims)))
            self._doing(self._holder(held, conn), claim.job, held.cid)
            self._apply(f"ack of {held} -> {ok}", op, ok)

    @precondition(lambda self: self.pacer is not None or self._zombie() is not None)
    @rule(conn=st.integers(0, 1))
    def zombie_ack(self, conn: int) -> None:
        """The oldest claim whose job someone else has claimed since (its lease ran out,
        or it gave the job back) acks anyway: the worker that came back from the dead. (On
        real time the rule is always drawable, and does nothing when there is no zombie.)"""
        zombie = self._zombie()
        if zombie is not None:
            self.held.remove(zombie)
            self.zombie_acks[0] += 1
            self.ack(zombie, conn)

    def _holder(self, held: Held, conn: int) -> str:
        """The lane of a call made with ``held``: the connection that claimed it."""
        return self.owners.get(held.cid, f"w{conn}")

    def _zombie(self) -> Held | None:
        """The oldest claim whose job a later claim got: decided by the claims alone, so a
        claim whose lease ran out and that then extended or acked its own job is never a
        zombie, whatever ``observe`` read in between. One whose lease timed out (the
        library never took its ack or nack) comes before one that gave its job back: a
        client often refuses the latter itself (kombu's ``Message.ack`` of a rejected
        message), and taking those first hid the timed-out ones."""
        zombies = [
            held
            for number, held in enumerate(self.held)
            if held.claim is not None
            and any(h.claim is not None and h.claim.job == held.claim.job
                    for h in self.held[number + 1 :])
        ]  # fmt: skip
        timed_out = [held for held in zombies if held.cid in self.given]
        return next(iter(timed_out or zombies), None)

    @precondition(lambda self: self.library.capabilities.nack)
    @rule(held=claims, conn=st.integers(0, 1))
    def nack(self, held: Held, conn: int) -> None:
        if (claim := held.claim) is None:
            return
        with self._step():
            op = QueueOp.of("nack", held.cid, claim.job)
            connection, claims = self.connections[conn], {held.cid: claim}
            ok = self._call(lambda: _accepted(lambda: op.apply(connection, claims)))
            self._doing(self._holder(held, conn), claim.job, held.cid)
            self._apply(f"nack of {held} -> {ok}", op, ok)

    @precondition(lambda self: self.library.capabilities.extend)
    @rule(held=claims, lease_ms=st.sampled_from(LEASES_MS))
    def extend(self, held: Held, lease_ms: int) -> None:
        if (claim := held.claim) is None:
            return
        with self._step():
            lease = self._lease(lease_ms)
            op = QueueOp.of("extend", held.cid, claim.job, lease)
            connection, claims = self.connections[0], {held.cid: claim}
            ok = self._call(lambda: _accepted(lambda: op.apply(connection, claims)))
            self._doing(self._holder(held, 0), claim.job, held.cid)
            if ok and held.cid in self.given:
                self.given[held.cid] = (
                    claim.job,
                    self.given[held.cid][1],
                    self.states[0].now + lease,
                )
            self._apply(f"extend of {held} by {lease} ms -> {ok}", op, ok)
            self._leased(lease)

    @rule()
    def recover(self) -> None:
        with self._step():
            op = QueueOp.of("recover")
            returned = self._call(lambda: op.apply(self.connections[1], {}))
            self._doing("queue")
            self._apply(f"recover() -> {returned}", op, returned)

    @precondition(
        lambda self: (
            self.advanced < MAX_ELAPSED_MS
            and (self.pacer is not None or self._oldest_lease() is not None)
        )
    )
    @rule(target=claims)
    def lease_runs_out(self) -> Any:
        """The leases held now run out, recovery runs, and the connection that did not hold
        the oldest one claims: a redelivery, whose first holder is now a zombie whose lease
        timed out. (Drawn as three separate rules this took a lucky program: the ci run of
        kombu-redis met none in 500.) On real time the rule is always drawable and moves
        the same time, so what Hypothesis draws next never depends on which claims got a
        job."""
        cid = self._oldest_lease()
        owner = "w0" if cid is None else self.given[cid][1]
        self.advance_clock(RUNS_OUT_MS)
        self.recover()
        return self.claim(1 - int(owner[1:]), max(LEASES_MS))  # the late ack comes well inside it

    def _oldest_lease(self) -> str | None:
        """The oldest claim whose lease the library handed out and still holds, and whose
        job no later claim got (a redelivered claim's lease is over already)."""
        leases = list(self.given.items())
        for number, (cid, (job, _, _)) in enumerate(leases):
            if all(later_job != job for _, (later_job, _, _) in leases[number + 1 :]):
                return cid
        return None

    @precondition(lambda self: self.advanced < MAX_ELAPSED_MS)
    @rule(ms=st.sampled_from(ADVANCES_MS))
    def advance_clock(self, ms: int) -> None:
        self.advanced += ms
        with self._step():
            self.clock.advance(self._ms(ms) / 1000)
            if self.pacer is not None:
                self.last = f"advance_clock({ms})"
                self.trace.append(f"slept {self._ms(ms)} ms: {self.last}")
                return  # the next call reads the time it runs at
            self._doing("clock")
            self._apply(f"advance_clock({ms})", QueueOp.of("advance", self._ms(ms)))
            self.record.event("clock", "clock", self.states[0].now, f"+{self._ms(ms)} ms")

    @invariant()
    def observed(self) -> None:
        if self.blind:
            return
        try:
            views = self._call(self.connections[0].observe)
        except Unsupported:
            # No read-only view (AMQP reads messages only by taking them): the machine
            # judges by what the verbs return, and the drain's claims find what is left.
            self.blind = True
            return
        seen = [(view.job, view.state) for view in views]
        self._apply("observe()", QueueOp.of("observe"), seen)

    # -- the end ----------------------------------------------------------------------------

    def drain(self) -> None:
        """Expire every lease, recover, then claim and ack until the library has nothing."""
        if self.pacer is None:
            self.advance_clock(max(LEASES_MS) + 100)
        else:
            self.pacer.wait_out()
        self.recover()
        self.observed()
        # A library may deliver a job more than once (a nack repeated by a stale claim can
        # queue it twice); that is queue.ack-final's business, so the drain claims until
        # the library says "nothing", with room for every delivery the program could have
        # queued, and judges a loss only when it heard that "nothing" from every
        # connection in turn: a library that hands a worker a batch (pgqueuer's
        # QueueManager, 10 rows a dequeue) keeps the rest for that worker, so another
        # worker's None says nothing of them until their lease runs out.
        empty, said_nothing = False, set[int]()
        deliveries = 2 * (len(self.states[0].jobs) + self.counts["claims"]) + 1
        for number in range(2 * deliveries):
            conn = number % len(self.connections)
            held = self.claim(conn, max(LEASES_MS))
            if self.void:
                return
            if not isinstance(held, Held) or held.claim is None:
                self.observed()  # a ready job it passed over reads as claimable: no-loss
                said_nothing.add(conn)
                if len(said_nothing) == len(self.connections):
                    empty = True
                    break
                continue
            said_nothing.clear()
            self.ack(held, conn)
            self.observed()
        self.observed()
        now = self.states[0].now
        stuck = [job for job in self.states[0].jobs if job.state == "ready" or job.expired(now)]
        if stuck and empty and "queue.no-loss" in self.enforce and not self.void:
            names = ", ".join(job.describe(now) for job in stuck)
            self._disagree(
                f"queue.no-loss violated by {self.library.name}: every lease expired and "
                f"recover() ran, but claim returns None while these jobs are neither done nor "
                f"failed: {names}"
            )

    def teardown(self) -> None:
        try:
            judged = not (self.stepping or self.failed or self.void)
            if judged and "queue.no-loss" in self.enforce:
                self.drain()
        finally:
            for connection in self.connections:
                connection.close()
            self.clock.close()
            destroy_store(self.library, self.location)
            shutil.rmtree(self.directory, ignore_errors=True)

    def _disagree(self, message: str) -> NoReturn:
        """Fail; on a real clock also keep the message and the calls as they ran, since a
        replay on real time need not repeat them (``failures``)."""
        if self.pacer is not None:
            steps = "\n".join(f"  {number}. {what}" for number, what in enumerate(self.trace, 1))
            self.failures.append(f"{message}\nthe calls as they ran, on real time:\n{steps}")
        _disagree(message, self.record.evidence(message.splitlines()[0]))


def _disagree(message: str, evidence: Evidence | None = None) -> NoReturn:
    # Raised at module level: pytest indents the report by the raise's indentation, and
    # leasecheck.counterexample reads the program from lines indented as Hypothesis prints.
    error = AssertionError(message)
    raise attach(error, evidence) if evidence is not None else error


def _number(cid: str) -> int | None:
    """The number of a claim id (``c3`` -> 3): the token its lease is drawn with."""
    return int(cid[1:]) if cid[1:].isdigit() else None


def _scratch_root() -> str | None:
    """Where ``leasecheck.scratch`` puts files (the run's directory, else tmpfs)."""
    inherited = os.environ.get("LEASECHECK_SCRATCH")
    if inherited and os.path.isdir(inherited):
        return inherited
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def _accepted(call: Callable[[], bool]) -> bool:
    """True if the library took the call; a refusal may be ``False`` or a library error."""
    try:
        return call() is True
    except Unsupported:
        raise
    except Exception:
        return False
