"""Kill cycles per second: the crash harness next to a bare fork + SIGKILL + reopen loop.

Not a test: run ``python benchmarks/bench_crash_harness.py [--kills N] [--ballast MB]
[--base REV]``. Every measurement runs in a fresh process (``_crash_probe.py``) on
tmpfs, in rounds that alternate the loops:

- *raw*: fork a child that opens SQLite, starts ``BEGIN IMMEDIATE``, writes a row and
  tells the parent over a pipe; the parent SIGKILLs it, reaps it and reopens the file
  (rolling back the hot journal). The least a kill cycle can cost;
- *raw + target*: the raw loop with the target's work of each harness kill and none of
  its checks (``_crash_probe.target_cycles``): the child claims on the last killed
  case's file and runs its own case's operation to its fault point with the target's
  ``open_queue``, ``claim``, ``finish`` and ``redrive``, as the harness's child does, on
  files built before the timed loop, one child at a time. Not the issue's yardstick
  (that is *raw*): it tells the target's work from the harness's own cost, the checks
  and their protocol;
- *harness*: ``check_every_point`` (``lease.crash-points``' loop, seed 0) — per kill a
  fresh queue file for a generated state, a child running the target's op to its
  fault hook, SIGKILL, reap, verified death, integrity check, state compared with the
  model, and the next claim on the reopened file — measured with the zygote
  (``crash_harness.zygote``) and without it (``LEASECHECK_ZYGOTE=0``, every child
  forked from the measuring process), each from this checkout (*new*) and from an
  older commit (*old*: the merge-base with ``main``, or ``--base REV``, exported with
  ``git archive`` into a temporary directory; the repository is not touched). A tree
  from before the zygote (0aa91dc, say: issue 25's base) has only the loop without it,
  which forked every child from the measuring process; its zygote row says so.

It prints each loop's median rate over the rounds and its share of the raw loop's
median (how much of a raw cycle's speed the checks keep), and the median CPU time per
kill (the measuring process, its children, the zygote and its children), which a
loaded machine moves less than the rates. ``--ballast MB`` first grows
every measuring process by that many MB of small Python objects, the way an xdist
worker grows after the Hypothesis machines (278 MB in the gate): the raw loop and the
harness without the zygote fork from it. The machine may be shared: read the ratios,
and the load average printed at the start and the end. ``--json FILE`` also writes the
figures as data (each row's rates, share of raw, CPU per kill, each round's own share).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from _trees import export, merge_base, run_probe, save_json

REPO = Path(__file__).resolve().parents[1]
PROBE = Path(__file__).with_name("_crash_probe.py")
LOOPS = (
    ("raw", "new", "raw"),
    ("raw + target", "new", "target"),
    ("old, zygote", "old", "zygote"),
    ("new, zygote", "new", "zygote"),
    ("old, no zygote", "old", "local"),
    ("new, no zygote", "new", "local"),
)
"""(row, tree, probe mode), in the order each round runs them."""


def probe(tree: Path, mode: str, kills: int, ballast: int) -> dict[str, Any]:
    return run_probe(PROBE, tree, mode, str(kills), str(ballast))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=220, help="kills per measurement")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (median taken)")
    parser.add_argument("--ballast", type=int, default=0, help="MB to grow each process by")
    parser.add_argument("--base", help="older commit (default: merge-base with main)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    base = args.base or merge_base()
    old_tree = export(base, "bench-crash-")
    try:
        return _run(args, base, {"old": old_tree, "new": REPO})
    finally:
        shutil.rmtree(old_tree, ignore_errors=True)


def _run(args: argparse.Namespace, base: str, trees: dict[str, Path]) -> int:
    print(f"old = {base[:10]} (git archive in {trees['old']}), new = this checkout {REPO}")
    print(
        f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at the start; "
        f"{args.kills} kills per measurement, {args.repeat} rounds, ballast {args.ballast} MB"
    )
    rates: dict[str, list[float]] = {row: [] for row, _, _ in LOOPS}
    cpu: dict[str, list[float]] = {row: [] for row, _, _ in LOOPS}
    forks: dict[str, int] = {}
    for _ in range(args.repeat):
        for row, tree, mode in LOOPS:
            figures = probe(trees[tree], mode, args.kills, args.ballast)
            if figures.get("zygote") is False:
                continue  # an older tree without a zygote: this row stays empty
            rates[row].append(figures["kills"] / figures["seconds"])
            cpu[row].append(1000 * figures["cpu"] / figures["kills"])
            forks[row] = figures["forks"] * 100 // figures["kills"]
    raw = statistics.median(rates["raw"])
    summary: dict[str, Any] = {
        "bench": "crash-harness", "base": base, "kills": args.kills, "rounds": args.repeat,
        "ballast_mb": args.ballast, "rows": {},
    }  # fmt: skip
    print(
        f"{'loop':<16} {'kill cycles/s':>14} {'share of raw':>13} {'CPU ms/kill':>12} "
        f"{'forks/100 kills':>16}   (rates of the rounds)"
    )
    for row, _, _ in LOOPS:
        if not rates[row]:
            print(f"{row:<16} {'(no zygote in that tree)':>28}")
            continue
        rate = statistics.median(rates[row])
        spread = ", ".join(f"{r:.1f}" for r in rates[row])
        used = statistics.median(cpu[row])
        print(
            f"{row:<16} {rate:14.1f} {rate / raw:13.2f} {used:12.1f} {forks[row]:16}   ({spread})"
        )
        summary["rows"][row] = {
            "rates": rates[row], "rate": rate, "share": rate / raw, "cpu_ms": used,
            "cpu_ms_rounds": cpu[row], "forks_per_100": forks[row],
            "round_shares": [r / w for r, w in zip(rates[row], rates["raw"], strict=True)],
        }  # fmt: skip
    loops = summary["rows"]
    if "raw + target" in loops:
        share = loops["new, zygote"]["rate"] / loops["raw + target"]["rate"]
        print(
            f"the harness with its zygote keeps {share:.2f} of the raw loop that does the "
            "target's work alone (no checks, one child at a time)"
        )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    save_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
