"""Batch mode: ``leasecheck check --impl a.py b.py ...`` (or ``--impl DIR``) for a class.

Each file is checked as ``leasecheck check --impl FILE`` checks it alone (same profile,
seed and properties, so the same verdicts), but the files share their start-up: a pool
of ``-n`` processes (``leasecheck._batch_worker``) imports pytest, Hypothesis and
leasecheck once, and forks each file's test process from that imported state. The
files run in parallel, one per pool process, each property serially within its file.

The run is this process's: it is the child subreaper of the pool, and when the batch
ends, or SIGINT/SIGTERM stops it, every process of the pool and of the files' runs is
killed (exit 130/143, the files judged so far kept). Every file has a record (its
``--json`` document, ``leasecheck._outputs.document``, with ``file``, ``option``,
``replay`` and ``load_error``); a file that cannot be loaded has one too, and does not
stop the others. Exit status: 2 if any file could not be loaded or anything was not
checked, else 1 if any file violated a property (or hung, or crashed), else 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from leasecheck import __version__
from leasecheck._preflight import check_scratch
from leasecheck._processes import Tree, subreaper
from leasecheck.adapters.servers import die_with_parent
from leasecheck.runner import ISOLATED, KILL_WITHIN, NOT_CHECKED, NOT_RUN, _Signals
from leasecheck.targets.scratch import SCRATCH_ENV, scratch_dir

__all__ = [
    "BatchResult",
    "Job",
    "batch_exit_code",
    "expand",
    "is_batch",
    "pool_size",
    "run_batch",
    "write_batch_json",
]

SKIPPED_FILES = ("__init__.py", "conftest.py")
"""Files of a directory that are never a target."""


@dataclass(frozen=True)
class Job:
    """One file of the batch and the option that names its kind."""

    option: str
    """``--impl`` (a lease worker) or ``--jobs-impl`` (a JobQueue file)."""
    path: Path


def _files(value: Path) -> list[Path]:
    if not value.is_dir():
        return [value]
    found = sorted(p for p in value.glob("*.py") if p.is_file() and p.name not in SKIPPED_FILES)
    if not found:
        raise ValueError(f"the directory {str(value)!r} holds no .py file; pass target files")
    return found


def expand(option: str, values: Iterable[Path]) -> list[Job]:
    """The files named by ``values`` (each file, or every ``*.py`` of a directory but
    ``__init__.py`` and ``conftest.py``), each once; raises ValueError for an empty
    directory."""
    paths = [path.resolve() for value in values for path in _files(value)]
    return [Job(option, path) for path in dict.fromkeys(paths)]


def is_batch(impls: Sequence[Path], jobs_impls: Sequence[Path]) -> bool:
    """Several files for one option, or a directory: the batch; else the single check."""
    return len(impls) > 1 or len(jobs_impls) > 1 or any(p.is_dir() for p in (*impls, *jobs_impls))


def pool_size(workers: str, files: int) -> int:
    """``-n``: that many files at a time (0: one; ``auto``: as pytest-xdist's ``-n auto``
    counts, ``$PYTEST_XDIST_AUTO_NUM_WORKERS`` or the physical cores)."""
    if workers != "auto":
        wanted = int(workers)
    elif os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").isdigit():
        wanted = int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    else:
        wanted = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    return max(1, min(wanted, files))


@dataclass
class BatchResult:
    records: list[dict[str, Any]]
    """One record per file that finished, in the order of ``jobs``."""
    jobs: list[Job]
    exit_code: int
    seconds: float
    interrupted: int = 0
    pool: int = 1

    def record_of(self, job: Job) -> dict[str, Any] | None:
        key = (str(job.path), job.option)
        return next((r for r in self.records if (r["file"], r["option"]) == key), None)


def batch_exit_code(records: Sequence[dict[str, Any]], expected: int) -> int:
    """2 if any file could not be loaded or anything was not checked (or not every file
    has a record), else 1 if any file failed, else 0."""
    incomplete = len(records) < expected or any(
        r["exit_code"] == 2
        or any(p["verdict"] in (NOT_CHECKED, NOT_RUN) for p in r.get("properties", []))
        for r in records
    )
    if incomplete:
        return 2
    return 1 if any(r["exit_code"] == 1 for r in records) else 0


def run_batch(
    jobs: list[Job], settings: dict[str, Any], workers: str,
    on_record: Callable[[dict[str, Any]], None] = lambda record: None,
) -> BatchResult:  # fmt: skip
    """Check every job's file with ``settings`` (profile, seed, properties, db) on a pool
    of ``pool_size(workers)`` processes; ``on_record`` is told each file's record."""
    check_scratch()
    started, size = time.monotonic(), pool_size(workers, len(jobs))
    tree = Tree()
    subreaper(True)
    try:
        with _Signals() as signals, scratch_dir("leasecheck-batch-") as work:
            wanted = [{"option": j.option, "path": str(j.path), **settings} for j in jobs]
            try:
                records = _Pool(size, work, signals).run(wanted, on_record)
            finally:  # before the scratch goes: nothing may still write in it
                tree.kill_all(time.monotonic() + KILL_WITHIN)
    finally:
        tree.kill_all(time.monotonic() + KILL_WITHIN)
        subreaper(False)
    order = {(str(job.path), job.option): index for index, job in enumerate(jobs)}
    records.sort(key=lambda record: order[record["file"], record["option"]])
    seconds = time.monotonic() - started
    if signals.received:
        return BatchResult(records, jobs, 128 + signals.received, seconds, signals.received, size)
    return BatchResult(records, jobs, batch_exit_code(records, len(jobs)), seconds, 0, size)


