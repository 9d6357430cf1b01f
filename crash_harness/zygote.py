"""The zygote: a small long-lived process that forks the engine's children.

A fork copies the page tables of the process that forks, and the child's first
writes copy pages: from a test process that has grown to hundreds of MB after the
Hypothesis machines, a fork and the child's start cost several times what they
cost from a fresh interpreter. So the engine forks from a helper started with
``python -c`` the first time a body can travel (a ``Task``): it imports only the
engine and, on the first request that needs them, the target file and the modules
of the body, and then forks a child per request.

The protocol, over a ``SOCK_SEQPACKET`` Unix socket pair (one pickle per packet),
is one-way from the harness, so no request waits for the zygote's answer (but the
last release of an engine that closes):

- ``("fork", warm, released)`` with a future child's two pipe ends attached
  (``socket.send_fds``): the zygote forks a *spare*, set up exactly like a child the
  engine forks itself (``_become_child``), which writes ``("pid", pid)`` as its first
  frame and waits. ``Engine.fork`` of a ``Task`` takes the spare, writes it the task
  (and the test's node id) and asks for the next spare at once, with the task as
  ``warm``: the zygote imports what it needs (the target file, the body's module)
  before forking, so no spare imports anything; the spare also inherits ``warm``
  unpickled, and runs that copy when its task is the same bytes (a kill loop sends the
  same task every time), so it unpickles nothing either. The task and the child's
  first commands travel in one write, so the child wakes once to start. The harness
  talks to the child directly; nothing is relayed. A task that cannot load in the
  child (a target file changed on disk since) raises there, a named error.
- ``released``, the pids of children whose wait status the engine has: the zygote
  reaps them (before it forks). The zygote never reaps a child before, so the child
  stays a zombie and its pid cannot be reused while the engine may still ``killpg``
  it; the engine reads the zombie's wait status from ``/proc/PID/stat``
  (``exit_code``, as ``waitpid`` gives it) once its pidfd says it exited. The
  releases ride on the next fork request (no wake-up of the zygote of their own);
  ``("release", pids)`` sends the ones left when an engine closes, and the zygote
  answers ``("released", pids)`` once it has reaped them, so a closed engine leaves
  no zombie behind.
- ``("stop",)``, or the end of the socket: the zygote SIGKILLs every child's process
  group, reaps them, sends ``("stopped", {pid: wait status})`` and exits. It sends
  the same record when SIGINT or SIGTERM stops it, so a child it reaped then still
  has its status.

Every child dies with the zygote (``PR_SET_PDEATHSIG``) and the zygote with the
process that started it; SIGINT and SIGTERM make it kill and reap its children and
exit. The process that started it stops it at exit (``atexit``), and a test run's
leftover checks (``leasecheck._processes``, the ``no_leaked_children`` fixture) know
it as the run's helper, not a target's process: it is started without the test's
``LEASECHECK_NODEID``.
"""

from __future__ import annotations

import _thread
import atexit
import contextlib
import importlib
import os
import pickle
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

from leasecheck.crash_harness import engine
from leasecheck.crash_harness._wire import FrameReader, write_frame, write_frames

__all__ = [
    "DISABLE_ENV",
    "Task",
    "Zygote",
    "ZygoteError",
    "current",
    "helper_pids",
    "release_reaped",
    "serve",
]

DISABLE_ENV: Final = "LEASECHECK_ZYGOTE"
"""Set to ``0`` to fork every child from the test process itself (as before the zygote)."""
NODEID_ENV: Final = "LEASECHECK_NODEID"
"""``leasecheck._processes.NODEID_ENV``: the zygote is the run's, never one test's; each
child gets the node id of the test that forked it."""
START_DEADLINE_S: Final = 30.0
"""How long the first request waits for the zygote's interpreter to start."""
ANSWER_DEADLINE_S: Final = engine.DEFAULT_DEADLINE_S
_PACKET: Final = 1 << 20
_PR_SET_PDEATHSIG: Final = 1
_EXIT_CODE_FIELD: Final = 52
"""``exit_code`` in proc(5)'s ``/proc/PID/stat`` (Linux >= 3.5): the status ``waitpid`` gives."""
_LEAN_ZYGOTE: Final = ("threading", "subprocess", "psutil", "hypothesis")
"""Modules the zygote must not import (this module and the engine import them only on the
harness's side): ``threading`` registers an at-fork handler that runs in every child,
about 0.5 ms and 120 copied pages each; the others import it. Hypothesis also makes the
zygote half again as large (21 to 31 MB), and every fork and exit from it costs that
much more: a task body's module imports only what the child runs (types of the
generating side under ``TYPE_CHECKING``)."""


