"""The generic agreement machine: a real queue library and ``models.queue_model`` side by side.

The shape of ``stateful_tests/lease_machine.py``: every rule applies one queue
operation to the library (through its adapter, two connections on one store) and
to the set of model states that are still possible; ``observe`` after every step
narrows that set by what the store holds. Rules are named after the operations
(``enqueue``, ``claim``, ``ack``, ``nack``, ``extend``, ``recover``,
``advance_clock``), so a shrunk failure reads as a script.

A disagreement names the generic property it breaks (``Mismatch.prop``). The
machine *enforces* some properties and adopts what the library did for the others,
so ``queue.stale-ack`` fails only on a stale ack, not on an unrelated limitation.
With ``queue.no-loss`` enforced, teardown expires every lease, runs the library's
recovery and claims until nothing is left: every job must end done, failed or
delivered.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NoReturn

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

from adapters.protocol import Claim, QueueAdapter, QueueLibrary, SharedClock, Unsupported
from models import queue_model as qm

__all__ = ["Held", "QueueMachine"]

LEASES_MS = (150, 350, 1050)
"""Lease lengths: each ends 50 ms off the 100 ms grid the clock moves on, so no lease
ever ends exactly at a reading of the clock (libraries differ at that boundary)."""
ADVANCES_MS = (100, 200, 500, 1000, 2000)
MAX_ELAPSED_MS = 40_000
"""Simulated time a program may use (the lease worker gives a job at most 60 s)."""


@dataclass(frozen=True)
class Held:
    """A claim the machine holds: ``cid`` is the model's name for that delivery."""

    cid: str
    claim: Claim = field(compare=False)

    def __repr__(self) -> str:
        return f"<claim {self.cid} of job {self.claim.job!r}>"


