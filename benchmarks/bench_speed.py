"""Issue 25's figures in one run: every speed benchmark beside its base, in one table.

Not a test: run ``python benchmarks/bench_speed.py [--base 0aa91dc] [--explorer-base
1c300b1 --explorer-base 0aa91dc] [--quick] [--only NAME ...] [--out DIR] [--json FILE]``.
It runs, one after another on a quiet machine, each benchmark that measures one of the
figures issue 25 named, with ``--json`` (their figures come back as data, never as
printed words), and then prints one table: each figure of the base and of this
checkout, their ratio, the issue's target where it set one, and whether it is met.

- ``gate``: ``bench_gate.py --base B --rounds 5``, the whole ``leasecheck check
  --profile ci -n auto`` (target: at least 1.5x faster);
- ``student``: ``bench_gate.py --base B --rounds 3`` limited to the gate's ``lease.*``
  properties (read from the gate's verdicts): what ``--impl worker.py`` runs for one
  student file;
- ``harness``: ``bench_crash_harness.py --base B --repeat 5`` (target: the harness with
  its zygote keeps at least 0.5 of the raw fork + SIGKILL + reopen loop's kills a second);
- ``explorer``: ``bench_explorer.py --base E --rounds 1`` for each ``--explorer-base``,
  the four deep parts (target: at least 5x the states per CPU second of the first base,
  by default 1c300b1: the explorer before the work issue 25 asks for, whose profile the
  issue quotes; 0aa91dc already holds the per-queue templates and the copying replay).
  One round is one sample of each side: ``--explorer-rounds 3`` gives medians, for
  about 17 minutes more;
- ``machines``: ``bench_lease_machine.py --base B --rounds 3``, each agreement machine's
  steps per CPU second as a share of its bare Hypothesis twin's (the issue asks to close
  that gap and sets no number: reported, not judged); then ``bench_lease_machine.py
  --split --rounds 3``, where each machine's step and its twin's go (Hypothesis, the
  collector, the target, leasecheck);
- ``batch``: ``bench_batch.py --files 20 --alone 4``: a class of 20 files in one batch,
  per file beside the base's one student file at a time (the ``student`` old side).

``--quick`` halves the rounds and the class (a look, not figures to quote). Every
benchmark checks its own sides' verdicts, states and digests and fails if they differ;
this runner then also compares the gate's verdicts. Exit status: 0 when every target is
met, 1 when one is not, 2 when a benchmark failed. ``--out DIR`` keeps each
benchmark's JSON there (default: a temporary directory, removed), and ``--table-from
DIR`` prints the table from such a directory without running anything.
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
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from _trees import save_json

HERE = Path(__file__).resolve().parent
GATE_TARGET = 1.5
HARNESS_TARGET = 0.5
EXPLORER_TARGET = 5.0
BALLAST_MB = 278
"""How large an xdist worker grows after the Hypothesis machines (issue 25's profile)."""
FAMILIES = ("gate", "student", "batch", "harness", "explorer", "machines")
"""The benchmarks (``--only``), in the table's order."""
WAITED = ("lease.schedules", "jobs.linearizable")
"""The properties that decided "blocked" after a timed silence (50 ms and 2 ms) in the base."""


@dataclass(frozen=True)
class Bench:
    """One benchmark run: its script and arguments (``--json`` is added)."""

    name: str
    script: str
    args: tuple[str, ...]


def plan(args: argparse.Namespace) -> list[Bench]:
    """The benchmarks to run, in order. ``student`` gets its properties from the gate's
    verdicts once the gate has run (``with_properties``)."""
    scale = 2 if args.quick else 1
    base = args.base
    benches = [
        Bench("gate", "bench_gate.py", ("--base", base, "--rounds", str(5 // scale))),
        Bench("gate-n4", "bench_gate.py", ("--base", base, "-n", "4", "--rounds", str(3 // scale))),
        Bench("student", "bench_gate.py", ("--base", base, "--rounds", str(max(1, 3 // scale)))),
        Bench("harness", "bench_crash_harness.py", ("--base", base, "--repeat", str(5 // scale))),
        Bench(
            "harness-ballast",
            "bench_crash_harness.py",
            ("--base", base, "--repeat", str(3 // scale), "--ballast", str(BALLAST_MB)),
        ),
        *(
            Bench(
                f"explorer-{rev}",
                "bench_explorer.py",
                ("--base", rev, "--rounds", str(args.explorer_rounds)),
            )
            for rev in args.explorer_base
        ),
        Bench("machines", "bench_lease_machine.py", ("--base", base, "--rounds", str(3 // scale))),
        Bench("machines-split", "bench_lease_machine.py", ("--split", "--rounds", str(3 // scale))),
        Bench("batch", "bench_batch.py", ("--files", str(20 // scale), "--alone", str(4 // scale))),
    ]
    return [bench for bench in benches if not args.only or _family(bench.name) in args.only]


def with_properties(bench: Bench, names: list[str]) -> Bench:
    """``bench`` limited to the properties ``names`` (``--property`` each)."""
    chosen = tuple(word for name in names for word in ("--property", name))
    return Bench(bench.name, bench.script, bench.args + chosen)


def _family(name: str) -> str:
    return name.split("-", 1)[0]


def run(bench: Bench, out: Path) -> dict[str, Any]:
    """Run ``bench`` (its output shown as it goes) and return the figures it wrote."""
    record = out / f"{bench.name}.json"
    command = [sys.executable, str(HERE / bench.script), *bench.args, "--json", str(record)]
    print(f"\n== {bench.name}: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=HERE, timeout=4 * 3600)
    print(f"== {bench.name}: exit {done.returncode} in {time.perf_counter() - started:.0f} s")
    if done.returncode != 0 or not record.exists():
        raise RuntimeError(f"{bench.script} exited {done.returncode} without its figures")
    figures: dict[str, Any] = json.loads(record.read_text(encoding="utf-8"))
    return figures


# --- the table ------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One line of the table (``met`` None: the issue set no target for it)."""

    figure: str
    before: str
    now: str
    ratio: str
    target: str
    met: bool | None


def rows(figures: dict[str, dict[str, Any]], judged_explorer: str) -> list[Row]:
    """The table, from whatever benchmarks' figures there are; the explorer's target is
    judged against the base ``judged_explorer``."""
    makers: dict[str, Callable[[dict[str, dict[str, Any]]], list[Row]]] = {
        "gate": _gate, "student": _student, "batch": _batch, "harness": _harness,
        "explorer": partial(_explorer, judged_base=judged_explorer), "machines": _machines,
    }  # fmt: skip
    have = {_family(name) for name in figures}
    return [row for name in FAMILIES if name in have for row in makers[name](figures)]


def _gate(figures: dict[str, dict[str, Any]]) -> list[Row]:
    table: list[Row] = []
    for name in ("gate", "gate-n4"):
        if name in figures:
            table.extend(_gate_rows(figures[name], judged=name == "gate"))
    if "gate" in figures:
        table.extend(_verdict_rows(figures["gate"]))
    return table


def _gate_rows(gate: dict[str, Any], judged: bool) -> list[Row]:
    ratio = gate["ratio"]
    rounds = gate["round_ratios"]
    spread = f"{min(rounds):.2f}-{max(rounds):.2f}x, median {statistics.median(rounds):.2f}x"
    old, new = gate["old"], gate["new"]
    target, met = (f">= {GATE_TARGET}x", ratio >= GATE_TARGET) if judged else ("", None)
    table = [
        Row(
            f"the whole gate, -n {gate['n']} ({gate['rounds']} rounds; "
            f"each round's own ratio {spread})",
            f"{old['median_wall']:.1f} s", f"{new['median_wall']:.1f} s",
            f"{ratio:.2f}x", target, met,
        ),
    ]  # fmt: skip
    if judged:
        over = [_over_floor(gate[side]["median_wall"], gate[side]["median_cpu"] / gate["cores"])
                for side in ("old", "new")]  # fmt: skip
        table.append(
            Row(
                f"the gate's wall time over its CPU floor (CPU seconds over {gate['cores']} cores)",
                over[0], over[1], "", "", None,
            )
        )  # fmt: skip
        seconds = gate.get("property_seconds", {})
        for name in WAITED:
            if name in seconds.get("old", {}) and name in seconds.get("new", {}):
                before, after = seconds["old"][name], seconds["new"][name]
                table.append(
                    Row(
                        f"{name}, its own seconds in the gate (the base waited on silences)",
                        f"{before:.1f} s", f"{after:.1f} s", f"{before / after:.1f}x", "", None,
                    )
                )  # fmt: skip
    return table


def _over_floor(wall: float, floor: float) -> str:
    return f"{wall:.1f} / {floor:.1f} = {wall / floor:.2f}"


def _verdict_rows(gate: dict[str, Any]) -> list[Row]:
    table: list[Row] = []
    old_v, new_v = gate["old_verdicts"], gate["verdicts"]
    common = sorted(set(old_v) & set(new_v))
    changed = [name for name in common if old_v[name] != new_v[name]]
    holds = sum(new_v[name] == "holds" for name in new_v)
    others = ", ".join(f"{n} {v}" for n, v in sorted(new_v.items()) if v != "holds")
    compared = f"{len(changed)} changed" if common else "the base wrote none (no --json)"
    table.append(
        Row(
            f"the gate's verdicts, every round, both sides ({len(common)} properties)",
            "", f"{holds} hold; {others or 'nothing else'}",
            compared, "none changes", not changed if common else None,
        )
    )  # fmt: skip
    return table


def _student(figures: dict[str, dict[str, Any]]) -> list[Row]:
    student = figures["student"]
    return [
        Row(
            f"one student file: the {len(student['properties'])} lease.* properties",
            f"{student['old']['median_wall']:.1f} s", f"{student['new']['median_wall']:.1f} s",
            f"{student['ratio']:.2f}x", "", None,
        )
    ]  # fmt: skip


def _harness(figures: dict[str, dict[str, Any]]) -> list[Row]:
    table: list[Row] = []
    if "harness" in figures:
        table.extend(_harness_rows(figures["harness"]["rows"]))
    if "harness-ballast" in figures:
        old, new = _sides(figures["harness-ballast"]["rows"])
        table.append(
            Row(
                f"CPU per kill, every measuring process grown by {BALLAST_MB} MB (as an "
                "xdist worker after the machines): the base forks from it",
                f"{old['cpu_ms']:.1f} ms", f"{new['cpu_ms']:.1f} ms",
                f"{old['cpu_ms'] / new['cpu_ms']:.1f}x less", "", None,
            )
        )  # fmt: skip
    return table


def _sides(loops: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the base's loop, this checkout's with the zygote): a base without a zygote has
    only the loop that forks from the measuring process."""
    return loops.get("old, zygote") or loops["old, no zygote"], loops["new, zygote"]


def _harness_rows(harness: dict[str, Any]) -> list[Row]:
    old, new = _sides(harness)
    shares = new["round_shares"]
    return [
        Row(
            "the crash harness, share of the raw loop's kills/s (median rate over the raw "
            f"loop's; each round's own share {min(shares):.2f}-{max(shares):.2f}, "
            f"median {statistics.median(shares):.2f})",
            f"{old['share']:.2f}", f"{new['share']:.2f}",
            f"{new['rate'] / old['rate']:.1f}x kills/s",
            f">= {HARNESS_TARGET}", new["share"] >= HARNESS_TARGET,
        ),
        *_target_work_rows(harness),
        Row(
            "CPU per kill (harness, zygote, children), forks per kill",
            f"{old['cpu_ms']:.1f} ms, {old['forks_per_100'] / 100:g}",
            f"{new['cpu_ms']:.1f} ms, {new['forks_per_100'] / 100:g}",
            f"{old['cpu_ms'] / new['cpu_ms']:.1f}x less", "", None,
        ),
    ]  # fmt: skip


def _target_work_rows(harness: dict[str, Any]) -> list[Row]:
    """The harness beside the raw loop that does the target's work of its kills alone, one
    child at a time and no checks (not judged; older figures have no such loop)."""
    alone = harness.get("raw + target")
    if alone is None:
        return []
    new = harness["new, zygote"]
    return [
        Row(
            "the raw loop doing only the target's work of the harness's kills (no checks, one "
            "child at a time): kills/s, its share of the raw loop's",
            "", f"{alone['rate']:.0f}/s, {alone['share']:.2f}", "", "", None,
        ),
        Row(
            "the crash harness, share of that loop's kills/s",
            "", f"{new['rate'] / alone['rate']:.2f}", "", "", None,
        ),
    ]  # fmt: skip


def _explorer(figures: dict[str, dict[str, Any]], judged_base: str) -> list[Row]:
    table: list[Row] = []
    judged_name = f"explorer-{judged_base}"
    bases = sorted((name for name in figures if name.startswith("explorer-")),
                   key=lambda name: name != judged_name)  # fmt: skip
    for name in bases:
        judged = name == judged_name
        for part in figures[name]["parts"]:
            ratio = part["ratio"]
            table.append(
                Row(
                    f"explorer {part['part']} ({part['states']:,} states), states per CPU s, "
                    f"against {figures[name]['base'][:10]}",
                    f"{part['old']['cpu_rate']:,.0f}", f"{part['new']['cpu_rate']:,.0f}",
                    f"{ratio:.1f}x", f">= {EXPLORER_TARGET:g}x" if judged else "(not the base)",
                    ratio >= EXPLORER_TARGET if judged else None,
                )
            )  # fmt: skip
    return table


def _machines(figures: dict[str, dict[str, Any]]) -> list[Row]:
    table = []
    for name, machine in figures.get("machines", {}).get("machines", {}).items():
        table.append(
            Row(
                f"the {name} agreement machine, steps/s as a share of bare Hypothesis's "
                f"({machine['bare']:,.0f} steps/s)",
                f"{machine['old_share']:.2f}", f"{machine['new_share']:.2f}",
                f"{machine['ratio']:.2f}x steps/s", "close the gap (no number)", None,
            )
        )  # fmt: skip
    for name, split in figures.get("machines-split", {}).get("machines", {}).items():
        table.extend(_split_rows(name, split["machine"], split["bare"]))
    return table


SPLIT_PARTS = {
    "hypothesis": "Hypothesis choosing rules and drawing arguments",
    "collector": "the garbage collector",
    "target": "the target's own calls",
    "leasecheck": "leasecheck: model, comparisons, reads, setup",
}
"""``bench_lease_machine.py --split``'s parts, as the table names them."""


def _split_rows(name: str, machine: dict[str, float], bare: dict[str, float]) -> list[Row]:
    """Where a step of machine ``name`` goes, in microseconds of CPU; the base column is
    its bare twin's step (no target, bodies that do nothing)."""
    table = [
        Row(
            f"the {name} machine's step, us of CPU: {label} (base column: its bare twin)",
            f"{bare[part]:.0f}", f"{machine[part]:.0f}", "", "", None,
        )
        for part, label in SPLIT_PARTS.items()
    ]  # fmt: skip
    whole, bare_whole = sum(machine.values()), sum(bare.values())
    table.append(
        Row(
            f"the {name} machine's step, us of CPU: all (base column: its bare twin)",
            f"{bare_whole:.0f}", f"{whole:.0f}", f"{bare_whole / whole:.2f} of it", "", None,
        )
    )  # fmt: skip
    return table


def _batch(figures: dict[str, dict[str, Any]]) -> list[Row]:
    batch = figures["batch"]
    table = [
        Row(
            f"a class of {batch['files']} files in one batch, seconds a file (one at a time "
            f"with this checkout: {batch['sequential_seconds'] / batch['files']:.1f} s, "
            f"the batch {batch['ratio']:.2f}x that)",
            "", f"{batch['per_file']:.1f} s", "", "", None,
        )
    ]  # fmt: skip
    if "student" in figures:
        before = figures["student"]["old"]["median_wall"]
        table.append(
            Row(
                "a class of 100, minutes (the base: one file at a time)",
                f"{100 * before / 60:.0f}", f"{100 * batch['per_file'] / 60:.0f}",
                f"{before / batch['per_file']:.2f}x a file", "", None,
            )
        )  # fmt: skip
    return table


def show(table: list[Row]) -> None:
    print("\n| figure | base | now | ratio | target | met |")
    print("|---|---|---|---|---|---|")
    for row in table:
        met = "" if row.met is None else ("yes" if row.met else "**no**")
        print(f"| {row.figure} | {row.before} | {row.now} | {row.ratio} | {row.target} | {met} |")
    judged = [row for row in table if row.met is not None]
    missed = [row.figure for row in judged if not row.met]
    print(f"\n{len(judged) - len(missed)} of {len(judged)} targets met" +
          (f"; not met: {'; '.join(missed)}" if missed else ""))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="0aa91dc", help="the gate's, harness's, machines' base")
    parser.add_argument(
        "--explorer-base", action="append", metavar="REV",
        help="the explorer's base (repeatable; the first is judged; default 1c300b1, 0aa91dc)",
    )  # fmt: skip
    parser.add_argument(
        "--explorer-rounds", type=int, default=1, metavar="N",
        help="rounds of each explorer part (default 1: the old sides take most of the hour)",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="half the rounds: a look only")
    parser.add_argument("--only", nargs="+", choices=FAMILIES, help="run only these")
    parser.add_argument("--out", type=Path, help="keep each benchmark's JSON in this directory")
    parser.add_argument(
        "--table-from", type=Path,
        help="print the table from a kept --out (the explorer judged against --explorer-base)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the table to this file")
    args = parser.parse_args()
    args.explorer_base = args.explorer_base or ["1c300b1", "0aa91dc"]
    if args.only and "student" in args.only and "gate" not in args.only:
        parser.error("student takes its properties from the gate: add gate to --only")
    if args.table_from:
        kept = {
            path.stem: json.loads(path.read_text(encoding="utf-8"))
            for path in sorted(args.table_from.glob("*.json"))
        }
        table = rows(kept, args.explorer_base[0])
        show(table)
        save_json(args.json, {"rows": [asdict(row) for row in table], "benches": kept})
        return 0 if all(row.met is not False for row in table) else 1
    # Absolute: every benchmark runs in this script's folder (``run``), not the caller's.
    out = (args.out or Path(tempfile.mkdtemp(prefix="bench-speed-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at the start")
    started = time.perf_counter()
    figures: dict[str, dict[str, Any]] = {}
    try:
        for bench in plan(args):
            if bench.name == "student":
                names = sorted(p for p in figures.get("gate", {}).get("verdicts", {})
                               if p.startswith("lease."))  # fmt: skip
                if not names:
                    raise RuntimeError("the student figure needs the gate's lease.* properties")
                bench = with_properties(bench, names)
            figures[bench.name] = run(bench, out)
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"bench_speed: {error}", file=sys.stderr)
        show(rows(figures, args.explorer_base[0]))
        return 2
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)
    minutes = (time.perf_counter() - started) / 60
    print(f"\nall in {minutes:.0f} min; load average {os.getloadavg()[0]:.1f} at the end")
    table = rows(figures, args.explorer_base[0])
    show(table)
    save_json(args.json, {"rows": [asdict(row) for row in table], "benches": figures})
    return 0 if all(row.met is not False for row in table) else 1


if __name__ == "__main__":
    sys.exit(main())
