"""Kill cycles per second: the crash harness next to a bare fork + SIGKILL + reopen loop.

Not a test: run ``python benchmarks/bench_crash_harness.py [--kills N]``. Both loops
run in the same process, one after the other, on tmpfs:

- *harness*: ``check_every_point`` — per kill a fresh queue file for a generated
  state, a forked child running the target's op to its fault hook (pipe handshake),
  SIGKILL, reap, verified death, integrity check, state compared with the model, and
  a second child for the next claim;
- *raw*: fork a child that opens SQLite, starts ``BEGIN IMMEDIATE``, writes a row and
  tells the parent over a pipe; the parent SIGKILLs it, reaps it and reopens the file
  (rolling back the hot journal). The least a kill cycle can cost.

It prints both rates and their ratio (how much of a raw cycle's speed the checks keep).
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import time
from pathlib import Path

from leasecheck.crash_harness.atomicity import POINT_CASES, check_every_point
from leasecheck.targets.loader import load_worker
from leasecheck.targets.scratch import scratch_dir


def raw_cycles(directory: Path, kills: int) -> float:
    """Bare kill cycles per second."""
    path = directory / "raw.db"
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
    con.close()
    started = time.perf_counter()
    for _ in range(kills):
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                child = sqlite3.connect(path, isolation_level=None, timeout=1)
                child.execute("BEGIN IMMEDIATE")
                child.execute("INSERT INTO t VALUES (1)")
                os.write(ready_w, b"k")
                signal.pause()  # until the SIGKILL
            finally:
                os._exit(70)
        os.close(ready_w)
        os.read(ready_r, 1)
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        os.close(ready_r)
        reopened = sqlite3.connect(path, isolation_level=None)
        rows = reopened.execute("SELECT COUNT(*) FROM t").fetchone()[0]
        reopened.close()
        assert rows == 0, "the killed transaction must have been rolled back"
    return kills / (time.perf_counter() - started)


def harness_cycles(directory: Path, kills: int) -> float:
    """Kill cycles per second of lease.crash-points on the bundled worker."""
    per_point = max(1, kills // len(POINT_CASES))
    module = load_worker()
    started = time.perf_counter()
    table = check_every_point(module, directory, per_point, seed=0)
    return table.total / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=220, help="kills per measurement")
    parser.add_argument("--repeat", type=int, default=3, help="measurements (median taken)")
    args = parser.parse_args()
    harness, raw = [], []
    for _ in range(args.repeat):
        with scratch_dir("leasecheck-bench-") as directory:
            raw.append(raw_cycles(directory, args.kills))
        with scratch_dir("leasecheck-bench-") as directory:
            harness.append(harness_cycles(directory, args.kills))
    h, r = statistics.median(harness), statistics.median(raw)
    print(f"raw fork + SIGKILL + reopen: {r:8.1f} kill cycles/s (median of {args.repeat})")
    print(f"crash harness (crash-points): {h:8.1f} kill cycles/s (median of {args.repeat})")
    print(f"ratio harness/raw: {h / r:.2f}")


if __name__ == "__main__":
    main()
