"""The one module an exported counterexample imports (``leasecheck check --export DIR``).

A team commits exported files next to its code, so they must keep working when the
repository moves and when leasecheck's insides change. They therefore name their target
relative to their own location (or take it from an environment variable) and call only
these functions, whose signatures are kept stable (new arguments only ever come with a
default):

- ``target(default, test_file, env)``: the target path or adapter spec the file checks;
- ``machine(kind, target, server=None)``: the state machine of ``kind`` ("lease", "jobs"
  or "queue:PROPERTY") bound to that target, to step through a shrunk program; a queue
  library that keeps its stores on a server makes them on ``server`` (a URL);
- ``server(target)``: a context manager that starts the server a queue library declares
  (``Capabilities.server``: PostgreSQL, Redis, ...) on a free port, through leasecheck's
  one starter (``adapters.servers.start``), yields its URL (``None`` for a library that
  needs none) and stops it and removes its files at the end;
- ``names(kind, *wanted)``: the value types a printed program constructs (``When(...)``);
- ``rerun(option, target, selector, profile, seed, servers=False)``: run a property
  again through pytest, for the properties whose failure no file can replay step by
  step; ``servers=True`` for the server faults (``--servers``), which start their own;
- ``schedule(kind, target, record)``: run exactly one recorded interleaving of
  ``lease.interleavings`` (kind "lease") or ``jobs.interleavings`` ("jobs"); what it
  broke, or None;
- ``BUNDLED``: the ``default`` that means leasecheck's bundled worker or job queue.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["BUNDLED", "ENV", "machine", "names", "rerun", "schedule", "server", "target"]

BUNDLED = "bundled"
ENV = {"lease": "LEASECHECK_IMPL", "jobs": "LEASECHECK_JOBS_IMPL", "queue": "LEASECHECK_ADAPTER"}
"""The environment variable that points an exported file of each kind at another target."""
_MODULES = {
    "lease": "leasecheck.stateful_tests.lease_machine",
    "jobs": "leasecheck.stateful_tests.job_machine",
    "queue": "leasecheck.stateful_tests.queue_machine",
}
_OPTIONS = {"--impl": "lease", "--jobs-impl": "jobs", "--adapter": "queue"}


def target(default: str, test_file: str, env: str) -> str:
    """``$env`` if set; else ``default``: ``BUNDLED`` (the bundled target of this kind),
    a path relative to the directory of ``test_file`` (the exported file's ``__file__``),
    or an adapter name (``rq``, ``planted:NAME``), returned as it is."""
    chosen = os.environ.get(env)
    if chosen:
        return chosen
    if default == BUNDLED:
        from leasecheck.targets.loader import BUNDLED_JOBS, BUNDLED_WORKER

        return str(BUNDLED_JOBS if env == ENV["jobs"] else BUNDLED_WORKER)
    if default.endswith(".py"):
        return str((Path(test_file).parent / default).resolve())
    return default


def machine(kind: str, chosen: str, server: str | None = None) -> Any:
    """The state machine class of ``kind`` bound to ``chosen`` (see ``target``); a queue
    library's stores go on ``server`` (the URL ``server(chosen)`` yields)."""
    if kind == "lease":
        from leasecheck.stateful_tests.lease_machine import LeaseAgreement
        from leasecheck.targets.loader import load_worker

        return LeaseAgreement.bind(load_worker(chosen))
    if kind == "jobs":
        from leasecheck.stateful_tests.job_machine import JobAgreement
        from leasecheck.targets.loader import load_jobs_target

        JobAgreement.bind(load_jobs_target(chosen))
        return JobAgreement
    if kind.startswith("queue:"):
        from leasecheck.adapters.registry import load_library
        from leasecheck.stateful_tests.queue_machine import QueueMachine

        enforce = frozenset({kind.split(":", 1)[1]})
        return QueueMachine.bound(load_library(chosen), enforce, server)
    raise ValueError(f"unknown machine kind {kind!r}; use 'lease', 'jobs' or 'queue:PROPERTY'")


@contextlib.contextmanager
def server(chosen: str) -> Iterator[str | None]:
    """Start the server the queue library ``chosen`` keeps its stores on, for as long as
    the ``with`` block runs; its URL, or ``None`` where the library needs no server.

    The same starter as ``leasecheck check`` (a fresh server in a temp directory on a
    free port, bounded waits, stopped and removed in ``finally``); durability is not what
    a replayed program tests, so PostgreSQL runs without fsync and Redis without its
    append-only file. A missing server binary raises ``ServerMissing``, whose message
    is the command that installs it.
    """
    from leasecheck.adapters import servers
    from leasecheck.adapters.registry import load_library

    capabilities = load_library(chosen).capabilities
    if capabilities.server is None:
        yield None
        return
    with servers.start_for(capabilities, durable=False) as running:
        yield running.url


def names(kind: str, *wanted: str) -> tuple[Any, ...]:
    """The value types ``wanted`` of the ``kind`` machine's programs, in that order."""
    module = importlib.import_module(_MODULES[kind.split(":", 1)[0]])
    return tuple(getattr(module, name) for name in wanted)


def rerun(
    option: str,
    chosen: str,
    selector: str,
    profile: str,
    seed: int,
    timeout: float = 900,
    servers: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run the property test ``selector`` (a pytest ``-k``) again on ``chosen`` with the
    same profile and seed; ``option`` is ``leasecheck check``'s (``--impl``, ...);
    ``servers`` also selects the server faults (which start the server they need). A
    selector that matches nothing is a failure (pytest's exit 5), never a pass."""
    from leasecheck._wire import ADAPTER, IMPL, JOBS_IMPL, PROFILE, SEED, SERVERS
    from leasecheck.runner import CHECK_INI, PROPERTIES_DIR

    plugin_option = {"lease": IMPL, "jobs": JOBS_IMPL, "queue": ADAPTER}[_OPTIONS[option]]
    command = [
        sys.executable, "-m", "pytest", str(PROPERTIES_DIR), "-c", str(CHECK_INI),
        "--rootdir", str(PROPERTIES_DIR), "-q", "-n", "0", plugin_option, chosen,
        PROFILE, profile, SEED, str(seed), "-k", selector, *([SERVERS] if servers else []),
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def schedule(kind: str, chosen: str, record: Mapping[str, Any]) -> str | None:
    """Run the recorded schedule ``record`` on ``chosen``: the failure it shows (an
    interleaving a reader can follow), or None once the bug is fixed. A fixed lease
    worker may run other statements, so a recorded choice no longer applies: the
    property is then run again instead (its verdict decides)."""
    if kind == "jobs":
        from leasecheck.stateful_tests.job_interleavings import replay as replay_jobs
        from leasecheck.targets.loader import load_jobs_target

        replayed = replay_jobs(load_jobs_target(chosen), dict(record))
        return None if replayed.failure is None else replayed.report()
    if kind != "lease":
        raise ValueError(f"unknown schedule kind {kind!r}; use 'lease' or 'jobs'")
    from leasecheck.crash_harness.interleavings import Schedule, ScheduleMismatch
    from leasecheck.crash_harness.interleavings import replay as replay_lease
    from leasecheck.targets.loader import load_worker
    from leasecheck.targets.scratch import scratch_dir

    with scratch_dir() as directory:
        try:
            run = replay_lease(load_worker(chosen), Schedule.from_json(_json(record)), directory)
        except ScheduleMismatch:
            again = rerun("--impl", chosen, "test_interleavings", profile="ci", seed=0)
            return None if again.returncode == 0 else again.stdout[-4000:]
    return None if run.problem is None else f"{run.interleaving()}\n{run.problem}"


def _json(record: Mapping[str, Any]) -> str:
    import json

    return json.dumps(dict(record))
