"""Steps per second of the agreement machines, next to bare Hypothesis machines.

Run as ``python benchmarks/bench_lease_machine.py [--machines lease jobs] [--rounds N]
[--base REV]``.
For each machine (``LeaseAgreement`` on the bundled worker, scratch storage on tmpfs;
``JobAgreement`` on the bundled JobQueue), figures from the same run:

- the machine's rate counts every rule it executes (each one is an operation on the
  target *and* the model, a full state comparison and the invariants, plus Hypothesis'
  own generation);
- the bare rate is a ``RuleBasedStateMachine`` with the same rules, bundles and number
  of arguments per rule whose bodies do nothing and whose arguments are one small
  integer each: what Hypothesis itself costs per step, the floor the machine can reach;
- for the lease machine, the raw rate counts plain ``enqueue``/``claim``/``finish``
  calls on the worker.

Rates are per second of this process's CPU time (``time.process_time``), so that the
other processes of a shared machine do not move them (wall time did, by 2x); every
figure is single-process work. The figure to watch is ``machine / bare`` (1.0 would
mean the checks cost nothing).
Each machine runs the examples and steps its ``leasecheck check --profile ci`` property
runs (``lease.agreement``: the ci profile's; ``jobs.agreement``: 1.2 times its examples,
at least 40 steps, see ``leasecheck/properties/test_job_agreement.py``); ``--examples``
and ``--steps`` override both.

``--floor`` prints, instead, how much of Hypothesis' own cost a change to the machines'
rules could remove: ``JobAgreement``'s bare twin, the same rules with one argument each
(``PackedJobs``: every rule's arguments drawn as one), and a machine of one rule with
one argument (``OneRule``: what a stateful step costs whatever the rules). Measured on
a 2-core machine (5 Dec 2026, 1200 examples x 40 steps, medians of 3 rounds): 1,626,
1,773 and 2,889 steps/s. Packing the arguments would gain about 9%, and a step of the
simplest machine still costs about a third of a millisecond.

``--split`` prints, instead, where a step's CPU goes, for each machine and for its bare
twin, in microseconds: Hypothesis (choosing the rule and drawing its arguments), the
garbage collector, the target's own calls, and leasecheck's work around them (the
model, the comparisons, the snapshot reads, the invariants, each example's files and
connections). It times the machine's rules, invariants, ``__init__`` and
``teardown`` and, inside them, the target's functions or methods; what is left is
Hypothesis'. The programs are the same (the digests do not change), and the collector
runs with the thresholds of a check's test processes, as the gate's machines do.
Measured on a 2-core machine (7 Dec 2026, medians of 3, see docs/speed.md): the lease
machine's step is about 2.4 times its twin's, and Hypothesis, the target and leasecheck
each add about the same to it.

``--fingerprint`` prints, instead of rates, a digest of every choice sequence Hypothesis
made for each machine (derandomized, no database): the same digest before and after a
change to a machine means the change generated the same programs. The digest is taken
on the counting subclasses (``_machine_probe.counting``), whose source does not change
with the machine's:
Hypothesis seeds a derandomized run, and keys the example database, from the machine
class's source (``function_digest``), so an edit to ``LeaseAgreement`` or
``JobAgreement`` themselves re-seeds every derandomized test of them (the mutant kill
tables in tests/test_lease_machine.py and tests/test_job_machine.py) and re-keys their
saved examples, even when the digest here is unchanged. ``leasecheck check`` forces a
seed, so its programs depend only on the strategies and preconditions.

Every measurement draws, as a check does, with leasecheck's fixed pool of literals
(``constants_pool.pin``; ``_machine_probe.py`` likewise for a tree that has one).
Without it Hypothesis mixes in the literals of every module this script has imported,
and an added import changed the programs: the digests of 7 Dec 2026 and before
(lease d57cec52…, jobs f6e18e53…) were taken so, and differ from today's.

``--base REV`` puts an older commit's machines beside this checkout's (a before/after of
the ratio to bare Hypothesis): ``REV`` is exported with ``git archive`` into a temporary
directory (the repository is not touched), and every measurement, the older machine,
this checkout's and the bare twin alike, runs in a fresh process (``_machine_probe.py``),
in rounds that alternate them, each with this checkout's ci budget. The older machine
may have other rules, so it runs other programs of that budget: its rate is per step it
ran, the way the issue that asked for these figures measured it. With ``--base``,
``--json FILE`` also writes the figures as data (per machine the three rates of every
round, their medians and the shares of the bare twin's).
"""

