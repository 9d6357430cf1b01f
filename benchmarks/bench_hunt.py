"""Examples per second of ``leasecheck hunt``: one hunting process, then two, on one Redis.

Run as ``python benchmarks/bench_hunt.py [--target jobs|lease] [--minutes M]``. Both
figures come from the same run, on the bundled implementation (no bug, so HypoFuzz
never stops early) and one throw-away Redis (``adapters.servers``): first one
``leasecheck hunt -n 1`` for M minutes on database 0, then two at once on database 1.
The rates are HypoFuzz's own counts: each worker's latest progress report in the
database (inputs run, by status, over its fuzzing time), per process.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from hypofuzz.database import HypofuzzDatabase
from hypothesis import settings
from hypothesis.extra.redis import RedisExampleDatabase
from hypothesis.stateful import RuleBasedStateMachine, get_state_machine_test
from redis import Redis

from leasecheck.adapters import servers
from leasecheck.hunt import STOP_GRACE
from leasecheck.machine_property import database_key
from leasecheck.stateful_tests.job_machine import JobAgreement
from leasecheck.stateful_tests.lease_machine import LeaseAgreement
from leasecheck.targets import BUNDLED_JOBS, BUNDLED_WORKER

TARGETS: dict[str, tuple[str, str, type[RuleBasedStateMachine]]] = {
    "jobs": ("--jobs-impl", str(BUNDLED_JOBS), JobAgreement),
    "lease": ("--impl", str(BUNDLED_WORKER), LeaseAgreement),
}


def hunt(url: str, target: str, minutes: float, processes: int) -> None:
    """Run ``processes`` hunts at once on ``url`` and wait for all of them (bounded)."""
    option, path, _ = TARGETS[target]
    command = [sys.executable, "-m", "leasecheck", "hunt", option, path, "--db", url]
    command += ["--minutes", str(minutes), "-n", "1"]
    hunts = [
        subprocess.Popen(command, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        for _ in range(processes)
    ]
    for process in hunts:
        try:
            process.wait(timeout=minutes * 60 + 4 * STOP_GRACE + 120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise


def rates(url: str, target: str) -> list[float]:
    """Examples per second of each HypoFuzz worker, from its latest report in the database."""
    machine = TARGETS[target][2]
    key = database_key(get_state_machine_test(machine, settings=settings()))
    with Redis.from_url(url) as client:
        reports = HypofuzzDatabase(RedisExampleDatabase(client)).reports.fetch(key)
    latest = {}
    for report in sorted(reports, key=lambda r: r.elapsed_time):
        latest[report.worker_uuid] = report
    return [sum(r.status_counts.values()) / r.elapsed_time for r in latest.values()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=sorted(TARGETS), default="jobs")
    parser.add_argument("--minutes", type=float, default=1.0)
    args = parser.parse_args()
    with servers.redis() as server:
        one, two = server.url, server.url.removesuffix("/0") + "/1"
        started = time.monotonic()
        hunt(one, args.target, args.minutes, 1)
        hunt(two, args.target, args.minutes, 2)
        alone, together = rates(one, args.target), rates(two, args.target)
    print(f"{args.target}.agreement under HypoFuzz, {args.minutes:g} min per phase, one Redis")
    print(f"  1 process : {statistics.median(alone):8.1f} examples/s")
    print(f"  2 processes: {statistics.median(together):8.1f} examples/s per process (median), "
          f"{sum(together):.1f} in all")  # fmt: skip
    print(f"  ratio 2 processes / 1 process, in all: {sum(together) / sum(alone):.2f}")
    print(f"  wall time {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
