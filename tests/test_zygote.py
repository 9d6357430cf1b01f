"""The zygote: children of a small helper, still killed, reaped and never left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from _lean_bodies import imported

from leasecheck.crash_harness import zygote
from leasecheck.crash_harness._queue_files import _open_only
from leasecheck.crash_harness.engine import Channel, Engine
from leasecheck.crash_harness.zygote import _LEAN_ZYGOTE, Task
from leasecheck.targets.loader import load_worker


def parent_and_size(channel: Channel) -> tuple[int, int]:
    """A Task body: who forked this child, and its resident size in bytes."""
    return os.getppid(), psutil.Process().memory_info().rss


def wait_forever(channel: Channel) -> None:
    channel.send("event", "ready")
    channel.receive()


def exit_with(code: int, channel: Channel) -> None:
    os._exit(code)


@pytest.fixture
def engine(no_leaked_children: None) -> Iterator[Engine]:
    with Engine(deadline_s=10) as running:
        yield running


def test_a_task_is_forked_by_the_zygote_and_a_closure_here(engine: Engine) -> None:
    helper = zygote.current()
    assert helper is not None
    parent, size = engine.fork("task", Task(parent_and_size)).outcome("its parent").value
    assert parent == helper.pid
    local = engine.fork("closure", lambda channel: os.getppid()).outcome("its parent")
    assert local.value == os.getpid()
    assert size < 100 * 2**20, f"a zygote child is {size} bytes: the zygote is not small"


def test_the_zygote_runs_a_crash_task_without_threading(engine: Engine, tmp_path: Path) -> None:
    """``threading`` registers an at-fork handler that runs in every child (about 0.5 ms
    each): the zygote imports neither it nor a module that brings it, even after it has
    loaded the crash properties' session task and the bundled worker."""
    zygote.stop()  # a fresh one: the tasks of this file's other tests import this file there
    module = load_worker()
    engine.fork("open", _open_only(module, tmp_path / "q.db")).outcome("open_queue")
    child = engine.fork("modules", Task(imported, (_LEAN_ZYGOTE,)))
    assert child.outcome("its modules").value == []
    local = engine.fork("closure", lambda channel: imported(_LEAN_ZYGOTE, channel))
    assert "threading" in local.outcome("its modules").value  # the test process has it


def test_a_zygote_child_is_sigkilled_and_reaped_with_its_status(engine: Engine) -> None:
    child = engine.fork("waiter", Task(wait_forever))
    assert child.next("its ready event").value == "ready"
    child.kill()  # checks that SIGKILL is what ended it
    assert child.status is not None and os.WTERMSIG(child.status) == signal.SIGKILL
    assert not _running(child.pid)


def test_a_zygote_child_that_exits_is_named_with_its_exit_status(engine: Engine) -> None:
    child = engine.fork("exits", Task(exit_with, (3,)))
    with pytest.raises(AssertionError, match="exited with status 3"):
        child.outcome("its result")


def test_stop_ends_the_zygote_and_its_spare(no_leaked_children: None) -> None:
    with Engine() as engine:
        engine.fork("task", Task(parent_and_size)).outcome("its result")
    helpers = zygote.helper_pids()
    assert len(helpers) == 2, helpers  # the zygote and the spare it forked ahead
    processes = [psutil.Process(pid) for pid in helpers]
    zygote.stop()
    _, alive = psutil.wait_procs(processes, timeout=5)
    assert not alive, f"still running after stop: {alive}"
    assert zygote.helper_pids() == set()


def test_sigterm_makes_the_zygote_end_its_children(no_leaked_children: None) -> None:
    with Engine() as engine:
        child = engine.fork("waiter", Task(wait_forever))
        child.next("its ready event")
        helper = zygote.current()
        assert helper is not None
        os.kill(helper.pid, signal.SIGTERM)
        assert helper.process.wait(timeout=10) == 0
        with pytest.raises(AssertionError, match="killed by SIGKILL"):
            child.outcome("its result after the zygote's SIGTERM")
    zygote.stop()


HARNESS = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, "tests")  # where this test file's helpers live
    from leasecheck.crash_harness import zygote
    from leasecheck.crash_harness.engine import Engine
    from tests.test_zygote import wait_forever
    engine = Engine()
    child = engine.fork("waiter", zygote.Task(wait_forever))
    child.next("its ready event")
    print(zygote.current().pid, child.pid, flush=True)
    sys.stdin.read()
    """
)


def test_the_zygote_and_its_children_die_with_a_sigkilled_harness() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with subprocess.Popen(
        [sys.executable, "-c", HARNESS], cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    ) as harness:  # fmt: skip
        assert harness.stdout is not None
        pids = [int(word) for word in harness.stdout.readline().split()]
        assert len(pids) == 2, pids
        harness.kill()
        harness.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not [pid for pid in pids if _running(pid)], "the zygote or its child outlived it"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_without_its_zygote_the_engine_forks_tasks_itself(no_leaked_children: None) -> None:
    with Engine() as engine:
        engine.fork("first", Task(parent_and_size)).outcome("its result")
        helper = zygote.current()
        assert helper is not None
        helper.process.kill()  # as a target's import that ends the process would
        helper.process.wait(timeout=10)
        parent, _ = engine.fork("after", Task(parent_and_size)).outcome("its parent").value
        assert parent == os.getpid()
    zygote.stop()


def identity(value: int, channel: Channel) -> int:
    return value


def test_a_spare_runs_its_own_task_not_the_one_before(engine: Engine) -> None:
    """The spare inherits the last task unpickled and runs that copy only for the same
    bytes: a task with other arguments is its own."""
    values = [
        engine.fork(f"task {n}", Task(identity, (n,))).outcome("its value").value
        for n in (1, 1, 2, 2, 1)
    ]
    assert values == [1, 1, 2, 2, 1]


def test_a_closed_engine_leaves_no_zombie_in_the_zygote(no_leaked_children: None) -> None:
    """The engine releases its children to the zygote with the next fork request; the
    ones left when it closes are reaped before close returns."""
    with Engine() as engine:
        for n in range(3):
            engine.fork(f"done {n}", Task(identity, (n,))).outcome("its value")
        waiter = engine.fork("killed", Task(wait_forever))
        waiter.next("its ready event")
        waiter.kill()
        helper = zygote.current()
        assert helper is not None
        assert helper.released  # released, not yet reaped: no wake-up of the zygote per child
    zombies = [
        child.pid
        for child in psutil.Process(helper.pid).children()
        if child.status() == psutil.STATUS_ZOMBIE
    ]
    assert zombies == [], f"zombies of the zygote after the engine closed: {zombies}"
    assert not helper.released