from __future__ import annotations

import argparse
import functools
import gc
import hashlib
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from _machine_probe import config, counting
from _trees import REPO, export, run_probe, save_json
from hypothesis import strategies as st
from hypothesis.internal.conjecture.data import ConjectureData
from hypothesis.internal.conjecture.engine import ConjectureRunner
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from leasecheck import constants_pool
from leasecheck._events import GC_THRESHOLDS
from leasecheck.profiles import PROFILES
from leasecheck.stateful_tests.job_machine import agreement_budget
from leasecheck.targets.loader import (
    JOBQUEUE_METHODS,
    WORKER_NAMES,
    load_jobs_target,
    load_worker,
)
from leasecheck.targets.scratch import scratch_dir

CI = PROFILES["ci"]
ARG = st.integers(0, 3)
"""One small integer: the cheapest argument Hypothesis draws."""


CountingAgreement = counting("lease")
"""``LeaseAgreement``, counting examples and invariant checks (one per step)."""
CountingJobs = counting("jobs")
"""``JobAgreement``, counting likewise."""


class _Bare(RuleBasedStateMachine):
    """A machine whose rules do nothing, counting its examples and checks (one per step)."""

    examples: ClassVar[int] = 0
    checks: ClassVar[int] = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).examples += 1

    @invariant()
    def counted(self) -> None:
        type(self).checks += 1


class BareMachine(_Bare):
    """``LeaseAgreement``'s rules, bundles and argument counts, doing nothing."""

    examples: ClassVar[int] = 0
    checks: ClassVar[int] = 0
    tickets = Bundle("tickets")
    housekeeping = Bundle("housekeeping")

    @initialize(start=ARG, job=ARG, qty=ARG, ttl_ms=ARG, max_attempts=ARG)
    def enqueue_first(self, **arguments: int) -> None:
        pass

    @rule(job=ARG, qty=ARG, now=ARG, ttl_ms=ARG, max_attempts=ARG, bad=ARG)
    def enqueue(self, **arguments: int) -> None:
        pass

    @rule(target=tickets, owner=ARG, now=ARG, lease_ms=ARG, fault=ARG, bad=ARG)
    def claim(self, **arguments: int) -> Any:
        return multiple(arguments["owner"])

    @rule(ticket=tickets, change=ARG, outcome=ARG, now=ARG, delay_ms=ARG, fault=ARG, bad=ARG)
    def finish(self, **arguments: int) -> None:
        pass

    @rule(job=ARG, now=ARG, ttl_ms=ARG, note=ARG, fault=ARG, bad=ARG)
    def redrive(self, **arguments: int) -> None:
        pass

    @rule(ms=ARG)
    def advance_clock(self, ms: int) -> None:
        pass

    @rule(target=tickets, owner=ARG, clock=ARG, send=ARG, jitter=ARG, lease_ms=ARG)
    def run_once(self, **arguments: int) -> Any:
        return multiple(arguments["owner"])

    @rule(target=tickets, path=ARG, owner=ARG, clock=ARG, send=ARG, jitter=ARG)
    def run_file(self, **arguments: int) -> Any:
        return multiple(arguments["owner"])

    @rule(attempt=ARG, base_ms=ARG, cap_ms=ARG, jitter=ARG)
    def retry_delay(self, **arguments: int) -> None:
        pass

    @rule(target=housekeeping)
    def reopen(self) -> Any:
        return multiple()

    @rule(target=housekeeping, index=ARG)
    def use_connection(self, index: int) -> Any:
        return multiple()