@dataclass
class _Member:
    """One process of the pool and the job it is checking."""

    process: subprocess.Popen[bytes]
    log: Path
    job: dict[str, Any] | None = None
    buffer: bytes = b""
    lines: list[bytes] = field(default_factory=list)


class _Pool:
    """Hands the jobs to the pool one at a time, as each process becomes free."""

    def __init__(self, size: int, work: Path, signals: _Signals) -> None:
        self.size, self.work, self.signals = size, work, signals

    def _start(self, index: int) -> _Member:
        log, scratch = self.work / f"pool-{index}.log", self.work / f"pool-{index}"
        scratch.mkdir()
        # Its runs' scratch lies inside the batch's, so a batch stopped by a signal
        # (its pool SIGKILLed) still leaves nothing behind. It imports Hypothesis before
        # it forks a file's pytest: no entry-point plugin may run there either.
        env = {**os.environ, SCRATCH_ENV: str(scratch), **ISOLATED}
        with log.open("wb") as errors:
            process = subprocess.Popen(
                [sys.executable, "-m", "leasecheck._batch_worker"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=errors, start_new_session=True,
                preexec_fn=die_with_parent, env=env,
            )  # fmt: skip
        return _Member(process, log)

    def run(
        self, jobs: list[dict[str, Any]], on_record: Callable[[dict[str, Any]], None]
    ) -> list[dict[str, Any]]:
        members = [self._start(index) for index in range(self.size)]
        try:
            return self._serve(members, list(jobs), on_record)
        finally:
            for member in members:
                _stop(member.process)

    def _serve(
        self, members: list[_Member], waiting: list[dict[str, Any]],
        on_record: Callable[[dict[str, Any]], None],
    ) -> list[dict[str, Any]]:  # fmt: skip
        records: list[dict[str, Any]] = []
        with selectors.DefaultSelector() as selector:
            for member in members:
                assert member.process.stdout is not None
                selector.register(member.process.stdout, selectors.EVENT_READ, member)
                self._give(member, waiting)
            while any(m.job for m in members) and not self.signals.received:
                for key, _ in selector.select(timeout=0.1):
                    member = key.data
                    for record in self._read(member, key.fileobj, selector):
                        records.append(record)
                        on_record(record)
                        self._give(member, waiting)
        return records

    @staticmethod
    def _give(member: _Member, waiting: list[dict[str, Any]]) -> None:
        member.job = waiting.pop(0) if waiting and member.process.poll() is None else None
        if member.job is not None:
            assert member.process.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # it died: its EOF reports the file
                member.process.stdin.write((json.dumps(member.job) + "\n").encode())
                member.process.stdin.flush()

    def _read(
        self, member: _Member, stream: Any, selector: selectors.BaseSelector
    ) -> list[dict[str, Any]]:
        chunk = os.read(stream.fileno(), 1 << 20)
        if not chunk:  # the pool process ended: its file is not checked, it takes no more
            selector.unregister(stream)
            return [self._lost(member)] if member.job else []
        member.buffer += chunk
        *lines, member.buffer = member.buffer.split(b"\n")
        return [_complete(json.loads(line)) for line in lines if line.strip()]

    def _lost(self, member: _Member) -> dict[str, Any]:
        code = member.process.wait()
        job, member.job = member.job or {}, None
        tail = member.log.read_text(errors="replace").strip().splitlines()[-1:]
        problem = (
            f"the batch process checking it ended (exit status {code}"
            f"{': ' + tail[0] if tail else ''}); nothing of this file was concluded"
        )
        return _complete({"file": job["path"], "option": job["option"], "load_error": None,
                          "exit_code": 2, "problem": problem})  # fmt: skip


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Its pipes closed, it and its session killed, its status collected."""
    for stream in (process.stdin, process.stdout):
        with contextlib.suppress(OSError):
            stream.close() if stream else None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def write_batch_json(path: Path, result: BatchResult) -> None:
    """``--json FILE`` of a batch: the batch's exit status and one record per file (the
    single check's document, plus ``file``, ``option``, ``replay``, ``load_error``)."""
    document = {
        "leasecheck": __version__,
        "exit_code": result.exit_code,
        "interrupted": result.interrupted,
        "seconds": round(result.seconds, 3),
        "files": result.records,
    }
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")


def _complete(record: dict[str, Any]) -> dict[str, Any]:
    """Every file record has every key, an unloadable file's too."""
    problem = f"cannot load: {record['load_error']}" if record.get("load_error") else ""
    defaults = {"leasecheck": __version__, "interrupted": 0, "problem": problem,
                "seconds": 0.0, "properties": [], "replay": None}  # fmt: skip
    return {**defaults, **record}
