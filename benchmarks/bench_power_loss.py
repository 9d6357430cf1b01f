"""lease.power-loss figures: cut points per operation, crash states per second, and cost.

Not a test: run ``python benchmarks/bench_power_loss.py [--histories N] [--repeat R]``.
In one run it measures, on the bundled worker (the spec's DELETE+FULL) and on the
same worker with synchronous=EXTRA:

- *untraced*: the same ops run by the same child script without strace (the floor);
- *traced*: the child under strace (what recording costs, as a ratio to untraced);
- *check*: crash states checked per second (rebuild files, open, integrity, compare),
  and how many of them were distinct files (the rest share a cached verdict);
- cut points per operation, and states per cut point.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

from leasecheck.crash_harness.power_loss import PowerReport, check_power_loss
from leasecheck.scratch import scratch_dir
from leasecheck.targets import BUNDLED_WORKER, load_worker


def extra_worker(directory: Path) -> ModuleType:
    path = directory / "worker_extra.py"
    text = BUNDLED_WORKER.read_text()
    path.write_text(text.replace("synchronous=FULL", "synchronous=EXTRA"))
    return load_worker(path)


def untraced_seconds(directory: Path, ops: int) -> float:
    """One child running ``ops`` enqueues without strace: the floor of a traced history."""
    queue = directory / "untraced"
    queue.mkdir(exist_ok=True)
    (queue / "queue.db").unlink(missing_ok=True)
    rng = random.Random(0)
    spec = {
        "target": str(BUNDLED_WORKER),
        "db": str(queue / "queue.db"),
        "marker": str(directory / "untraced-acks"),
        "results": str(directory / "untraced.pickle"),
        "ops": [
            ["enqueue", [{"id": f"j{i}", "qty": rng.randint(1, 9)}, 1000, 5000, 3]]
            for i in range(ops)
        ],
    }
    (directory / "untraced.json").write_text(json.dumps(spec))
    began = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "leasecheck.crash_harness._power_child",
            str(directory / "untraced.json"),
        ],
        check=True,
        timeout=120,
    )
    return time.perf_counter() - began


def measure(module: ModuleType, histories: int, strict: bool) -> PowerReport:
    with scratch_dir("bench-power-") as directory:
        return check_power_loss(module, directory, histories, 64, 0, strict)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--histories", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with scratch_dir("bench-power-extra-") as directory:
        targets = {"spec DELETE+FULL": load_worker(), "EXTRA": extra_worker(directory)}
        for label, module in targets.items():
            reports = [measure(module, args.histories, False) for _ in range(args.repeat)]
            show(label, reports)
        floor = statistics.median(untraced_seconds(directory, 6) for _ in range(args.repeat))
    traced = statistics.median(r.trace_seconds / r.histories for r in reports)
    print(f"one history untraced {floor:.3f} s, traced {traced:.3f} s: x{traced / floor:.2f}")


def show(label: str, reports: list[PowerReport]) -> None:
    last = reports[-1]
    rate = statistics.median(r.states_per_second() for r in reports)
    total = statistics.median(r.trace_seconds + r.check_seconds for r in reports)
    print(
        f"{label}: {last.operations} ops, {last.cuts} cut points "
        f"({last.cuts_per_operation():.1f} per op), {last.states} crash states "
        f"({last.states / last.cuts:.1f} per cut, {last.distinct} distinct files), "
        f"median {rate:.0f} states/s, {total:.2f} s per run, "
        f"spec losses {last.spec_losses}"
    )


if __name__ == "__main__":
    main()
