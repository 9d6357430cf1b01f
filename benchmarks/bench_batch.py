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
``--alone K`` runs only K of the files alone (a loaded machine may not have the time
for 20 ci runs) and extrapolates the sequential total; ``--batch-json FILE
--batch-seconds S`` reuses an earlier batch of the same files. ``--json FILE`` also
writes the figures as data (``bench_speed.py`` reads it).
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

from _trees import save_json

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
    parser.add_argument("--alone", type=int, help=HELP_ALONE)
    parser.add_argument("--batch-json", type=Path, help=HELP_BATCH_JSON)
    parser.add_argument("--batch-seconds", type=float, help="with --batch-json: its wall time")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="batch-bench-", dir="/tmp"))
    try:
        return _run(options, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


HELP_ALONE = (
    "run only this many of the files alone, alternately mutants and copies; the "
    "sequential total is then extrapolated (sum x files / alone), and says so"
)
HELP_BATCH_JSON = "reuse the --json of an earlier batch of the same files instead of running it"


def _alternate(paths: list[Path], count: int) -> list[Path]:
    mutants = [p for p in paths if not p.name.startswith("worker_copy_")]
    copies = [p for p in paths if p.name.startswith("worker_copy_")]
    mixed = [p for pair in zip(mutants, copies, strict=False) for p in pair]
    rest = [p for p in paths if p not in mixed]
    return (mixed + rest)[:count]


def _batch(
    options: argparse.Namespace, folder: Path, common: list[str], work: Path, env: dict[str, str]
) -> tuple[float, int, dict[str, dict[str, Any]]]:
    if options.batch_json:
        document = json.loads(options.batch_json.read_text())
        total, code = options.batch_seconds or document["seconds"], document["exit_code"]
    else:
        total, code, document = _check(["--impl", str(folder), *common], work / "b.json", env)
    print(f"  batch: {total:6.1f} s  exit {code}  ({len(document['files'])} files)", flush=True)
    return total, code, {Path(r["file"]).name: r for r in document["files"]}


def _run(options: argparse.Namespace, work: Path) -> int:
    folder = work / "class"
    folder.mkdir()
    paths = write_class(folder, options.files)
    env = {**os.environ, "LEASECHECK_EXAMPLES": str(work / "examples")}
    common = ["--profile", options.profile, "-n", options.workers]
    total, batch_code, batch = _batch(options, folder, common, work, env)
    alone: dict[str, tuple[float, int, dict[str, str]]] = {}
    chosen = _alternate(paths, options.alone or len(paths))
    for index, path in enumerate(chosen):
        seconds, code, document = _check(["--impl", str(path), *common], work / "one.json", env)
        alone[path.name] = (seconds, code, _verdicts(document))
        print(f"  alone {index + 1:>2}/{len(chosen)}: {seconds:6.1f} s  exit {code}  {path.name}",
              flush=True)  # fmt: skip
    same = [name for name in alone if _verdicts(batch[name]) == alone[name][2]]
    copies = [name for name in alone if name.startswith("worker_copy_")]
    measured = sum(seconds for seconds, _, _ in alone.values())
    sequential = measured * len(paths) / len(alone)
    estimate = "" if len(alone) == len(paths) else f" (from {len(alone)} files measured)"
    print(f"\n{len(paths)} files, profile {options.profile}, -n {options.workers}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    median = statistics.median(seconds for seconds, _, _ in alone.values())
    alone_copies = _median_text([alone[p][0] for p in copies], "bundled copies")
    print(f"  alone, per file:        median {median:6.1f} s{alone_copies}")
    in_pool = [float(r["seconds"]) for r in batch.values()]
    pool_copies = _median_text([float(batch[p]["seconds"]) for p in copies], "copies")
    print(f"  in the batch, per file: median {statistics.median(in_pool):6.1f} s of its own"
          f"{pool_copies}, {total / len(paths):.1f} s of the batch's wall time each")  # fmt: skip
    print(f"  sequential total {sequential:7.1f} s{estimate};  batch {total:7.1f} s "
          f"(exit {batch_code});  ratio {sequential / total:.2f}x")  # fmt: skip
    print(f"  same verdicts alone and in the batch: {len(same)} of {len(alone)} files")
    for name in (name for name in alone if name not in same):
        mine, theirs = _verdicts(batch[name]), alone[name][2]
        differ = {p: (theirs.get(p), mine.get(p)) for p in {*mine, *theirs}
                  if mine.get(p) != theirs.get(p)}  # fmt: skip
        print(f"    {name}: (alone, batch) {differ}")
    save_json(options.json, {
        "bench": "batch", "files": len(paths), "profile": options.profile,
        "workers": options.workers, "batch_seconds": total, "batch_exit": batch_code,
        "alone": {name: seconds for name, (seconds, _, _) in alone.items()},
        "alone_median": median, "sequential_seconds": sequential,
        "sequential_estimated": len(alone) != len(paths), "ratio": sequential / total,
        "per_file": total / len(paths), "same_verdicts": len(same), "compared": len(alone),
    })  # fmt: skip
    return 0 if len(same) == len(alone) else 1


def _median_text(seconds: list[float], label: str) -> str:
    """`` (label M s)``, the median of ``seconds``; nothing when no such file was timed
    (``--alone 1`` times one mutant and no copy)."""
    return f"  ({label} {statistics.median(seconds):.1f} s)" if seconds else ""


if __name__ == "__main__":
    sys.exit(main())