class BareJobs(_Bare):
    """``JobAgreement``'s rules, bundles and argument counts, doing nothing."""

    examples: ClassVar[int] = 0
    checks: ClassVar[int] = 0
    leases = Bundle("leases")
    observers = Bundle("observers")

    @initialize(policy=ARG, backlog=ARG)
    def start(self, **arguments: int) -> None:
        pass

    @rule(target=observers, type=ARG, payload=ARG, priority=ARG, run_at_millis=ARG)
    def submit(self, **arguments: int) -> Any:
        return multiple()

    @rule(target=leases, worker=ARG, lease_millis=ARG)
    def poll(self, **arguments: int) -> Any:
        return arguments["worker"]

    @rule(target=observers, lease=ARG, job_id=ARG)
    def complete(self, **arguments: int) -> Any:
        return multiple()

    @rule(target=observers, lease=ARG, job_id=ARG, error=ARG)
    def fail(self, **arguments: int) -> Any:
        return multiple()

    @rule(target=observers, job_id=ARG)
    def view(self, job_id: int) -> Any:
        return multiple()

    @rule(target=observers)
    def dead_letters(self) -> Any:
        return multiple()

    @rule(target=observers, job_id=ARG)
    def retry_dead(self, job_id: int) -> Any:
        return multiple()

    @rule(target=observers, job_id=ARG)
    def cancel(self, job_id: int) -> Any:
        return multiple()

    @rule(target=observers, to=ARG, offset=ARG)
    def advance_clock(self, **arguments: int) -> Any:
        return multiple()


class PackedJobs(BareJobs):
    """``BareJobs`` with one argument per rule: the least a rule could draw (the rules of
    one or no argument are inherited)."""

    examples: ClassVar[int] = 0
    checks: ClassVar[int] = 0

    @initialize(start=ARG)
    def start(self, start: int) -> None:
        pass

    @rule(target=BareJobs.observers, job=ARG)
    def submit(self, job: int) -> Any:
        return multiple()

    @rule(target=BareJobs.leases, worker=ARG)
    def poll(self, worker: int) -> Any:
        return worker

    @rule(target=BareJobs.observers, lease=ARG)
    def complete(self, lease: int) -> Any:
        return multiple()

    @rule(target=BareJobs.observers, lease=ARG)
    def fail(self, lease: int) -> Any:
        return multiple()

    @rule(target=BareJobs.observers, to=ARG)
    def advance_clock(self, to: int) -> Any:
        return multiple()


class OneRule(_Bare):
    """One rule of one small integer: what a stateful step costs whatever the rules are."""

    examples: ClassVar[int] = 0
    checks: ClassVar[int] = 0

    @rule(value=ARG)
    def step(self, value: int) -> None:
        pass


FLOOR = {"jobs bare": BareJobs, "jobs packed": PackedJobs, "one rule": OneRule}
"""``--floor``'s machines, each run with the jobs machine's examples and steps."""


MACHINES: dict[str, tuple[Any, Any, int, int]] = {
    "lease": (CountingAgreement, BareMachine, CI.max_examples, CI.step_count),
    "jobs": (CountingJobs, BareJobs, *agreement_budget(CI.max_examples, CI.step_count)),
}
"""name -> (machine, its bare twin, examples and steps of its ci property)."""


def machine_rate(machine: Any, examples: int, steps: int) -> tuple[float, int, float]:
    """(steps per CPU second, steps, CPU seconds) of ``machine`` (a counting machine class)."""
    machine.examples = machine.checks = 0
    started = time.process_time()
    run_state_machine_as_test(machine, settings=config(examples, steps))
    seconds = time.process_time() - started
    ran = machine.checks - machine.examples  # one check before step 1
    return ran / seconds, ran, seconds


@contextmanager
def _choices_hashed() -> Iterator[Any]:  # a hashlib object (its class is private)
    """Hash every test case's choice sequence while the block runs (the digest is yielded)."""
    digest = hashlib.sha256()
    original = ConjectureRunner.test_function

    def test_function(runner: ConjectureRunner, data: ConjectureData) -> None:
        try:
            original(runner, data)
        finally:
            digest.update(repr(tuple(data.choices)).encode())

    ConjectureRunner.test_function = test_function  # type: ignore[method-assign, assignment]
    try:
        yield digest
    finally:
        ConjectureRunner.test_function = original  # type: ignore[method-assign]


