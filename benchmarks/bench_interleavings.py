"""Schedules per second of ``crash_harness.interleavings``, next to the bare cost of one switch.

Not a test: run ``python benchmarks/bench_interleavings.py [--switches N]``. On tmpfs:

- *switch*: one forked child (the fork engine) that reports a statement and waits, N
  times; the harness answers each at once. One pipe round trip to a paused child: the
  least a scheduling point can cost.
- *schedules/s*: the exploration of one scenario on the bundled worker (every run forks
  its processes, replays its prefix one statement at a time, reads /proc when a process
  may be blocked, and judges the file with the linearizability checker).
- *growth*: how the number of schedules grows with processes and the preemption bound,
  with pruning (state hashing and the would-block rule) and without it.

It prints medians of ``--repeat`` runs; on a shared machine the figures are noisy, the
ratios less so.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from leasecheck.crash_harness._interleave_scenarios import by_name
from leasecheck.crash_harness.engine import Channel, Engine
from leasecheck.crash_harness.interleavings import explore
from leasecheck.targets.loader import BUNDLED_WORKER, load_worker
from leasecheck.targets.scratch import scratch_dir


def switch_seconds(switches: int) -> float:
    """Seconds per round trip: the child asks, the harness answers."""

    def body(channel: Channel) -> int:
        for n in range(switches):
            channel.ask("stmt", n)
        return switches

    with Engine() as engine:
        child = engine.fork("bench", body)
        started = time.perf_counter()
        for _ in range(switches):
            child.next("the next statement")
            child.answer()
        elapsed = time.perf_counter() - started
        child.outcome("the child's result")
    return elapsed / switches


def growth_row(directory: Path, scenario: str, bound: int | None, prune: bool) -> str:
    found = explore(load_worker(BUNDLED_WORKER), by_name(scenario), directory, bound,
                    prune=prune)  # fmt: skip
    runs = found.explored + found.cut
    rate = runs / found.seconds if found.seconds else 0.0
    k = "all" if bound is None else str(bound)
    return (f"  {scenario:<22} k={k:<4} prune={'yes' if prune else 'no ':<3} "
            f"schedules={found.explored:<5} cut={found.cut:<5} skipped={found.pruned:<5} "
            f"runs={runs:<5} {found.seconds:6.2f}s {rate:6.1f} runs/s "
            f"({found.points} points/run)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switches", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    switch = statistics.median(switch_seconds(args.switches) for _ in range(args.repeat))
    print(f"bare switch (pipe round trip to a paused child): {switch * 1e6:.0f} us "
          f"(median of {args.repeat} x {args.switches})")  # fmt: skip
    with scratch_dir() as directory:
        module = load_worker(BUNDLED_WORKER)
        runs = []
        for _ in range(args.repeat):
            found = explore(module, by_name("claim-claim"), directory, None)
            runs.append((found.explored + found.cut) / found.seconds)
        rate = statistics.median(runs)
        print(f"claim-claim, every schedule: {rate:.1f} runs/s = {1e3 / rate:.1f} ms per run "
              f"= {1 / rate / switch:.0f} bare switches per run")  # fmt: skip
        print("growth (bundled worker):")
        for scenario, bound, prune in (
            ("claim-claim", 0, True), ("claim-claim", 1, True), ("claim-claim", None, True),
            ("claim-claim", 0, False), ("claim-claim", 1, False), ("claim-claim", 2, False),
            ("claim-claim-claim", 0, True), ("claim-claim-claim", 1, True),
            ("claim-claim-claim", 2, True), ("claim-claim-claim", 1, False),
            ("enqueue-enqueue-claim", 1, True), ("enqueue-enqueue-claim", 2, True),
            ("enqueue-enqueue-claim", 3, True),
        ):  # fmt: skip
            print(growth_row(directory, scenario, bound, prune), flush=True)


if __name__ == "__main__":
    main()
