"""One process of a batch's pool: imports leasecheck once, then checks file after file.

``python -m leasecheck._batch_worker`` reads one job per line on stdin (a JSON record:
the option, the file, the profile, seed, properties and example database) and writes
one JSON record per job on stdout: the file's ``--json`` document
(``leasecheck._outputs.document``) with the file, the option, the replay command and,
for a file that cannot be loaded, ``load_error``. Before the first job it imports
pytest, Hypothesis, the plugin and every module the property files import, so that a
file's run costs a fork, not an interpreter start: each file is loaded in a forked
child (as ``leasecheck check``'s preflight does in a new one), then checked by
``run_check`` exactly as ``leasecheck check --impl FILE -n 0`` checks it, its pytest
process forked from this one (``fork_pytest``) instead of started afresh. A fork
keeps nothing of an earlier file: each starts from the same imported state.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import json
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from leasecheck._outputs import document
from leasecheck.adapters.servers import die_with_parent
from leasecheck.runner import PROPERTIES_DIR, CheckOptions, Child, run_check

__all__ = ["LOAD_TIMEOUT", "Forked", "check_file", "fork_pytest", "main", "preload"]

LOAD_TIMEOUT = 60.0
"""Seconds a file may take to import (the CLI's preflight allows as long)."""
PRELOADED = ("pytest", "xdist.plugin", "_hypothesis_pytestplugin", "leasecheck._events")


def preload() -> list[str]:
    """Import what every run imports: the plugins and the modules the property files
    import (read from their source; the property modules themselves read the run's
    profile when imported, so each run imports those)."""
    names = list(PRELOADED)
    for module in sorted(PROPERTIES_DIR.glob("*.py")):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        names += [
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
        ]
    names = [name for name in dict.fromkeys(names) if not name.startswith("leasecheck.properties")]
    for name in names:
        importlib.import_module(name)
    return names


class Forked:
    """A forked child, shaped like the part of ``subprocess.Popen`` the runner uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._collect(os.WNOHANG)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            self._collect(0)
        return self.returncode

    def _collect(self, flags: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:  # reaped by the run's sweep: as Popen, report 0
            self.returncode = 0
            return
        if pid:
            self.returncode = os.waitstatus_to_exitcode(status)


def _become_child(output: int) -> None:
    """In a fresh fork: a session of its own (a Ctrl-C reaches only the CLI), killed with
    its parent, default signal handlers, output to ``output``, nothing on stdin."""
    os.setsid()
    die_with_parent()
    sys.stdout = sys.__stdout__
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)


def _fork(body: Any, output: int) -> Forked:
    """Run ``body()`` in a forked child; its return value is the child's exit status."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return Forked(pid)
    code = 3
    try:
        _become_child(output)
        code = int(body())
    except BaseException:  # the child must never return into the pool's loop
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def fork_pytest(command: list[str], output: IO[bytes], env: dict[str, str]) -> Child:
    """The runner's ``launch``: pytest in a fork of this process instead of a new
    interpreter running ``command`` (``python -m pytest ARGS``)."""
    import pytest

    def body() -> int:
        os.environ.clear()
        os.environ.update(env)
        return int(pytest.main(command[3:]))

    return _fork(body, output.fileno())


def load_problem(option: str, path: Path) -> str | None:
    """Why ``path`` cannot be loaded as an ``option`` target (in a forked child, within
    ``LOAD_TIMEOUT``), or None when it loads."""
    if not path.is_file():
        return f"{option} {str(path)!r} is not a file"
    read, write = os.pipe()

    def body() -> int:
        from leasecheck.targets.loader import TargetError, load_jobs_target, load_worker

        try:
            (load_worker if option == "--impl" else load_jobs_target)(path)
        except TargetError as error:
            os.write(write, str(error).encode())
            return 2
        return 0

    with open(os.devnull, "wb") as devnull:
        child = _fork(body, devnull.fileno())
    os.close(write)
    try:
        return _load_verdict(child, read)
    finally:
        os.close(read)


def _load_verdict(child: Forked, read: int) -> str | None:
    deadline, message = time.monotonic() + LOAD_TIMEOUT, b""
    while child.poll() is None:
        if time.monotonic() > deadline:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            return (
                f"did not finish importing within {LOAD_TIMEOUT:.0f} s; move work done "
                f"at import time into functions"
            )
        message += _available(read, 0.05)
    message += _available(read, 0.0)
    if child.returncode == 0:
        return None
    text = message.decode(errors="replace").strip()
    return text or f"importing it ended with exit status {child.returncode}"


def _available(read: int, wait: float) -> bytes:
    ready, _, _ = select.select([read], [], [], wait)
    return os.read(read, 65536) if ready else b""


def _options(job: Mapping[str, Any]) -> CheckOptions:
    path = Path(job["path"])
    return CheckOptions(
        impl=path if job["option"] == "--impl" else None,
        jobs_impl=path if job["option"] == "--jobs-impl" else None,
        profile=job["profile"], seed=int(job["seed"]), workers="0",
        properties=tuple(job["properties"]), db=job.get("db"), read_only_examples=True,
    )  # fmt: skip


def check_file(job: Mapping[str, Any]) -> dict[str, object]:
    """One file of the batch, loaded then checked: its record."""
    from leasecheck.cli import replay_command

    options = _options(job)
    head: dict[str, object] = {"file": job["path"], "option": job["option"]}
    replay = replay_command(options)
    problem = load_problem(job["option"], Path(job["path"]))
    if problem is not None:
        return {**head, "load_error": problem, "exit_code": 2, "replay": replay}
    result = run_check(options, launch=fork_pytest)
    return {**head, "load_error": None, "replay": replay, **document(result, replay)}


def main() -> int:
    preload()
    out = sys.stdout
    sys.stdout = sys.stderr  # only records go to the pool's pipe
    for line in sys.stdin:
        if line.strip():
            record = check_file(json.loads(line))
            out.write(json.dumps(record, default=str) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
