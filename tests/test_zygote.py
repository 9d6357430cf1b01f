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

import leasecheck
from leasecheck.crash_harness import zygote
from leasecheck.crash_harness._queue_files import _open_only
from leasecheck.crash_harness.engine import Channel, Engine
from leasecheck.crash_harness.zygote import _LEAN_ZYGOTE, Task
from leasecheck.models.lease_ops import LeaseOp
from leasecheck.stateful_tests._parallel_lease import run_lease_program
from leasecheck.stateful_tests.parallel import ParallelProgram
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


def test_the_zygote_stays_lean_after_a_parallel_history(engine: Engine, tmp_path: Path) -> None:
    """lease.linearizable's children are tasks too: after the zygote has forked one
    history's processes, it still has none of ``_LEAN_ZYGOTE`` (its module once brought
    Hypothesis, and with it ``threading``, into the zygote, for every later child)."""
    zygote.stop()  # a fresh one: the tasks of this file's other tests import this file there
    enqueue = LeaseOp.of("enqueue", event={"id": "a", "qty": 1}, now_ms=0, ttl_ms=60000,
                         max_attempts=3)  # fmt: skip
    claim = LeaseOp.of("claim", owner="w1", now_ms=100, lease_ms=1000)
    program = ParallelProgram((enqueue,), ((claim,), (claim,)), seed=0, switch_percent=50)
    history = run_lease_program(load_worker(), tmp_path, program)
    assert [op.process for op in history].count("P1") == 1, "the program did not run"
    child = engine.fork("modules", Task(imported, (_LEAN_ZYGOTE,)))
    assert child.outcome("its modules").value == []


def _task_modules() -> list[str]:
    """The modules of leasecheck that make ``Task``s (the zygote imports each to run them)."""
    root = Path(leasecheck.__file__).parent
    found = []
    for folder, _, files in os.walk(root, followlinks=True):  # the folders are symlinks
        for path in (Path(folder) / name for name in files if name.endswith(".py")):
            if "Task(" in path.read_text() and path.name != "zygote.py":
                relative = path.relative_to(root).with_suffix("")
                found.append(".".join(("leasecheck", *relative.parts)))
    return sorted(found)


def test_every_module_that_makes_tasks_imports_none_of_the_lean_list() -> None:
    """What the zygote imports to run a task is its module: none of them may bring a
    module of ``_LEAN_ZYGOTE`` with it (in a fresh interpreter, as the zygote's)."""
    modules = _task_modules()
    assert "leasecheck.stateful_tests._parallel_lease" in modules, modules
    script = textwrap.dedent(f"""
        import importlib, json, sys
        importlib.import_module("leasecheck.crash_harness.zygote")
        importlib.import_module(sys.argv[1])
        print(json.dumps([name for name in {list(_LEAN_ZYGOTE)!r} if name in sys.modules]))
    """)  # fmt: skip
    env = {**os.environ, "HYPOTHESIS_NO_PLUGINS": "1"}
    brought = {}
    for name in modules:
        done = subprocess.run(
            [sys.executable, "-c", script, name], capture_output=True, text=True, env=env,
            timeout=60, check=True,
        )  # fmt: skip
        if done.stdout.strip() != "[]":
            brought[name] = done.stdout.strip()
    assert not brought, f"task modules that bring what the zygote must not import: {brought}"


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
