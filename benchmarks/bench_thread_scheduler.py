"""What the deterministic thread scheduler costs, and how its schedule count grows.

Run: ``python benchmarks/bench_thread_scheduler.py [--repeat 5]``.

1. The bare cost of one scheduling point: two threads bump a shared counter in a
   tiny target file (every line is a visible point), once with the turn passed at
   every point (each point is an OS-level hand-over between two real threads) and
   once with each thread running to its end (the point only decides to go on).
2. Schedules per second on the ci scenarios of jobs.interleavings (bundled queue),
   at each preemption bound 0-3, with and without state pruning.
3. Growth: N threads each polling once (N = 2, 3, 4) at bounds 0-2.

Figures are medians of ``--repeat`` runs; on a loaded machine read the ratios.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from types import ModuleType

from leasecheck.models.job_ops import JobOp
from leasecheck.stateful_tests._job_scenarios import call
from leasecheck.stateful_tests.job_interleavings import CI_SCENARIOS, Scenario, check_scenarios
from leasecheck.stateful_tests.thread_scheduler import Step, follow
from leasecheck.targets.loader import load_jobs_target

COUNTER = """
class Counter:
    def __init__(self):
        self.value = 0

    def bump(self, times):
        for _ in range(times):
            self.value += 1
"""


def _counter_module(directory: Path) -> ModuleType:
    path = directory / "bench_counter.py"
    path.write_text(COUNTER)
    spec = importlib.util.spec_from_file_location("bench_counter", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_counter"] = module
    spec.loader.exec_module(module)
    return module


class _CounterWorld:
    """Two threads bumping one counter: the smallest world the scheduler can run."""

    def __init__(self, module: ModuleType, times: int) -> None:
        self.target_file = str(module.__file__)
        self.counter = module.Counter()
        self.times = times

    def bodies(self) -> list[tuple[str, Callable[[], None]]]:
        return [(name, lambda: self.counter.bump(self.times)) for name in ("T1", "T2")]

    def roots(self) -> tuple[object, ...]:
        return (self.counter,)

    def thread_key(self, name: str) -> Hashable:
        return name

    def history_key(self) -> Hashable:
        return ()

    def atoms(self) -> tuple[type, ...]:
        return ()

    def judge(self, steps: Sequence[Step], problem: str | None) -> str | None:
        return problem


def _submit(priority: int) -> JobOp:
    return call("submit", type="email", payload="p", priority=priority, run_at_millis=0, now=0)


def _median(repeat: int, run: Callable[[], float]) -> float:
    return statistics.median(run() for _ in range(repeat))


def bare_switch(repeat: int, times: int = 2000) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-scheduler-") as directory:
        module = _counter_module(Path(directory))
        points = 2 * (2 * times + 1)

        def timed(choices: list[str]) -> float:
            started = time.perf_counter()
            schedule, _ = follow(_CounterWorld(module, times), choices)
            assert len(schedule.steps) >= points - 2, len(schedule.steps)
            return (time.perf_counter() - started) / len(schedule.steps)

        alternating = ["T1", "T2"] * points
        stay = _median(repeat, lambda: timed([]))
        hand_over = _median(repeat, lambda: timed(alternating))
    print("1. one scheduling point (median per point):")
    print(f"   the thread goes on:           {stay * 1e6:8.1f} us")
    print(f"   the turn passes to the other: {hand_over * 1e6:8.1f} us")


def schedules_per_second(repeat: int) -> None:
    cls = load_jobs_target()
    print(
        f"2. the {len(CI_SCENARIOS)} ci scenarios of jobs.interleavings on the bundled queue, "
        f"each to one bound:"
    )
    print(f"   {'bound':>5} {'prune':>5} {'explored':>9} {'pruned':>7} {'steps':>8} "
          f"{'seconds':>8} {'schedules/s':>12} {'us/step':>8}")  # fmt: skip
    for bound in (0, 1, 2, 3):
        for prune in (True, False):
            plan = [(scenario, bound) for scenario in CI_SCENARIOS]
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                summary = check_scenarios(cls, plan, prune=prune)
                times.append(time.perf_counter() - started)
            seconds = statistics.median(times)
            runs = summary.explored + summary.pruned
            print(
                f"   {bound:>5} {prune!s:>5} {summary.explored:>9} {summary.pruned:>7} "
                f"{summary.steps:>8} {seconds:>8.2f} {runs / seconds:>12.0f} "
                f"{seconds / summary.steps * 1e6:>8.1f}"
            )


def growth(repeat: int) -> None:
    cls = load_jobs_target()
    print("3. N threads each poll once (two ready jobs): schedules explored (pruned)")
    print(f"   {'threads':>7} " + " ".join(f"{f'bound {k}':>16}" for k in (0, 1, 2)))
    for threads in (2, 3, 4):
        scenario = Scenario(
            f"{threads} polls", "growth", (_submit(0), _submit(1)),
            tuple((call("poll", worker_id=f"w{n}", lease_millis=1000, now=100),)
                  for n in range(1, threads + 1)),
        )  # fmt: skip
        cells = []
        for bound in (0, 1, 2):
            started = time.perf_counter()
            summary = check_scenarios(cls, [(scenario, bound)])
            cells.append(
                f"{summary.explored:>6} ({summary.pruned:>4}) {time.perf_counter() - started:4.1f}s"
            )
        print(f"   {threads:>7} " + " ".join(f"{cell:>16}" for cell in cells))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    bare_switch(args.repeat)
    schedules_per_second(args.repeat)
    growth(1)


if __name__ == "__main__":
    main()
