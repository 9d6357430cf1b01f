"""``leasecheck hunt``: long bug hunts under HypoFuzz, sharing what they find.

HypoFuzz (``hypothesis fuzz``) runs the Hypothesis-based properties that ``check``
would run for the same target options (``--impl``, ``--jobs-impl``, ``--adapter``
are passed to pytest as they are), for ``--minutes`` minutes, then is stopped.
HypoFuzz fuzzes only Hypothesis tests (a ``@given`` function or a state machine
``TestCase``, see ``leasecheck.machine_property``); it lists the others as skipped.
Every failure and covering example goes to the example database of the settings
profile (HypoFuzz manual, *HypoFuzz database*): the Redis named by ``--db``, which
several machines share, or the local example directory. HypoFuzz saves a failure
"to the standard location in the Hypothesis database", so the next
``leasecheck check --db URL`` anywhere replays it first.

Run ``python -m leasecheck.hunt findings PYTEST_ARGS`` (what the hunt does at the
end, in a child process) to list, per fuzzed property, the failures the database
holds: it collects the tests as HypoFuzz does and reads their keys.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil

from leasecheck.profiles import EXAMPLES_ENV, HUNT_ENV, PROFILE_ENV, SEED_ENV
from leasecheck.runner import CHECK_INI, PROPERTIES_DIR
from leasecheck.scratch import SCRATCH_ENV, scratch_dir
from leasecheck.shared_db import DB_ENV, FLEET_INSTALL, SharedDatabaseError

__all__ = [
    "Finding",
    "HuntOptions",
    "HuntResult",
    "fuzz_command",
    "hunt_command",
    "pytest_args",
    "replay_command",
    "run_hunt",
]

STOP_GRACE = 15.0
"""Seconds HypoFuzz gets to stop after SIGINT before its process group is killed."""
FINDINGS_TIMEOUT = 120.0


@dataclass(frozen=True)
class HuntOptions:
    impl: Path | None = None
    jobs_impl: Path | None = None
    adapter: str | None = None
    """Passed to pytest as ``--leasecheck-adapter`` unchanged (the queue-adapter properties)."""
    db: str | None = None
    minutes: float = 60.0
    workers: str = "auto"
    """HypoFuzz worker processes on this machine: a number, or ``auto`` (every core)."""
    dashboard_port: int | None = None
    profile: str = "ci"
    """The check profile whose programs (steps per example) the hunt generates: ``check``
    at that profile replays every find, shrunk or not; another replays the shrunk ones."""
    examples: Path | None = None


@dataclass(frozen=True)
class Finding:
    """What the database holds for one fuzzed property after the hunt."""

    name: str
    nodeid: str
    shrunk: int
    unshrunk: int


@dataclass
class HuntResult:
    exit_code: int
    seconds: float
    findings: list[Finding]
    problem: str = ""
    log: str = ""
    ended_by_itself: str = ""
    """Set when HypoFuzz ended before its time was up and found something: its exit
    status and last words (it stops once every test it fuzzes has failed, and also when
    its workers report nothing to fuzz at its minute checks, or when they die)."""


def hunt_command(options: HuntOptions, out: IO[str] = sys.stdout) -> int:
    """The ``leasecheck hunt`` command: print what runs, hunt, print what was found."""
    require_fleet(options.db)
    if options.workers == "0":
        raise SharedDatabaseError("-n takes at least 1 HypoFuzz process (or auto)")
    where = options.db or f"the example directory (${EXAMPLES_ENV} or .leasecheck/examples)"
    print(f"leasecheck hunt: HypoFuzz for {options.minutes:g} min, -n {options.workers}, "
          f"profile {options.profile}; database {where}", file=out)  # fmt: skip
    if options.dashboard_port is not None:
        print(f"  dashboard: http://127.0.0.1:{options.dashboard_port}/", file=out)
    result = run_hunt(options, out)
    if result.ended_by_itself:
        print(f"  {result.ended_by_itself}", file=out)
    for finding in result.findings:
        print(f"  FOUND  {finding.name:<22} {finding.shrunk} shrunk, {finding.unshrunk} "
              f"not yet shrunk counterexample(s)  ({finding.nodeid})", file=out)  # fmt: skip
    if result.problem:
        print(f"leasecheck: error: {result.problem}", file=sys.stderr)
    elif result.findings:
        print(f"replay them anywhere: {replay_command(options)}", file=out)
    else:
        print(f"no failure found ({result.seconds:.0f} s, stopping included)", file=out)
    return result.exit_code


def replay_command(options: HuntOptions) -> str:
    """The ``check`` that replays this hunt's finds (it reads the same database)."""
    words = ["leasecheck", "check"]
    for option, value in (("--impl", options.impl), ("--jobs-impl", options.jobs_impl),
                          ("--adapter", options.adapter), ("--db", options.db)):  # fmt: skip
        words += [option, str(value)] if value else []
    if options.profile != "ci":
        words += ["--profile", options.profile]
    return shlex.join(words)


def require_fleet(db: str | None) -> None:
    """HypoFuzz (and ``redis`` for a Redis database) must be installed: exit 2 otherwise."""
    needed = ["hypofuzz", *(["redis"] if db else [])]
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        raise SharedDatabaseError(
            f"leasecheck hunt needs {' and '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed; "
            f"install with: {FLEET_INSTALL}"
        )


