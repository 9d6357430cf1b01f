"""leasecheck's own needs, checked before a run starts: scratch space and output paths.

A full disk, an unwritable scratch directory or a report path that cannot be written
is leasecheck failing to do its job, never a property violated (suite.md: exit 2, the
cause and what to do). They are checked first, so that a 45 s run does not end in a
traceback about its report path.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from leasecheck.targets.scratch import SCRATCH_ENV, scratch_root

__all__ = ["MIN_FREE_BYTES", "SetupError", "check_output", "check_scratch", "resource_problem"]

MIN_FREE_BYTES = 64 * 1024 * 1024
"""A run writes SQLite files, logs and (with servers) data directories in scratch."""
_SQLITE_FULL = 13
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
MORE_SPACE = (
    f"free space there, or set {SCRATCH_ENV} to a directory on a disk with at least "
    f"{MIN_FREE_BYTES // 2**20} MiB free"
)


class SetupError(Exception):
    """leasecheck cannot do its job here; the message says why and what to do (exit 2)."""


def check_scratch() -> Path:
    """The scratch root a run will use, once it is known to be writable with room."""
    root = scratch_root() or Path(tempfile.gettempdir())
    try:
        probe = Path(tempfile.mkdtemp(prefix="leasecheck-probe-", dir=root))
    except OSError as error:
        raise SetupError(_scratch_message(root, error)) from None
    try:
        with (probe / "probe").open("wb") as stream:
            stream.write(b"\0" * 65536)
            stream.flush()
            os.fsync(stream.fileno())
    except OSError as error:
        raise SetupError(_scratch_message(root, error)) from None
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    stats = os.statvfs(root)
    free = stats.f_bavail * stats.f_frsize
    if free < MIN_FREE_BYTES:
        raise SetupError(
            f"the scratch directory {str(root)!r} has only {free // 2**20} MiB free; {MORE_SPACE}"
        )
    return root


def _scratch_message(root: Path, error: OSError) -> str:
    if error.errno in _DISK_FULL:
        return f"the scratch directory {str(root)!r} is full ({error.strerror}); {MORE_SPACE}"
    return (
        f"cannot write in the scratch directory {str(root)!r} ({error.strerror}); make it "
        f"writable or set {SCRATCH_ENV} to a writable directory"
    )


def check_output(option: str, path: Path, *, directory: bool) -> Path:
    """``path`` (a directory to create, or a file to write) can be written: a probe file
    is created and removed where the output will go."""
    folder = path if directory else path.parent
    if directory and path.exists() and not path.is_dir():
        raise SetupError(f"{option} {str(path)!r} is a file; pass a directory")
    if not directory and path.is_dir():
        raise SetupError(f"{option} {str(path)!r} is a directory; pass a file path")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".leasecheck-probe-"):
            pass
    except OSError as error:
        raise SetupError(
            f"{option} {str(path)!r} cannot be written ({error.strerror}: "
            f"{error.filename or folder}); pass a path in a writable directory"
        ) from None
    return path.resolve()


def resource_problem(error: BaseException) -> str | None:
    """ "the disk is full" when ``error`` (or an error it was raised from) is an out-of-space
    error of the OS or of SQLite: leasecheck's environment failed, not the target."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _DISK_FULL:
            return f"the disk is full ({current.strerror}: {current.filename or '?'})"
        if isinstance(current, sqlite3.Error) and (
            getattr(current, "sqlite_errorcode", None) == _SQLITE_FULL
        ):
            return f"the disk is full (SQLite: {current})"
        current = current.__cause__ or current.__context__
    return None
