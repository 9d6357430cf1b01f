"""How much of the agreement machines' ci budget the mutant catalogue needs.

Not a test: run ``python benchmarks/bench_margin.py [--seeds 0 1 2] [--machines lease jobs]
[-n 2] [--only NAME ...]``.

For every catalogue mutant an agreement machine is meant to catch (``caught_by`` is
``lease.agreement`` or ``jobs.agreement``) and every seed, the machine runs the way
``leasecheck check --profile ci --seed S`` runs it: the property's examples and steps,
the profile's Hypothesis settings, Hypothesis' seed forced to S, the plugin's pool of
literals (``leasecheck.constants_pool``; without it the programs differ) and an empty
example database (a fresh machine). It stops at the first failing program, without
shrinking, and records how many programs Hypothesis had run by then, counted the way
``max_examples`` counts them (valid programs, the failing one included), and the CPU
seconds that took. Each run is a fresh process.

Printed per machine: the budget (``max_examples``), the counts' median, 90th percentile
and largest (with its mutant and seed), any (mutant, seed) the machine missed within the
whole budget, and for budgets of 1/4, 1/2 and 3/4 of the ci one how many (mutant, seed)
pairs need more programs than that. This is the margin the gate's largest cost buys: the
two machines are about half of the gate's CPU, two thirds of that Hypothesis generating
programs (docs/ci.md), so their budgets are what a faster gate would have to give up.

The counts are estimates for a smaller budget: Hypothesis spends its first programs
differently when ``max_examples`` is smaller (``small_example_cap``), so a mutant found
at program k of 1,200 may be found a little earlier or later with a budget of 600.
``LEASECHECK_MAX_EXAMPLES=N leasecheck mutants --only NAME --seed S`` checks one exactly (the
profile's examples are N; ``jobs.agreement`` runs 6/5 of them).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MACHINES = {"lease": "lease.agreement", "jobs": "jobs.agreement"}
FRACTIONS = (0.25, 0.5, 0.75)


def budget(machine: str) -> tuple[int, int]:
    """(examples, steps) of the machine's property under the ci profile."""
    from leasecheck.profiles import PROFILES

    ci = PROFILES["ci"]
    if machine == "jobs":
        from leasecheck.stateful_tests.job_machine import agreement_budget

        return agreement_budget(ci.max_examples, ci.step_count)
    return ci.max_examples, ci.step_count


def probe(machine: str, mutant_name: str, seed: int) -> dict[str, Any]:
    """Run in a fresh process: programs to the first failure of ``mutant_name``."""
    from hypothesis import Phase, settings
    from hypothesis.internal.conjecture.data import ConjectureData, Status
    from hypothesis.internal.conjecture.engine import ConjectureRunner
    from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

    from leasecheck.mutants import by_name, materialize
    from leasecheck.plugin import pin_draws
    from leasecheck.profiles import PROFILES, hypothesis_settings
    from leasecheck.stateful_tests.job_machine import JobAgreement
    from leasecheck.stateful_tests.lease_machine import LeaseAgreement
    from leasecheck.targets.loader import load_jobs_target, load_worker

    examples, steps = budget(machine)
    config = settings(
        hypothesis_settings(PROFILES["ci"]), max_examples=examples, stateful_step_count=steps,
        database=None, phases=[Phase.generate],
    )  # fmt: skip
    pin_draws(seed)  # the seed and the pool of literals ``check`` draws with
    valid = other = 0
    found_at: int | None = None
    original = ConjectureRunner.test_function

    def counting(runner: ConjectureRunner, data: ConjectureData) -> None:
        nonlocal valid, other, found_at
        try:
            original(runner, data)
        finally:
            if data.status == Status.VALID:
                valid += 1
            elif data.status == Status.INTERESTING and found_at is None:
                found_at = valid + 1
            else:
                other += 1

    ConjectureRunner.test_function = counting  # type: ignore[method-assign,assignment]
    with tempfile.TemporaryDirectory(prefix="leasecheck-margin-", dir="/dev/shm") as scratch:
        path = materialize(by_name(mutant_name), Path(scratch))
        bound: type[RuleBasedStateMachine]
        if machine == "jobs":
            JobAgreement.bind(load_jobs_target(path))
            bound = JobAgreement
        else:
            bound = LeaseAgreement.bind(load_worker(path))
        started = time.process_time()
        try:
            run_state_machine_as_test(bound, settings=config)
        except Exception:
            if found_at is None:  # not a failing program the count saw: the probe broke
                raise
        seconds = time.process_time() - started
    return {"machine": machine, "mutant": mutant_name, "seed": seed, "budget": examples,
            "found_at": found_at, "valid": valid, "other": other,
            "cpu": round(seconds, 2)}  # fmt: skip


