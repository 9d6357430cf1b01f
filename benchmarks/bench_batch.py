"""A class of files: one ``leasecheck check --impl DIR`` batch next to one run per file.

Not a test: run ``python benchmarks/bench_batch.py [--files 20] [--profile ci]``. It
writes ``--files`` target files into a temporary directory (half catalogue mutants of
the lease worker, half copies of the bundled worker), then

- *batch* (first, so that an interrupted benchmark still has it): ``leasecheck check
  --impl DIR --profile P`` once, timed from start to exit; each file's own time in the
  pool is its ``--json`` record's ``seconds``;
- *sequential*: ``leasecheck check --impl FILE --profile P`` once per file, one after
  the other (``-n`` as given, default ``auto``), each timed likewise.

Both read the same empty example database. It prints the medians per file, the two
totals, their ratio, and whether every file got the same verdicts both ways (it
exits 1 if not). Timings on a shared machine are noisy: quote medians and ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from leasecheck.mutants import by_name, materialize
from leasecheck.targets.loader import BUNDLED_WORKER

MUTANTS = (
    "stale-finish-accepted", "expiry-off-by-one-claim", "quarantine-lost-when-nothing-claimable",
    "bool-accepted-as-int", "redrive-audit-committed-alone", "open-queue-recreates-tables",
    "claim-selects-outside-lock", "run-once-sends-twice", "expiry-off-by-one-finish",
    "claim-select-before-begin",
)  # fmt: skip
"""Lease-worker mutants caught by different properties (agreement, edges, crash-points,
crash-random, single-winner, duplicate-send, model-check, linearizable)."""


def write_class(directory: Path, files: int) -> list[Path]:
    mutants = [by_name(name) for name in MUTANTS[: files // 2]]
    paths = [materialize(mutant, directory) for mutant in mutants]
    for index in range(files - len(paths)):
        copy = directory / f"worker_copy_{index:02d}.py"
        copy.write_text(BUNDLED_WORKER.read_text())
        paths.append(copy)
    return paths


def _check(args: list[str], json_path: Path, env: dict[str, str]) -> tuple[float, int, Any]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "check", *args, "--json", str(json_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    return time.perf_counter() - started, done.returncode, json.loads(json_path.read_text())


def _verdicts(document: dict[str, Any]) -> dict[str, str]:
    return {row["property"]: row["verdict"] for row in document["properties"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--profile", default="ci")
    parser.add_argument("-n", dest="workers", default="auto")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="batch-bench-", dir="/tmp"))
    try:
        return _run(options, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(options: argparse.Namespace, work: Path) -> int:
    folder = work / "class"
    folder.mkdir()
    paths = write_class(folder, options.files)
    env = {**os.environ, "LEASECHECK_EXAMPLES": str(work / "examples")}
    common = ["--profile", options.profile, "-n", options.workers]
    total, batch_code, batch_document = _check(
        ["--impl", str(folder), *common], work / "batch.json", env
    )
    print(f"  batch: {total:6.1f} s  exit {batch_code}  ({len(paths)} files)", flush=True)
    alone: dict[str, tuple[float, int, dict[str, str]]] = {}
    for index, path in enumerate(paths):
        seconds, code, document = _check(["--impl", str(path), *common], work / "one.json", env)
        alone[str(path)] = (seconds, code, _verdicts(document))
        print(f"  alone {index + 1:>2}/{len(paths)}: {seconds:6.1f} s  exit {code}  {path.name}",
              flush=True)  # fmt: skip
    batch = {r["file"]: r for r in batch_document["files"]}
    same = [p for p in map(str, paths) if _verdicts(batch[p]) == alone[p][2]]
    copies = [str(p) for p in paths if p.name.startswith("worker_copy_")]
    sequential = sum(seconds for seconds, _, _ in alone.values())
    print(f"\n{len(paths)} files, profile {options.profile}, -n {options.workers}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    median = statistics.median(seconds for seconds, _, _ in alone.values())
    print(f"  alone, per file:     median {median:6.1f} s"
          f"  (bundled copies {statistics.median(alone[p][0] for p in copies):.1f} s)")  # fmt: skip
    in_pool = [float(r["seconds"]) for r in batch.values()]
    print(f"  in the batch, per file: median {statistics.median(in_pool):6.1f} s of its own"
          f" (copies {statistics.median(float(batch[p]['seconds']) for p in copies):.1f} s),"
          f" {total / len(paths):.1f} s of the batch's wall time each")  # fmt: skip
    print(f"  sequential total {sequential:7.1f} s;  batch {total:7.1f} s (exit {batch_code});"
          f"  ratio {sequential / total:.2f}x")  # fmt: skip
    print(f"  same verdicts alone and in the batch: {len(same)} of {len(paths)} files")
    return 0 if len(same) == len(paths) else 1


if __name__ == "__main__":
    sys.exit(main())