class ZygoteError(engine.HarnessError):
    """The zygote did not answer in time or answered nonsense; the message says which."""


@dataclass(frozen=True)
class Task:
    """A child body that can travel to the zygote: ``function(*args, channel)``.

    ``function`` must be a module-level function and ``args`` picklable; a target
    module among them travels as its file (``_target_module``), so the zygote loads
    the very same file.
    """

    function: Callable[..., Any]
    args: tuple[Any, ...] = ()

    def __call__(self, channel: engine.Channel) -> Any:
        return self.function(*self.args, channel)


def _target_module(path: str, name: str) -> ModuleType:
    """In the zygote: the target ``path``, which must load as ``name`` (same content)."""
    from leasecheck.targets.loader import load_module

    module = load_module(path, "target")
    if module.__name__ != name:
        raise ImportError(f"{path} changed on disk since the harness loaded it as {name}")
    return module


class _Pickler(pickle.Pickler):
    """Pickles modules by reference: a target file by its path, any other by its name."""

    def reducer_override(self, obj: Any) -> Any:
        if getattr(obj, "__module__", None) == "__main__":
            raise pickle.PicklingError(f"{obj!r} lives in __main__, which the zygote does not run")
        if not isinstance(obj, ModuleType):
            return NotImplemented
        file = getattr(obj, "__file__", None)
        if obj.__name__.startswith("leasecheck_target_") and file:
            return _target_module, (file, obj.__name__)
        if sys.modules.get(obj.__name__) is obj:
            return importlib.import_module, (obj.__name__,)
        raise pickle.PicklingError(f"module {obj.__name__} cannot be found by another process")


def encode_task(task: Task) -> bytes | None:
    """The task as bytes for the zygote, or None when it cannot travel."""
    import io

    buffer = io.BytesIO()
    try:
        _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(task)
    except (pickle.PicklingError, AttributeError, TypeError):
        return None
    return buffer.getvalue()


# --- the harness side ----------------------------------------------------------------------


@dataclass
class _Spare:
    """A child the zygote forked ahead of need: it waits for its task on ``commands``."""

    events: int
    commands: int
    reader: FrameReader
    pid: int | None = None
    """Known once its first frame is read."""


