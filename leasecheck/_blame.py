"""Whose failure an exception is: leasecheck's own code, or what it checks.

A property fails with an ``AssertionError`` when it judged the target (the library, the
lease worker) and found it wrong: VIOLATED. Any other exception is either something the
target raised (a library's ``KeyError`` out of its own code is what the library did, and
is judged as such) or a bug of leasecheck itself: a ``KeyError`` raised by a harness's
own lookup says nothing of the target, and suite.md makes it exit 2 ("leasecheck itself
could not do its job"), never VIOLATED.

The raising code decides: the innermost frame of the traceback that is not the standard
library's (``json.loads`` on leasecheck's own records raises inside ``json``, on
leasecheck's behalf). If that frame is in leasecheck's package (the harnesses, models,
properties and bundled adapters, through the package's symlinks too) but not in the
bundled target (``queue_impl``, which is what is checked), the failure is leasecheck's.
An ``AdapterError`` is an adapter's deliberate word about its library (a dropped
enqueue, an unsupported verb), so it stays the library's.

It is asked for the ``queue.*`` properties (a library through its adapter): the
``lease.*`` and ``job.*`` properties judge a target file whose outputs leasecheck's own
code parses, where what a target returned can surface as leasecheck's ``KeyError``.
"""

from __future__ import annotations

import functools
import sysconfig
import traceback
from pathlib import Path

import leasecheck
from leasecheck.crash_harness.engine import ErrorInfo

__all__ = ["HARNESS_CHANGE", "HarnessFailure", "child_harness_problem", "harness_problem"]

HARNESS_CHANGE = (
    "this is a bug of leasecheck, not of what it checks: report it with this message "
    "(the property was not judged)"
)
_TARGETS = ("queue_impl",)
"""Folders of leasecheck's package that hold what is checked, not what checks."""


class HarnessFailure(RuntimeError):
    """leasecheck's own code failed where it was seen (a forked child's error, carried
    back as data); the message is ``child_harness_problem``'s, said as it is."""


@functools.cache
def _roots() -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """leasecheck's own folders (resolved, symlinked ones too) and its bundled targets'."""
    package = Path(leasecheck.__file__).parent
    own = [package.resolve(), *(c.resolve() for c in package.iterdir() if c.is_symlink())]
    targets = [(package / name).resolve() for name in _TARGETS]
    return tuple(own), tuple(targets)


@functools.cache
def _stdlib() -> tuple[Path, ...]:
    paths = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib")}
    return tuple(Path(path).resolve() for path in paths)


def _within(path: Path, roots: tuple[Path, ...]) -> bool:
    return any(path.is_relative_to(root) for root in roots)


def _raised_in(frames: list[tuple[str, int]]) -> tuple[Path, int] | None:
    """The innermost frame (file, line) of a traceback that is not the stdlib's."""
    for filename, line in reversed(frames):
        path = Path(filename).resolve()
        site = "site-packages" in path.parts or "dist-packages" in path.parts
        if site or not _within(path, _stdlib()):
            return path, line
    return None


def _own(classes: tuple[str, ...], frames: list[tuple[str, int]], text: str) -> str | None:
    if "AssertionError" in classes or "AdapterError" in classes:
        return None
    raised = _raised_in(frames)
    own, targets = _roots()
    if raised is None or not _within(raised[0], own) or _within(raised[0], targets):
        return None
    path, line = raised
    where = path.relative_to(next(root for root in own if path.is_relative_to(root)).parent)
    return f"leasecheck's own code raised {text} ({where}:{line})"


def harness_problem(error: BaseException) -> str | None:
    """What leasecheck's own code raised, when ``error`` is its failure (not an
    assertion, not an adapter's word, raised in leasecheck's code); else None."""
    if isinstance(error, HarnessFailure):
        return str(error)
    if not isinstance(error, Exception):
        return None
    classes = tuple(klass.__name__ for klass in type(error).__mro__)
    frames = [(f.filename, f.lineno or 0) for f in traceback.extract_tb(error.__traceback__)]
    return _own(classes, frames, f"{type(error).__name__}: {error}")


def child_harness_problem(info: ErrorInfo) -> str | None:
    """The same for what a forked child raised (``ErrorInfo``: its classes and frames)."""
    return _own(info.classes, list(info.frames), info.describe())
