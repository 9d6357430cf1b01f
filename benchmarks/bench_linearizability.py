"""Throughput of the linearizability checker on long lease-worker histories.

Run: ``python benchmarks/bench_linearizability.py [--ops 1000 5000] [--procs 2 3 4]``.

Histories are simulated, not recorded: ``procs`` processes each issue operations
one after another with random durations; every operation takes effect at a random
instant inside its interval, in which order the reference model computes its
result. So each history is linearizable by construction, with as much overlap as
real runs have (each process has at most one operation pending). A second run per
size corrupts one claim's result in the middle of the history, which the checker
must reject, to time the failing path too (it explores every configuration
before it gives up).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import replace
from typing import Any

from leasecheck.models import lease_model as lm
from leasecheck.models.contracts import Snapshot
from leasecheck.models.lease_ops import LeaseOp, LeaseOutcome
from leasecheck.models.linearizability import LeaseSpec, Operation, check

JOBS = tuple("abcdefgh")


def _args(rng: random.Random, now: int, held: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    roll = rng.random()
    if roll < 0.1:
        event = {"id": rng.choice(JOBS), "qty": 1}
        return "enqueue", {"event": event, "now_ms": now, "ttl_ms": 60000, "max_attempts": 3}
    if roll < 0.55 or not held:
        owner = rng.choice(("w1", "w2"))
        return "claim", {"owner": owner, "now_ms": now, "lease_ms": rng.choice((30, 200))}
    if roll < 0.9:
        outcome = rng.choice(("ok", "retry", "permanent"))
        ticket = dict(held[-1])
        return "finish", {"ticket": ticket, "outcome": outcome, "now_ms": now, "delay_ms": 0}
    return "redrive", {"job_id": rng.choice(JOBS), "now_ms": now, "ttl_ms": 60000, "note": "n"}


def simulate(ops: int, procs: int, seed: int) -> list[Operation]:
    """A linearizable history of ``ops`` lease operations by ``procs`` overlapping processes."""
    rng = random.Random(seed)
    per = ops // procs
    intervals: list[tuple[int, int, int, int, int]] = []  # (point, start, end, proc, index)
    for proc in range(procs):
        clock = rng.randrange(50)
        for index in range(1, per + 1):
            start = clock + rng.randrange(1, 20)
            end = start + rng.randrange(5, 60)
            intervals.append((rng.randrange(start, end), start, end, proc, index))
            clock = end
    state, history = Snapshot(), []
    held: list[list[dict[str, Any]]] = [[] for _ in range(procs)]
    for point, start, end, proc, index in sorted(intervals):
        name, args = _args(rng, point // 10, held[proc])
        try:
            step = getattr(lm, name)(state, **args)
        except (ValueError, lm.Conflict) as error:
            outcome = LeaseOutcome(error=type(error).__name__)
        else:
            state, outcome = step.state, LeaseOutcome(step.result)
            if name == "claim" and step.result is not None:
                held[proc].append(step.result)
        call = LeaseOp.of(name, **args)
        history.append(Operation(f"P{proc + 1}", index, call, start, end, outcome))
    history.sort(key=lambda op: op.invoked_ns)
    return history


def corrupt(history: list[Operation]) -> list[Operation]:
    """The same history with the middle successful claim's token off by one."""
    claims = [i for i, op in enumerate(history) if op.name == "claim" and op.result]
    i = claims[len(claims) // 2]
    ticket = dict(history[i].result)
    ticket["token"] += 1
    return [*history[:i], replace(history[i], outcome=LeaseOutcome(ticket)), *history[i + 1 :]]


def bench(ops: int, procs: int, seeds: int) -> None:
    for label, make in (("linearizable", simulate), ("one bad claim", _bad)):
        times, explored = [], []
        for seed in range(seeds):
            history = make(ops, procs, seed)
            started = time.perf_counter()
            verdict = check(history, LeaseSpec(), Snapshot())
            times.append(time.perf_counter() - started)
            explored.append(verdict.explored)
            assert verdict.linearizable == (label == "linearizable"), (label, seed)
        median = statistics.median(times)
        print(
            f"{ops:>5} ops  {procs} procs  {label:<13} median {median * 1000:8.1f} ms"
            f"  {ops / median:>9,.0f} ops/s  max {max(times) * 1000:8.1f} ms"
            f"  configurations {int(statistics.median(explored)):>7}"
        )


def _bad(ops: int, procs: int, seed: int) -> list[Operation]:
    return corrupt(simulate(ops, procs, seed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--procs", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--seeds", type=int, default=5)
    options = parser.parse_args()
    for ops in options.ops:
        for procs in options.procs:
            bench(ops, procs, options.seeds)


if __name__ == "__main__":
    main()
