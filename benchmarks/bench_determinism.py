"""Whole ``leasecheck check --adapter NAME --profile ci --seed 0`` runs, repeated: same verdicts?

Not a test: run ``python benchmarks/bench_determinism.py --runs 5 rq saq ...``. Each run is
one ``leasecheck check --adapter NAME --profile ci --seed 0 -n N --json FILE`` (one after
the other: run 1 of every adapter, then run 2, ...), its ``--json`` document kept in ``--out DIR``
(``NAME-RUN.json``, so an interrupted benchmark keeps what it measured and ``--table``
prints the table of what is there). The table has one row per adapter and property: the
verdict of each run (``x5`` when all agree), the median seconds of the property, and a
``FLIP`` mark when the runs disagree; then each adapter's exit codes and whole-run times.
It exits 1 if any row flipped. Timings on a shared machine are noisy: quote medians.

``--property NAME`` (repeatable) runs only those properties (``leasecheck check
--property``), for repeating one flip cheaply; ``--first-run N`` numbers the runs from
N, so a later benchmark adds runs to a directory an earlier one (cut off) left.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _run(adapter: str, run: int, out: Path, workers: str, props: list[str]) -> None:
    path = out / f"{adapter}-{run}.json"
    started = time.monotonic()
    command = [
        sys.executable, "-m", "leasecheck", "check", "--adapter", adapter, "--profile", "ci",
        "--seed", "0", "-n", workers, "--json", str(path),
    ]  # fmt: skip
    for prop in props:
        command += ["--property", prop]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    took = time.monotonic() - started
    (out / f"{adapter}-{run}.log").write_text(done.stdout + done.stderr)
    print(f"{adapter} run {run}: exit {done.returncode}, {took:.0f} s", flush=True)


def _order(path: Path) -> tuple[str, int]:
    """``NAME-RUN.json``: the adapter's name and the run's number."""
    name, run = path.stem.rsplit("-", 1)
    return name, int(run)


def _table(out: Path) -> bool:
    """Print the table of every kept document; True if some row flipped."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(out.glob("*.json"), key=_order):
        runs.setdefault(_order(path)[0], []).append(json.loads(path.read_text()))
    flipped = False
    print("| adapter | property | verdicts | median s |\n|---|---|---|---|")
    for adapter, documents in runs.items():
        rows: dict[str, list[tuple[str, float]]] = {}
        for document in documents:
            for record in document["properties"]:
                rows.setdefault(record["property"], []).append(
                    (record["verdict"], float(record.get("seconds", 0.0)))
                )
        for prop, seen in sorted(rows.items()):
            verdicts = [verdict for verdict, _ in seen]
            same = len(set(verdicts)) == 1 and len(verdicts) == len(documents)
            flipped |= not same
            shown = f"{verdicts[0]} x{len(verdicts)}" if same else "FLIP " + ", ".join(verdicts)
            median = statistics.median(seconds for _, seconds in seen)
            print(f"| {adapter} | {prop} | {shown} | {median:.1f} |")
        codes = ", ".join(str(d["exit_code"]) for d in documents)
        times = ", ".join(f"{float(d['seconds']):.0f}" for d in documents)
        print(f"| {adapter} | (exit, whole run s) | {codes} | {times} |")
    return flipped


def _wide(out: Path) -> None:
    """The same as one row per adapter: each property's verdicts, the exits, the times."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(out.glob("*.json"), key=_order):
        runs.setdefault(_order(path)[0], []).append(json.loads(path.read_text()))
    props = sorted({r["property"] for docs in runs.values() for d in docs for r in d["properties"]})
    short = [p.removeprefix("queue.") for p in props]
    print("| library | " + " | ".join(short) + " | exit | whole run s |")
    print("|---" * (len(props) + 3) + "|")
    for adapter, documents in runs.items():
        cells = []
        for prop in props:
            seen = [
                r["verdict"] for d in documents for r in d["properties"] if r["property"] == prop
            ]
            same = len(set(seen)) == 1 and len(seen) == len(documents)
            cells.append(f"{seen[0]} x{len(seen)}" if same else "FLIP " + ", ".join(seen))
        codes = sorted({str(d["exit_code"]) for d in documents})
        exits = (
            f"{codes[0]} x{len(documents)}"
            if len(codes) == 1
            else "FLIP " + ", ".join(str(d["exit_code"]) for d in documents)
        )
        times = ", ".join(f"{float(d['seconds']):.0f}" for d in documents)
        print(f"| {adapter} | " + " | ".join(cells) + f" | {exits} | {times} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("adapters", nargs="*")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("determinism-runs"))
    parser.add_argument("-n", dest="workers", default="2")
    parser.add_argument("--table", action="store_true", help="only print the kept table")
    parser.add_argument("--wide", action="store_true", help="with --table: one row an adapter")
    parser.add_argument(
        "--property", dest="props", action="append", default=[], help="only this property"
    )
    parser.add_argument("--first-run", type=int, default=1, help="the first run's number")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.table:
        first = args.first_run
        for run in range(first, first + args.runs):  # run by run: a cut-off one stays even
            for adapter in args.adapters:
                _run(adapter, run, args.out, args.workers, args.props)
    if args.wide:
        _wide(args.out)
        return 0
    return 1 if _table(args.out) else 0


if __name__ == "__main__":
    sys.exit(main())
