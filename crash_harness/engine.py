"""The fork engine: real child processes that stop where the harness says, and real SIGKILL.

Every process-level property of leasecheck runs its target code through this one
engine. ``Engine.fork(name, body)`` forks a child from a warm process (no
interpreter start per kill); the child runs ``body(channel)`` and never returns into
pytest: whatever happens it ends with ``os._exit``. The child talks to the harness
over two pipes:

- ``channel.fault`` is the target's ``fault`` hook: it reports the point name and
  blocks until the harness answers *go* (or *raise*), or SIGKILLs it right there;
- ``channel.trace`` can be installed with ``con.set_trace_callback`` and does the
  same for every SQL statement, so a scenario can hold a process just before its
  ``BEGIN``;
- ``channel.fault_until(point)`` is a ``fault`` hook that blocks only at ``point``
  and reports every other point it passes as a ``passed`` message without waiting
  (what the harness sees is the same as answering *go* to each: one round trip less
  per point passed);
- ``channel.send`` reports an event without waiting (e.g. each acknowledged
  operation in a random history), ``channel.receive`` waits for a command;
- the body's return value, or the exception it raised, is the child's last frame.

Children are forked by the zygote (``crash_harness.zygote``), a small helper process,
when the body is a ``zygote.Task`` (a module-level function and picklable arguments):
a fork from a small process is cheap however large the test process has grown.
The harness still talks to the child over the same pipes, SIGKILLs it by pid and
group, and gets its wait status from the zygote. Any other body (a closure) is
forked from the test process itself.

The harness side (``Child``) only ever waits through a poll with a deadline. A wait
that runs out raises ``HarnessTimeout`` naming what it waited for; a child that
exits, crashes or is killed by someone else while the harness expects a message
raises ``ChildDied`` with its exit status or signal. Both are ``AssertionError``s: a
target that hangs, calls ``os._exit`` or segfaults gets a named verdict, never a
hang. ``Child.kill`` sends SIGKILL, reaps the child and checks that SIGKILL is what
ended it. ``Engine.close`` (also on an exception, as a context manager) kills and
reaps every child still alive and every descendant they started (psutil).

Children must not touch the parent's SQLite connections: a body opens its own
connection after the fork (``module.open_queue(path)``). Forking from a process with
threads (pytest-xdist, Hypothesis) is safe as long as the child only runs target
calls and pipe I/O, which is all a body should do.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import select
import signal
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

from leasecheck.crash_harness._wire import (
    FrameReader,
    read_frame_blocking,
    write_frame,
    write_frames,
)
from leasecheck.models.contracts import InjectedFault

__all__ = [
    "DEFAULT_DEADLINE_S",
    "GO",
    "RAISE",
    "Channel",
    "Child",
    "ChildDied",
    "ChildResult",
    "Engine",
    "ErrorInfo",
    "HarnessError",
    "HarnessTimeout",
    "InjectedFault",
    "Message",
    "PointNotReached",
    "describe_status",
]

DEFAULT_DEADLINE_S: Final = 10.0
"""How long the harness waits for one message from a child (a healthy step takes ms)."""
GO: Final = "go"
RAISE: Final = "raise"
EXIT_REPORTED: Final = 0
"""Exit status of a child whose body's result (value or exception) reached the harness."""
EXIT_UNREPORTED: Final = 70
EXIT_ORPHANED: Final = 71
FINAL_KINDS: Final = frozenset({"return", "raise"})

_PARENT_SIDE_FDS: set[int] = set()
"""Harness-side pipe ends of every live child: a newly forked child closes them all."""


def _find_prctl() -> Callable[..., int] | None:
    """libc's prctl, to make children die with the harness (Linux); None elsewhere."""
    try:
        function: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: children then rely on pipe EOF alone
        return None
    return function


_prctl = _find_prctl()
_PR_SET_PDEATHSIG = 1


class HarnessError(AssertionError):
    """A process-level verdict from the engine: a timeout, an unexpected death, a missed point."""


class HarnessTimeout(HarnessError):
    """A bounded wait ran out; the message names what the harness waited for."""


class ChildDied(HarnessError):
    """A child ended (exit, crash, foreign signal) while the harness expected it to talk."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class PointNotReached(HarnessError):
    """The child's operation ended without passing the fault point the harness waited for."""