def pytest_args(options: HuntOptions) -> list[str]:
    """The pytest selection of ``check`` for the same targets (same rootdir, same node ids)."""
    args = [str(PROPERTIES_DIR), "-c", str(CHECK_INI), "--rootdir", str(PROPERTIES_DIR)]
    args += ["--leasecheck-profile", options.profile]
    if options.impl:
        args += ["--leasecheck-impl", str(options.impl)]
    if options.jobs_impl:
        args += ["--leasecheck-jobs-impl", str(options.jobs_impl)]
    if options.adapter:
        args += ["--leasecheck-adapter", options.adapter]
    return args


def fuzz_command(options: HuntOptions) -> list[str]:
    """``hypothesis fuzz [-n N] --dashboard|--no-dashboard -- PYTEST_ARGS``."""
    command = [sys.executable, "-c", "from hypothesis.extra.cli import main; main()", "fuzz"]
    if options.workers != "auto":
        command += ["-n", options.workers]
    if options.dashboard_port is None:
        command += ["--no-dashboard"]
    else:
        command += ["--dashboard", "--host", "127.0.0.1", "--port", str(options.dashboard_port)]
    return [*command, "--", *pytest_args(options)]


def _environment(options: HuntOptions, work: Path) -> dict[str, str]:
    env = {**os.environ, PROFILE_ENV: options.profile, SCRATCH_ENV: str(work), HUNT_ENV: "1"}
    env.pop(SEED_ENV, None)  # a forced seed would make every worker repeat the same inputs
    env.pop(DB_ENV, None)
    if options.db:
        env[DB_ENV] = options.db
    if options.examples is not None:
        env[EXAMPLES_ENV] = str(options.examples)
    return env


def run_hunt(options: HuntOptions, out: IO[str] = sys.stdout) -> HuntResult:
    """Fuzz for ``options.minutes``, stop HypoFuzz, reap it, and read what it found."""
    started = time.monotonic()
    with scratch_dir("leasecheck-hunt-") as work:
        env, log = _environment(options, work), work / "hypofuzz.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                fuzz_command(options), stdout=output, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
            )  # fmt: skip
            ended_early = _wait(process, options.minutes * 60.0, out)
        text = log.read_text(errors="replace")
        findings = _findings(options, env)
    seconds = time.monotonic() - started
    problem = "" if findings or not ended_early else _why_ended(process.returncode, text)
    code = 1 if findings else 2 if problem else 0
    itself = _ended_by_itself(process.returncode, text) if findings and ended_early else ""
    return HuntResult(code, seconds, findings, problem, text, itself)


def _wait(process: subprocess.Popen[bytes], seconds: float, out: IO[str]) -> bool:
    """Let HypoFuzz run for ``seconds``; True if it ended by itself before that."""
    try:
        process.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        print(f"  stopping HypoFuzz after {seconds / 60:.1f} min", file=out, flush=True)
        return False
    except KeyboardInterrupt:  # Ctrl-C ends the hunt early; what was found is still reported
        print("  interrupted: stopping HypoFuzz", file=out, flush=True)
        return False
    finally:
        stop_group(process)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGINT the fuzzer's process group (HypoFuzz stops as on Ctrl-C), then SIGKILL the rest."""
    try:
        family = [psutil.Process(process.pid), *psutil.Process(process.pid).children(True)]
    except psutil.NoSuchProcess:
        family = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_GRACE)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=STOP_GRACE)
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    psutil.wait_procs(family, timeout=STOP_GRACE)


def _why_ended(returncode: int, log: str) -> str:
    tail = [line for line in log.strip().splitlines() if line.strip()][-8:]
    said = "\n  ".join(tail) or "(no output)"
    return f"HypoFuzz ended early (exit status {returncode}) and found nothing; it said:\n  {said}"


def _ended_by_itself(returncode: int, log: str) -> str:
    """What a hunt that found something says when HypoFuzz ended before its time."""
    lines = [line.strip() for line in log.strip().splitlines()]
    tail = [line for line in lines if line.strip("^~ ")][-3:]  # no traceback underlines
    said = "\n    ".join(tail) or "(no output)"
    return f"HypoFuzz ended by itself (exit status {returncode}); it said:\n    {said}"


def _findings(options: HuntOptions, env: dict[str, str]) -> list[Finding]:
    """Ask a child (tests are imported there, not here) what the database holds."""
    command = [sys.executable, "-m", "leasecheck.hunt", "findings", *pytest_args(options)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL,
            timeout=FINDINGS_TIMEOUT, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return []
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return [Finding(**row) for row in rows if row["shrunk"] or row["unshrunk"]]


# --- the findings child ----------------------------------------------------------


def _collect_findings(args: Sequence[str]) -> list[dict[str, Any]]:
    """Collect the fuzz targets exactly as HypoFuzz does and read their failure keys."""
    from contextlib import redirect_stdout

    from hypofuzz.collection import collect_tests

    from leasecheck.plugin import property_name

    with redirect_stdout(sys.stderr):
        targets = collect_tests(args).fuzz_targets
    rows = []
    for target in targets:
        database = target.database._db  # the settings profile's database
        key = target.database_key
        item = target.pytest_item
        rows.append(
            {
                "name": (property_name(item) if item else None) or target.nodeid,
                "nodeid": target.nodeid,
                "shrunk": len(list(database.fetch(key))),
                "unshrunk": len(list(database.fetch(key + b".secondary"))),
            }
        )
    return rows


def _main(argv: Sequence[str]) -> int:
    if argv[:1] != ["findings"]:
        print("usage: python -m leasecheck.hunt findings PYTEST_ARGS", file=sys.stderr)
        return 2
    for row in _collect_findings(argv[1:]):
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