class QueueMachine(RuleBasedStateMachine):
    """Bind a library with ``QueueMachine.bound(library, enforce)`` before running."""

    library: ClassVar[QueueLibrary]
    enforce: ClassVar[frozenset[str]] = frozenset()
    claims = Bundle("claims")

    @classmethod
    def bound(cls, library: QueueLibrary, enforce: frozenset[str]) -> type[QueueMachine]:
        attributes: dict[str, Any] = {"library": library, "enforce": enforce}
        return type("QueueMachine", (cls,), attributes)  # the name Hypothesis prints

    def __init__(self) -> None:
        super().__init__()
        self.scale = self.library.capabilities.time_scale()
        self.directory = Path(tempfile.mkdtemp(prefix="leasecheck-queue-", dir=_scratch_root()))
        self.clock = SharedClock(self.directory / "clock")
        location = self.library.create(self.directory, None)
        self.connections: list[QueueAdapter] = [
            self.library.connect(location, self.clock) for _ in range(2)
        ]
        self.states = [qm.QueueState()]
        self.counts = {"jobs": 0, "claims": 0}
        self.stepping = False
        self.failed = False
        self.last = "the start"

    # -- the one place target and model are compared --------------------------------------

    def _apply(self, what: str, each: Callable[[qm.QueueState], qm.Step]) -> None:
        after, mismatch = qm.across(self.states, each)
        if what != "observe()":
            self.last = what
        if mismatch is not None and mismatch.prop in self.enforce:
            self.failed = True
            _disagree(
                f"{mismatch.prop} violated by {self.library.name}: at {what} after {self.last}, "
                f"{mismatch.text}\nthe model's state before it:\n{self.states[0].describe()}"
            )
        self.states = after

    @contextmanager
    def _step(self) -> Iterator[None]:
        self.stepping = True
        yield
        self.stepping = False

    def _ms(self, ms: int) -> int:
        return ms * self.scale

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
            self.connections[0].enqueue(key, f"payload of {key}")
            self._apply(f"enqueue({key!r})", lambda s: qm.enqueue(s, key))

    @rule(target=claims, conn=st.integers(0, 1), lease_ms=st.sampled_from(LEASES_MS))
    def claim(self, conn: int, lease_ms: int) -> Any:
        with self._step():
            cid = f"c{self.counts['claims']}"
            self.counts["claims"] += 1
            got = self.connections[conn].claim(f"w{conn}", self._ms(lease_ms) / 1000)
            job = None if got is None else got.job
            lease = self._ms(lease_ms)
            self._apply(f"claim {cid} -> {job!r}", lambda s: qm.claim(s, cid, lease, job))
            return multiple() if got is None else Held(cid, got)

    @rule(held=claims, conn=st.integers(0, 1))
    def ack(self, held: Held, conn: int) -> None:
        with self._step():
            ok = _accepted(lambda: self.connections[conn].ack(held.claim))
            what = f"ack of {held} -> {ok}"
            self._apply(what, lambda s: qm.ack(s, held.cid, held.claim.job, ok))

    @precondition(lambda self: self.library.capabilities.nack)
    @rule(held=claims, conn=st.integers(0, 1))
    def nack(self, held: Held, conn: int) -> None:
        with self._step():
            ok = _accepted(lambda: self.connections[conn].nack(held.claim))
            what = f"nack of {held} -> {ok}"
            self._apply(what, lambda s: qm.nack(s, held.cid, held.claim.job, ok))

    @precondition(lambda self: self.library.capabilities.extend)
    @rule(held=claims, lease_ms=st.sampled_from(LEASES_MS))
    def extend(self, held: Held, lease_ms: int) -> None:
        with self._step():
            lease = self._ms(lease_ms)
            ok = _accepted(lambda: self.connections[0].extend(held.claim, lease / 1000))
            what = f"extend of {held} by {lease} ms -> {ok}"
            self._apply(what, lambda s: qm.extend(s, held.cid, held.claim.job, lease, ok))

    @rule()
    def recover(self) -> None:
        with self._step():
            returned = self.connections[1].recover()
            self._apply(f"recover() -> {returned}", lambda s: qm.recover(s, returned))

    @precondition(lambda self: self.states[0].now < MAX_ELAPSED_MS * self.scale)
    @rule(ms=st.sampled_from(ADVANCES_MS))
    def advance_clock(self, ms: int) -> None:
        with self._step():
            self.clock.advance(self._ms(ms) / 1000)
            self._apply(f"advance_clock({ms})", lambda s: qm.advance(s, self._ms(ms)))

    @invariant()
    def observed(self) -> None:
        seen = [(view.job, view.state) for view in self.connections[0].observe()]
        deletes = self.library.capabilities.ack_deletes
        self._apply("observe()", lambda s: qm.observe(s, seen, deletes))

    # -- the end ----------------------------------------------------------------------------

    def drain(self) -> None:
        """Expire every lease, recover, then claim and ack until the library has nothing."""
        self.advance_clock(max(LEASES_MS) + 100)
        self.recover()
        self.observed()
        for number in range(len(self.states[0].jobs) + 1):
            held = self.claim(number % 2, max(LEASES_MS))
            if not isinstance(held, Held):
                break
            self.ack(held, number % 2)
            self.observed()
        self.observed()
        now = self.states[0].now
        stuck = [job for job in self.states[0].jobs if job.state == "ready" or job.expired(now)]
        if stuck and "queue.no-loss" in self.enforce:
            names = ", ".join(job.describe(now) for job in stuck)
            _disagree(
                f"queue.no-loss violated by {self.library.name}: every lease expired and "
                f"recover() ran, but claim returns None while these jobs are neither done nor "
                f"failed: {names}"
            )

    def teardown(self) -> None:
        try:
            if not (self.stepping or self.failed) and "queue.no-loss" in self.enforce:
                self.drain()
        finally:
            for connection in self.connections:
                connection.close()
            self.clock.close()
            shutil.rmtree(self.directory, ignore_errors=True)


def _disagree(message: str) -> NoReturn:
    # Raised at module level: pytest indents the report by the raise's indentation, and
    # leasecheck.counterexample reads the program from lines indented as Hypothesis prints.
    raise AssertionError(message)


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
