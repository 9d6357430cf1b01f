"""``leasecheck check`` as a guest in someone's CI: cancellation, orphans, rows, outputs.

Each test runs the real command in a child process on a real target file (the bundled
worker with an edit), and sends real signals: SIGINT through a pseudo-terminal, as a
Ctrl-C does, and SIGTERM with ``kill``, as a CI runner's cancel does (suite.md: exit 130
/ 143, the properties judged so far printed, nothing left running).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import re
import select
import subprocess
import sys
import termios
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from leasecheck._processes import Tree, subreaper
from leasecheck.targets import BUNDLED_WORKER

CLAIM_BODY = (
    '    """Quarantine overdue or exhausted jobs, then lease the lowest-seq claimable one."""\n'
)


def worker_with(directory: Path, code: str) -> Path:
    """The bundled worker with ``code`` run first in every ``claim``."""
    source = BUNDLED_WORKER.read_text()
    assert source.count(CLAIM_BODY) == 1
    path = directory / "worker.py"
    path.write_text(source.replace(CLAIM_BODY, CLAIM_BODY + code))
    return path


def processes_naming(mark: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if mark in " ".join(process.info["cmdline"] or []):
            found.append(process)
    return found


def wait_for(what: str, ready: object, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.05)


@pytest.fixture
def own_scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The run's scratch root: everything the run writes goes here, and must be gone."""
    root = tmp_path / "scratch"
    root.mkdir()
    monkeypatch.setenv("LEASECHECK_SCRATCH", str(root))
    return root


@pytest.fixture
def mark() -> Iterator[str]:
    """A ``sleep`` duration no other process on the machine uses; none may be left."""
    text = f"{random.randint(10**6, 10**7)}.5"
    yield text
    left = processes_naming(f"sleep {text}")
    for process in left:
        process.kill()
    assert not left, f"processes outlived the run: {[p.pid for p in left]}"


def check_command(target: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "leasecheck", "check", "--impl", str(target),
            "--profile", "quick", "-n", "0", *extra]  # fmt: skip


# --- cancellation ---------------------------------------------------------------------


def stalling_target(directory: Path, mark: str) -> tuple[Path, Path]:
    """A worker that behaves until ``trigger`` exists, then, in ``claim``, starts a
    ``sleep`` in a new session and stalls: the run is mid-property when signalled."""
    trigger = directory / "stall-now"
    code = (
        f"    if os.path.exists({str(trigger)!r}):\n"
        f"        import subprocess, time\n"
        f"        subprocess.Popen(['sleep', {mark!r}], start_new_session=True)\n"
        f"        time.sleep(3600)\n"
    )
    return worker_with(directory, code), trigger


