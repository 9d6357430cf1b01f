"""The pytest plugin: ``--impl``, ``--jobs-impl``, ``--profile`` and the target fixtures.

Loaded through the ``pytest11`` entry point, so ``pytest --impl path/to/worker.py``
and ``pytest -n auto`` run the same properties as ``leasecheck check``. A property
is a test marked ``@pytest.mark.leasecheck("lease.agreement")``; the name's prefix
(``lease.`` or ``jobs.``) says which contract it checks, so that ``--impl`` alone
runs only lease-worker properties and ``--jobs-impl`` alone only JobQueue ones.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil
import pytest
from hypothesis import core as hypothesis_core
from hypothesis import settings
from hypothesis.internal.conjecture import engine as shrinking_engine

from leasecheck import profiles
from leasecheck.scratch import scratch_dir
from leasecheck.shared_db import SharedDatabaseError
from leasecheck.targets import TargetError, load_jobs_target, load_worker

HELP_IMPL = "lease worker target file to check (default: the bundled queue_impl/worker.py)"
HELP_JOBS_IMPL = "file defining JobQueue to check (default: the bundled queue_impl/job_queue.py)"
HELP_PROFILE = "how hard to try: quick (seconds), ci (deterministic gate), deep (long hunts)"
HELP_SEED = "seed for every random choice outside Hypothesis (default 0)"
MARKER = "leasecheck(name): a leasecheck property, e.g. lease.agreement or jobs.threads"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("leasecheck", "leasecheck targets and profiles")
    group.addoption("--impl", metavar="PATH", default=None, help=HELP_IMPL)
    group.addoption("--jobs-impl", metavar="PATH", default=None, help=HELP_JOBS_IMPL)
    group.addoption("--profile", choices=sorted(profiles.PROFILES), default=None, help=HELP_PROFILE)
    group.addoption("--leasecheck-seed", metavar="N", type=int, default=None, help=HELP_SEED)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    if config.getoption("--profile"):
        os.environ[profiles.PROFILE_ENV] = config.getoption("--profile")
    if config.getoption("--leasecheck-seed") is not None:
        os.environ[profiles.SEED_ENV] = str(config.getoption("--leasecheck-seed"))
    try:
        profile = profiles.current_profile()
        leasecheck_settings = profiles.hypothesis_settings(profile)
    except (SharedDatabaseError, ValueError) as error:  # a bad LEASECHECK_* variable
        raise pytest.UsageError(str(error)) from None
    settings.register_profile("leasecheck", leasecheck_settings)
    settings.load_profile("leasecheck")
    # Hypothesis reads this bound when shrinking starts; the default is 300 s.
    shrinking_engine.MAX_SHRINKING_SECONDS = profile.shrink_seconds
    seeded = config.getoption("--leasecheck-seed") is not None or profiles.SEED_ENV in os.environ
    forced = (profile.name == "ci" or seeded) and not profiles.hunting()  # HypoFuzz: no seed
    if forced and hypothesis_core.global_force_seed is None:
        # What Hypothesis' own --hypothesis-seed does: every test draws from this seed,
        # so the ci verdict depends only on the target, the seed and the example database.
        hypothesis_core.global_force_seed = profiles.current_seed()  # type: ignore[assignment]


def property_name(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("leasecheck")
    return str(marker.args[0]) if marker and marker.args else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    impl, jobs_impl = config.getoption("--impl"), config.getoption("--jobs-impl")
    if bool(impl) == bool(jobs_impl):
        return
    unwanted = "jobs." if impl else "lease."
    keep = [item for item in items if not (property_name(item) or "").startswith(unwanted)]
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
