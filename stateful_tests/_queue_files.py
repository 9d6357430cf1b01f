"""The lease machine's files: one scratch folder per process and target, one queue per example.

Creating a folder, a FIFO and a queue (the schema in a write transaction) for every
example, and removing them all again, cost the machine about a tenth of its time.
``files_for(module)`` makes them once per process and target module instead: a
template queue created by the target's own ``open_queue`` on a new file (so the
"creates both tables" sentence is still exercised by the target), the paths
``run_file`` is pointed at (a missing file, a directory, a FIFO), and each example's
queue is a copy of the template (lease-worker.md: ``open_queue`` "never touches
existing rows", so opening the copy is opening a queue the target created).
``ExampleFiles.remove`` deletes the example's queue and anything a target created
where ``run_file`` must create nothing, so no example sees another's files. The
folder is removed at interpreter exit (and ``leasecheck check`` removes its whole
scratch root itself, should a process be killed).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from leasecheck.targets.scratch import scratch_dir

__all__ = ["ExampleFiles", "files_for"]


@dataclass
class ExampleFiles:
    """The scratch folder of one target module in this process."""

    dir: Path
    template: Path
    missing: Path
    """Never exists (``run_file`` must raise FileNotFoundError and create nothing)."""
    directory: Path
    """An empty directory (not a regular file)."""
    fifo: Path
    """A FIFO (not a regular file)."""
    _numbers: itertools.count[int] = field(default_factory=itertools.count)

    def fresh(self) -> Path:
        """A new queue file: a copy of the template, as the target created it."""
        path = self.dir / f"queue-{next(self._numbers)}.db"
        shutil.copyfile(self.template, path)
        return path

    def remove(self, path: Path) -> None:
        """Delete the example's queue (with any journal) and whatever a target created in
        place of the missing file or inside the directory."""
        for leftover in (path, *(path.with_name(path.name + end) for end in _SIDE_FILES)):
            leftover.unlink(missing_ok=True)
        _remove(self.missing)
        for entry in self.directory.iterdir():
            _remove(entry)


_SIDE_FILES = ("-journal", "-wal", "-shm")
_BY_MODULE: weakref.WeakKeyDictionary[ModuleType, ExampleFiles] = weakref.WeakKeyDictionary()
_CLEANUP = contextlib.ExitStack()
atexit.register(_CLEANUP.close)


def files_for(module: ModuleType) -> ExampleFiles:
    """This process's files for ``module``, made on first use (the template by its own
    ``open_queue``; an error there propagates, as from the first open of any example)."""
    files = _BY_MODULE.get(module)
    if files is None:
        files = _BY_MODULE[module] = _make(module)
    return files


def _make(module: ModuleType) -> ExampleFiles:
    with contextlib.ExitStack() as made:
        folder = made.enter_context(scratch_dir("leasecheck-agreement-"))
        template = folder / "template.db"
        module.open_queue(template).close()
        files = ExampleFiles(
            folder, template, folder / "missing.db", folder / "a-directory", folder / "fifo"
        )
        files.directory.mkdir()
        os.mkfifo(files.fifo)
        _CLEANUP.push(made.pop_all())  # kept until exit; removed at once if anything failed
    return files


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
