"""One measurement in a fresh process, for ``bench_crash_harness.py``: kill cycles per second.

Run as ``python _crash_probe.py TREE MODE KILLS BALLAST_MB`` (MODE: ``raw``,
``target``, ``zygote`` or ``local``): it imports leasecheck from the source tree ``TREE`` (this
checkout or an exported older commit), grows itself by ``BALLAST_MB`` MB of small
Python objects (the way an xdist worker grows after the Hypothesis machines), and
prints one JSON object: the kills, the seconds, the forks and the CPU seconds of the
timed loop (this process, its children and the zygote with its children: on a loaded
machine the figure that moves least). ``zygote`` and ``local``
time ``check_every_point`` (``lease.crash-points``' loop on the bundled worker, seed 0)
with the zygote on or off (``LEASECHECK_ZYGOTE``), after one untimed warm-up pass (11
kills: the zygote has started and the target is imported); ``raw`` times the bare loop,
``target`` the bare loop with the target's work of each harness kill (``target_cycles``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any


def raw_cycles(directory: Path, kills: int) -> dict[str, Any]:
    """Bare kill cycles: fork a child that opens SQLite, starts ``BEGIN IMMEDIATE``, writes a
    row and says so over a pipe; SIGKILL it, reap it, reopen the file (the hot journal
    rolled back) and count the rows. The least a kill cycle can cost."""
    path = directory / "raw.db"
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
    con.close()
    cpu, started = cpu_seconds(), time.perf_counter()
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
        rows = kill_and_count(pid, ready_r, path, "t", "the raw child")
        assert rows == 0, "the killed transaction must have been rolled back"
    seconds = time.perf_counter() - started
    return {"kills": kills, "seconds": seconds, "forks": kills, "cpu": cpu_seconds() - cpu}


def target_cycles(directory: Path, kills: int) -> dict[str, Any]:
    """The raw loop with the target's work of a harness kill and none of its checks: the
    cases ``check_every_point`` would run (seed 0), each case's file built before the
    timed loop; per kill, fork a child that (as the harness's child does) opens the last
    killed case's file with the target's ``open_queue`` and claims on it, then opens its
    own case's file and runs the case's operation up to its fault point, where it says so
    and waits; SIGKILL it, reap it, reopen the file and count the rows (as the raw loop
    does). No model, no integrity check, no state compared, no report from the child: what
    is left of the harness's cost is its checks and its protocol."""
    import random

    from leasecheck.crash_harness._queue_files import QueueFiles
    from leasecheck.crash_harness.atomicity import POINT_CASES, PROPERTY, _cases
    from leasecheck.crash_harness.engine import Engine
    from leasecheck.models.lease_ops import LeaseOp
    from leasecheck.targets.loader import load_worker

    module = load_worker()
    per_point = max(1, kills // len(POINT_CASES))
    with Engine() as engine:
        files = QueueFiles(engine, module, directory)
        warm = [(case, files.fresh(case.world.state)) for case in _cases(random.Random(1), 1)]
        cases = [(case, files.fresh(case.world.state)) for case in _cases(
            random.Random(f"{PROPERTY}:0"), per_point
        )]  # fmt: skip
    previous: tuple[Path, int] | None = None

    def cycle(case: Any, path: Path) -> None:
        nonlocal previous
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                if previous is not None:
                    con = module.open_queue(str(previous[0]))
                    with contextlib.suppress(Exception):
                        LeaseOp.of("claim", "next", previous[1], 1000).apply(module, con, None)
                    con.close()
                con = module.open_queue(str(path))

                def hook(point: str) -> None:
                    if point == case.point:
                        os.write(ready_w, b"k")
                        signal.pause()  # until the SIGKILL

                case.op.apply(module, con, hook)
            finally:
                os._exit(70)
        os.close(ready_w)
        rows = kill_and_count(pid, ready_r, path, "jobs", f"the child of {case.label}")
        assert rows >= len(case.world.state.jobs), f"{case.label}: jobs lost"
        previous = (path, case.world.now)

    for case, path in warm:
        cycle(case, path)
    cpu, started = cpu_seconds(), time.perf_counter()
    for case, path in cases:
        cycle(case, path)
    seconds, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    return {"kills": len(cases), "seconds": seconds, "forks": len(cases), "cpu": cpu}


def kill_and_count(pid: int, ready: int, path: Path, table: str, child: str) -> int:
    """The parent's side of a bare kill cycle: wait for ``child``'s word on ``ready``,
    SIGKILL it, reap it (SIGKILL must have ended it), reopen ``path`` (rolling a hot
    journal back) and count the rows of ``table``."""
    assert os.read(ready, 1) == b"k", f"{child} ended before it reached its point"
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    os.close(ready)
    reopened = sqlite3.connect(path, isolation_level=None)
    rows: int = reopened.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    reopened.close()
    return rows


def harness_cycles(directory: Path, kills: int, with_zygote: bool) -> dict[str, Any]:
    """Kill cycles of lease.crash-points on the bundled worker (after a warm-up pass). A
    tree from before the zygote (no ``crash_harness.zygote``) has only the second loop:
    asked for the zygote, it reports ``"zygote": false`` and measures nothing."""
    from leasecheck.crash_harness.atomicity import POINT_CASES, check_every_point
    from leasecheck.targets.loader import load_worker

    zygote: ModuleType | None
    try:
        from leasecheck.crash_harness import zygote
    except ImportError:
        if with_zygote:
            return {"kills": 0, "seconds": 0.0, "forks": 0, "cpu": 0.0, "zygote": False}
        zygote = None
    if zygote is not None:
        os.environ[zygote.DISABLE_ENV] = "1" if with_zygote else "0"
    module = load_worker()
    try:
        check_every_point(module, directory / "warm-up", 1, seed=0)
        (directory / "timed").mkdir()
        helper = zygote._STATE.get("zygote") if zygote is not None else None
        helper_pid = helper.pid if helper is not None else None
        cpu, started = cpu_seconds(helper_pid), time.perf_counter()
        table = check_every_point(module, directory / "timed", max(1, kills // len(POINT_CASES)), 0)
        seconds = time.perf_counter() - started
        cpu = cpu_seconds(helper_pid) - cpu
    finally:
        if zygote is not None:
            zygote.stop()
    return {"kills": table.total, "seconds": seconds, "forks": table.forks, "cpu": cpu}


def cpu_seconds(helper: int | None = None) -> float:
    """CPU seconds so far of this process and its reaped children, and of ``helper`` (the
    zygote) and its reaped children (``/proc/PID/stat`` utime, stime, cutime, cstime)."""
    times = os.times()
    total = times.user + times.system + times.children_user + times.children_system
    if helper is not None:
        with open(f"/proc/{helper}/stat", encoding="ascii") as stream:
            fields = stream.read().rsplit(")", 1)[1].split()
        total += sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def grow(megabytes: int) -> list[list[int]]:
    """Small tracked objects, about ``megabytes`` MB (a list of one int is about 88 bytes)."""
    return [[n] for n in range(megabytes * 1_000_000 // 88)]


def main(mode: str, kills: int, ballast_mb: int) -> dict[str, Any]:
    from leasecheck.targets.scratch import scratch_dir

    ballast = grow(ballast_mb)
    with scratch_dir("leasecheck-bench-") as directory:
        if mode == "raw":
            figures = raw_cycles(directory, kills)
        elif mode == "target":
            figures = target_cycles(directory, kills)
        else:
            (directory / "warm-up").mkdir()
            figures = harness_cycles(directory, kills, mode == "zygote")
    import leasecheck

    figures["ballast_objects"] = len(ballast)
    figures["imported_from"] = str(Path(leasecheck.__file__).resolve().parents[1])
    return figures


if __name__ == "__main__":
    tree, mode, kills, ballast = sys.argv[1:5]
    sys.path.insert(0, tree)
    print(json.dumps(main(mode, int(kills), int(ballast))))
