"""The fork engine itself: kill at a hook, reap, verdicts for children that misbehave, cleanup.

Every test forks real children and checks, with psutil, that none is left behind.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from leasecheck.crash_harness.atomicity import check_every_point
from leasecheck.crash_harness.engine import (
    GO,
    RAISE,
    Channel,
    ChildDied,
    Engine,
    HarnessError,
    HarnessTimeout,
    Message,
    PointNotReached,
    _groups_empty,
    _sweep,
    describe_status,
)
from leasecheck.crash_harness.zygote import Task
from leasecheck.targets import BUNDLED_WORKER, load_worker


@pytest.fixture
def engine(no_leaked_children: None) -> Iterator[Engine]:
    with Engine(deadline_s=5.0) as running:
        yield running


def blocks_at(point: str) -> Callable[[Channel], str]:
    def body(channel: Channel) -> str:
        channel.fault(point)
        return "passed"

    return body


def test_kill_at_a_hook_reaps_a_child_that_died_of_sigkill(engine: Engine) -> None:
    child = engine.fork("hooked", blocks_at("after-claim"))
    assert child.run_to_point("after-claim", "the op") == []
    left = child.kill()
    assert left == []
    assert child.status is not None
    assert os.WIFSIGNALED(child.status) and os.WTERMSIG(child.status) == signal.SIGKILL
    assert not psutil.pid_exists(child.pid) or psutil.Process(child.pid).ppid() != os.getpid()


def test_go_lets_the_child_pass_the_point_and_return(engine: Engine) -> None:
    child = engine.fork("hooked", blocks_at("p"))
    child.run_to_point("p", "the op")
    child.answer(GO)
    assert child.outcome("the op's result").value == "passed"
    assert child.status == 0


def test_earlier_points_are_answered_go_and_listed(engine: Engine) -> None:
    def body(channel: Channel) -> None:
        channel.fault("after-audit")
        channel.fault("after-redrive")

    child = engine.fork("redrive", body)
    assert child.run_to_point("after-redrive", "redrive") == ["after-audit"]
    child.kill()


def points_until(stop: str, channel: Channel) -> list[str]:
    """A Task body: pass the points a, b, c through ``fault_until(stop)``."""
    hook = channel.fault_until(stop)
    for point in ("a", "b", "c"):
        hook(point)
    return ["done"]


@pytest.fixture
def task_engine(no_leaked_children: None) -> Iterator[Engine]:
    """For Task bodies of this module: the first child of the zygote imports it (pytest
    and all), which takes seconds on a loaded machine."""
    with Engine(deadline_s=60.0) as running:
        yield running


@pytest.mark.parametrize("travels", [True, False], ids=["zygote", "here"])
def test_fault_until_blocks_only_at_its_point_and_reports_the_others(
    task_engine: Engine, travels: bool
) -> None:
    engine = task_engine
    body = Task(points_until, ("b",)) if travels else functools.partial(points_until, "b")
    child = engine.fork("until b", body)
    assert child.run_to_point("b", "the op") == ["a"]  # a was reported, not waited on
    child.answer(GO)
    assert child.outcome("the op's result").value == ["done"]
    assert child.status == 0


def test_fault_until_raises_at_its_point_when_told_to(task_engine: Engine) -> None:
    child = task_engine.fork("until c", Task(points_until, ("c",)))
    assert child.run_to_point("c", "the op") == ["a", "b"]
    child.answer(RAISE)
    outcome = child.outcome("the op's result")
    assert outcome.error is not None and outcome.error.is_a("InjectedFault")


def echo_commands(count: int, channel: Channel) -> list[object]:
    """A Task body: the first ``count`` commands it receives."""
    return [channel.receive() for _ in range(count)]


@pytest.mark.parametrize("travels", [True, False], ids=["zygote", "here"])
def test_commands_sent_with_the_fork_are_received_in_order(
    task_engine: Engine, travels: bool
) -> None:
    engine = task_engine
    body = Task(echo_commands, (4,)) if travels else functools.partial(echo_commands, 4)
    child = engine.fork("echo", body, [("claim", 1), ("op", 2), "three"])
    child.answer("four")  # a later command queues behind them
    assert child.outcome("its commands").value == [("claim", 1), ("op", 2), "three", "four"]


def test_raise_answer_injects_an_exception_that_the_child_reports(engine: Engine) -> None:
    child = engine.fork("hooked", blocks_at("p"))
    child.run_to_point("p", "the op")
    child.answer(RAISE)
    outcome = child.outcome("the op's result")
    assert outcome.error is not None and outcome.error.type_name == "InjectedFault"
    assert outcome.describe() == "raised InjectedFault: fault injected by the harness at 'p'"


def test_an_exception_in_the_child_comes_back_as_data(engine: Engine) -> None:
    def body(channel: Channel) -> None:
        raise sqlite3.OperationalError("database is locked")

    outcome = engine.fork("busy", body).outcome("the claim")
    assert outcome.error is not None
    assert outcome.error.is_a("OperationalError") and outcome.error.is_a("Exception")
    assert outcome.busy
    assert "sqlite3.OperationalError: database is locked" in outcome.error.traceback


def test_even_system_exit_never_returns_into_pytest(engine: Engine) -> None:
    def body(channel: Channel) -> None:
        raise SystemExit(4)

    child = engine.fork("exits", body)
    outcome = child.outcome("the result")
    assert outcome.error is not None and outcome.error.type_name == "SystemExit"
    assert child.status == 0


def test_a_point_never_reached_is_named(engine: Engine) -> None:
    child = engine.fork("returns", lambda channel: 5)
    with pytest.raises(PointNotReached) as caught:
        child.run_to_point("after-claim", "claim('w1', 0, 1000)")
    assert str(caught.value) == (
        "claim('w1', 0, 1000) returned 5 without calling fault('after-claim'); "
        "the hook points it passed: none"
    )


def test_a_child_that_exits_gets_a_named_verdict(engine: Engine) -> None:
    child = engine.fork("quitter", lambda channel: os._exit(3))
    with pytest.raises(ChildDied) as caught:
        child.run_to_point("after-claim", "claim")
    assert str(caught.value) == (
        f"child 'quitter' (pid {child.pid}) exited with status 3 while the harness waited "
        f"for claim to reach fault point 'after-claim'"
    )


def test_a_child_that_crashes_gets_a_named_verdict(engine: Engine) -> None:
    child = engine.fork("crasher", lambda channel: os.kill(os.getpid(), signal.SIGSEGV))
    with pytest.raises(ChildDied, match=r"'crasher' .* was killed by SIGSEGV while the harness"):
        child.outcome("finish to return")


def test_a_child_that_loops_gets_a_timeout_naming_what_was_awaited(
    no_leaked_children: None,
) -> None:
    with Engine(deadline_s=0.3) as engine:
        child = engine.fork("spinner", _spin)
        started = time.monotonic()
        with pytest.raises(HarnessTimeout) as caught:
            child.run_to_point("after-finish", "finish(ticket, 'ok', 5)")
        assert time.monotonic() - started < 3
    assert str(caught.value).startswith(
        "timed out after 0.3 s waiting for finish(ticket, 'ok', 5) to reach fault point "
        f"'after-finish' from child 'spinner' (pid {child.pid})"
    )
    assert child.reaped


def _spin(channel: Channel) -> None:
    while True:
        pass


def test_descendants_are_killed_even_when_an_assertion_fails(no_leaked_children: None) -> None:
    def body(channel: Channel) -> None:
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        channel.send("event", pid)
        channel.receive()

    with pytest.raises(AssertionError, match="the test's own check"), Engine() as engine:
        child = engine.fork("parent-of-one", body)
        grandchild = child.next("the grandchild's pid").value
        assert psutil.pid_exists(grandchild)
        raise AssertionError("the test's own check")
    _, alive = psutil.wait_procs([_process(grandchild)], timeout=5)
    assert all(p.status() == psutil.STATUS_ZOMBIE for p in alive)  # reaped by init, if at all
    assert child.reaped


def _process(pid: int) -> psutil.Process:
    return psutil.Process(pid)


def test_kill_drains_the_events_sent_before_death(engine: Engine) -> None:
    def body(channel: Channel) -> None:
        for index in range(3):
            channel.send("event", ("ack", index))
        channel.receive()

    child = engine.fork("acker", body)
    first = child.next("the first ack")
    assert first == Message("event", ("ack", 0))
    _wait_until_sleeping(child.pid)  # blocked in receive(): every ack is in the pipe
    assert [m.value for m in child.kill()] == [("ack", 1), ("ack", 2)]


def _wait_until_sleeping(pid: int) -> None:
    """Bounded: a child that only writes to a pipe with room never sleeps before its read."""
    deadline = time.monotonic() + 5
    while psutil.Process(pid).status() != psutil.STATUS_SLEEPING:
        assert time.monotonic() < deadline, f"child {pid} never blocked in its read"


def test_wait_any_returns_the_child_that_spoke(engine: Engine) -> None:
    quiet = engine.fork("quiet", lambda channel: channel.receive())
    talker = engine.fork("talker", lambda channel: channel.send("event", "hello"))
    who, message = engine.wait_any([quiet, talker], "a greeting")
    assert who is talker and message == Message("event", "hello")
    quiet.answer(None)
    quiet.outcome("quiet to end")
    talker.outcome("talker to end")


def test_a_child_whose_harness_is_gone_exits_at_once(engine: Engine) -> None:
    child = engine.fork("orphan", lambda channel: channel.receive())
    child._close("commands")  # what the child sees when the harness dies
    with pytest.raises(ChildDied, match="exited with status 71"):
        child.outcome("the orphan")


def test_trace_reports_each_statement_before_it_runs(engine: Engine, scratch: Path) -> None:
    path = scratch / "traced.db"

    def body(channel: Channel) -> int:
        con = sqlite3.connect(path, isolation_level=None)
        con.set_trace_callback(channel.trace)
        con.execute("CREATE TABLE t (x)")
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO t VALUES (1)")
        con.execute("COMMIT")
        con.close()
        return 1

    child = engine.fork("traced", body)
    held = child.run_until(lambda m: m.kind == "stmt" and m.value == "BEGIN IMMEDIATE", "BEGIN")
    assert held == Message("stmt", "BEGIN IMMEDIATE")
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    other.execute("BEGIN IMMEDIATE")  # the held child has not taken the lock yet
    other.execute("ROLLBACK")
    other.close()
    child.answer(GO)
    assert child.outcome("the traced child").value == 1


def test_kill_of_a_reaped_child_is_refused(engine: Engine) -> None:
    child = engine.fork("done", lambda channel: None)
    child.outcome("its end")
    with pytest.raises(HarnessError, match=r"child 'done' \(pid \d+\) is already reaped"):
        child.kill()


def test_close_does_not_hide_the_error_already_raised(no_leaked_children: None) -> None:
    with pytest.raises(ValueError, match="original"), Engine() as engine:
        engine.fork("left-running", lambda channel: channel.receive())
        raise ValueError("original")


@pytest.mark.parametrize(
    ("status", "words"),
    [(3 << 8, "exited with status 3"), (signal.SIGKILL, "was killed by SIGKILL")],
)
def test_describe_status(status: int, words: str) -> None:
    assert describe_status(status) == words


@pytest.mark.parametrize(
    ("inside_claim", "verdict"),
    [
        ("os._exit(3)", r"exited with status 3 while the harness waited for claim\("),
        (
            "os.kill(os.getpid(), signal.SIGSEGV)",
            r"was killed by SIGSEGV while the harness waited for claim\(",
        ),
        ("while True: pass", r"timed out after 0.5 s waiting for claim\("),
    ],
    ids=["exits", "segfaults", "hangs"],
)
def test_a_misbehaving_target_gets_a_named_verdict_not_a_hang(
    inside_claim: str, verdict: str, scratch: Path, no_leaked_children: None
) -> None:
    source = BUNDLED_WORKER.read_text()
    find = '    _check_identifier("claim", "owner", owner)\n'
    assert source.count(find) == 1
    broken = source.replace(find, f"    import os, signal\n    {inside_claim}\n" + find)
    path = scratch / "worker_broken.py"
    path.write_text(broken)
    started = time.monotonic()
    with pytest.raises(AssertionError, match=verdict) as caught:
        check_every_point(load_worker(path), scratch, 1, 0, deadline_s=0.5)
    assert time.monotonic() - started < 10
    assert "replay with --leasecheck-seed 0 (property lease.crash-points)" in str(caught.value)


def _group_leader() -> int:
    """A child of this process sleeping as the leader of its own process group."""
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        signal.pause()
        os._exit(0)
    with contextlib.suppress(PermissionError):  # the child may have done it already
        os.setpgid(pid, pid)
    return pid


def test_groups_empty_asks_the_kernel_for_live_zombie_and_gone_groups(
    no_leaked_children: None,
) -> None:
    pid = _group_leader()
    try:
        assert _groups_empty(set())
        assert not _groups_empty({pid})
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the killed child never became a zombie"
            time.sleep(0.005)
        assert not _groups_empty({pid})  # a zombie is still in its group: the walk decides
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert _groups_empty({pid})


def test_sweep_kills_a_process_left_in_a_group_and_names_it(no_leaked_children: None) -> None:
    pid = _group_leader()
    try:
        assert _sweep({pid}) == [pid]  # killed and waited for (psutil reaps its own child)
        assert not psutil.pid_exists(pid)
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert _sweep({pid}) == []