class Terminal:
    """A pseudo-terminal whose other end is a child's controlling terminal."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        self.output = b""
        self.reader = threading.Thread(target=self._read, daemon=True)

    def start(self, command: list[str]) -> subprocess.Popen[bytes]:
        def controlling_terminal() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        process = subprocess.Popen(
            command, stdin=self.slave, stdout=self.slave, stderr=self.slave,
            start_new_session=True, preexec_fn=controlling_terminal,
        )  # fmt: skip
        os.close(self.slave)
        self.reader.start()
        return process

    def _read(self) -> None:
        while True:
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                self.output += chunk

    def text(self) -> str:
        return self.output.decode(errors="replace")


def _interrupt_mid_run(
    process: subprocess.Popen[bytes], output: object, trigger: Path, mark: str, send: object
) -> float:
    """Wait for a property to be judged, stall the target, signal: seconds to the exit."""
    wait_for("a judged property", lambda: "holds " in output())  # type: ignore[operator]
    trigger.write_text("")
    wait_for("the stalled target's sleep", lambda: processes_naming(f"sleep {mark}"))
    tree = psutil.Process(process.pid).children(recursive=True)
    assert tree, "the run has no processes"
    sent = time.monotonic()
    send()  # type: ignore[operator]
    process.wait(timeout=30)
    took = time.monotonic() - sent
    alive = [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == [] and processes_naming(f"sleep {mark}") == [], alive
    return took


def _assert_partial_summary(text: str, signal_name: str) -> None:
    # The longest properties start first, so which one is judged first is the cost table's.
    assert re.search(r"^  lease\.\S+ +holds ", text, re.MULTILINE), text
    assert re.search(r"^  lease\.\S+ +not run ", text, re.MULTILINE), text
    assert f"interrupted by {signal_name}" in text and "properties judged" in text, text


def test_ctrl_c_through_a_terminal_stops_everything_and_prints_what_was_judged(
    tmp_path: Path, own_scratch: Path, mark: str
) -> None:
    target, trigger = stalling_target(tmp_path, mark)
    terminal = Terminal()
    process = terminal.start(check_command(target))
    try:
        took = _interrupt_mid_run(
            process, terminal.text, trigger, mark, lambda: os.write(terminal.master, b"\x03")
        )
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    wait_for("the rest of the output", lambda: not terminal.reader.is_alive(), 10)
    assert process.returncode == 130, terminal.text()
    assert took < 2.0, f"the run took {took:.2f} s to stop"
    plain = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", terminal.text()).replace("\r", "")
    _assert_partial_summary(plain, "SIGINT")
    assert list(own_scratch.iterdir()) == [], "the run left scratch behind"
    # On a terminal: a live status line and coloured verdicts.
    assert re.search(r"\x1b\[2K  running lease\.\S+  \d+s  \(\d+ of \d+\)", terminal.text())
    assert "\x1b[32mholds" in terminal.text()


def test_a_ci_cancel_with_kill_stops_everything_and_prints_what_was_judged(
    tmp_path: Path, own_scratch: Path, mark: str
) -> None:
    target, trigger = stalling_target(tmp_path, mark)
    log = tmp_path / "log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            check_command(target), stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        took = _interrupt_mid_run(
            process, lambda: log.read_text(), trigger, mark,
            lambda: subprocess.run(["kill", "-TERM", str(process.pid)], check=True),
        )  # fmt: skip
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = log.read_text()
    assert process.returncode == 143, text
    assert took < 2.0, f"the run took {took:.2f} s to stop"
    _assert_partial_summary(text, "SIGTERM")
    assert list(own_scratch.iterdir()) == [], "the run left scratch behind"
    assert "\x1b[" not in text, "escape codes in a log that is not a terminal"


def test_a_cli_killed_outright_takes_its_pytest_run_with_it(
    tmp_path: Path, own_scratch: Path
) -> None:
    """SIGKILL cannot be caught: the pytest child dies with the CLI (PR_SET_PDEATHSIG)
    instead of running on for the rest of the check. (Nor can the CLI remove its run
    folder then: ``own_scratch`` keeps it under the test's own temporary directory.)"""
    log = tmp_path / "log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            check_command(BUNDLED_WORKER), stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:

        def pytest_child() -> list[psutil.Process]:
            found = []
            for child in psutil.Process(process.pid).children():
                with contextlib.suppress(psutil.NoSuchProcess):  # the loader's, ending
                    if "pytest" in " ".join(child.cmdline()):
                        found.append(child)
            return found

        wait_for("the pytest child", pytest_child)
        child = pytest_child()[0]
        process.kill()
        process.wait()
        _, alive = psutil.wait_procs([child], timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    for left in alive:
        left.kill()
    assert alive == [], "the pytest run outlived its SIGKILLed CLI"


# --- orphans --------------------------------------------------------------------------


def test_processes_a_target_leaves_in_a_new_session_are_found_named_and_killed(
    tmp_path: Path, own_scratch: Path, mark: str
) -> None:
    """Each process that calls ``claim`` starts one ``sleep`` in a new session and never
    waits for it (crash-harness children die and orphan theirs): every one is killed,
    and each property that left some says so (exit 1)."""
    code = (
        # Not under the power-loss recorder: strace -f would wait 120 s for the sleep.
        f"    import sys\n"
        f"    traced = '_power_child' in ' '.join(sys.argv)\n"
        f"    if not traced and os.environ.get('SPAWNED') != str(os.getpid()):\n"
        f"        import subprocess\n"
        f"        os.environ['SPAWNED'] = str(os.getpid())\n"
        f"        subprocess.Popen(['sleep', {mark!r}], start_new_session=True,\n"
        f"                         stdin=-3, stdout=-3, stderr=-3)\n"
    )
    target = worker_with(tmp_path, code)
    report = tmp_path / "result.json"
    done = subprocess.run(
        check_command(target, "--json", str(report)), capture_output=True, text=True,
        timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert processes_naming(f"sleep {mark}") == []
    records = {r["property"]: r for r in json.loads(report.read_text())["properties"]}
    leaving = {name for name, r in records.items() if r["left_running"]}
    # The test process spawns once, in whichever in-process property claims first (with -n 0
    # every in-process property shares it); each forking property's children spawn their own.
    in_process = {"lease.agreement", "lease.edges", "lease.configuration"}
    assert "lease.crash-points" in leaving and leaving & in_process, leaving
    assert all(records[name]["verdict"] == "VIOLATED" for name in leaving)
    assert "the target left" in done.stdout and f"sleep {mark}" in done.stdout
    assert list(own_scratch.iterdir()) == []


def test_the_run_s_processes_leave_out_those_running_before_it_and_below_them(
    tmp_path: Path,
) -> None:
    """A test that calls ``run_check`` may have servers of its own, which fork children
    during the run (a PostgreSQL backend per connection): the run's processes are only
    those it started, at any depth."""
    go = tmp_path / "go"
    server = (
        "import os, subprocess, sys, time\n"
        "while not os.path.exists(sys.argv[1]):\n    time.sleep(0.01)\n"
        "subprocess.Popen(['sleep', '30'])\ntime.sleep(30)\n"
    )
    earlier = subprocess.Popen([sys.executable, "-c", server, str(go)])
    run: subprocess.Popen[bytes] | None = None
    try:
        tree = Tree()
        go.touch()  # the server forks its child only now, during the run
        wait_for("the server's child", lambda: psutil.Process(earlier.pid).children())
        run = subprocess.Popen([sys.executable, "-c", server, str(go)])
        started = run.pid
        wait_for("the run's process's child", lambda: psutil.Process(started).children())
        later = {run.pid, *(c.pid for c in psutil.Process(run.pid).children())}
        found = {process.pid for process in tree.processes()}
        assert found == later, (found, later, tree.before)
    finally:
        for process in (earlier, run):
            if process is not None:
                for child in psutil.Process(process.pid).children(recursive=True):
                    child.kill()
                process.kill()
                process.wait(timeout=10)


def test_the_run_collects_orphaned_zombies_but_never_its_test_process_status() -> None:
    """The runner is the subreaper: orphans of the run (a broker's helper processes) land
    on it and must be reaped as they die; the test process's exit status stays
    ``subprocess.Popen``'s to collect (reaping it would read as exit 0)."""
    tree = Tree()
    subreaper(True)
    try:
        owned = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
        tree.waited_by_owner.add(owned.pid)
        orphaning = "import os, time\nif os.fork() == 0:\n    time.sleep(0.2)\nos._exit(0)\n"
        subprocess.run([sys.executable, "-c", orphaning], check=True, timeout=30)
        deadline = time.monotonic() + 10
        zombies: set[int] = set()
        while time.monotonic() < deadline:
            zombies = {
                c.pid for c in psutil.Process().children()
                if c.pid not in tree.before and c.status() == psutil.STATUS_ZOMBIE
            }  # fmt: skip
            if len(zombies) == 2:
                break
            time.sleep(0.02)
        assert owned.pid in zombies and len(zombies) == 2, zombies
        assert tree.reap() == 1
        left = {c.pid for c in psutil.Process().children()}
        assert zombies - left == zombies - {owned.pid}
        assert owned.wait(timeout=10) == 3
    finally:
        subreaper(False)


# --- honest verdicts: leasecheck's own failures ---------------------------------------


@pytest.mark.parametrize("option", ["--report", "--export", "--junit-xml", "--json"])
def test_an_output_path_that_cannot_be_written_is_exit_2_before_the_run(
    tmp_path: Path, option: str
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "check", option, str(blocker / "out")],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{option} {str(blocker / 'out')!r} cannot be written" in done.stderr
    assert "pass a path in a writable directory" in done.stderr
    assert "profile ci" not in done.stdout, "the run started"
    assert time.monotonic() - started < 60


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MiB tmpfs, filled up (needs root, as the suite's CI has)."""
    mount = tmp_path / "full"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert mounted.returncode == 0, f"cannot mount a tmpfs (run as root): {mounted.stderr}"
    try:
        with (mount / "filler").open("wb") as filler, pytest.raises(OSError):
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_scratch_disk_is_exit_2_before_the_run(full_disk: Path) -> None:
    env = {**os.environ, "LEASECHECK_SCRATCH": str(full_disk)}
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "check"], capture_output=True, text=True,
        timeout=120, stdin=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"the scratch directory {str(full_disk)!r}" in done.stderr
    assert "set LEASECHECK_SCRATCH to a directory on a disk with at least" in done.stderr
    assert "VIOLATED" not in done.stdout


def test_out_of_space_errors_are_recognised_as_the_environments(tmp_path: Path) -> None:
    """ENOSPC from the OS and SQLITE_FULL from SQLite, both real, even when raised
    from inside another error; any other error is the target's."""
    import sqlite3

    from leasecheck._preflight import resource_problem

    with pytest.raises(OSError) as enospc, open("/dev/full", "wb") as full:
        full.write(b"x")
        full.flush()
    con = sqlite3.connect(tmp_path / "tiny.db")
    try:
        con.execute("PRAGMA max_page_count = 2")
        with pytest.raises(sqlite3.Error) as sqlite_full:
            con.execute("CREATE TABLE t (x)")
            con.execute("CREATE TABLE u (x)")
            con.executemany("INSERT INTO t VALUES (?)", [("x" * 1000,)] * 50)
    finally:
        con.close()
    wrapped = RuntimeError("the harness gave up")
    wrapped.__cause__ = enospc.value
    assert resource_problem(enospc.value) == "the disk is full (No space left on device: ?)"
    assert (resource_problem(sqlite_full.value) or "").startswith("the disk is full (SQLite:")
    assert resource_problem(wrapped) is not None
    assert resource_problem(AssertionError("finish returned 'done'")) is None


# --- results as data ------------------------------------------------------------------


def test_json_and_junit_have_one_record_per_property_under_its_name(tmp_path: Path) -> None:
    json_path, junit = tmp_path / "result.json", tmp_path / "junit.xml"
    done = subprocess.run(
        check_command(BUNDLED_WORKER, "--json", str(json_path), "--junit-xml", str(junit)),
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = set(re.findall(r"^  (lease\.\S+) ", done.stdout, re.MULTILINE))
    records = json.loads(json_path.read_text())["properties"]
    collected = _lease_properties()
    assert {r["property"] for r in records} == rows == collected, (rows, collected)
    power = next(r for r in records if r["property"] == "lease.power-loss")
    assert power["verdict"] == "not promised" and power["counterexample"]["message"]
    assert power["replay"].startswith("leasecheck check --impl ")
    assert all(r["checked"] for r in records if r["verdict"] == "holds")
    cases = ET.parse(junit).getroot().iter("testcase")
    named = {case.get("name"): case for case in cases}
    assert set(named) == rows
    assert named["lease.power-loss"].find("skipped") is None  # "not promised" is no skip
    assert "not promised" in (named["lease.power-loss"].findtext("system-out") or "")


def test_colour_only_on_a_terminal_and_never_with_no_color(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from leasecheck._outputs import View

    master, slave = os.openpty()
    with os.fdopen(slave, "w") as terminal, open(os.devnull, "w") as pipe:
        monkeypatch.delenv("NO_COLOR", raising=False)
        assert View(terminal).paint("VIOLATED").startswith("\x1b[")
        assert View(pipe).paint("VIOLATED") == "VIOLATED"
        monkeypatch.setenv("NO_COLOR", "1")
        assert View(terminal).paint("VIOLATED") == "VIOLATED"
    os.close(master)


def test_a_server_that_will_not_start_is_exit_2_with_its_log_not_violated(
    tmp_path: Path,
) -> None:
    """A ``redis-server`` that exits at start (a real process, first on ``PATH``):
    leasecheck could not do its job, so exit 2 with the server's own words."""
    shim = tmp_path / "bin" / "redis-server"
    shim.parent.mkdir()
    shim.write_text("#!/bin/sh\necho '# Fatal: this redis-server refuses to start' >&2\nexit 1\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "check", "--adapter", "rq", "--profile", "quick",
         "-n", "0"], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the redis server that rq needs did not start, so nothing was checked" in done.stderr
    assert "this redis-server refuses to start" in done.stderr
    assert "VIOLATED" not in done.stdout
    assert re.search(r"^  queue\.no-loss +not run ", done.stdout, re.MULTILINE), done.stdout


def _lease_properties() -> set[str]:
    """Every ``lease.*`` property leasecheck ships, read from the property files' markers."""
    from leasecheck.runner import PROPERTIES_DIR

    found = set()
    for path in PROPERTIES_DIR.glob("test_*.py"):
        marks = re.findall(r'pytest\.mark\.leasecheck\("(lease\.[^"]+)"\)', path.read_text())
        found |= set(marks)
    return found


def test_the_default_hang_budget_stretches_with_the_machines_load() -> None:
    """On 2 cores at load 27 a library's ``queue.no-loss`` took 394-406 s, at the 420 s
    budget (saq-defaults read HUNG in one run of two): the default budget is per core of
    load, at least itself, at most ``MAX_STRETCH`` times; a budget the user sets is not."""
    from leasecheck.runner import MAX_STRETCH, PROPERTY_BUDGET, stretched

    ci = PROPERTY_BUDGET["ci"]
    assert stretched(ci, 0.5, 2) == ci  # a quiet machine: the budget as it is
    assert stretched(ci, 2.0, 2) == ci
    assert stretched(ci, 6.0, 2) == 3 * ci
    assert stretched(ci, 27.0, 2) == MAX_STRETCH * ci  # bounded: a hang is still caught
    assert stretched(ci, 27.0, 0) == MAX_STRETCH * ci  # no core count: one core


# --- leasecheck mutants ---------------------------------------------------------------

SLOW_MUTANTS = ("jobs-ids-compared-as-strings", "jobs-poll-window-of-eight",
                "jobs-backoff-table-of-three")  # fmt: skip
"""Killed by jobs.model-check after about 9 s each: two are checked when the cancel comes."""


def test_a_ci_cancel_of_leasecheck_mutants_stops_its_checks_and_leaves_nothing(
    tmp_path: Path, own_scratch: Path
) -> None:
    """``leasecheck mutants -n 2`` checks two mutants at once, each in a worker process:
    SIGTERM stops both runs (no mutant is called SURVIVED for it), begins no other, and
    leaves no process or scratch behind; exit 143."""
    log = tmp_path / "log"
    command = [sys.executable, "-m", "leasecheck", "mutants", "--profile", "ci", "-n", "2"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--only", *SLOW_MUTANTS], stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:

        def runs() -> list[psutil.Process]:
            found = []
            for child in psutil.Process(process.pid).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    if "--leasecheck-first" in child.cmdline():
                        found.append(child)
            return found

        wait_for("two mutants' test processes", lambda: len(runs()) >= 2)
        everything = psutil.Process(process.pid).children(recursive=True)
        process.terminate()
        process.wait(timeout=60)
        _, alive = psutil.wait_procs(everything, timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    for left in alive:
        left.kill()
    text = log.read_text()
    assert process.returncode == 143, text
    assert alive == [], f"left running: {alive}"
    assert "SURVIVED" not in text and "stopped by SIGTERM" in text, text
    assert list(own_scratch.iterdir()) == [], "the checks left scratch behind"