@dataclass(frozen=True)
class ErrorInfo:
    """An exception raised in a child, as plain data (the exception itself may not pickle)."""

    type_name: str
    classes: tuple[str, ...]
    message: str
    traceback: str
    frames: tuple[tuple[str, int], ...] = ()
    """(file, line) of each frame of the traceback, innermost last: where it was raised."""

    @classmethod
    def from_exception(cls, error: BaseException) -> ErrorInfo:
        return cls(
            type_name=type(error).__name__,
            classes=tuple(klass.__name__ for klass in type(error).__mro__),
            message=str(error),
            traceback="".join(traceback.format_exception(error)),
            frames=tuple(
                (frame.filename, frame.lineno or 0)
                for frame in traceback.extract_tb(error.__traceback__)
            ),
        )

    def is_a(self, name: str) -> bool:
        """True if ``name`` is the error's class or one of its bases (by class name)."""
        return name in self.classes

    @property
    def busy(self) -> bool:
        """SQLite gave up waiting for a lock (``timeout=1``): contention, not a wrong answer."""
        text = self.message.lower()
        return self.is_a("OperationalError") and ("locked" in text or "busy" in text)

    def describe(self) -> str:
        return f"{self.type_name}: {self.message}"


@dataclass(frozen=True)
class ChildResult:
    """What a child's body did: returned ``value`` or raised ``error``."""

    value: Any = None
    error: ErrorInfo | None = None

    @property
    def raised(self) -> bool:
        return self.error is not None

    @property
    def busy(self) -> bool:
        return self.error is not None and self.error.busy

    def describe(self) -> str:
        return f"raised {self.error.describe()}" if self.error else f"returned {self.value!r}"


@dataclass(frozen=True)
class Message:
    """One frame from a child: ``point``/``stmt`` (blocked, waits for an answer), ``event``
    and ``passed`` (a point passed without waiting, ``fault_until``; no answer),
    ``return``/``raise`` (the last one)."""

    kind: str
    value: Any

    @property
    def blocking(self) -> bool:
        return self.kind in ("point", "stmt")


def describe_status(status: int) -> str:
    """A waitpid status as words: 'exited with status 3', 'was killed by SIGSEGV'."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(number).name}"
        return f"was killed by signal {number}"
    if os.WIFEXITED(status):
        return f"exited with status {os.WEXITSTATUS(status)}"
    return f"ended with wait status {status}"


# --- the child side ------------------------------------------------------------------------


class Channel:
    """The child's end of the pipes."""

    def __init__(self, commands_fd: int, events_fd: int) -> None:
        self._commands = commands_fd
        self._events = events_fd

    def send(self, kind: str, value: Any = None) -> None:
        """Report without waiting for an answer."""
        write_frame(self._events, (kind, value))

    def receive(self) -> Any:
        """Wait for the harness's next command; if the harness is gone, exit at once."""
        ok, value = read_frame_blocking(self._commands)
        if not ok:
            os._exit(EXIT_ORPHANED)
        return value

    def ask(self, kind: str, value: Any = None) -> Any:
        self.send(kind, value)
        return self.receive()

    def fault(self, point: str) -> None:
        """The target's ``fault`` hook: report ``point``, block until the harness answers."""
        if self.ask("point", point) == RAISE:
            raise InjectedFault(f"fault injected by the harness at {point!r}")

    def fault_until(self, stop: str) -> Callable[[str], None]:
        """A ``fault`` hook that blocks (like ``fault``) only at ``stop``; any other point is
        reported as ``("passed", point)`` and the call returns at once, as it would after
        the harness's *go*."""

        def hook(point: str) -> None:
            if point == stop:
                self.fault(point)
            else:
                self.send("passed", point)

        return hook

    def trace(self, statement: str) -> None:
        """A ``set_trace_callback`` hook: report each SQL statement before it runs, and wait."""
        self.ask("stmt", statement)


def _child_main(body: Callable[[Channel], Any], channel: Channel) -> None:
    """Run ``body`` and report its result; never return (``os._exit`` in every case)."""
    code = EXIT_UNREPORTED
    try:
        try:
            value = body(channel)
        except BaseException as error:  # the child reports everything, even SystemExit
            channel.send("raise", ErrorInfo.from_exception(error))
        else:
            try:
                channel.send("return", value)
            except Exception as error:  # an unpicklable result
                channel.send("raise", ErrorInfo.from_exception(error))
        code = EXIT_REPORTED
    finally:
        os._exit(code)


