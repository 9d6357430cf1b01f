"""Cooperative locks for the thread scheduler, and a target module loaded to use them.

The scheduler (``stateful_tests.thread_scheduler``) runs one thread at a time. A
real ``threading.Lock`` held by a paused thread would block the running one in the
OS, where the scheduler cannot see it; so the target's module is loaded a second
time (``instrument``) with its ``threading`` replaced by a namespace whose
``Lock``, ``RLock``, ``Condition``, ``Semaphore``, ``BoundedSemaphore`` and ``Event`` are
the classes below (``Event`` built, as CPython's is, on a Condition). They keep their state
in plain attributes and ask the scheduler, through ``Switcher``, to switch before
an acquire and after a release, and to park a thread that waits: a thread blocked
on a held lock is known to be blocked because the lock says so, never because it
went quiet.

Outside the scheduled threads (a scenario's opening steps, the final views) the
same objects act as ordinary locks for the one thread that runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import threading
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, Protocol

from leasecheck.targets.loader import execute

__all__ = [
    "CoopBoundedSemaphore",
    "CoopCondition",
    "CoopEvent",
    "CoopLock",
    "CoopRLock",
    "CoopSemaphore",
    "Switcher",
    "active",
    "caller_in",
    "install",
    "instrument",
    "scheduled",
]

_REAL_LOCK = type(threading.Lock())
_REAL_RLOCK = type(threading.RLock())


class Switcher(Protocol):
    """What the primitives need from the scheduler that runs the calling thread."""

    def point(self, kind: str, subject: object) -> None:
        """A scheduling point just before (acquire) or after (release) touching a lock."""

    def block(self, subject: object, timed: bool) -> bool:
        """Park the calling thread until ``wake(subject)``; False if a timed wait ran out."""

    def wake(self, subject: object) -> None:
        """Every thread parked on ``subject`` may run again (and re-check)."""

    def yielded(self) -> None:
        """The calling thread found a lock held and did not wait (it spins)."""

    def name(self) -> str:
        """The calling thread's scheduler name (T1, T2, ...)."""


_ACTIVE: list[Switcher | None] = [None]
_SCHEDULED = threading.local()


def install(switcher: Switcher | None) -> None:
    """Make ``switcher`` the scheduler the primitives talk to (None: none)."""
    _ACTIVE[0] = switcher


def active() -> Switcher | None:
    """The scheduler installed now, if any."""
    return _ACTIVE[0]


def scheduled(flag: bool) -> None:
    """Mark the calling OS thread as one the active scheduler runs (or not)."""
    _SCHEDULED.on = flag


def _switcher() -> Switcher | None:
    active = _ACTIVE[0]
    return active if active is not None and getattr(_SCHEDULED, "on", False) else None


class CoopLock:
    """``threading.Lock`` for scheduled threads: acquire and release are scheduling points."""

    reentrant = False

    def __init__(self) -> None:
        self.owner: str | None = None
        self.count = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        switcher = _switcher()
        me = switcher.name() if switcher else "main"
        if switcher:
            switcher.point("acquire", self)
        while self.owner is not None and not (self.reentrant and self.owner == me):
            if switcher is None:
                raise RuntimeError(
                    f"a lock of the target is still held by {self.owner} after every "
                    f"scheduled thread returned; each acquire needs its release"
                )
            if not blocking:
                switcher.yielded()
                return False
            if not switcher.block(self, timed=timeout is not None and timeout >= 0):
                return False
        self.owner, self.count = me, self.count + 1
        return True

    def release(self) -> None:
        if self.owner is None:
            raise RuntimeError("release unlocked lock")
        switcher = _switcher()
        if self.reentrant and self.owner != (switcher.name() if switcher else "main"):
            raise RuntimeError("cannot release un-acquired lock")
        self.count -= 1
        if self.count:
            return
        self.owner = None
        if switcher:
            switcher.wake(self)
            switcher.point("release", self)

    def locked(self) -> bool:
        return self.owner is not None

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _release_all(self) -> int:
        """Release fully (for ``Condition.wait``); the count to restore."""
        count, self.count = self.count, 1
        self.release()
        return count

    def _restore(self, count: int) -> None:
        self.acquire()
        self.count = count


class CoopRLock(CoopLock):
    """``threading.RLock`` for scheduled threads."""

    reentrant = True


class CoopCondition:
    """``threading.Condition`` over a cooperative lock; notified waiters re-acquire it."""

    def __init__(self, lock: CoopLock | None = None) -> None:
        self.lock = lock if lock is not None else CoopRLock()
        self.waiters: list[str] = []
        self.acquire = self.lock.acquire
        self.release = self.lock.release

    def __enter__(self) -> bool:
        return self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()

    def wait(self, timeout: float | None = None) -> bool:
        switcher = _switcher()
        if switcher is None:
            raise RuntimeError("Condition.wait outside the scheduled threads would wait forever")
        me = switcher.name()
        if self.lock.owner != me:
            raise RuntimeError("cannot wait on un-acquired lock")
        self.waiters.append(me)
        count = self.lock._release_all()
        notified = True
        while me in self.waiters and notified:
            notified = switcher.block(self, timed=timeout is not None)
        if me in self.waiters:
            self.waiters.remove(me)
        self.lock._restore(count)
        return notified

    def wait_for(self, predicate: Any, timeout: float | None = None) -> Any:
        result = predicate()
        while not result:
            if not self.wait(timeout) and timeout is not None:
                return predicate()
            result = predicate()
        return result

    def notify(self, n: int = 1) -> None:
        del self.waiters[:n]
        switcher = _switcher()
        if switcher:
            switcher.wake(self)

    def notify_all(self) -> None:
        self.notify(len(self.waiters))

    notifyAll = notify_all


