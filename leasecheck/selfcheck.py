"""``leasecheck mutants``: the suite checks itself against the public mutant catalogue.

Each mutant is written to a scratch file and checked exactly as a user's target
would be (``leasecheck check --impl FILE``), with its expected killer run first and
the run stopped at the first violation. Each starts from an empty example database:
the table measures what the properties find, not what a past run saved. The kill
table says, per mutant, whether it was killed, by which property, how long that took
and how short the counterexample is. Any survivor is a hole in the suite: exit 1.

Mutants checked at once (``-n``) each run in a process of their own: a check is its
run's child subreaper and, when its test process ends, kills and reaps whatever of the
process tree is left (``runner.run_check``), so two checks in threads of one process
took each other's test processes for leftovers and reaped their exit statuses (a
mutant then read SURVIVED, "the test process ended (exit status 0) before reporting
its results").
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import signal
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import psutil

from leasecheck.adapters.servers import die_with_parent
from leasecheck.mutants import CATALOGUE, Mutant, materialize
from leasecheck.runner import (
    HOLDS,
    NOT_PROMISED,
    NOT_RUN,
    CheckOptions,
    CheckResult,
    PropertyResult,
    _Signals,
    run_check,
)
from leasecheck.targets.scratch import scratch_dir

__all__ = ["Kill", "check_all", "check_mutant", "kill_table", "mutants_command"]


@dataclass(frozen=True)
class Kill:
    """The verdict on one mutant."""

    mutant: Mutant
    killed: bool
    killer: str
    seconds: float
    steps: int
    note: str = ""
    stopped: int = 0
    """The signal (SIGINT, SIGTERM) that stopped this mutant's check, 0 if none."""


def run_mutant(mutant: Mutant, profile: str, seed: int = 0) -> tuple[CheckResult, Path]:
    """Check ``mutant`` as a user's target, its expected killer first, stopping at the first
    failure; the result and the (removed) path the mutant's file had."""
    with scratch_dir("leasecheck-mutant-") as directory:
        path = materialize(mutant, directory)
        option = {"impl": path} if mutant.target == "worker" else {"jobs_impl": path}
        options = CheckOptions(
            profile=profile, seed=seed, workers="0", first=mutant.caught_by,
            stop_at_first_failure=True, examples=directory / "examples",
            **option,  # type: ignore[arg-type]
        )  # fmt: skip
        return run_check(options), path


def violations(result: CheckResult) -> list[PropertyResult]:
    """The properties a run found broken (not those that hold, did not run, or are not
    promised), the first to fail first."""
    failed = [
        p for p in result.properties.values() if p.verdict not in (HOLDS, NOT_RUN, NOT_PROMISED)
    ]
    return sorted(failed, key=lambda p: p.failed_at or 0.0)


def check_mutant(mutant: Mutant, profile: str, seed: int = 0) -> Kill:
    """Check one mutant as a user's target; killed means some property was violated."""
    started = time.monotonic()
    result, _ = run_mutant(mutant, profile, seed)
    if result.interrupted:
        name = signal.Signals(result.interrupted).name
        seconds = time.monotonic() - started
        return Kill(mutant, False, "-", seconds, 0, f"stopped by {name}", result.interrupted)
    failed = violations(result)
    if not failed:
        note = result.problem or ("" if result.exit_code == 0 else f"exit {result.exit_code}")
        return Kill(mutant, False, "-", time.monotonic() - started, 0, note)
    killer = failed[0]
    example = killer.counterexample
    steps = example.steps if example else 0
    seconds = killer.failed_at or time.monotonic() - started
    return Kill(mutant, True, killer.name, seconds, steps, killer.verdict)


def kill_table(kills: list[Kill]) -> str:
    """The kill table as text: mutant, verdict, killer, time to kill, shrunk length."""
    width = max([len("mutant"), *(len(kill.mutant.name) for kill in kills)])
    lines = [f"  {'mutant':<{width}} {'verdict':<9} {'killed by':<22} {'time':>7} {'steps':>5}"]
    for kill in kills:
        verdict = "killed" if kill.killed else "stopped" if kill.stopped else "SURVIVED"
        steps = str(kill.steps) if kill.steps else "-"
        lines.append(
            f"  {kill.mutant.name:<{width}} {verdict:<9} {kill.killer:<22} "
            f"{kill.seconds:>6.1f}s {steps:>5}" + (f"  {kill.note}" if not kill.killed else "")
        )
    return "\n".join(lines)