class Zygote:
    """The harness's handle on one zygote process.

    The zygote keeps one child forked ahead (a spare): ``start`` hands it its task and
    asks for the next spare at once, so no fork waits for the zygote to be scheduled.
    """

    def __init__(self) -> None:
        import subprocess  # the harness's side only: see _LEAN_ZYGOTE

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {key: value for key, value in os.environ.items() if key != NODEID_ENV}
        command = (
            f"import sys; sys.path[:] = {sys.path!r}; "
            f"from {__name__} import serve; serve({theirs.fileno()}, {os.getpid()})"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", command], pass_fds=[theirs.fileno()], env=env,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        theirs.close()
        self.socket = ours
        self.owner = os.getpid()
        self.lock = _thread.allocate_lock()
        self.started = False
        self.spare: _Spare | None = None
        self.ended = False
        """The zygote has gone: every later child is forked by the harness itself."""
        self.final: dict[int, int] | None = None
        """The wait statuses the zygote reported when it stopped (SIGTERM, SIGINT)."""
        self.released: list[int] = []
        """Children whose wait status the engine has, for the zygote to reap."""
        engine._PARENT_SIDE_FDS.add(ours.fileno())  # a child the engine forks drops it

    @property
    def pid(self) -> int:
        return self.process.pid

    def _send(self, request: tuple[Any, ...], fds: list[int] | None = None) -> None:
        socket.send_fds(self.socket, [pickle.dumps(request)], fds or [])

    def _ask_for_spare(self, warm: bytes | None) -> None:
        """Ask for the next spare; ``warm``, the last task, makes the zygote import what it
        needs first (its target file, its body's module), so the spare starts with them."""
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        try:
            self._send(("fork", warm, tuple(self.released)), [to_child_r, to_parent_w])
            self.released.clear()
        finally:
            os.close(to_child_r)
            os.close(to_parent_w)
        engine._PARENT_SIDE_FDS.update((to_parent_r, to_child_w))
        self.spare = _Spare(to_parent_r, to_child_w, FrameReader())

    def start(
        self, name: str, task: bytes, commands: tuple[Any, ...] = ()
    ) -> tuple[int, int, int, FrameReader] | None:
        """A child running ``task`` (``commands`` waiting in its pipe): (pid, events fd,
        commands fd, the frames read so far); None if the zygote has ended."""
        with self.lock:
            if self.ended:
                return None
            spare, pid = None, None
            try:
                if self.spare is None:
                    self._ask_for_spare(None)
                spare, self.spare = self.spare, None
                assert spare is not None
                budget = ANSWER_DEADLINE_S if self.started else START_DEADLINE_S
                pid = _spare_pid(spare, budget, f"fork child {name!r}", self.pid)
                if pid is not None:
                    self.started = True
                    first = (task, os.environ.get(NODEID_ENV))
                    write_frames(spare.commands, (first, *commands))
                    self._ask_for_spare(task)
            except OSError:  # the zygote is gone (a target's import ended it, say)
                pid = None
            if spare is None or pid is None:
                if spare is not None:
                    _close_spare(spare)
                self.ended = True
                return None
        return pid, spare.events, spare.commands, spare.reader

    def pids(self) -> set[int]:
        """The zygote's pid and its spare's (waiting, bounded, for the spare to start)."""
        with self.lock:
            spare = self.spare
            budget = ANSWER_DEADLINE_S if self.started else START_DEADLINE_S
            pid = None
            if spare is not None:
                with contextlib.suppress(ZygoteError):
                    pid = _spare_pid(spare, budget, "start a spare child", self.pid)
        return {self.pid} | ({pid} if pid is not None else set())

    def reap(self, pid: int) -> int:
        """The wait status of an exited child (a zombie until now), which the zygote reaps;
        of a child the zygote reaped as it stopped, the status it reported then."""
        try:
            status = exit_status(pid)
        except ZygoteError:
            final = self._final_statuses()
            if pid not in final:
                raise
            return final[pid]
        with self.lock:
            self.released.append(pid)
        return status

    def release_reaped(self) -> None:
        """Have the zygote reap every child released so far, and wait (bounded) until it has."""
        with self.lock:
            if not self.released or self.ended:
                return
            pids, self.released = tuple(self.released), []
            silent = False
            try:
                self._send(("release", pids))
                ready, _, _ = select.select([self.socket], [], [], ANSWER_DEADLINE_S)
                silent = not ready
                data = self.socket.recv(_PACKET) if ready else b""
            except OSError:  # the zygote is gone
                data = b""
            record: tuple[Any, ...] = pickle.loads(data) if data else ("gone", None)
            if record[0] == "stopped":  # SIGTERM or SIGINT stopped it meanwhile
                self.final = dict(record[1])
            if record[0] != "released":
                self.ended = True
            if silent:
                raise ZygoteError(
                    f"timed out after {ANSWER_DEADLINE_S:g} s waiting for the zygote "
                    f"(pid {self.pid}) to reap its children {list(pids)}"
                )

    def _final_statuses(self) -> dict[int, int]:
        """The record ``("stopped", {pid: status})`` the zygote sent as it stopped."""
        with self.lock:
            if self.final is None:
                ready, _, _ = select.select([self.socket], [], [], ANSWER_DEADLINE_S)
                data = self.socket.recv(_PACKET) if ready else b""
                record = pickle.loads(data) if data else ("stopped", {})
                self.final = dict(record[1]) if record[0] == "stopped" else {}
            return self.final

    def stop(self) -> None:
        """Stop the zygote and every child it still has; wait (bounded) for it to exit."""
        import subprocess

        with self.lock:
            if self.spare is not None:
                _close_spare(self.spare)
                self.spare = None
            engine._PARENT_SIDE_FDS.discard(self.socket.fileno())
            with contextlib.suppress(OSError):
                self._send(("stop",))
                select.select([self.socket], [], [], ANSWER_DEADLINE_S)
            self.socket.close()
        try:
            self.process.wait(timeout=ANSWER_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _close_spare(spare: _Spare) -> None:
    for fd in (spare.events, spare.commands):
        engine._PARENT_SIDE_FDS.discard(fd)
        with contextlib.suppress(OSError):
            os.close(fd)


def _spare_pid(spare: _Spare, deadline_s: float, doing: str, helper: int) -> int | None:
    """The spare's pid, its first frame ``("pid", pid)``; None if the zygote ended first."""
    deadline = time.monotonic() + deadline_s
    poller = select.poll()
    poller.register(spare.events, select.POLLIN | select.POLLHUP)
    while spare.pid is None:
        ok, frame = spare.reader.pop()
        if ok:
            spare.pid = int(frame[1])
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poller.poll(max(1, int(remaining * 1000))):
            raise ZygoteError(
                f"timed out after {deadline_s:g} s waiting for the zygote (pid {helper}) to {doing}"
            )
        data = os.read(spare.events, 1 << 16)
        if not data:
            return None
        spare.reader.feed(data)
    return spare.pid


def exit_status(pid: int) -> int:
    """The wait status of zombie ``pid`` (not our child): field 52 of ``/proc/PID/stat``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stream:
            fields = stream.read().rsplit(")", 1)[1].split()
        return int(fields[_EXIT_CODE_FIELD - 3])
    except (OSError, IndexError, ValueError) as error:
        raise ZygoteError(
            f"the wait status of pid {pid} is gone ({error}): the zygote reaped it"
        ) from error


_STATE: dict[str, Zygote | None] = {}
_START_LOCK = _thread.allocate_lock()


def current() -> Zygote | None:
    """This process's zygote, started at the first call; None where children are forked
    here (disabled, a forked child of the harness, no pidfd, or it would not start)."""
    if os.environ.get(DISABLE_ENV) == "0" or not hasattr(os, "pidfd_open"):
        return None
    with _START_LOCK:
        zygote = _STATE.get("zygote")
        if zygote is not None and zygote.owner != os.getpid():
            return None  # we are a child forked from the harness: never share its zygote
        if "zygote" not in _STATE:
            try:
                _STATE["zygote"] = zygote = Zygote()
            except OSError:
                _STATE["zygote"] = zygote = None
            else:
                atexit.register(stop)
        return zygote


def stop() -> None:
    """Stop this process's zygote, if it started one (also registered with ``atexit``)."""
    with _START_LOCK:
        zygote = _STATE.pop("zygote", None)
    if zygote is not None and zygote.owner == os.getpid():
        zygote.stop()


def release_reaped() -> None:
    """Have this process's zygote (if it started one) reap the children the engine has
    released: called when an engine closes, so no zombie of it is left."""
    zygote = _STATE.get("zygote")
    if zygote is not None and zygote.owner == os.getpid():
        zygote.release_reaped()


def helper_pids() -> set[int]:
    """The pids of this process's zygote and its spare: the run's helpers, not a test's
    leftovers."""
    zygote = _STATE.get("zygote")
    return zygote.pids() if zygote is not None and zygote.owner == os.getpid() else set()


# --- the zygote side -----------------------------------------------------------------------


class _Stop(BaseException):
    """SIGINT or SIGTERM reached the zygote (a BaseException: no ``except Exception`` on
    the way, such as the warm-up's, may swallow it)."""


_STOPPING: list[int] = []


def _on_signal(signum: int, frame: object) -> None:
    # Also remembered: a handler that runs inside an at-fork hook (logging has one) has
    # its exception swallowed, so the loop checks the flag after every request.
    _STOPPING.append(signum)
    raise _Stop(signum)


def serve(fd: int, owner: int) -> None:
    """The zygote's main loop (``python -c``): answer requests until stop or end of file."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != owner:  # the harness died before prctl took effect
        os._exit(engine.EXIT_ORPHANED)
    channel = socket.socket(fileno=fd)
    children: set[int] = set()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _on_signal)
    try:
        while _serve_one(channel, children) and not _STOPPING:
            pass
    except _Stop:
        pass
    finally:
        ended = _end_all(children)
        with contextlib.suppress(OSError):
            channel.send(pickle.dumps(("stopped", ended)))
        channel.close()
    os._exit(0)


def _serve_one(channel: socket.socket, children: set[int]) -> bool:
    """Answer one request; False at stop or end of file."""
    data, fds, _, _ = socket.recv_fds(channel, _PACKET, 2)
    if not data:
        return False
    request = pickle.loads(data)
    if request[0] == "fork":
        _reap(request[2], children)
        _fork(request[1], fds, channel, children)
    elif request[0] == "release":
        _reap(request[1], children)
        channel.send(pickle.dumps(("released", request[1])))
    elif request[0] == "stop":
        return False
    return True


def _reap(pids: tuple[int, ...], children: set[int]) -> None:
    """Reap the released children (zombies by now: the engine saw each exit)."""
    for pid in pids:
        if pid in children:
            children.discard(pid)
            os.waitpid(pid, 0)


_WARMED: list[tuple[bytes, Task | None]] = []
"""The last task the zygote imported what it needs for, and its unpickled copy (None if
it did not load: the child then unpickles it itself and reports the error)."""


def _fork(warm: bytes | None, fds: list[int], channel: socket.socket, children: set[int]) -> None:
    """Fork a spare on ``fds``: it reports its pid, then waits for its task and runs it."""
    if warm is not None and not (_WARMED and _WARMED[0][0] == warm):
        loaded = None
        with contextlib.suppress(Exception):  # the child will say what fails, as its error
            loaded = pickle.loads(warm)
        _WARMED[:] = [(warm, loaded if isinstance(loaded, Task) else None)]
    commands_r, events_w = fds
    me = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; coverage never sees os._exit
        try:
            channel.close()
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, signal.SIG_DFL)
            engine._become_child(me, ())
            write_frame(events_w, ("pid", os.getpid()))
            engine._child_main(_run_task, engine.Channel(commands_r, events_w))
        finally:
            os._exit(engine.EXIT_UNREPORTED)
    with contextlib.suppress(OSError):  # the child does it too
        os.setpgid(pid, pid)
    os.close(commands_r)
    os.close(events_w)
    children.add(pid)


def _run_task(channel: engine.Channel) -> Any:
    """The spare's body: wait for the task (a pickle of a ``Task``) and run it, with the
    node id of the test that forked it, which every process the target starts inherits
    (``leasecheck._processes`` names the property that left one running)."""
    data, nodeid = channel.receive()
    if nodeid is not None:
        os.environ[NODEID_ENV] = nodeid
    warmed = _WARMED[0] if _WARMED else (b"", None)
    task: Task = warmed[1] if warmed[1] is not None and data == warmed[0] else pickle.loads(data)
    return task(channel)


def _end_all(children: set[int]) -> dict[int, int]:
    """SIGKILL every child's group and reap them all (bounded); their wait statuses."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + engine.DEFAULT_DEADLINE_S
    left, statuses = set(children), {}
    while left and time.monotonic() < deadline:
        for pid in list(left):
            with contextlib.suppress(ChildProcessError):
                reaped, status = os.waitpid(pid, os.WNOHANG)
                if reaped == 0:
                    continue
                statuses[pid] = status
            left.discard(pid)
        if left:
            time.sleep(0.005)
    return statuses
