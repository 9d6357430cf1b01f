"""The pytest plugin: ``--impl``, ``--jobs-impl``, ``--adapter``, ``--profile``, the fixtures.

Loaded through the ``pytest11`` entry point, so ``pytest --impl path/to/worker.py``
and ``pytest -n auto`` run the same properties as ``leasecheck check``. A property
is a test marked ``@pytest.mark.leasecheck("lease.agreement")``; the name's prefix
(``lease.`` or ``jobs.``) says which contract it checks, so that ``--impl`` alone
runs only lease-worker properties and ``--jobs-impl`` alone only JobQueue ones.
``--adapter NAME|PATH`` selects the generic ``queue.*`` properties, which check a
real queue library through its adapter; they never run without it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import pytest
from hypothesis import core as hypothesis_core
from hypothesis import settings
from hypothesis.internal.conjecture import engine as shrinking_engine

from adapters.protocol import AdapterError, QueueLibrary
from adapters.registry import load_library
from leasecheck import profiles
from leasecheck.promises import judge
from leasecheck.scratch import scratch_dir
from leasecheck.targets import TargetError, load_jobs_target, load_worker

HELP_IMPL = "lease worker target file to check (default: the bundled queue_impl/worker.py)"
HELP_JOBS_IMPL = "file defining JobQueue to check (default: the bundled queue_impl/job_queue.py)"
HELP_PROFILE = "how hard to try: quick (seconds), ci (deterministic gate), deep (long hunts)"
HELP_SEED = "seed for every random choice outside Hypothesis (default 0)"
HELP_ADAPTER = (
    "a queue library to check through its adapter: a bundled name (leasecheck adapters "
    "lists them) or the path of your adapter file; only the queue.* properties run"
)
HELP_STRICT = "with --adapter: a property the library does not promise fails instead of xfail"
MARKER = "leasecheck(name): a leasecheck property, e.g. lease.agreement or jobs.threads"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("leasecheck", "leasecheck targets and profiles")
    group.addoption("--impl", metavar="PATH", default=None, help=HELP_IMPL)
    group.addoption("--jobs-impl", metavar="PATH", default=None, help=HELP_JOBS_IMPL)
    group.addoption("--profile", choices=sorted(profiles.PROFILES), default=None, help=HELP_PROFILE)
    group.addoption("--leasecheck-seed", metavar="N", type=int, default=None, help=HELP_SEED)
    group.addoption("--adapter", metavar="NAME|PATH", default=None, help=HELP_ADAPTER)
    group.addoption("--strict-promises", action="store_true", default=False, help=HELP_STRICT)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    if config.getoption("--profile"):
        os.environ[profiles.PROFILE_ENV] = config.getoption("--profile")
    if config.getoption("--leasecheck-seed") is not None:
        os.environ[profiles.SEED_ENV] = str(config.getoption("--leasecheck-seed"))
    profile = profiles.current_profile()
    settings.register_profile("leasecheck", profiles.hypothesis_settings(profile))
    settings.load_profile("leasecheck")
    # Hypothesis reads this bound when shrinking starts; the default is 300 s.
    shrinking_engine.MAX_SHRINKING_SECONDS = profile.shrink_seconds
    seeded = config.getoption("--leasecheck-seed") is not None or profiles.SEED_ENV in os.environ
    if (profile.name == "ci" or seeded) and hypothesis_core.global_force_seed is None:
        # What Hypothesis' own --hypothesis-seed does: every test draws from this seed,
        # so the ci verdict depends only on the target, the seed and the example database.
        hypothesis_core.global_force_seed = profiles.current_seed()  # type: ignore[assignment]


def property_name(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("leasecheck")
    return str(marker.args[0]) if marker and marker.args else None


def selected_families(config: pytest.Config) -> tuple[str, ...]:
    """The property name prefixes a run checks: each target option selects its family;
    no option checks the bundled worker and job queue (``queue.*`` needs ``--adapter``)."""
    chosen = {
        "lease.": config.getoption("--impl"),
        "jobs.": config.getoption("--jobs-impl"),
        "queue.": config.getoption("--adapter"),
    }
    wanted = tuple(prefix for prefix, value in chosen.items() if value)
    return wanted or ("lease.", "jobs.")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = selected_families(config)
    families = ("lease.", "jobs.", "queue.")

    def unwanted(item: pytest.Item) -> bool:
        name = property_name(item) or ""
        return name.startswith(families) and not name.startswith(wanted)

    keep = [item for item in items if not unwanted(item)]
    dropped = [item for item in items if item not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="session")
def lc_profile() -> profiles.Profile:
    """The active profile (quick, ci or deep)."""
    return profiles.current_profile()


@pytest.fixture(scope="session")
def lc_seed() -> int:
    return profiles.current_seed()


@pytest.fixture(scope="session")
def worker_path(request: pytest.FixtureRequest) -> Path | None:
    impl = request.config.getoption("--impl")
    return Path(impl).resolve() if impl else None


@pytest.fixture(scope="session")
def worker_target(worker_path: Path | None) -> ModuleType:
    """The lease worker module under test."""
    try:
        return load_worker(worker_path)
    except TargetError as error:
        pytest.exit(str(error), returncode=2)


@pytest.fixture(scope="session")
def jobs_path(request: pytest.FixtureRequest) -> Path | None:
    impl = request.config.getoption("--jobs-impl")
    return Path(impl).resolve() if impl else None


@pytest.fixture(scope="session")
def jobs_target(jobs_path: Path | None) -> type[Any]:
    """The JobQueue class under test."""
    try:
        return load_jobs_target(jobs_path)
    except TargetError as error:
        pytest.exit(str(error), returncode=2)


@pytest.fixture(scope="session")
def queue_library(request: pytest.FixtureRequest) -> QueueLibrary:
    """The queue library chosen by ``--adapter`` (bundled name, planted:NAME or a file)."""
    spec = request.config.getoption("--adapter")
    if not spec:
        pytest.exit("the queue.* properties need --adapter NAME|PATH", returncode=2)
    try:
        return load_library(str(spec))
    except AdapterError as error:
        pytest.exit(str(error), returncode=2)


@pytest.fixture
def multiprocess_library(queue_library: QueueLibrary) -> QueueLibrary:
    """The library, for a property that needs several processes on one store: one that
    cannot share its store is reported "not run" (exit 2), never passed."""
    if not queue_library.capabilities.multiprocess:
        pytest.skip(
            f"{queue_library.name} declares multiprocess=False: this property needs several "
            f"processes on one store, so it was not checked"
        )
    return queue_library


@pytest.fixture
def judged(
    queue_library: QueueLibrary, request: pytest.FixtureRequest, record_property: Any
) -> Callable[[str], AbstractContextManager[None]]:
    """``with judged("queue.exclusive"):`` turns a failure the library does not promise
    into an xfail "not promised" with its counterexample (a failure with --strict-promises)."""
    strict = bool(request.config.getoption("--strict-promises"))
    return lambda prop: judge(queue_library, prop, strict, record_property)


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A fresh directory on tmpfs for SQLite files, removed afterwards."""
    with scratch_dir() as path:
        yield path


@pytest.fixture
def no_leaked_children() -> Iterator[None]:
    """Fails the test if it leaves a child process of this one alive."""
    yield
    left = psutil.Process().children(recursive=True)
    for child in left:
        child.kill()
    psutil.wait_procs(left, timeout=5)
    assert not left, f"the test left child processes running: {[c.pid for c in left]}"


@pytest.fixture
def checked(record_property: Any) -> Any:
    """Call ``checked("412 kills")`` to say what a property covered (the summary's column)."""

    def note(what: str) -> None:
        record_property("runs", what)

    return note
