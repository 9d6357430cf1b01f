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

It prints the rates and their ratios (how much of a raw cycle's speed the checks
keep), the harness measured twice in the same run: *before*, every child forked from
the benchmark process (``LEASECHECK_ZYGOTE=0``), and *after*, forked by the zygote
(``crash_harness.zygote``). ``--ballast MB`` first grows the benchmark process by that
many MB of small Python objects, the way an xdist worker grows after the Hypothesis
machines (278 MB in the gate): the raw loop and the *before* harness fork from it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import time
from pathlib import Path

from leasecheck.crash_harness import zygote
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


def harness_cycles(directory: Path, kills: int, with_zygote: bool) -> float:
    """Kill cycles per second of lease.crash-points on the bundled worker."""
    per_point = max(1, kills // len(POINT_CASES))
    module = load_worker()
    os.environ[zygote.DISABLE_ENV] = "1" if with_zygote else "0"
    try:
        started = time.perf_counter()
        table = check_every_point(module, directory, per_point, seed=0)
        return table.total / (time.perf_counter() - started)
    finally:
        del os.environ[zygote.DISABLE_ENV]


def grow(megabytes: int) -> list[list[int]]:
    """Small tracked objects, about ``megabytes`` MB (a list of one int is about 88 bytes)."""
    return [[n] for n in range(megabytes * 1_000_000 // 88)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=220, help="kills per measurement")
    parser.add_argument("--repeat", type=int, default=3, help="measurements (median taken)")
    parser.add_argument("--ballast", type=int, default=0, help="MB to grow this process by")
    args = parser.parse_args()
    ballast = grow(args.ballast)
    rates: dict[str, list[float]] = {"raw": [], "before": [], "after": []}
    for _ in range(args.repeat):
        with scratch_dir("leasecheck-bench-") as directory:
            rates["raw"].append(raw_cycles(directory, args.kills))
        for name, with_zygote in (("before", False), ("after", True)):
            with scratch_dir("leasecheck-bench-") as directory:
                rates[name].append(harness_cycles(directory, args.kills, with_zygote))
    zygote.stop()
    r, b, a = (statistics.median(rates[name]) for name in ("raw", "before", "after"))
    size = f"a process grown by {args.ballast} MB ({len(ballast)} objects)"
    print(f"forking from {size}; medians of {args.repeat}")
    print(f"raw fork + SIGKILL + reopen:           {r:8.1f} kill cycles/s")
    print(f"harness before (forks from this one):  {b:8.1f} kill cycles/s  ratio {b / r:.2f}")
    print(f"harness after (forks from the zygote): {a:8.1f} kill cycles/s  ratio {a / r:.2f}")


if __name__ == "__main__":
    main()
