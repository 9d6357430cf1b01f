"""The watch that sees a call into the target block for good (``leasecheck._blocked``).

Each case runs a real thread in a real "target" file (a module written to a temporary
directory) and asks the watch, with a 1 s window instead of 10, whether it is blocked:
only a thread that stands still inside the target while nothing else of the process tree
uses CPU is; a loop, a lock another working thread holds, a wait outside the target and
a child process at work are not.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from leasecheck._blocked import Watch
from leasecheck.targets.loader import load_module

TARGET = """
import threading

def twice(lock):
    lock.acquire()
    lock.acquire()  # a non-reentrant lock taken twice: blocks for good
    lock.release()

def waits(lock):
    with lock:
        pass

def spins(stop):
    while not stop.is_set():
        pass
"""
WINDOW = 1.0


@pytest.fixture
def target(tmp_path: Path) -> ModuleType:
    path = tmp_path / "jobqueue_under_test.py"
    path.write_text(TARGET)
    return load_module(path, "target")


class Looker:
    """A watch looked at by hand, its reports kept."""

    def __init__(self, target: ModuleType, nodeid: str | None = "test_x.py::test_y") -> None:
        self.reports: list[dict[str, Any]] = []
        files = frozenset({str(Path(str(target.__file__)).resolve())})
        self.watch = Watch(files, lambda: nodeid, self.reports.append, after=WINDOW)

    def for_seconds(self, seconds: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.reports:
            self.watch.look()
            time.sleep(0.1)
        return self.reports


def _thread(body: Any, *args: Any) -> threading.Thread:
    thread = threading.Thread(target=body, args=args, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def lock() -> Iterator[threading.Lock]:
    """A lock that a test leaves held, with one thread waiting for it: released after
    the test, so that the waiting thread ends."""
    held = threading.Lock()
    yield held
    held.release()


def test_a_thread_blocked_for_good_inside_the_target_is_reported(
    target: ModuleType, lock: threading.Lock
) -> None:
    _thread(target.twice, lock)
    time.sleep(0.1)
    reports = Looker(target).for_seconds(5 * WINDOW)
    assert len(reports) == 1, reports
    event = reports[0]
    assert event["event"] == "blocked" and event["nodeid"] == "test_x.py::test_y"
    assert event["seconds"] >= WINDOW
    blocked = event["threads"][0]  # the blocked thread first: its innermost frame is the target's
    assert blocked[-1][0] == target.__file__ and blocked[-1][2] == "twice", blocked[-1]


def test_a_loop_inside_the_target_is_not_blocked(target: ModuleType) -> None:
    stop = threading.Event()
    _thread(target.spins, stop)
    try:
        assert Looker(target).for_seconds(3 * WINDOW) == []
    finally:
        stop.set()


def test_a_wait_for_a_lock_that_a_working_thread_holds_is_not_blocked(
    target: ModuleType,
) -> None:
    stop, held = threading.Event(), threading.Lock()

    def holds_and_works() -> None:
        with held:
            while not stop.is_set():
                sum(range(1000))

    threads = [_thread(holds_and_works)]
    time.sleep(0.1)
    threads.append(_thread(target.waits, held))
    try:
        assert Looker(target).for_seconds(3 * WINDOW) == []
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def test_a_wait_outside_the_target_is_not_the_targets(
    target: ModuleType, lock: threading.Lock
) -> None:
    lock.acquire()
    _thread(lock.acquire)  # blocked for good, but in no call into the target
    assert Looker(target).for_seconds(3 * WINDOW) == []


def test_a_child_process_at_work_may_still_release_the_target(
    target: ModuleType, lock: threading.Lock
) -> None:
    """A target waiting on a file lock that a child holds is not blocked while the
    child works: the child may let go."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        lock.acquire()
        _thread(target.waits, lock)
        assert Looker(target).for_seconds(3 * WINDOW) == []
    finally:
        child.kill()
        child.wait()


def test_nothing_is_reported_between_tests(target: ModuleType, lock: threading.Lock) -> None:
    _thread(target.twice, lock)
    time.sleep(0.1)
    assert Looker(target, nodeid=None).for_seconds(3 * WINDOW) == []


def test_a_watch_that_cannot_look_stops_quietly(
    target: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error inside a look ends the watch thread (the budget still bounds the run); it
    is not thrown into the test process as an unhandled thread exception."""
    looker = Looker(target)
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise OSError("a /proc this machine does not have")

    monkeypatch.setattr(looker.watch, "look", broken)
    raised: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    looker.watch.start()
    looker.watch.join(timeout=5)
    assert not looker.watch.is_alive()
    assert calls == [1]
    assert raised == []


FRAMES_UNDER_GC = """
import faulthandler, gc, sys, threading
from leasecheck._blocked import current_frames

faulthandler.dump_traceback_later(40, exit=True)  # a deadlock prints its stacks and exits 1


def deep(stop, n):  # frames with no frame object yet: the call makes them, and may collect
    return deep(stop, n - 1) if n else stop.wait(0.0005)


def worker(stop):
    while not stop.is_set():
        deep(stop, 30)


class Holder:
    def __init__(self):
        self.local = threading.local()
        self.me = self  # a cycle: only a collection frees it, and its threading.local


stop = threading.Event()
for _ in range(4):
    threading.Thread(target=worker, args=(stop,), daemon=True).start()
gc.set_threshold(20, 5, 5)
for _ in range(20_000):
    for _ in range(30):
        Holder()
    current_frames()
assert gc.isenabled()
stop.set()
print("done")
"""


def test_looking_at_every_thread_cannot_deadlock_the_process(tmp_path: Path) -> None:
    """CPython gh-106883: up to 3.11, a collection inside ``sys._current_frames()`` that
    frees a ``threading.local`` deadlocks the process (the watch held the runtime's lock
    and waited for it again, with the GIL). The thread scheduler frees such objects by
    the thousand, and a jobs.interleavings run sat idle until its budget ran out. Without
    the guard in ``current_frames`` this script hangs within its first thousand calls
    on 3.11.7 (seen 5 of 5); 3.12 and later never collect there, so it passes either way."""
    script = tmp_path / "frames_under_gc.py"
    script.write_text(FRAMES_UNDER_GC)
    try:
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired as stuck:  # the faulthandler's exit did not come
        pytest.fail(f"sys._current_frames() under the collector hung: {stuck}")
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-3000:]
