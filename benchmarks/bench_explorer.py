"""States per second of the explorer, this checkout against an older commit, side by side.

    python benchmarks/bench_explorer.py                      # deep scopes, 3 rounds
    python benchmarks/bench_explorer.py --scope ci --replay  # ci scopes, with conformance
    python benchmarks/bench_explorer.py --base 1c300b1 --rounds 1 --parts deep-1job
    python benchmarks/bench_explorer.py --max-states 50000   # the first 50k states of each
    python benchmarks/bench_explorer.py --base 1c300b1 --new HEAD  # a commit, not the files

The older implementation is the merge-base with ``main`` (or ``--base REV``), exported
with ``git archive`` into a temporary directory (the repository is not touched), and so
is the newer side with ``--new REV`` (the checkout's files can then change during a long
run without changing what is measured); each
exploration runs in a fresh process (``_explorer_probe.py``) that imports leasecheck
from one tree or the other, alternating old and new in every round. Both trees explore
the scope parts as defined in *this* checkout's ``BENCH_SCOPES`` (the merge-base deep
scopes), so a later change of the gate's scopes does not change what is compared.

Reported per part: the median over the rounds of each side's states per CPU second of
the probe process and states per wall second (explore only, as ``leasecheck explore``
calls it), and their ratios (on a loaded machine read the CPU figures: the wall clock
then measures the other processes' bursts more than the explorer). The first round's
two runs also compute digests (after their timed exploration), and the bench asserts
that both sides found the same number of states and transitions,
the same depth, coverage and verdict, and the same digests of the state set and of the
edge multiset (source, operation, target, result, error, hooks); with ``--replay`` also
the same conformance verdict on the bundled targets, and each side's replay time and
count of target calls (a side that asks each distinct question once makes fewer).
Timings on a shared machine are noisy: read the ratios. ``--json FILE`` also writes the
figures as data (per part its size and each side's rates per round and their medians).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from _trees import export, merge_base, run_probe, save_json

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from leasecheck.models.job_explorer import JobScope  # noqa: E402
from leasecheck.models.lease_explorer import LeaseScope  # noqa: E402

PROBE = Path(__file__).with_name("_explorer_probe.py")

BENCH_SCOPES: dict[str, list[tuple[str, LeaseScope | JobScope]]] = {
    "deep": [
        ("lease", LeaseScope(
            name="deep-1job", jobs=("a",), dispatchers=("d1", "d2"), qtys=(1,), ttls=(3, 5),
            budgets=(1, 3), leases=(1, 3), delays=(0, 2), max_redrives=1, max_held=2,
            max_states=3_000_000)),
        ("lease", LeaseScope(
            name="deep-2jobs", jobs=("a", "b"), dispatchers=("d1", "d2"), qtys=(1,), ttls=(3,),
            budgets=(1, 2), leases=(2,), delays=(1,), max_redrives=1, max_held=1,
            max_states=3_000_000)),
        ("jobs", JobScope(
            name="jobs-deep-1job", jobs=1, workers=("w1", "w2"), priorities=(0,),
            offsets=(0, 2), leases=(1, 3), max_attempts=3, base_backoff=1, max_backoff=2,
            retries=2, max_states=3_000_000)),
        ("jobs", JobScope(
            name="jobs-deep-2jobs", jobs=2, workers=("w1", "w2"), priorities=(0, 1),
            offsets=(0,), leases=(2,), max_attempts=2, base_backoff=1, max_backoff=2,
            retries=0, max_states=3_000_000)),
    ],
    "ci": [
        ("lease", LeaseScope(
            name="ci-1job", jobs=("a",), dispatchers=("d1", "d2"), qtys=(1,), ttls=(4,),
            budgets=(2,), leases=(2,), delays=(1,), max_redrives=1, max_held=2,
            max_states=100_000)),
        ("lease", LeaseScope(
            name="ci-2jobs", jobs=("a", "b"), dispatchers=("d1", "d2"), qtys=(1,), ttls=(3,),
            budgets=(1,), leases=(2,), delays=(1,), max_redrives=0, max_held=1,
            max_states=100_000)),
        ("jobs", JobScope(
            name="jobs-ci-1job", jobs=1, workers=("w1", "w2"), priorities=(0,), offsets=(0, 1),
            leases=(2,), max_attempts=2, base_backoff=1, max_backoff=2, retries=1,
            max_states=100_000)),
        ("jobs", JobScope(
            name="jobs-ci-2jobs", jobs=2, workers=("w1", "w2"), priorities=(0, 1), offsets=(0,),
            leases=(2,), max_attempts=1, base_backoff=1, max_backoff=1, retries=0,
            max_states=100_000)),
    ],
}  # fmt: skip
"""The merge-base scopes (commit 1c300b1), written out so both sides explore the same."""

SAME = ("states", "transitions", "depth", "exhausted", "ok", "violation", "missing", "coverage")


def probe(tree: Path, system: str, scope: LeaseScope | JobScope, mode: str) -> dict[str, Any]:
    fields = json.dumps(dataclasses.asdict(scope))
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    figures = run_probe(PROBE, tree, system, fields, mode, timeout=3600, env=env)
    cpu = f", {figures['cpu_seconds']:.1f} s of CPU" if "cpu_seconds" in figures else ""
    print(f"  {scope.name} {mode} in {tree.name}: {figures['states']} states in"
          f" {figures['seconds']:.1f} s{cpu}", flush=True)  # fmt: skip
    return figures


def compare(name: str, old: dict[str, Any], new: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        assert old[key] == new[key], f"{name}: {key} differs: old {old[key]!r}, new {new[key]!r}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scope", choices=sorted(BENCH_SCOPES), default="deep")
    parser.add_argument("--parts", nargs="*", help="only these part names")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", help="older commit (default: merge-base with main)")
    parser.add_argument("--new", help="newer commit (default: this checkout's files)")
    parser.add_argument("--replay", action="store_true", help="also compare conformance")
    parser.add_argument(
        "--max-states", type=int, help="cut every part off here (the same on both sides)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    base = args.base or merge_base()
    old_tree = export(base, "bench-explorer-")
    new_tree = REPO if args.new is None else export(args.new, "bench-explorer-new-")
    try:
        return _run(args, base, old_tree, new_tree)
    finally:
        shutil.rmtree(old_tree, ignore_errors=True)
        if new_tree != REPO:
            shutil.rmtree(new_tree, ignore_errors=True)


def _run(args: argparse.Namespace, base: str, old_tree: Path, new_tree: Path) -> int:
    newer = f"{args.new} (git archive in {new_tree})" if args.new else f"this checkout {REPO}"
    print(f"old = {base[:10]} (git archive in {old_tree}), new = {newer}")
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at the start")
    parts = [(s, p) for s, p in BENCH_SCOPES[args.scope] if not args.parts or p.name in args.parts]
    if args.max_states:
        parts = [(s, dataclasses.replace(p, max_states=args.max_states)) for s, p in parts]
    rows = []
    figures: list[dict[str, Any]] = []
    for system, scope in parts:
        mode = "digest" if args.replay else "digest-explore"
        old, new = probe(old_tree, system, scope, mode), probe(new_tree, system, scope, mode)
        keys: tuple[str, ...] = (*SAME, "state_digest", "edge_digest")
        if args.replay:
            keys += ("replay_failure",)
        compare(scope.name, old, new, keys)
        # the digest runs are the first round (their explore is timed before any digest)
        runs: dict[str, list[dict[str, Any]]] = {"old": [old], "new": [new]}
        for _ in range(args.rounds - 1):
            for side, tree in (("old", old_tree), ("new", new_tree)):
                runs[side].append(probe(tree, system, scope, "time"))
        part = _figures(scope.name, new, runs)
        figures.append(part)
        row = f"{scope.name}: {new['states']} states, {new['transitions']} transitions, same"
        row += f" states/edges/verdict; medians of {args.rounds} alternating runs:"
        for label, rate in (("states per CPU second", "cpu_rate"), ("states/s", "wall_rate")):
            before, after = part["old"][rate], part["new"][rate]
            if before is None or after is None:
                continue  # an older probe's figures
            row += f" {label} old {before:,.0f}, new {after:,.0f}, ratio {after / before:.1f}x;"
        if args.replay:
            before, after = old["replay_seconds"], new["replay_seconds"]
            row += (
                f" target calls {old['replayed_transitions']} -> {new['replayed_transitions']}"
                f" from {old['replayed_states']} -> {new['replayed_states']} states;"
            )
            row += f" replay {before:.1f}s -> {after:.1f}s ({before / after:.1f}x, one run"
            if "replay_cpu_seconds" in old:
                before, after = old["replay_cpu_seconds"], new["replay_cpu_seconds"]
                row += f"; CPU {before:.1f}s -> {after:.1f}s, {before / after:.1f}x"
            row += ")"
        print(row, flush=True)
        rows.append(row)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    summary = {"bench": "explorer", "base": base, "new": args.new, "scope": args.scope,
               "rounds": args.rounds, "parts": figures}  # fmt: skip
    save_json(args.json, summary)
    return 0


def _figures(
    name: str, first: dict[str, Any], runs: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """A part's figures (printed, and written by ``--json``): its size, and per side the
    states per CPU second and per wall second of every round and their medians (the
    digests matched). An older probe that did not report its CPU seconds in every round
    has no CPU rates."""
    part: dict[str, Any] = {"part": name, "states": first["states"],
                            "transitions": first["transitions"], "same": True}  # fmt: skip
    timed = all("cpu_seconds" in r for side_runs in runs.values() for r in side_runs)
    for side, side_runs in runs.items():
        cpu = [r["states"] / r["cpu_seconds"] for r in side_runs] if timed else []
        wall = [r["states"] / r["seconds"] for r in side_runs]
        part[side] = {"cpu_rates": cpu, "wall_rates": wall,
                      "cpu_rate": statistics.median(cpu) if cpu else None,
                      "wall_rate": statistics.median(wall)}  # fmt: skip
    clock = "cpu_rate" if part["old"]["cpu_rate"] and part["new"]["cpu_rate"] else "wall_rate"
    part["ratio"] = part["new"][clock] / part["old"][clock]
    part["ratio_of"] = clock  # an older probe may not report its CPU seconds
    return part


if __name__ == "__main__":
    sys.exit(main())
