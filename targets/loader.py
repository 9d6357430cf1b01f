"""The one target loader: a lease worker file or a JobQueue file, checked before use.

A *target* is a Python file: a lease worker (``--impl``) or a file defining
``JobQueue`` (``--jobs-impl``). Loading never guesses: a missing file, a file that
does not import, or missing names raise ``TargetError`` with a sentence naming the
file and what is wrong, which the CLI turns into exit status 2.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

from leasecheck import queue_impl
from leasecheck.queue_impl import jobs as given_types
from leasecheck.targets.lease_compare import WORKER_ERRORS

__all__ = [
    "BUNDLED_JOBS",
    "BUNDLED_WORKER",
    "JOBQUEUE_METHODS",
    "WORKER_NAMES",
    "TargetError",
    "load_jobs_target",
    "load_module",
    "load_worker",
]

BUNDLED_WORKER = Path(queue_impl.__file__).with_name("worker.py")
BUNDLED_JOBS = Path(queue_impl.__file__).with_name("job_queue.py")

WORKER_NAMES = (
    "Conflict", "Retryable", "Permanent", "BadAck", "retry_delay", "open_queue",
    "enqueue", "claim", "finish", "redrive", "run_once", "run_file",
)  # fmt: skip
JOBQUEUE_METHODS = (
    "submit", "poll", "complete", "fail", "view", "dead_letters", "retry_dead", "cancel",
)  # fmt: skip


class TargetError(Exception):
    """A target file cannot be used; the message says which file and what to do."""


COMPAT_JOBS = "queue_impl.jobs"
"""The old import of the given types; older JobQueue files keep it (see ``compat/``)."""


def load_module(path: str | Path, role: str) -> ModuleType:
    """Import the file at ``path`` as a fresh module (cached per resolved path and content)."""
    # Where a folder named queue_impl shadows the installed compatibility package (a run
    # from leasecheck's own checkout), ``queue_impl.jobs`` must still be the very module
    # leasecheck compares against, or a target's JobStatus would not equal the model's.
    sys.modules.setdefault(COMPAT_JOBS, given_types)
    file = Path(path)
    if not file.is_file():
        raise TargetError(
            f"{role} {str(path)!r} is not a file; pass the path of a Python file, "
            f"for example --impl path/to/worker.py"
        )
    source = file.read_bytes()
    digest = hashlib.sha256(str(file.resolve()).encode() + source).hexdigest()[:16]
    name = f"leasecheck_target_{file.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise TargetError(f"{role} {str(path)!r} cannot be imported as a Python module")
    try:
        return execute(spec)
    except BaseException as error:  # a target may even raise SystemExit while importing
        raise TargetError(
            f"{role} {str(path)!r} failed to import: {type(error).__name__}: {error}; "
            f"fix the file so that `python {file}` runs without error"
        ) from error


def execute(spec: ModuleSpec) -> ModuleType:
    """The module of ``spec`` (which has a loader), run; it is in ``sys.modules`` under
    its name while it runs (dataclasses and the like look their module up) and after,
    and is taken out again if running it raises."""
    assert spec.loader is not None, spec
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return module


def import_again(module: ModuleType) -> ModuleType:
    """A second, independent import of a target already loaded by ``load_module``: its
    module-level state starts afresh, as in a new process. It is never cached."""
    file = Path(str(module.__file__))
    spec = importlib.util.spec_from_file_location(f"{module.__name__}_again", file)
    if spec is None or spec.loader is None:
        raise TargetError(f"{str(file)!r} cannot be imported again")
    again = execute(spec)
    del sys.modules[spec.name]
    return again


def load_worker(path: str | Path | None = None) -> ModuleType:
    """Load a lease worker target (default: the bundled ``queue_impl/worker.py``)."""
    module = load_module(path or BUNDLED_WORKER, "lease worker")
    missing = [name for name in WORKER_NAMES if not hasattr(module, name)]
    if missing:
        raise TargetError(
            f"lease worker {str(path or BUNDLED_WORKER)!r} does not define "
            f"{', '.join(missing)}; lease-worker.md lists every name a worker.py must define"
        )
    for name in WORKER_ERRORS:
        value = getattr(module, name)
        if not (isinstance(value, type) and issubclass(value, Exception)):
            raise TargetError(
                f"lease worker {str(path)!r}: {name} must be an Exception subclass, got {value!r}"
            )
    return module


def load_jobs_target(path: str | Path | None = None) -> type[Any]:
    """Load the ``JobQueue`` class of a job-queue target (default: the bundled one)."""
    where = path or BUNDLED_JOBS
    module = load_module(where, "job queue")
    cls = getattr(module, "JobQueue", None)
    if not isinstance(cls, type):
        raise TargetError(
            f"job queue {str(where)!r} does not define a class JobQueue; "
            f"define `class JobQueue` taking (time, policy), see job-queue.md"
        )
    missing = [name for name in JOBQUEUE_METHODS if not callable(getattr(cls, name, None))]
    if missing:
        raise TargetError(f"job queue {str(where)!r}: JobQueue has no method {', '.join(missing)}")
    return cls
