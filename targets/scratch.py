"""Scratch space for SQLite files: tmpfs (``/dev/shm``) when it exists.

Durability tests, where the file must survive a power cut, are not what the
suite checks (SIGKILL leaves the page cache intact), so every queue file lives in
memory-backed storage when the machine has it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["SCRATCH_ENV", "scratch_dir", "scratch_root"]

SCRATCH_ENV = "LEASECHECK_SCRATCH"
"""Set by ``leasecheck check`` to a directory it removes itself, so that files of a test
process it had to kill (a hung or crashed target) do not outlive the run."""


def scratch_root() -> Path | None:
    inherited = os.environ.get(SCRATCH_ENV)
    if inherited and Path(inherited).is_dir():
        return Path(inherited)
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


@contextlib.contextmanager
def scratch_dir(prefix: str = "leasecheck-") -> Iterator[Path]:
    """A fresh directory on tmpfs (or the system temp dir), removed on exit."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=scratch_root()))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
