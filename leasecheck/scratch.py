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

__all__ = ["scratch_dir", "scratch_root"]


def scratch_root() -> Path | None:
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
