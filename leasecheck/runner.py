"""Runs the properties through pytest in a child process and turns its events into verdicts.

The child is a separate process group, so a target that hangs, calls ``os._exit``
or crashes the interpreter cannot take the CLI with it: the runner names the
property that was running and what happened, and never reports success for a
property that did not run to the end. Every collected property has a row (``not
run`` until it reports). The runner is the run's child subreaper: a process a
target leaves running is a finding of the property that started it, and is killed
(``_processes``). SIGINT and SIGTERM stop the whole tree at once; the properties
judged so far are kept (``CheckResult.interrupted``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Protocol

import leasecheck.properties
from leasecheck._preflight import SetupError, check_scratch
from leasecheck._processes import Leftover, Tree, subreaper
from leasecheck._wire import (
    ADAPTER,
    CHECKED_KEY,
    CPU_KEY,
    CRASHED_KEY,
    EVENTS_ENV,
    FAILURE_KEY,
    HARNESS_KEY,
    IMPL,
    JOBS_IMPL,
    NOT_CHECKED_KEY,
    READ_ONLY,
    RESOURCE_KEY,
    SERVERS,
    STACKS_ENV,
    STRICT,
    TARGETS_ENV,
)
from leasecheck.adapters.servers import die_with_parent
from leasecheck.counterexample import Counterexample
from leasecheck.targets.scratch import SCRATCH_ENV, scratch_dir

__all__ = [
    "CHECK_INI",
    "PROPERTIES_DIR",
    "CheckOptions",
    "CheckResult",
    "Child",
    "Launch",
    "PropertyResult",
    "SetupError",
    "pytest_command",
    "run_check",
]

PROPERTIES_DIR = Path(leasecheck.properties.__file__).parent
CHECK_INI = Path(__file__).with_name("check.ini")
PROPERTY_BUDGET = {"quick": 180.0, "ci": 420.0, "deep": 7200.0}
"""Seconds one property may run before it is declared hung (``LEASECHECK_BUDGET`` overrides),
on a machine with a core for each runnable process (see ``stretched``)."""
BUDGET_ENV = "LEASECHECK_BUDGET"
MAX_STRETCH = 8.0
"""A loaded machine stretches the default budget at most this much."""


def stretched(budget: float, load: float, cores: int) -> float:
    """The default budget on a machine whose 1-minute load average is ``load``: a
    property's wall time grows with the runnable processes per core, so "did not finish
    within 420 s" at load 27 on 2 cores says nothing of a hang (a queue library's
    ``queue.no-loss`` takes 250-410 s there, 100-170 s at load 4). Stretched by load per
    core, at least 1, at most ``MAX_STRETCH``; a budget the user set is never stretched."""
    return budget * min(MAX_STRETCH, max(1.0, load / max(1, cores)))


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
    read_only_examples: bool = False
    """Replay the example database but write nothing to it (a batch: no file's find is
    replayed on another file, so each verdict is the file's alone)."""
    servers: bool = False
    """Also the properties that start real servers (``--servers``): with ``adapter``, the
    server faults queue.server-crash, queue.zombie-pause, queue.clock-skew and
    queue.server-pause on it."""

    def targets(self) -> tuple[Path, ...]:
        """The files whose functions are "the operation" a hung property was running."""
        from leasecheck.targets.loader import BUNDLED_JOBS, BUNDLED_WORKER

        chosen = [self.impl or BUNDLED_WORKER, self.jobs_impl or BUNDLED_JOBS]
        if self.adapter and self.adapter.endswith(".py"):
            chosen.append(Path(self.adapter))
        return tuple(path.resolve() for path in chosen)


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
    left: list[str] = field(default_factory=list)
    """Processes its tests left running (killed by the runner), described."""
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds in each phase of its tests: ``setup``, ``call``, ``teardown`` (fixtures
    that start a server or drop stores show up in setup and teardown; a session-scoped
    fixture's in the phases of the test that started or ended it)."""
    cpu: float = 0.0
    """CPU seconds its test bodies used: their worker's and the children each reaped
    (a child reaped by another process, the crash harness's zygote, is not counted)."""

    def phase(self, when: str) -> float:
        return self.phases.get(when, 0.0)

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
    interrupted: int = 0
    """The signal (SIGINT, SIGTERM) that stopped the run, or 0."""


PLUGINS = ("xdist.plugin", "_hypothesis_pytestplugin", "leasecheck.plugin", "leasecheck._events")
"""The only plugins a check loads (with ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``): other plugins
installed in a user's environment cannot change its verdicts or clash with its options.
Hypothesis' own entry-point plugins (group ``hypothesis``: trio's registers a Random that
Hypothesis then seeds around every example, HypoFuzz's imports click and multiprocessing)
are off too (``HYPOTHESIS_NO_PLUGINS``)."""


ISOLATED: dict[str, str] = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "HYPOTHESIS_NO_PLUGINS": "1"}
"""The environment a check's pytest runs in (``PLUGINS``), and a batch's pool processes,
which import Hypothesis before they fork each file's pytest."""


def pytest_command(options: CheckOptions) -> list[str]:
    """The pytest command line that checks ``options``' targets."""
    command = [
        sys.executable, "-m", "pytest", str(PROPERTIES_DIR), "-c", str(CHECK_INI),
        "--rootdir", str(PROPERTIES_DIR), *(word for p in PLUGINS for word in ("-p", p)),
        "--leasecheck-profile", options.profile, "--leasecheck-seed", str(options.seed),
        "-n", options.workers, "-q", "-rN", "--no-header", "--tb=long",
    ]  # fmt: skip
    if options.impl:
        command += [IMPL, str(options.impl)]
    if options.jobs_impl:
        command += [JOBS_IMPL, str(options.jobs_impl)]
    if options.adapter:
        command += [ADAPTER, options.adapter]
    if options.strict:
        command += [STRICT]
    if options.first:
        command += ["--leasecheck-first", options.first]
    for name in options.properties:
        command += ["--leasecheck-property", name]
    if options.servers:
        command += [SERVERS]
    if options.stop_at_first_failure:
        command += ["-x"]
    if options.examples is not None:
        command += ["--leasecheck-examples", str(options.examples)]
    if options.db is not None:
        command += ["--leasecheck-db", options.db]
    if options.read_only_examples:
        command += [READ_ONLY]
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


@dataclass(frozen=True)
class Progress:
    """What the run is doing, for a live status line."""

    running: tuple[str, ...]
    """Property names of the tests running now."""
    done: int
    total: int
    elapsed: float


class _Run:
    """The state of one pytest run, built from its events."""

    def __init__(self, on_event: Callable[[str, PropertyResult], None]) -> None:
        self.results: dict[str, PropertyResult] = {}
        self.running: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.names: dict[str, str] = {}
        self.on_event = on_event
        self.started = time.monotonic()
        self.exitstatus: int | None = None
        self.exit_reason = ""
        """Why the test process stopped the run itself (``pytest.exit``), if it did."""
        self.blocked: dict[str, Any] | None = None
        """The first ``blocked`` event of this pytest run (``_blocked``), if any."""

    def again(self) -> None:
        """Before the next pytest run of the same check: its events start afresh."""
        self.running.clear()
        self.exitstatus, self.exit_reason, self.blocked = None, "", None

    def unfinished(self) -> list[str]:
        """Properties with a test that did not run to its end and no failure of their own:
        a stopped run's "holds" for them would be a guess."""
        failed = (VIOLATED, HUNG, CRASHED)
        return sorted(
            name
            for name, nodes in self._nodes_by_name().items()
            if not nodes <= set(self.finished)
            and self.results.get(name, PropertyResult(name)).verdict not in failed
        )

    def apply(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        if kind == "collected":
            self._collected(event["items"])
        elif kind == "start":
            self.running[event["nodeid"]] = time.monotonic()
        elif kind == "report":
            self._report(event)
        elif kind == "phase":
            self._phase(event)
        elif kind == "finish":
            self.running.pop(event["nodeid"], None)
            self.finished[event["nodeid"]] = time.monotonic()
        elif kind == "exit":
            self.exit_reason = str(event["reason"])
        elif kind == "finished":
            self.exitstatus = int(event["exitstatus"])
        elif kind == "blocked" and self.blocked is None:
            self.blocked = event

    def _collected(self, items: dict[str, str]) -> None:
        """Every collected property gets its row now, "not run" until it reports."""
        for nodeid, name in items.items():
            self.names[nodeid] = name
            self.results.setdefault(name, PropertyResult(name))

    def name_of(self, nodeid: str) -> str:
        return self.names.get(nodeid) or nodeid.rsplit("::", 1)[-1]

    def progress(self) -> Progress:
        running = tuple(sorted({self.name_of(node) for node in self.running}))
        done = sum(1 for nodes in self._nodes_by_name().values() if nodes <= set(self.finished))
        return Progress(running, done, len(self.results), time.monotonic() - self.started)

    def _nodes_by_name(self) -> dict[str, set[str]]:
        nodes: dict[str, set[str]] = {name: set() for name in self.results}
        for nodeid, name in self.names.items():
            nodes.setdefault(name, set()).add(nodeid)
        return nodes

    def _phase(self, event: dict[str, Any]) -> None:
        """A setup or teardown that passed: its seconds only."""
        name = self.name_of(event["nodeid"])
        result = self.results.setdefault(name, PropertyResult(name))
        when = str(event["when"])
        result.phases[when] = result.phase(when) + float(event["duration"])

    def _report(self, event: dict[str, Any]) -> None:
        name = self.names.get(event["nodeid"]) or _property_of(event)
        self.names[event["nodeid"]] = name
        result = self.results.setdefault(name, PropertyResult(name))
        if event["nodeid"] not in result.nodeids:
            result.nodeids.append(event["nodeid"])
        result.seconds += float(event["duration"])
        when = str(event["when"])
        result.phases[when] = result.phase(when) + float(event["duration"])
        self._record(result, event["user_properties"])
        if when == "call":  # a failed teardown's report carries the same entry again
            result.cpu += sum(float(v) for k, v in event["user_properties"] if k == CPU_KEY)
        outcome = event["outcome"]
        crashed = next((v for k, v in event["user_properties"] if k == CRASHED_KEY), None)
        if outcome == "failed" and crashed is not None:
            result.verdict = CRASHED
            result.details.append(f"the test process ({crashed}) died while this property ran")
            result.failed_at = result.failed_at or time.monotonic() - self.started
        elif outcome == "failed" and self._resource(event):
            result.verdict = NOT_CHECKED if result.verdict != VIOLATED else VIOLATED
            result.details.append(event["longrepr"])
        elif outcome == "failed":
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
    def _resource(event: dict[str, Any]) -> bool:
        """leasecheck could not do its job (its disk, its own code's error): exit 2."""
        return any(key in (RESOURCE_KEY, HARNESS_KEY) for key, _ in event["user_properties"])

    @staticmethod
    def _record(result: PropertyResult, records: list[list[Any]]) -> None:
        """What the test process sent as data: coverage figures and counterexamples."""
        for key, value in records:
            if key == CHECKED_KEY and isinstance(value, dict):
                result.runs.append(str(value.get("text", "")))
                result.figures.update({k: v for k, v in value.items() if k != "text"})
            elif key in (NOT_CHECKED_KEY, RESOURCE_KEY, HARNESS_KEY) and isinstance(value, dict):
                result.figures["not_checked"] = value
            elif key == FAILURE_KEY and isinstance(value, dict):
                result.failures.append(Counterexample.from_record(value))

    def overdue(self, budget: float) -> str | None:
        now = time.monotonic()
        return next((node for node, t in self.running.items() if now - t > budget), None)

    def mark(self, nodeid: str, verdict: str, detail: str) -> None:
        name = self.name_of(nodeid)
        result = self.results.setdefault(name, PropertyResult(name))
        result.verdict = verdict
        result.details.append(detail)
        result.failed_at = time.monotonic() - self.started
        result.nodeids.append(nodeid)

    def left_running(self, left: list[Leftover]) -> str:
        """Processes left by tests: a finding of each property that left them; what was
        not started by any test (the run's problem, if any)."""
        by_node: dict[str, list[Leftover]] = {}
        for item in left:
            by_node.setdefault(item.nodeid or "", []).append(item)
        for nodeid, items in sorted(by_node.items()):
            if not nodeid:
                continue
            described = ", ".join(item.describe() for item in items[:5])
            more = f" and {len(items) - 5} more" if len(items) > 5 else ""
            count = f"{len(items)} process{'es' if len(items) > 1 else ''}"
            self.mark(
                nodeid, VIOLATED,
                f"the target left {count} running after this property's test: "
                f"{described}{more}; leasecheck killed {'them' if len(items) > 1 else 'it'}",
            )  # fmt: skip
            self.results[self.name_of(nodeid)].left += [item.describe() for item in items]
        strays = by_node.get("", [])
        if not strays:
            return ""
        return f"the run left {len(strays)} processes running: " + ", ".join(
            item.describe() for item in strays[:5]
        )


class Child(Protocol):
    """The test process of a run, as the watch needs it (``subprocess.Popen`` is one)."""

    pid: int
    returncode: Any

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


Launch = Callable[[list[str], IO[bytes], dict[str, str]], Child]
"""Starts the test process: (the pytest command, its output file, its environment). It
must run in a session of its own and die with the runner."""


def _popen(command: list[str], output: IO[bytes], env: dict[str, str]) -> Child:
    # Its own session (a Ctrl-C reaches only us, and we stop it), and SIGKILLed
    # if we are: a CLI killed outright must not leave a 45 s run going.
    return subprocess.Popen(
        command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env=env, start_new_session=True, preexec_fn=die_with_parent,
    )  # fmt: skip


_STOPPING = (signal.SIGINT, signal.SIGTERM)
KILL_WITHIN = 2.0
"""Seconds from SIGINT/SIGTERM until nothing of the run is left (suite.md)."""
LEFTOVER_GRACE = 1.0
"""Seconds after a test ends before a process it started counts as left running."""


class _Signals:
    """SIGINT and SIGTERM, while a run is watched: remembered, acted on by the watch loop."""

    def __init__(self) -> None:
        self.received = 0
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for signum in _STOPPING:
                self.previous[signum] = signal.signal(signum, self._note)
        return self

    def _note(self, signum: int, frame: object) -> None:
        self.received = self.received or signum

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)


def run_check(
    options: CheckOptions,
    on_event: Callable[[str, PropertyResult], None] = lambda nodeid, result: None,
    on_tick: Callable[[Progress], None] = lambda progress: None,
    launch: Launch = _popen,
) -> CheckResult:
    """Run every selected property; ``on_event`` is told each time a property test ends,
    ``on_tick`` what is running about ten times a second. Raises ``SetupError`` before
    the run when leasecheck cannot work here (no room or no write access in scratch).
    ``launch`` starts the test process (default: a new interpreter running pytest; the
    batch mode forks one from a process that has imported everything already)."""
    given = options.budget or _budget_from_env()
    budget = given or PROPERTY_BUDGET[options.profile]
    check_scratch()
    tree, run = Tree(), _Run(on_event)
    subreaper(True)
    try:
        with _Signals() as signals, scratch_dir("leasecheck-run-") as work:
            watch = _Watch(run, tree, signals, budget, options, on_tick, launch)
            watch.stretch = given is None
            problem, returncode, text = watch.follow(_attempt(work, 1))
            attempts = 1
            while (rest := _run_again(run, watch, options)) and not signals.received:
                # A call into the target blocked for good: its property is HUNG, and the
                # properties the stopped run had not finished get a run of their own.
                attempts += 1
                run.again()
                watch.options = replace(options, properties=rest, first=None)
                more, returncode, log = watch.follow(_attempt(work, attempts))
                problem, text = "; ".join(filter(None, (problem, more))), text + log
            for name in run.unfinished():
                if run.results[name].verdict != NOT_RUN:  # some of its tests ended
                    run.results[name] = _not_run(name, problem)
    finally:
        tree.kill_all(time.monotonic() + KILL_WITHIN)
        subreaper(False)
    if signals.received:
        seconds = time.monotonic() - run.started
        return CheckResult(run.results, 128 + signals.received, problem, seconds, text,
                           interrupted=signals.received)  # fmt: skip
    code = _exit_code(returncode, run, problem)
    return CheckResult(run.results, code, problem, time.monotonic() - run.started, text)


def _attempt(work: Path, number: int) -> Path:
    path = work / f"pytest-{number}"
    path.mkdir()
    return path


def _run_again(run: _Run, watch: _Watch, options: CheckOptions) -> tuple[str, ...]:
    """The properties to run again after a run that a blocked call stopped, or none: each
    such run judges at least one property (the blocked one is HUNG, not run again), so
    there are at most as many runs as properties."""
    if not watch.blocked_hang or options.stop_at_first_failure:
        return ()
    watch.blocked_hang = False
    rest = run.unfinished()
    for name in rest:  # judged afresh: what the stopped run saw of them is not a verdict
        run.results[name] = PropertyResult(name)
    return tuple(rest)


def _not_run(name: str, problem: str) -> PropertyResult:
    """A property the run stopped after some of its tests, none of which failed."""
    why = f" ({problem})" if problem else ""
    return PropertyResult(name, details=[f"only some of its tests ran: the run stopped{why}"])


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


class _Watch:
    """Follows one pytest child until it exits, is stopped by a signal, or hangs."""

    def __init__(
        self, run: _Run, tree: Tree, signals: _Signals, budget: float,
        options: CheckOptions, on_tick: Callable[[Progress], None], launch: Launch = _popen,
    ) -> None:  # fmt: skip
        self.run, self.tree, self.signals, self.budget = run, tree, signals, budget
        self.options, self.on_tick, self.launch = options, on_tick, launch
        self.stretch = False
        """The default budget: stretched by the machine's load (``stretched``)."""
        self.blocked_hang = False
        """The last run was stopped because a call into the target blocked for good."""

    def _budget(self) -> float:
        if not self.stretch:
            return self.budget
        return stretched(self.budget, os.getloadavg()[0], os.cpu_count() or 1)

    def follow(self, work: Path) -> tuple[str, int, str]:
        """(problem, pytest's return code, pytest's output)."""
        events, log, stacks = work / "events.jsonl", work / "pytest.log", work / "stacks"
        stacks.mkdir()
        env = {
            **os.environ, EVENTS_ENV: str(events), SCRATCH_ENV: str(work),
            STACKS_ENV: str(stacks), **ISOLATED,
        }  # fmt: skip
        if not self.options.adapter:  # a library's properties wait on servers and time
            env[TARGETS_ENV] = os.pathsep.join(str(path) for path in self.options.targets())
        tail = _Tail(events)
        with log.open("wb") as output:
            process = self.launch(pytest_command(self.options), output, env)
            self.tree.waited_by_owner.add(process.pid)
            try:
                problem = self._loop(process, tail, stacks)
            finally:
                _kill_group(process)
        for event in tail.read():
            self.run.apply(event)
        problem += self._sweep()
        if not self.signals.received:
            problem = problem or _ended_early(process.returncode, self.run) or self.run.exit_reason
        return problem, process.returncode, log.read_text(errors="replace")

    def _loop(self, process: Child, tail: _Tail, stacks: Path) -> str:
        last_scan = time.monotonic()
        while process.poll() is None:
            if self.signals.received:
                return ""
            for event in tail.read():
                self.run.apply(event)
            if self.run.blocked is not None:
                return self._blocked(process, self.run.blocked)
            stuck = self.run.overdue(self._budget())
            if stuck:
                return self._hung(process, stuck, stacks)
            if time.monotonic() - last_scan > LEFTOVER_GRACE:
                last_scan = time.monotonic()
                self._leftovers()
            self.on_tick(self.run.progress())
            time.sleep(0.1)
        return ""

    def _leftovers(self) -> None:
        # Orphans the run's servers leave (a broker's helper processes) land on us, the
        # subreaper: collect them as they die, not only at the end of the run.
        self.tree.reap()
        left = self.tree.left_by(self.run.finished, LEFTOVER_GRACE)
        if left:
            self.tree.kill(item.pid for item in left)
            self.run.left_running(left)

    def _sweep(self) -> str:
        """After pytest exited: whatever of the run is still alive is killed and named."""
        left = self.tree.kill_all(time.monotonic() + KILL_WITHIN)
        if self.signals.received:
            return ""
        return self.run.left_running(left)

    def _hung(self, process: Child, stuck: str, stacks: Path) -> str:
        operation = _operation(self._stacks(stuck, stacks), self.options.targets())
        _kill_group(process)
        name = self.run.name_of(stuck)
        during = f" while running {operation}" if operation else ""
        detail = f"did not finish within {self._budget():.0f} s{during}; the target may hang"
        self.run.mark(stuck, HUNG, detail)
        return f"{name} did not finish within {self._budget():.0f} s{during} (the target may hang)"

    def _blocked(self, process: Child, event: dict[str, Any]) -> str:
        """A test process saw a call into the target block for good (``_blocked``)."""
        _kill_group(process)
        self.blocked_hang = True
        stuck, seconds = str(event["nodeid"]), float(event["seconds"])
        operation = _operation(event["threads"], self.options.targets()) or "the target"
        self.run.mark(
            stuck, HUNG,
            f"blocked in {operation}: for {seconds:.0f} s that thread did not move, and "
            f"no thread of the test process and none of its child processes used CPU, so "
            f"nothing could release it (a deadlock, or a wait on something that never "
            f"comes)",
        )  # fmt: skip
        return f"{self.run.name_of(stuck)} blocked in {operation}"

    def _stacks(self, stuck: str, stacks: Path) -> list[list[list[Any]]]:
        """Ask every process of the run for its stacks (SIGUSR1); those of ``stuck``'s."""
        for process in self.tree.processes():
            with contextlib.suppress(OSError):
                os.kill(process.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            records = [json.loads(path.read_text()) for path in stacks.glob("*.json")]
            mine = [record for record in records if record.get("nodeid") == stuck]
            if mine:
                return [thread for record in mine for thread in record["threads"]]
            time.sleep(0.05)
        return []


def _operation(threads: list[list[list[Any]]], targets: tuple[Path, ...]) -> str:
    """``claim (worker.py line 120)``: the outermost call into a target file on a stack
    of the hung test, and the line it was at, innermost."""
    files = {str(path) for path in targets}
    for frames in threads:
        inside = [frame for frame in frames if str(Path(frame[0]).resolve()) in files]
        if inside:
            outer, inner = inside[0], inside[-1]
            where = f"{Path(inner[0]).name} line {inner[1]}"
            inner_call = "" if outer is inner else f", in {inner[2]}"
            return f"{outer[2]} ({where}{inner_call})"
    return ""


def _kill_group(process: Child) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _ended_early(returncode: int, run: _Run) -> str:
    """A test process that died mid-property: name the property and how it died."""
    if run.exitstatus is not None:
        return ""
    how = f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
    running = list(run.running)
    for nodeid in running:
        run.mark(nodeid, CRASHED, f"the test process ended ({how}) while this property ran")
    if running:
        return f"the test process ended ({how}) during {', '.join(map(run.name_of, running))}"
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