def _become_child(parent_pid: int, own_fds: Iterable[int]) -> None:
    """Right after the fork: drop every harness-side fd and die with the harness."""
    for fd in _PARENT_SIDE_FDS | set(own_fds):
        with contextlib.suppress(OSError):
            os.close(fd)
    _PARENT_SIDE_FDS.clear()
    faulthandler.disable()  # a crashing target is reported by its wait status, not a dump
    os.setpgid(0, 0)  # a group of its own: one killpg ends it and all it started
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the harness died before prctl took effect
        os._exit(EXIT_ORPHANED)


# --- the harness side ----------------------------------------------------------------------


class Child:
    """A forked child, seen from the harness."""

    def __init__(
        self,
        name: str,
        pid: int,
        events_fd: int,
        commands_fd: int,
        deadline_s: float,
        reaper: Callable[[int], int] | None = None,
        reader: FrameReader | None = None,
    ):
        self.name = name
        self.pid = pid
        self.deadline_s = deadline_s
        self.status: int | None = None
        """The waitpid status once reaped."""
        self.events: list[Any] = []
        """Values of ``event`` messages seen while waiting for something else."""
        self._fds: dict[str, int] = {"events": events_fd, "commands": commands_fd}
        pidfd = _pidfd_open(pid)
        if pidfd is not None:
            self._fds["pidfd"] = pidfd
        _PARENT_SIDE_FDS.update(self._fds.values())
        self._reader = reader or FrameReader()
        self._eof = False
        self._reaper = reaper
        """Who collects the wait status: the zygote that forked the child, or waitpid here."""

    def __repr__(self) -> str:
        return f"<Child {self.name!r} pid={self.pid} status={self.status}>"

    @property
    def reaped(self) -> bool:
        return self.status is not None

    def _close(self, *names: str) -> None:
        for name in names:
            fd = self._fds.pop(name, None)
            if fd is not None:
                _PARENT_SIDE_FDS.discard(fd)
                with contextlib.suppress(OSError):
                    os.close(fd)

    # -- receiving --

    def _pop(self) -> Message | None:
        ok, frame = self._reader.pop()
        return Message(*frame) if ok else None

    def _fill(self, deadline: float) -> bool:
        """Read what the pipe holds, waiting until ``deadline``; False if nothing came."""
        fd = self._fds.get("events")
        remaining = deadline - time.monotonic()
        if fd is None or self._eof or remaining <= 0:
            return False
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        if not poller.poll(max(1, int(remaining * 1000))):
            return False
        data = os.read(fd, 1 << 16)
        if data:
            self._reader.feed(data)
        else:
            self._eof = True
        return True

    def next(self, waiting_for: str, deadline_s: float | None = None) -> Message:
        """The child's next message; ``waiting_for`` completes 'while the harness waited for …'."""
        budget = deadline_s if deadline_s is not None else self.deadline_s
        deadline = time.monotonic() + budget
        while True:
            message = self._pop()
            if message is not None:
                return message
            if self._eof or "events" not in self._fds:
                self._reap(deadline, waiting_for)
                assert self.status is not None
                raise ChildDied(
                    f"child {self.name!r} (pid {self.pid}) {describe_status(self.status)} "
                    f"while the harness waited for {waiting_for}",
                    self.status,
                )
            if not self._fill(deadline):
                raise HarnessTimeout(
                    f"timed out after {budget:g} s waiting for {waiting_for} from child "
                    f"{self.name!r} (pid {self.pid}); it was still running and is killed now "
                    f"(does the target block or loop forever?)"
                )

    def poll_message(self, wait_s: float, waiting_for: str) -> Message | None:
        """The child's next message if one arrives within ``wait_s``, else None.

        For schedulers that read silence as "blocked on a lock": unlike ``next`` a
        short wait that runs out is not an error. A child that died raises ChildDied.
        """
        deadline = time.monotonic() + wait_s
        while True:
            message = self._pop()
            if message is not None:
                return message
            if self._eof or "events" not in self._fds:
                return self.next(waiting_for)  # raises ChildDied with the status
            if not self._fill(deadline):
                return self._pop()

    def answer(self, reply: Any = GO) -> None:
        """Answer a blocking message (a fault point or a statement), or send a command."""
        fd = self._fds.get("commands")
        if fd is None:
            raise HarnessError(f"child {self.name!r} (pid {self.pid}) has ended; cannot answer")
        write_frame(fd, reply)

    def send_commands(self, commands: Iterable[Any]) -> None:
        """Send several commands at once (one write): the child reads each when it asks."""
        fd = self._fds.get("commands")
        if fd is None:
            raise HarnessError(f"child {self.name!r} (pid {self.pid}) has ended; cannot answer")
        write_frames(fd, commands)

    def run_to_point(self, point: str, op: str) -> list[str]:
        """Let the child run (answering go) until it blocks at ``point``; the points passed.

        The child stays blocked at ``point`` until ``answer`` or ``kill``.
        """
        passed: list[str] = []
        reached = self.run_until(
            lambda m: m.kind == "point" and m.value == point,
            f"{op} to reach fault point {point!r}",
            passed,
        )
        if isinstance(reached, ChildResult):
            raise PointNotReached(
                f"{op} {reached.describe()} without calling fault({point!r}); the hook "
                f"points it passed: {passed or 'none'}"
            )
        return passed

    def run_until(
        self, match: Callable[[Message], bool], waiting_for: str, passed: list[str] | None = None
    ) -> Message | ChildResult:
        """Answer go to everything until a message ``match``es (returned, not answered) or the
        body ends (its ``ChildResult``, the child reaped). ``passed`` collects the points passed."""
        points = passed if passed is not None else []
        while True:
            message = self.next(waiting_for)
            if match(message):
                return message
            if message.kind in FINAL_KINDS:
                self._collect_final(waiting_for)
                return _outcome(message)
            self._pass(message, points)

    def _pass(self, message: Message, passed: list[str]) -> None:
        if message.kind in ("point", "passed"):
            passed.append(message.value)
        elif message.kind == "event":
            self.events.append(message.value)
        if message.blocking:
            self.answer(GO)

    def outcome(self, waiting_for: str, deadline_s: float | None = None) -> ChildResult:
        """Answer go to every point and statement until the body returns or raises; reap."""
        while True:
            message = self.next(waiting_for, deadline_s)
            if message.kind in FINAL_KINDS:
                self._collect_final(waiting_for)
                return _outcome(message)
            self._pass(message, [])

    def _collect_final(self, waiting_for: str) -> None:
        """After the last frame the child exits by itself: reap it and check its status."""
        self._reap(time.monotonic() + self.deadline_s, f"the exit that follows {waiting_for}")
        assert self.status is not None
        if not (os.WIFEXITED(self.status) and os.WEXITSTATUS(self.status) == EXIT_REPORTED):
            raise ChildDied(
                f"child {self.name!r} (pid {self.pid}) reported its result and then "
                f"{describe_status(self.status)}",
                self.status,
            )

    # -- ending --

    def kill(self, meanwhile: Callable[[], object] | None = None) -> list[Message]:
        """SIGKILL the child, reap it, check SIGKILL ended it; the messages it sent before dying.

        ``meanwhile`` runs between the signal and the wait for the death: the kernel tears
        the child's memory down before it releases its files' locks, and that takes about
        as long as preparing the next case (docs/processes.md)."""
        if self.reaped:
            raise HarnessError(f"child {self.name!r} (pid {self.pid}) is already reaped")
        self._kill_group()
        if meanwhile is not None:
            meanwhile()
        self._reap(time.monotonic() + self.deadline_s, "its death after SIGKILL")
        assert self.status is not None
        if not (os.WIFSIGNALED(self.status) and os.WTERMSIG(self.status) == signal.SIGKILL):
            raise ChildDied(
                f"child {self.name!r} (pid {self.pid}) was sent SIGKILL but "
                f"{describe_status(self.status)}",
                self.status,
            )
        return self.drain()

    def drain(self) -> list[Message]:
        """Every whole frame left in the pipe of a reaped child (a torn tail is dropped)."""
        deadline = time.monotonic() + self.deadline_s
        while self._fill(deadline):
            pass
        left: list[Message] = []
        while (message := self._pop()) is not None:
            left.append(message)
        self._close("events")
        return left

    def _reap(self, deadline: float, waiting_for: str) -> None:
        if self.reaped:
            return
        if not self._wait_exit(deadline):
            raise HarnessTimeout(
                f"timed out waiting for {waiting_for} of child {self.name!r} (pid {self.pid}); "
                f"it is still running and is killed now"
            )
        self._kill_group()  # the leader is a zombie at worst, so the group id is still ours
        if self.status is None:
            self.status = self._waitpid()
        self._close("commands", "pidfd")

    def _kill_group(self) -> None:
        """SIGKILL the child's process group: the child and every process it started.

        Only called before the child is reaped: until then no one else can own the id.
        """
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:  # the group was not set up (setpgid raced): the child alone
            os.kill(self.pid, signal.SIGKILL)

    def _waitpid(self) -> int:
        """The wait status of the exited child (its zygote reaps it, or this process)."""
        if self._reaper is not None:
            return self._reaper(self.pid)
        return os.waitpid(self.pid, 0)[1]

    def _wait_exit(self, deadline: float) -> bool:
        """Wait (bounded) until the process has exited; True once it has."""
        pidfd = self._fds.get("pidfd")
        if pidfd is None and self._reaper is not None:  # a zygote's child: watch it turn zombie
            import psutil  # here, not at the top: see _sweep

            while time.monotonic() < deadline:
                with contextlib.suppress(psutil.NoSuchProcess):
                    if psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE:
                        time.sleep(0.001)
                        continue
                return True
            return False
        if pidfd is None:  # no pidfd (old kernel): poll waitpid until the deadline
            while time.monotonic() < deadline:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.status = status
                    return True
                time.sleep(0.001)
            return False
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        remaining = deadline - time.monotonic()
        return remaining > 0 and bool(poller.poll(max(1, int(remaining * 1000))))

    def force_end(self) -> str | None:
        """Cleanup path: SIGKILL the child's group and reap it; a problem, or None."""
        problem = None
        if not self.reaped:
            self._kill_group()
            if self._wait_exit(time.monotonic() + self.deadline_s):
                if self.status is None:
                    try:
                        self.status = self._waitpid()
                    except HarnessError as error:  # its zygote is gone: say so, end the rest
                        problem = str(error)
            else:
                problem = f"child {self.name!r} (pid {self.pid}) survived SIGKILL"
        self._close("events", "commands", "pidfd")
        return problem


