"""Exploration, not a test: the generic properties' scenarios tried by hand on each library.

Run ``python tests/explore_adapters.py [litequeue|persist-queue|localqueue ...]``. It prints
one JSON line per scenario and library: what the library did, seen only through the
adapter protocol, with real forked processes and real SIGKILL (``crash_harness.engine``)
on real SQLite files in a scratch directory. Nothing here judges: the generic properties
(``queue.*``) do that; this records what a person sees when trying the same steps.

Scenarios:
- ``stale-ack``: A claims, its lease runs out, recover(), B claims; A acks, then B acks;
  then one more claim.
- ``stale-nack``: the same, but B acks first and A then nacks; then one more claim.
- ``ack-kill-reopen``: a child claims and acks, is SIGKILLed; a new connection expires
  every lease, recovers, observes and claims.
- ``race-3``: 3 processes claim from 300 jobs at once until none is left (10 rounds);
  deliveries counted per job.
- ``kill-holder-recover``: a child claims 2 of 3 jobs and is SIGKILLed; recover() before
  and after the leases run out; then every job is claimed.
- ``recover-live``: a live claim (lease 60 s), recover(), another claim.
"""

from __future__ import annotations

import collections
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _adapter_checks import Store, new_store, states

from leasecheck.adapters.litequeue import Litequeue
from leasecheck.adapters.localqueue import Localqueue
from leasecheck.adapters.persist_queue import PersistQueue
from leasecheck.adapters.protocol import QueueLibrary, SharedClock
from leasecheck.crash_harness.engine import GO, Channel, Engine
from leasecheck.scratch import scratch_dir

LIBRARIES: dict[str, QueueLibrary] = {
    "litequeue": Litequeue(),
    "persist-queue": PersistQueue(),
    "localqueue": Localqueue(),
}


def lease_for(store: Store) -> float:
    return 0.2 if store.real else 30.0


def expire(store: Store, clock: SharedClock) -> None:
    clock.advance(lease_for(store) + (0.1 if store.real else 1.0))


def stale_ack(store: Store, engine: Engine) -> dict[str, Any]:
    with store.connect() as (q, clock):
        q.enqueue("a", "x")
        a = q.claim("A", lease_for(store))
        expire(store, clock)
        recovered = q.recover()
        b = q.claim("B", lease_for(store) * 100)
        assert a is not None and b is not None
        seen = {"recovered": recovered, "B claimed": b.job, "A ack": q.ack(a)}
        seen["after A ack"] = states(q)
        seen["B ack"] = q.ack(b)
        seen["after B ack"] = states(q)
        again = q.claim("C", lease_for(store))
        seen["claim after"] = again.job if again else None
        return seen


def stale_nack(store: Store, engine: Engine) -> dict[str, Any]:
    with store.connect() as (q, clock):
        q.enqueue("a", "x")
        a = q.claim("A", lease_for(store))
        expire(store, clock)
        q.recover()
        b = q.claim("B", lease_for(store) * 100)
        assert a is not None and b is not None
        seen: dict[str, Any] = {"B ack": q.ack(b), "A nack (stale)": q.nack(a)}
        seen["after A nack"] = states(q)
        again = q.claim("C", lease_for(store))
        seen["delivered again after ack"] = again.job if again else None
        return seen


def _claim_ack_then_wait(store: Store) -> Callable[[Channel], object]:
    def body(channel: Channel) -> object:
        with store.connect() as (q, _):
            claim = q.claim("child", lease_for(store))
            assert claim is not None
            channel.send("event", ["acked", q.ack(claim)])
            channel.receive()  # wait here until SIGKILL
        return None

    return body


def ack_kill_reopen(store: Store, engine: Engine) -> dict[str, Any]:
    with store.connect() as (q, _):
        q.enqueue("a", "x")
        q.enqueue("b", "y")
    child = engine.fork("acker", _claim_ack_then_wait(store))
    event = child.next("the child's ack")
    child.kill()
    with store.connect() as (q, clock):
        expire(store, clock)
        seen = {"child": event.value, "recovered": q.recover(), "after reopen": states(q)}
        claimed = [c.job for c in iter(lambda: q.claim("W", 60.0), None)]
        seen["claimable after"] = claimed
        return seen


