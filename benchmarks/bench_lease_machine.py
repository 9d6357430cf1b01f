"""Steps per second of the lease agreement machine vs raw operations per second of the worker.

Run as ``python benchmarks/bench_lease_machine.py [--examples N] [--steps N] [--jobs N]``.
Both figures come from the same run, on the bundled worker and the same scratch storage
(tmpfs): the machine's rate counts every rule it executes (each one is an operation on
the target *and* the model, a full state comparison and the invariants, plus Hypothesis'
own generation), the raw rate counts plain ``enqueue``/``claim``/``finish`` calls.
"""

from __future__ import annotations

import argparse
import time
from typing import ClassVar

from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant, run_state_machine_as_test

from leasecheck.stateful_tests.lease_machine import LeaseAgreement
from leasecheck.targets.loader import load_worker
from leasecheck.targets.scratch import scratch_dir


class CountingAgreement(LeaseAgreement):
    """The agreement machine, counting examples and invariant checks (one per step)."""

    examples: ClassVar[int] = 0
    checks: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        CountingAgreement.examples += 1

    @invariant()
    def consistent(self) -> None:
        CountingAgreement.checks += 1
        super().consistent()


def machine_rate(examples: int, steps: int) -> tuple[float, int, float]:
    """(steps per second, steps, seconds) of the machine on the bundled worker."""
    CountingAgreement.bind(load_worker())
    config = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    started = time.perf_counter()
    run_state_machine_as_test(CountingAgreement, settings=config)
    seconds = time.perf_counter() - started
    ran = CountingAgreement.checks - CountingAgreement.examples  # one check before step 1
    return ran / seconds, ran, seconds


def raw_rate(jobs: int) -> tuple[float, int, float]:
    """(operations per second, operations, seconds): enqueue, claim, finish per job."""
    worker = load_worker()
    with scratch_dir("leasecheck-bench-") as directory:
        con = worker.open_queue(directory / "queue.db")
        try:
            started = time.perf_counter()
            for n in range(jobs):
                worker.enqueue(con, {"id": f"j{n}", "qty": 1}, n, 60000)
                ticket = worker.claim(con, "w1", n, 1000)
                worker.finish(con, ticket, "ok", n)
            seconds = time.perf_counter() - started
        finally:
            con.close()
    return 3 * jobs / seconds, 3 * jobs, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=150, help="machine examples (ci: 150)")
    parser.add_argument("--steps", type=int, default=40, help="steps per example (ci: 40)")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs in the raw loop")
    args = parser.parse_args()
    raw, operations, raw_seconds = raw_rate(args.jobs)
    machine, steps, machine_seconds = machine_rate(args.examples, args.steps)
    print(f"raw worker: {raw:10.0f} operations/s ({operations} operations in {raw_seconds:.2f}s)")
    print(f"machine:    {machine:10.0f} steps/s      ({steps} steps in {machine_seconds:.2f}s)")
    print(f"ratio:      {raw / machine:10.1f} raw operations per machine step")


if __name__ == "__main__":
    main()
