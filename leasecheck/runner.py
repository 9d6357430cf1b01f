"""Runs the properties through pytest in a child process and turns its events into verdicts.

The child is a separate process group, so a target that hangs, calls ``os._exit``
or crashes the interpreter cannot take the CLI with it: the runner names the
property that was running and what happened, and never reports success for a
property that did not run to the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import leasecheck.properties
from leasecheck._events import FAILURE_KEY
from leasecheck.counterexample import Counterexample
from leasecheck.plugin import CHECKED_KEY, NOT_CHECKED_KEY
from targets.scratch import SCRATCH_ENV, scratch_dir

__all__ = [
    "CHECK_INI",
    "PROPERTIES_DIR",
    "CheckOptions",
    "CheckResult",
    "PropertyResult",
    "pytest_command",
    "run_check",
]

PROPERTIES_DIR = Path(leasecheck.properties.__file__).parent
CHECK_INI = Path(__file__).with_name("check.ini")
PROPERTY_BUDGET = {"quick": 180.0, "ci": 420.0, "deep": 7200.0}
"""Seconds one property may run before it is declared hung (``LEASECHECK_BUDGET`` overrides)."""
BUDGET_ENV = "LEASECHECK_BUDGET"

HOLDS, VIOLATED, NOT_RUN, HUNG, CRASHED = "holds", "VIOLATED", "not run", "HUNG", "CRASHED"
NOT_CHECKED = "not checked"
"""A property that exercised nothing (no ack to judge, every program cut short): exit 2."""
NOT_PROMISED = "not promised"
"""A property the library under test does not promise failed: reported with its
counterexample, exit 0 unless ``--strict`` (the property marks the test xfail)."""


@dataclass(frozen=True)
class CheckOptions:
    impl: Path | None = None
    jobs_impl: Path | None = None
    profile: str = "ci"
    seed: int = 0
    workers: str = "auto"
    junit_xml: Path | None = None
    first: str | None = None
    """Run this property first (the mutant kill table uses its expected killer)."""
    stop_at_first_failure: bool = False
    budget: float | None = None
    """Seconds a property may run; default from the profile."""
    examples: Path | None = None
    """The example database directory (default: ``$LEASECHECK_EXAMPLES`` or .leasecheck/)."""
    db: str | None = None
    """A shared example database URL (``redis://HOST:PORT/N``; ``$LEASECHECK_DB``)."""
    adapter: str | None = None
    """A queue library to check (``--adapter NAME|PATH``): only ``queue.*`` properties."""
    strict: bool = False
    """With ``adapter``: a property the library does not promise fails too (exit 1)."""
    properties: tuple[str, ...] = ()
    """Only these properties (``--property NAME``); empty: every selected one."""
    servers: bool = False
    """Also the properties that start real servers (``--servers``): with ``adapter``, the
    server faults queue.server-crash, queue.zombie-pause and queue.clock-skew on it."""


@dataclass
class PropertyResult:
    name: str
    verdict: str = NOT_RUN
    seconds: float = 0.0
    runs: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    nodeids: list[str] = field(default_factory=list)
    failed_at: float | None = None
    """Seconds from the start of the run to the first failure report."""
    failures: list[Counterexample] = field(default_factory=list)
    """Each failure as the test process recorded it (program, message, steps)."""
    figures: dict[str, object] = field(default_factory=dict)
    """What the property covered, as numbers (``checked(..., kills=110)``)."""

    @property
    def counterexample(self) -> Counterexample | None:
        """The first recorded failure, or one made of the report text if none was recorded
        (a crash of the test process or a setup error)."""
        if self.failures:
            return self.failures[0]
        if self.details:
            return Counterexample(None, (), tuple("\n".join(self.details).splitlines()[-30:]))
        return None


@dataclass
class CheckResult:
    properties: dict[str, PropertyResult]
    exit_code: int
    problem: str = ""
    seconds: float = 0.0
    log: str = ""


def pytest_command(options: CheckOptions) -> list[str]:
    """The pytest command line that checks ``options``' targets."""
    command = [
        sys.executable, "-m", "pytest", str(PROPERTIES_DIR), "-c", str(CHECK_INI),
        "--rootdir", str(PROPERTIES_DIR), "-p", "leasecheck._events",
        "--profile", options.profile, "--leasecheck-seed", str(options.seed),
        "-n", options.workers, "-q", "-rN", "--no-header", "--tb=long",
    ]  # fmt: skip
    if options.impl:
        command += ["--impl", str(options.impl)]
    if options.jobs_impl:
        command += ["--jobs-impl", str(options.jobs_impl)]
    if options.adapter:
        command += ["--adapter", options.adapter]
    if options.strict:
        command += ["--strict-promises"]
    if options.junit_xml:
        command += ["--junit-xml", str(options.junit_xml)]
    if options.first:
        command += ["--leasecheck-first", options.first]
    for name in options.properties:
        command += ["--leasecheck-property", name]
    if options.servers:
        command += ["--servers"]
    if options.stop_at_first_failure:
        command += ["-x"]
    if options.examples is not None:
        command += ["--leasecheck-examples", str(options.examples)]
    if options.db is not None:
        command += ["--leasecheck-db", options.db]
    return command


def _property_of(event: dict[str, Any]) -> str:
    for keyword in event.get("keywords", []):
        return str(keyword).removeprefix("leasecheck:")
    return str(event["nodeid"]).rsplit("::", 1)[-1]


class _Tail:
    """Reads the events file incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open(encoding="utf-8") as stream:
            stream.seek(self.offset)
            chunk = stream.read()
        complete = chunk[: chunk.rfind("\n") + 1]
        self.offset += len(complete.encode())
        return [json.loads(line) for line in complete.splitlines() if line.strip()]


class _Run:
    """The state of one pytest run, built from its events."""

    def __init__(self, on_event: Callable[[str, PropertyResult], None]) -> None:
        self.results: dict[str, PropertyResult] = {}
        self.running: dict[str, float] = {}
        self.names: dict[str, str] = {}
        self.on_event = on_event
        self.started = time.monotonic()
        self.exitstatus: int | None = None

    def apply(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind == "start":
            self.running[event["nodeid"]] = time.monotonic()
        elif kind == "report":
            self._report(event)
        elif kind == "finished":
            self.exitstatus = int(event["exitstatus"])

    def _report(self, event: dict[str, Any]) -> None:
        name = _property_of(event)
        self.names[event["nodeid"]] = name
        result = self.results.setdefault(name, PropertyResult(name))
        if event["nodeid"] not in result.nodeids:
            result.nodeids.append(event["nodeid"])
        result.seconds += float(event["duration"])
        self._record(result, event["user_properties"])
        outcome = event["outcome"]
        if outcome == "failed":
            result.verdict = VIOLATED
            result.details.append(event["longrepr"])
            result.failed_at = result.failed_at or time.monotonic() - self.started
        elif outcome == "skipped" and event.get("wasxfail") is not None:
            result.verdict = NOT_PROMISED if result.verdict != VIOLATED else VIOLATED
            result.details.append(str(event["wasxfail"]) or event["longrepr"])
        elif outcome == "skipped" and result.verdict != VIOLATED:
            result.verdict = NOT_CHECKED if self._not_checked(event) else NOT_RUN
            result.details.append(event["longrepr"])
        elif result.verdict == NOT_RUN and not result.details:
            result.verdict = HOLDS
        if event["when"] in ("call", "teardown") or outcome != "passed":
            self.running.pop(event["nodeid"], None)
            self.on_event(event["nodeid"], result)

    @staticmethod
    def _not_checked(event: dict[str, Any]) -> bool:
        return any(key == NOT_CHECKED_KEY for key, _ in event["user_properties"])

    @staticmethod
    def _record(result: PropertyResult, records: list[list[Any]]) -> None:
        """What the test process sent as data: coverage figures and counterexamples."""
        for key, value in records:
            if key == CHECKED_KEY and isinstance(value, dict):
                result.runs.append(str(value.get("text", "")))
                result.figures.update({k: v for k, v in value.items() if k != "text"})
            elif key == NOT_CHECKED_KEY and isinstance(value, dict):
                result.figures["not_checked"] = value
            elif key == FAILURE_KEY and isinstance(value, dict):
                result.failures.append(Counterexample.from_record(value))

    def overdue(self, budget: float) -> str | None:
        now = time.monotonic()
        return next((node for node, t in self.running.items() if now - t > budget), None)

    def mark(self, nodeid: str, verdict: str, detail: str) -> None:
        name = self.names.get(nodeid) or nodeid.rsplit("::", 1)[-1]
        result = self.results.setdefault(name, PropertyResult(name))
        result.verdict = verdict
        result.details.append(detail)
        result.failed_at = time.monotonic() - self.started
        result.nodeids.append(nodeid)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def run_check(
    options: CheckOptions,
    on_event: Callable[[str, PropertyResult], None] = lambda nodeid, result: None,
) -> CheckResult:
    """Run every selected property; ``on_event`` is told each time a property test ends."""
    budget = options.budget or _budget_from_env() or PROPERTY_BUDGET[options.profile]
    with scratch_dir("leasecheck-run-") as work:
        events, log = work / "events.jsonl", work / "pytest.log"
        env = {**os.environ, "LEASECHECK_EVENTS": str(events), SCRATCH_ENV: str(work)}
        run, tail = _Run(on_event), _Tail(events)
        with log.open("wb") as output:
            process = subprocess.Popen(
                pytest_command(options), stdout=output, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
            )  # fmt: skip
            problem = _watch(process, run, tail, budget)
        for event in tail.read():
            run.apply(event)
        problem = problem or _ended_early(process.returncode, run)
        text = log.read_text(errors="replace")
    code = _exit_code(process.returncode, run, problem)
    seconds = time.monotonic() - run.started
    return CheckResult(run.results, code, problem, seconds, text)


def _budget_from_env() -> float | None:
    raw = os.environ.get(BUDGET_ENV)
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(
            f"${BUDGET_ENV}={raw!r} is not a number of seconds; set e.g. 600"
        ) from None


def _watch(process: subprocess.Popen[bytes], run: _Run, tail: _Tail, budget: float) -> str:
    """Follow the run until pytest exits; kill it if a property outlives ``budget``."""
    try:
        while process.poll() is None:
            for event in tail.read():
                run.apply(event)
            stuck = run.overdue(budget)
            if stuck:
                _kill_group(process)
                run.mark(stuck, HUNG, f"did not finish within {budget:.0f} s; the target may hang")
                return f"{stuck} did not finish within {budget:.0f} s (the target may hang)"
            time.sleep(0.1)
    except BaseException:
        _kill_group(process)
        raise
    finally:
        if process.poll() is None:
            _kill_group(process)
    return ""


def _ended_early(returncode: int, run: _Run) -> str:
    """A test process that died mid-property: name the property and how it died."""
    if run.exitstatus is not None:
        return ""
    how = f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
    for nodeid in list(run.running):
        run.mark(nodeid, CRASHED, f"the test process ended ({how}) while this property ran")
    if run.running:
        return f"the test process ended ({how}) during {', '.join(run.running)}"
    if returncode in (2, 4):
        return ""  # a usage error or a target that cannot be loaded: pytest said why
    return f"the test process ended ({how}) before reporting its results"


def _exit_code(returncode: int, run: _Run, problem: str) -> int:
    verdicts = {result.verdict for result in run.results.values()}
    if VIOLATED in verdicts or HUNG in verdicts or CRASHED in verdicts:
        return 1
    if problem or returncode not in (0, 1):
        return 2  # never 0 when something could not run
    if not run.results or NOT_RUN in verdicts or NOT_CHECKED in verdicts or returncode != 0:
        return 2
    return 0  # NOT_PROMISED too: reported, not a violation (--strict turns it into VIOLATED)