def _outcome(message: Message) -> ChildResult:
    return (
        ChildResult(error=message.value) if message.kind == "raise" else ChildResult(message.value)
    )


def _sweep(groups: set[int]) -> list[int]:
    """psutil: kill and wait for any process below this one still in one of ``groups``.

    The zygote and its spare are not ours to sweep: on a busy machine the pids wrap
    (``pid_max`` may be 32768), and a spare can lead a group whose number an ended
    child of this engine once had. Nor is a zombie: a child of the zygote that the
    engine has reaped stays one until the zygote reads its release.

    psutil is imported here and not with this module, which the zygote imports too:
    psutil brings ``threading``, whose at-fork handler would run in every child the
    zygote forks (about 0.5 ms and 120 copied pages each, docs/processes.md).

    The groups are first asked of the kernel (``_groups_empty``): psutil's walk reads
    every process of the machine, 1 ms with 65 processes and 2.7 ms during a gate
    (2-core AMD EPYC), 249 times in a gate; it runs only when a group still has a process.
    """
    if _groups_empty(groups):
        return []
    import psutil

    from leasecheck.crash_harness import zygote

    helpers = zygote.helper_pids()
    found = []
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error, OSError):
            if process.pid in helpers or process.status() == psutil.STATUS_ZOMBIE:
                continue  # a zombie has ended: a zygote's child waits there for its release
            if os.getpgid(process.pid) in groups:
                process.kill()
                found.append(process)
    psutil.wait_procs(found, timeout=DEFAULT_DEADLINE_S)
    return [process.pid for process in found]