def run_probe(machine: str, name: str, seed: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--probe", machine, name, str(seed)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"probe {machine} {name} {seed} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def report(machine: str, rows: list[dict[str, Any]]) -> None:
    examples = rows[0]["budget"]
    found = [r for r in rows if r["found_at"] is not None]
    missed = [r for r in rows if r["found_at"] is None]
    counts = sorted(r["found_at"] for r in found)
    print(f"\n{MACHINES[machine]}: {len({r['mutant'] for r in rows})} mutants x "
          f"{len({r['seed'] for r in rows})} seeds, budget {examples} programs")  # fmt: skip
    if counts:
        worst = max(found, key=lambda r: r["found_at"])
        p90 = counts[min(len(counts) - 1, int(0.9 * len(counts)))]
        print(f"  programs to the first failure: median {statistics.median(counts):.0f}, "
              f"90th percentile {p90}, largest {worst['found_at']} "
              f"({worst['mutant']}, seed {worst['seed']}) = {worst['found_at'] / examples:.0%}"
              " of the budget")  # fmt: skip
        print(f"  CPU to the first failure: median {statistics.median(r['cpu'] for r in found):.1f}"
              f" s, largest {max(r['cpu'] for r in found):.1f} s")  # fmt: skip
    for row in missed:
        print(f"  MISSED within the whole budget: {row['mutant']}, seed {row['seed']}")
    for fraction in FRACTIONS:
        limit = int(examples * fraction)
        late = [r for r in found if r["found_at"] > limit] + missed
        names = ", ".join(f"{r['mutant']}@{r['seed']}" for r in late[:6])
        more = f" (+{len(late) - 6})" if len(late) > 6 else ""
        print(f"  a budget of {limit} ({fraction:.0%}): {len(late)} of {len(rows)} would be "
              f"missed by this machine{': ' + names + more if late else ''}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--machines", nargs="+", choices=sorted(MACHINES), default=["lease", "jobs"]
    )
    parser.add_argument("-n", type=int, default=2, help="probes at once (default 2)")
    parser.add_argument("--only", nargs="+", default=None, help="these mutants only")
    parser.add_argument("--json", type=Path, default=None, help="also write every row here")
    args = parser.parse_args()

    from leasecheck.mutants import CATALOGUE

    jobs = [
        (machine, mutant.name, seed)
        for machine in args.machines
        for mutant in CATALOGUE
        if mutant.caught_by == MACHINES[machine] and (not args.only or mutant.name in args.only)
        for seed in args.seeds
    ]
    started = time.perf_counter()
    with ThreadPoolExecutor(args.n) as pool:  # each probe is a process of its own
        rows = list(pool.map(lambda job: run_probe(*job), jobs))
    for machine in args.machines:
        mine = [r for r in rows if r["machine"] == machine]
        if mine:
            report(machine, mine)
    print(f"\n{len(rows)} probes in {time.perf_counter() - started:.0f} s")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--probe":
        # A SIGTERM (say, from pkill) unwinds like Ctrl-C, which Hypothesis lets through:
        # the scratch directories go too.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        print(json.dumps(probe(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
        raise SystemExit(0)
    raise SystemExit(main())