def _race_body(store: Store, name: str) -> Callable[[Channel], object]:
    def body(channel: Channel) -> object:
        with store.connect() as (q, _):
            channel.fault("ready")
            got = []
            while (claim := q.claim(name, 60.0)) is not None:
                got.append(claim.job)
            return got

    return body


def race_3(store: Store, engine: Engine, scratch: Path) -> dict[str, Any]:
    rounds, duplicated, claims, errors = 10, 0, 0, []
    for round_ in range(rounds):
        directory = scratch / f"race-{round_}"
        directory.mkdir()
        fresh = new_store(store.library, directory)
        with fresh.connect() as (q, _):
            for i in range(300):
                q.enqueue(f"j{i:03d}", "x")
        children = [engine.fork(f"P{i}", _race_body(fresh, f"P{i}")) for i in range(3)]
        for child in children:
            child.next("ready")
        for child in children:
            child.answer(GO)
        counts: collections.Counter[str] = collections.Counter()
        for child in children:
            outcome = child.outcome("its claims", deadline_s=60.0)
            if outcome.raised:
                errors.append(outcome.describe())
            else:
                counts.update(outcome.value)
        claims += sum(counts.values())
        duplicated += sum(1 for n in counts.values() if n > 1)
    return {"rounds": rounds, "claims": claims, "jobs delivered twice": duplicated,
            "errors": errors}  # fmt: skip


def _claim_two_then_wait(store: Store) -> Callable[[Channel], object]:
    def body(channel: Channel) -> object:
        with store.connect() as (q, _):
            got = [q.claim("holder", lease_for(store)) for _ in range(2)]
            channel.send("event", [c.job if c else None for c in got])
            channel.receive()
        return None

    return body


def kill_holder_recover(store: Store, engine: Engine) -> dict[str, Any]:
    with store.connect() as (q, _):
        for job in "abc":
            q.enqueue(job, "x")
    child = engine.fork("holder", _claim_two_then_wait(store))
    held = child.next("the holder's claims").value
    child.kill()
    with store.connect() as (q, clock):
        seen: dict[str, Any] = {"held": held, "recover before expiry": q.recover()}
        expire(store, clock)
        seen["recover after expiry"] = q.recover()
        seen["after"] = states(q)
        seen["claimable"] = sorted(c.job for c in iter(lambda: q.claim("W", 60.0), None))
        return seen


def recover_live(store: Store, engine: Engine) -> dict[str, Any]:
    with store.connect() as (q, _):
        q.enqueue("a", "x")
        q.claim("A", 60.0)
        recovered = q.recover()
        b = q.claim("B", 60.0)
        return {"recovered": recovered, "B got": b.job if b else None}


def run(name: str, scenario: str, step: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    library = LIBRARIES[name]
    with scratch_dir("leasecheck-explore-") as scratch, Engine() as engine:
        store = new_store(library, scratch)
        extra = (scratch,) if scenario == "race-3" else ()
        try:
            seen = step(store, engine, *extra)
        except Exception as error:  # an observation too: say what the library raised
            seen = {"raised": f"{type(error).__name__}: {error}"}
    return {"library": name, "version": library.version(), "scenario": scenario, **seen}


SCENARIOS: dict[str, Callable[..., dict[str, Any]]] = {
    "stale-ack": stale_ack,
    "stale-nack": stale_nack,
    "ack-kill-reopen": ack_kill_reopen,
    "race-3": race_3,
    "kill-holder-recover": kill_holder_recover,
    "recover-live": recover_live,
}


def main(names: list[str]) -> None:
    for name in names or list(LIBRARIES):
        for scenario, step in SCENARIOS.items():
            print(json.dumps(run(name, scenario, step)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