def fingerprint(machine: Any, examples: int, steps: int) -> tuple[str, int]:
    """(a digest of every program Hypothesis generated for ``machine``, steps run): the
    same digest before and after a change means the change generated the same programs."""
    machine.examples = machine.checks = 0
    with _choices_hashed() as digest:
        run_state_machine_as_test(machine, settings=config(examples, steps))
    return digest.hexdigest()[:16], machine.checks - machine.examples


PARTS = ("hypothesis", "collector", "target", "leasecheck")
"""Where a machine step's CPU goes (``split``): Hypothesis choosing each rule and drawing
its arguments; Python's garbage collector, whoever's allocation set it off; the
target's own calls; leasecheck's work around them (the model, the comparisons, the
snapshot reads, the invariants, each example's files and connections)."""


@contextmanager
def _parts_timed(machine: Any, target: Any) -> Iterator[dict[str, float]]:
    """Time, in CPU seconds, the machine's code (its rules, invariants, ``__init__`` and
    ``teardown``), inside it the target's (``target``: a worker module's functions, a
    ``JobQueue`` class's methods, or None), and the collector's passes, which are taken
    out of whichever part they interrupted. Only the outermost call of each part counts.
    The wrappers change no choice Hypothesis makes (the programs stay the same) and are
    removed after."""
    spent = {"machine": 0.0, "target": 0.0, "collector": 0.0}
    depth = {"machine": 0, "target": 0}
    collecting = [0.0]
    undo: list[Callable[[], None]] = []

    def timed(function: Callable[..., Any], part: str) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if depth[part]:
                return function(*args, **kwargs)
            depth[part] += 1
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[part] += time.process_time() - started
                depth[part] -= 1

        return wrapper

    def collected(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting[0] = time.process_time()
            return
        took = time.process_time() - collecting[0]
        spent["collector"] += took
        for part, inside in depth.items():
            if inside:
                spent[part] -= took

    def patch(owner: Any, name: str, part: str) -> None:  # a class or a module
        own = vars(owner)
        setattr(owner, name, timed(getattr(owner, name), part))
        if name in own:
            original = own[name]
            undo.append(lambda: setattr(owner, name, original))
        else:  # inherited: removing the wrapper uncovers it again
            undo.append(lambda: delattr(owner, name))

    def patch_slot(holder: Any, part: str) -> None:  # Rule and Invariant: slots dataclasses
        original = holder.function
        object.__setattr__(holder, "function", timed(original, part))
        undo.append(lambda: object.__setattr__(holder, "function", original))

    try:
        state = machine.setup_state()
        for holder in (*state.rules, *state.initializers, *state.invariants):
            patch_slot(holder, "machine")
        patch(machine, "__init__", "machine")
        patch(machine, "teardown", "machine")
        if isinstance(target, type):
            for name in ("__init__", *JOBQUEUE_METHODS):
                patch(target, name, "target")
        elif target is not None:
            for name in WORKER_NAMES:
                if not isinstance(getattr(target, name), type):  # not an exception class
                    patch(target, name, "target")
        gc.callbacks.append(collected)
        undo.append(lambda: gc.callbacks.remove(collected))
        yield spent
    finally:
        for step_back in reversed(undo):
            step_back()


def split(machine: Any, target: Any, examples: int, steps: int) -> dict[str, float]:
    """Microseconds of CPU per step of ``machine`` (a counting machine class) in each of
    ``PARTS``, from one timed run (``target``: what ``_parts_timed`` times as the
    target's). The timers add one to two microseconds a call; rates are measured without
    them."""
    machine.examples = machine.checks = 0
    started = time.process_time()
    with _parts_timed(machine, target) as spent:
        run_state_machine_as_test(machine, settings=config(examples, steps))
    total = time.process_time() - started
    ran = machine.checks - machine.examples
    seconds = {
        "hypothesis": total - spent["machine"] - spent["collector"],
        "collector": spent["collector"],
        "target": spent["target"],
        "leasecheck": spent["machine"] - spent["target"],
    }
    return {part: 1e6 * seconds[part] / ran for part in PARTS}


def splits(names: list[str], rounds: int, budget: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """``--split``: per machine, the medians of ``rounds`` splits of it and of its bare
    twin (alternated), printed, and returned as data. The collector runs with the
    thresholds of a check's test processes (``_events.GC_THRESHOLDS``: a full collection
    after 1000 middle ones), as the gate's machines do; the rates keep Python's own."""
    measured: dict[tuple[str, str], list[dict[str, float]]] = {}
    defaults = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        for _ in range(rounds):
            for name in names:
                machine, bare, *_ = MACHINES[name]
                target = machine.target_module if name == "lease" else machine.target_class
                examples, steps = budget[name]
                for side, subject, timed_target in (("machine", machine, target),
                                                    ("bare", bare, None)):  # fmt: skip
                    row = split(subject, timed_target, examples, steps)
                    measured.setdefault((name, side), []).append(row)
    finally:
        gc.set_threshold(*defaults)
    summary: dict[str, Any] = {
        "bench": "machine-split", "rounds": rounds, "gc_thresholds": list(GC_THRESHOLDS),
        "machines": {},
    }  # fmt: skip
    print(
        f"CPU per step in microseconds, medians of {rounds} rounds, the collector set as in"
        f" a check's test processes {GC_THRESHOLDS}"
    )
    for name in names:
        rows = {
            side: {part: statistics.median(r[part] for r in measured[name, side]) for part in PARTS}
            for side in ("machine", "bare")
        }
        examples, steps = budget[name]
        summary["machines"][name] = {"examples": examples, "steps": steps, **rows}
        print(f"{name}: {examples} examples x {steps} steps      machine  bare twin")
        for part in PARTS:
            print(f"  {part:12} {rows['machine'][part]:28.0f} {rows['bare'][part]:10.0f}")
        print(
            f"  {'all':12} {sum(rows['machine'].values()):28.0f} {sum(rows['bare'].values()):10.0f}"
        )
    return summary


def raw_rate(jobs: int) -> tuple[float, int, float]:
    """(operations per CPU second, operations, CPU seconds): enqueue, claim, finish per job."""
    worker = load_worker()
    with scratch_dir("leasecheck-bench-") as directory:
        con = worker.open_queue(directory / "queue.db")
        try:
            started = time.process_time()
            for n in range(jobs):
                worker.enqueue(con, {"id": f"j{n}", "qty": 1}, n, 60000)
                ticket = worker.claim(con, "w1", n, 1000)
                worker.finish(con, ticket, "ok", n)
            seconds = time.process_time() - started
        finally:
            con.close()
    return 3 * jobs / seconds, 3 * jobs, seconds


PROBE = Path(__file__).with_name("_machine_probe.py")


def probe(tree: Path, kind: str, machine: str, examples: int, steps: int) -> float:
    """Steps per CPU second of ``kind`` (``machine`` or ``bare``) in a fresh process."""
    figures = run_probe(PROBE, tree, kind, machine, str(examples), str(steps))
    return float(figures["steps"]) / float(figures["cpu"])


def against_base(
    base: str,
    machines: list[str],
    rounds: int,
    budget: dict[str, tuple[int, int]],
    json_path: Path | None = None,
) -> None:
    """``--base``: the older commit's machines, this checkout's and the bare twins."""
    old_tree = export(base, "bench-machine-")
    try:
        rates: dict[tuple[str, str], list[float]] = {}
        for _ in range(rounds):
            for name in machines:
                examples, steps = budget[name]
                for row, tree, kind in (("old", old_tree, "machine"), ("new", REPO, "machine"),
                                        ("bare", REPO, "bare")):  # fmt: skip
                    rate = probe(tree, kind, name, examples, steps)
                    rates.setdefault((name, row), []).append(rate)
    finally:
        shutil.rmtree(old_tree, ignore_errors=True)
    print(f"old = {base[:10]}, new = this checkout; medians of {rounds} rounds, fresh processes")
    summary: dict[str, Any] = {"bench": "machines", "base": base, "rounds": rounds, "machines": {}}
    for name in machines:
        old, new, bare = (statistics.median(rates[name, row]) for row in ("old", "new", "bare"))
        examples, steps = budget[name]
        summary["machines"][name] = {
            "examples": examples, "steps": steps, "old": old, "new": new, "bare": bare,
            "old_share": old / bare, "new_share": new / bare, "ratio": new / old,
            "rounds": {row: rates[name, row] for row in ("old", "new", "bare")},
        }  # fmt: skip
        print(f"{name}: {examples} examples x {steps} steps")
        print(f"  old machine:  {old:10.0f} steps/s   / bare {old / bare:5.2f}")
        print(f"  new machine:  {new:10.0f} steps/s   / bare {new / bare:5.2f}")
        print(f"  bare:         {bare:10.0f} steps/s")
        print(f"  new / old:    {new / old:10.2f}")
    save_json(json_path, summary)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--machines", nargs="+", choices=sorted(MACHINES), default=["lease", "jobs"],
        help="the machines to measure (default: both)",
    )  # fmt: skip
    parser.add_argument(
        "--examples", type=int, help="examples per machine (default: its ci property's)"
    )
    parser.add_argument("--steps", type=int, help="steps per example (default: its ci property's)")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs in the raw loop")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians are printed)")
    parser.add_argument(
        "--fingerprint", action="store_true",
        help="print a digest of the programs each machine generates (derandomized), not rates",
    )  # fmt: skip
    parser.add_argument(
        "--floor", action="store_true",
        help="print the rates of the jobs bare twin, a one-argument twin and a one-rule machine",
    )  # fmt: skip
    parser.add_argument(
        "--split", action="store_true",
        help="print where each machine's and its bare twin's CPU per step goes, not rates",
    )  # fmt: skip
    parser.add_argument(
        "--base", help="an older commit whose machines to measure beside these (fresh processes)"
    )
    parser.add_argument(
        "--json", type=Path, help="with --base or --split: also write the figures here"
    )
    args = parser.parse_args()
    if args.json and not (args.base or args.split):
        parser.error("--json goes with --base or --split")
    constants_pool.pin()  # the literals a check draws with, whatever this script imports
    budget = {
        name: (args.examples or MACHINES[name][2], args.steps or MACHINES[name][3])
        for name in args.machines
    }
    if args.base:
        against_base(args.base, args.machines, args.rounds, budget, args.json)
        return
    if args.floor:
        _, _, examples, steps = MACHINES["jobs"]
        examples, steps = args.examples or examples, args.steps or steps
        floor: dict[str, list[float]] = {name: [] for name in FLOOR}
        for _ in range(args.rounds):
            for name, twin in FLOOR.items():
                floor[name].append(machine_rate(twin, examples, steps)[0])
        print(f"medians of {args.rounds} rounds, {examples} examples x {steps} steps")
        for name, measured in floor.items():
            print(f"  {name:12} {statistics.median(measured):10.0f} steps/s")
        return
    CountingAgreement.bind(load_worker())
    CountingJobs.bind(load_jobs_target())
    if args.split:
        save_json(args.json, splits(args.machines, args.rounds, budget))
        return
    if args.fingerprint:
        for name in args.machines:
            examples, steps = budget[name]
            digest, ran = fingerprint(MACHINES[name][0], examples, steps)
            print(f"{name}: {examples} examples x {steps} steps: programs {digest}, {ran} steps")
        return
    rates: dict[str, list[float]] = {"raw": []}
    for _ in range(args.rounds):  # interleaved, so a load spike hits all alike
        if "lease" in args.machines:
            rates["raw"].append(raw_rate(args.jobs)[0])
        for name in args.machines:
            machine, bare, *_ = MACHINES[name]
            examples, steps = budget[name]
            rates.setdefault(name, []).append(machine_rate(machine, examples, steps)[0])
            rates.setdefault(f"{name} bare", []).append(machine_rate(bare, examples, steps)[0])
    median = {name: statistics.median(values) for name, values in rates.items() if values}
    print(f"medians of {args.rounds} rounds")
    for name in args.machines:
        examples, steps = budget[name]
        machine, bare = median[name], median[f"{name} bare"]
        print(f"{name}: {examples} examples x {steps} steps")
        print(f"  machine:    {machine:10.0f} steps/s")
        print(f"  bare:       {bare:10.0f} steps/s (Hypothesis alone, same rules and arguments)")
        print(f"  machine / bare: {machine / bare:6.2f}")
    if "raw" in median:
        print(f"raw worker: {median['raw']:10.0f} operations/s")
        print(f"raw operations per lease machine step: {median['raw'] / median['lease']:6.1f}")


if __name__ == "__main__":
    main()