def mutants_command(args: argparse.Namespace) -> int:
    chosen = [m for m in CATALOGUE if not args.only or m.name in args.only]
    unknown = sorted(set(args.only or ()) - {m.name for m in CATALOGUE})
    if unknown:
        names = ", ".join(unknown)
        print(f"leasecheck: error: no mutant named {names}; see `leasecheck mutants --list`")
        return 2
    if args.list:
        for m in chosen:
            print(f"{m.name}  [{m.target}, caught by {m.caught_by}]")
            print(f"    bug: {m.bug_class}\n    e.g. {m.real_world}")
        if not args.only:
            _list_planted_adapters()
        return 0
    workers = _parallelism(args.workers)
    print(
        f"leasecheck mutants: {len(chosen)} mutants, profile {args.profile}, {workers} at a time",
        flush=True,
    )
    started = time.monotonic()
    kills = check_all(chosen, args.profile, args.seed, workers)
    print(kill_table(kills))
    stopped = max((k.stopped for k in kills), default=0)
    survivors = [k.mutant.name for k in kills if not k.killed and not k.stopped]
    print(
        f"\n{len(kills) - len(survivors)}/{len(kills)} killed in {time.monotonic() - started:.0f} s"
        if not stopped
        else f"\nstopped by {signal.Signals(stopped).name} after "
        f"{time.monotonic() - started:.0f} s: {sum(k.killed for k in kills)} killed, "
        f"{len(survivors)} survived, {len(chosen) - len(kills)} not begun; nothing else concluded"
    )
    if survivors:
        print(f"survived: {', '.join(survivors)}")
    if stopped:
        return 128 + stopped
    return 1 if survivors else 0


def _list_planted_adapters() -> None:
    """The planted-bug adapters (``adapters.planted``), checked with ``--adapter planted:NAME``."""
    from leasecheck.adapters.planted import CONTROLS, PLANTED

    print("\nplanted-bug adapters (leasecheck check --adapter planted:NAME):")
    for bug in PLANTED:
        print(f"planted:{bug.name}  [adapter, caught by {bug.caught_by}]")
        print(f"    bug: {bug.bug_class}\n    e.g. {bug.real_world}")
    print("\nplanted controls (no bug: every property must hold on them):")
    for control in CONTROLS:
        print(f"planted:{control.name}  [control, holds every property]")
        print(f"    does: {control.behaviour}\n    fine because: {control.why_fine}")


def check_all(chosen: list[Mutant], profile: str, seed: int, workers: int) -> list[Kill]:
    """``check_mutant`` for each of ``chosen``, in order; ``workers`` at once, each in a
    process of its own (forked, one per worker, reused), never in threads of this one.

    SIGINT or SIGTERM stops the checks under way (each run stops as ``leasecheck check``
    does, its processes and scratch gone; its ``Kill`` says ``stopped``) and begins no
    other: the list then ends with the mutants checked or stopped, in order."""
    if workers == 1 or len(chosen) < 2:
        kills = []
        for mutant in chosen:
            kills.append(check_mutant(mutant, profile, seed))
            if kills[-1].stopped:
                break
        return kills
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(min(workers, len(chosen)), context, initializer=_worker_start)
    with _Signals() as stopping:  # the main thread's: SIGINT and SIGTERM remembered
        try:
            futures = [pool.submit(_check_one, (mutant, profile, seed)) for mutant in chosen]
            while not stopping.received and not all(future.done() for future in futures):
                wait(futures, timeout=0.1, return_when=FIRST_COMPLETED)
            if stopping.received:
                for future in futures:
                    future.cancel()
                for worker in psutil.Process().children():
                    with contextlib.suppress(psutil.Error):
                        worker.send_signal(stopping.received)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    checked = [f.result() for f in futures if f.done() and not f.cancelled()]
    return [kill for kill in checked if kill is not None]


_OWNER: list[int] = []
"""In a worker: the pid of the process that started it."""
_STOPPED: list[int] = []
"""In a worker: the signal that stopped it (it then begins no other check)."""


def _worker_start() -> None:
    """A worker ends its check cleanly (SIGTERM: the run stops, its scratch is removed) when
    this process dies, then exits instead of taking the next mutant. SIGINT or SIGTERM
    stops the run it is checking (whose handlers replace these while it runs); after
    one it begins no other check, and an idle orphan exits."""
    _OWNER[:] = [os.getppid()]
    die_with_parent(signal.SIGTERM)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _worker_signal)


def _worker_signal(signum: int, frame: object) -> None:
    _STOPPED.append(signum)
    _exit_if_orphaned()


def _check_one(job: tuple[Mutant, str, int]) -> Kill | None:
    """The mutant's ``Kill``; None if this worker was stopped before it began."""
    _exit_if_orphaned()
    if _STOPPED:
        return None
    kill = check_mutant(*job)
    if kill.stopped:
        _STOPPED.append(kill.stopped)
    _exit_if_orphaned()
    return kill


def _exit_if_orphaned() -> None:
    if os.getppid() != _OWNER[0]:
        os._exit(128 + signal.SIGTERM)


def _parallelism(workers: str) -> int:
    if workers == "auto":
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, int(workers))