class CoopSemaphore:
    """``threading.Semaphore`` for scheduled threads, kept like ``CoopLock``: acquire and
    release are scheduling points, and a thread that wants a permit while there is none
    is parked (the scheduler sees it blocked, and does not choose it: ``held``)."""

    def __init__(self, value: int = 1) -> None:
        if value < 0:
            raise ValueError("semaphore initial value must be >= 0")
        self._value = value

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        if not blocking and timeout is not None:
            raise ValueError("can't specify timeout for non-blocking acquire")
        switcher = _switcher()
        if switcher:
            switcher.point("acquire", self)
        while self._value == 0:
            if switcher is None:
                raise RuntimeError(
                    "a semaphore of the target has no permit left after every scheduled "
                    "thread returned; each acquire needs its release"
                )
            if not blocking:
                switcher.yielded()
                return False
            if not switcher.block(self, timed=timeout is not None):
                return False
        self._value -= 1
        return True

    def __enter__(self) -> bool:
        return self.acquire()

    def release(self, n: int = 1) -> None:
        if n < 1:
            raise ValueError("n must be one or more")
        self._add(n)
        switcher = _switcher()
        if switcher:
            switcher.wake(self)
            switcher.point("release", self)

    def _add(self, n: int) -> None:
        self._value += n

    def __exit__(self, *exc: object) -> None:
        self.release()


class CoopBoundedSemaphore(CoopSemaphore):
    """``threading.BoundedSemaphore``: releasing past the initial value is a ValueError."""

    def __init__(self, value: int = 1) -> None:
        super().__init__(value)
        self._initial_value = value

    def _add(self, n: int) -> None:
        if self._value + n > self._initial_value:
            raise ValueError("Semaphore released too many times")
        super()._add(n)


class CoopEvent:
    """``threading.Event`` over a cooperative Condition."""

    def __init__(self) -> None:
        self._cond = CoopCondition(CoopLock())
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    isSet = is_set

    def set(self) -> None:
        with self._cond:
            self._flag = True
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        with self._cond:
            signaled = self._flag
            if not signaled:
                signaled = self._cond.wait(timeout)
            return signaled


def _namespace() -> ModuleType:
    """A ``threading`` module whose locks are the cooperative ones (the rest is real)."""
    fake = ModuleType("threading")
    fake.__dict__.update(threading.__dict__)
    fake.Lock = CoopLock  # type: ignore[attr-defined]
    fake.RLock = CoopRLock  # type: ignore[attr-defined]
    fake.Condition = CoopCondition  # type: ignore[attr-defined]
    fake.Semaphore = CoopSemaphore  # type: ignore[attr-defined]
    fake.BoundedSemaphore = CoopBoundedSemaphore  # type: ignore[attr-defined]
    fake.Event = CoopEvent  # type: ignore[attr-defined]
    return fake


_THREADING = _namespace()
_SWAP: dict[int, object] = {
    id(threading): _THREADING,
    id(threading.Lock): CoopLock,
    id(threading.RLock): CoopRLock,
    id(threading.Condition): CoopCondition,
    id(threading.Semaphore): CoopSemaphore,
    id(threading.BoundedSemaphore): CoopBoundedSemaphore,
    id(threading.Event): CoopEvent,
}


def _swapped(value: object) -> object:
    """The cooperative stand-in for a threading name or a primitive made at import time."""
    if isinstance(value, _REAL_LOCK):
        return CoopLock()
    if isinstance(value, _REAL_RLOCK):
        return CoopRLock()
    if isinstance(value, threading.BoundedSemaphore):
        bounded = CoopBoundedSemaphore(value._initial_value)  # type: ignore[attr-defined]
        bounded._value = value._value
        return bounded
    if isinstance(value, threading.Semaphore):
        plain = CoopSemaphore()
        plain._value = value._value
        return plain
    if isinstance(value, threading.Event):
        event = CoopEvent()
        event._flag = value.is_set()
        return event
    return _SWAP.get(id(value), value)


def _patch(namespace: dict[str, Any]) -> None:
    for key, value in list(namespace.items()):
        namespace[key] = _swapped(value)


def _load(file: Path) -> ModuleType:
    source = file.read_bytes()
    digest = hashlib.sha256(str(file).encode() + source).hexdigest()[:16]
    name = f"leasecheck_interleaved_{file.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None, file
    module = execute(spec)
    _patch(module.__dict__)
    for value in list(vars(module).values()):
        if isinstance(value, type) and value.__module__ == name:
            for key, attr in list(vars(value).items()):
                if _swapped(attr) is not attr:
                    setattr(value, key, _swapped(attr))
    return module


def instrument(cls: type[Any]) -> tuple[type[Any], str]:
    """``cls`` from a second copy of its module whose locks are cooperative, and the
    module's file (the one whose lines are scheduling points)."""
    source = inspect.getsourcefile(cls)
    if source is None:
        raise TypeError(f"{cls!r} has no source file, so its lines cannot be scheduled")
    file = Path(source).resolve()
    module = _load(file)
    copy = getattr(module, cls.__name__)
    assert isinstance(copy, type)
    return copy, str(file)


def caller_in(file: str) -> FrameType | None:
    """The innermost frame of the calling thread that runs code of ``file``."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename != file:
        frame = frame.f_back
    return frame