def _groups_empty(groups: set[int]) -> bool:
    """No process, zombie or not, is in any of ``groups``: ``killpg(group, 0)`` finds
    none. A group the kernel still has (a zombie waiting for its release, a number
    reused by another process's group, one we may not signal) needs ``_sweep``'s walk."""
    for group in groups:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            continue
        except OSError:
            return False
        return False
    return True


class Engine:
    """Forks children and guarantees that none outlives the ``with`` block."""

    def __init__(self, deadline_s: float = DEFAULT_DEADLINE_S) -> None:
        self.deadline_s = deadline_s
        self.children: list[Child] = []
        self.forks = 0

    def fork(
        self, name: str, body: Callable[[Channel], Any], commands: Iterable[Any] = ()
    ) -> Child:
        """Start a child running ``body(channel)``; it starts at once.

        A ``zygote.Task`` body is forked by the zygote (a small process, so the fork is
        cheap however large this one has grown); any other body, or a task the zygote
        refuses, is forked from this process. ``commands`` are waiting in the child's
        pipe when it starts (sent with its task in one write), for its ``receive``.
        """
        commands = tuple(commands)
        started = _start_in_zygote(name, body, self.deadline_s, commands)
        if started is None:
            to_child_r, to_child_w = os.pipe()
            to_parent_r, to_parent_w = os.pipe()
            pid = _fork_here(body, (to_child_r, to_parent_w), (to_child_w, to_parent_r))
            os.close(to_child_r)
            os.close(to_parent_w)
            child = Child(name, pid, to_parent_r, to_child_w, self.deadline_s)
            if commands:
                child.send_commands(commands)
        else:
            child = started
        self.children.append(child)
        self.forks += 1
        return child

    def wait_any(self, children: list[Child], waiting_for: str) -> tuple[Child, Message]:
        """The first message from any of ``children`` (one child's death raises ChildDied)."""
        deadline = time.monotonic() + self.deadline_s
        while True:
            for child in children:
                message = child._pop()
                if message is not None:
                    return child, message
                if child._eof:
                    child.next(waiting_for)  # raises ChildDied with the status
            poller = select.poll()
            for child in children:
                if "events" in child._fds:
                    poller.register(child._fds["events"], select.POLLIN | select.POLLHUP)
            remaining = deadline - time.monotonic()
            ready = {fd for fd, _ in poller.poll(max(1, int(remaining * 1000)))}
            if not ready or remaining <= 0:
                names = ", ".join(repr(c.name) for c in children)
                raise HarnessTimeout(
                    f"timed out after {self.deadline_s:g} s waiting for {waiting_for} from "
                    f"children {names}; they are killed now"
                )
            for child in children:
                if child._fds.get("events") in ready:
                    child._fill(deadline)

    def close(self) -> None:
        """Kill and reap every child still running, and everything they started.

        Each child leads its own process group, killed as a whole; a psutil sweep then
        catches anything of those groups still below this process.
        """
        from leasecheck.crash_harness import zygote

        problems = [p for child in self.children if (p := child.force_end())]
        try:  # the zygote reaps every child whose status this engine has: no zombie stays
            zygote.release_reaped()
        except HarnessError as error:
            problems.append(str(error))
        stragglers = _sweep({child.pid for child in self.children})
        self.children.clear()
        if problems:
            raise HarnessError("; ".join(problems))
        if stragglers:
            raise HarnessError(f"processes {stragglers} outlived their group's SIGKILL")

    def __enter__(self) -> Engine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.close()
        except HarnessError:
            if exc is None:  # never hide the error that is already on its way out
                raise


def _fork_here(
    body: Callable[[Channel], Any], child_ends: tuple[int, int], parent_ends: tuple[int, int]
) -> int:
    """Fork the child from this process; its pid."""
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; coverage never sees os._exit
        try:
            _become_child(parent, parent_ends)
            _child_main(body, Channel(*child_ends))
        finally:
            os._exit(EXIT_UNREPORTED)
    with contextlib.suppress(OSError):  # the child does it too; whoever is first wins
        os.setpgid(pid, pid)
    return pid


def _start_in_zygote(
    name: str, body: Callable[[Channel], Any], deadline_s: float, commands: tuple[Any, ...]
) -> Child | None:
    """The child, if the zygote started ``body``; None if it is for this process to fork."""
    from leasecheck.crash_harness import zygote

    travels: object = body  # a Task is a callable too; mypy does not narrow the Callable
    if not isinstance(travels, zygote.Task):
        return None
    helper = zygote.current()
    task = zygote.encode_task(travels) if helper is not None else None
    if helper is None or task is None:
        return None
    started = helper.start(name, task, commands)
    if started is None:
        return None
    pid, events_fd, commands_fd, reader = started
    return Child(name, pid, events_fd, commands_fd, deadline_s, helper.reap, reader)


def _pidfd_open(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
