"""The pytest plugin: ``--leasecheck-impl``, ``--leasecheck-profile``, ..., the fixtures.

Loaded through the ``pytest11`` entry point, so ``pytest --leasecheck-impl worker.py``
and ``pytest -n auto`` run the same properties as ``leasecheck check`` (which loads
it explicitly, with no other plugin autoloaded). A property is a test marked
``@pytest.mark.leasecheck("lease.agreement")``; the name's prefix (``lease.`` or
``jobs.``) says which contract it checks, so that ``--leasecheck-impl`` alone runs
only lease-worker properties and ``--leasecheck-jobs-impl`` alone only JobQueue
ones. ``--leasecheck-adapter NAME|PATH`` selects the generic ``queue.*``
properties, which check a real queue library through its adapter.

A guest in other projects' sessions (like Hypothesis' own ``_hypothesis_pytestplugin``):
it registers its options and markers, and changes nothing else (no Hypothesis profile,
seed or shrink bound, no deselection) until it is *activated*, by one of its options or
by the collection of a file under ``leasecheck/properties/`` (``activate``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn, Protocol

import psutil
import pytest
from hypothesis import core as hypothesis_core
from hypothesis import settings
from hypothesis.internal.conjecture import engine as shrinking_engine

from leasecheck import _hunt_worker, constants_pool, profiles
from leasecheck._processes import started_since
from leasecheck._wire import (
    ADAPTER,
    CHECKED_KEY,
    DB,
    EXAMPLES,
    IMPL,
    JOBS_IMPL,
    NOT_CHECKED_KEY,
    OPTIONS,
    PROFILE,
    READ_ONLY,
    SEED,
    SERVERS,
    STRICT,
)
from leasecheck.adapters import servers
from leasecheck.adapters.protocol import AdapterError, QueueLibrary
from leasecheck.adapters.registry import load_library
from leasecheck.crash_harness import zygote
from leasecheck.promises import judge
from leasecheck.shared_db import SharedDatabaseError
from leasecheck.targets.loader import TargetError, load_jobs_target, load_worker
from leasecheck.targets.scratch import scratch_dir

HELP_IMPL = "lease worker target file to check (default: the bundled queue_impl/worker.py)"
HELP_JOBS_IMPL = "file defining JobQueue to check (default: the bundled queue_impl/job_queue.py)"
HELP_PROFILE = "how hard to try: quick (seconds), ci (deterministic gate), deep (long hunts)"
HELP_SEED = "seed for every random choice outside Hypothesis (default 0)"
HELP_DB = "shared example database, redis://HOST:PORT/N (default: $LEASECHECK_DB)"
HELP_EXAMPLES = "example database directory (default: $LEASECHECK_EXAMPLES, .leasecheck/examples)"
HELP_READ_ONLY = (
    "replay the example database but write nothing to it, in every profile (a batch: one "
    "file's counterexample is never replayed on another)"
)
HELP_ADAPTER = (
    "a queue library to check through its adapter: a bundled name (leasecheck adapters "
    "lists them) or the path of your adapter file; only the queue.* properties run"
)
HELP_STRICT = "with --leasecheck-adapter: a property the library does not promise fails, not xfail"
MARKER = "leasecheck(name): a leasecheck property, e.g. lease.agreement or jobs.threads"
HELP_SERVERS = (
    "also run the properties that start real PostgreSQL/Redis servers (marked 'servers'; "
    "also turned on by LEASECHECK_SERVERS=1)"
)
SERVERS_MARKER = (
    "servers: needs real PostgreSQL/Redis servers; deselected unless --leasecheck-servers or "
    "LEASECHECK_SERVERS=1"
)
SERVERS_ENV = "LEASECHECK_SERVERS"


PROPERTIES_DIR = Path(__file__).with_name("properties")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("leasecheck", "leasecheck targets and profiles")
    group.addoption(IMPL, metavar="PATH", default=None, help=HELP_IMPL)
    group.addoption(JOBS_IMPL, metavar="PATH", default=None, help=HELP_JOBS_IMPL)
    group.addoption(PROFILE, choices=sorted(profiles.PROFILES), default=None, help=HELP_PROFILE)
    group.addoption(SEED, metavar="N", type=int, default=None, help=HELP_SEED)
    group.addoption(EXAMPLES, metavar="DIR", default=None, help=HELP_EXAMPLES)
    group.addoption(DB, metavar="URL", default=None, help=HELP_DB)
    group.addoption(SERVERS, action="store_true", default=False, help=HELP_SERVERS)
    group.addoption(ADAPTER, metavar="NAME|PATH", default=None, help=HELP_ADAPTER)
    group.addoption(STRICT, action="store_true", default=False, help=HELP_STRICT)
    group.addoption(READ_ONLY, action="store_true", default=False, help=HELP_READ_ONLY)


@dataclass(frozen=True)
class RunSettings:
    """The options of this run, read once at configure time (not through ``os.environ``)."""

    profile: profiles.Profile
    seed: int
    seeded: bool
    """A seed was chosen (option or environment): every test draws from it."""
    examples: Path
    db: str | None
    """A shared example database (``--leasecheck-db``, ``$LEASECHECK_DB``), or None."""
    read_only: bool = False
    """The example database is only replayed (``--leasecheck-read-only-examples``)."""


RUN_SETTINGS = pytest.StashKey[RunSettings]()
_ACTIVE: dict[str, RunSettings] = {}


def active_run() -> RunSettings:
    """This run's settings, for property modules that build their Hypothesis settings when
    pytest imports them (after ``pytest_configure``)."""
    if "run" not in _ACTIVE:
        raise RuntimeError("leasecheck's pytest plugin is not configured in this process")
    return _ACTIVE["run"]


def _run_settings(config: pytest.Config) -> RunSettings:
    seed = config.getoption(SEED)
    return RunSettings(
        profile=profiles.current_profile(config.getoption(PROFILE)),
        db=profiles.db_url(config.getoption(DB)),
        seed=profiles.current_seed(seed),
        seeded=seed is not None or profiles.SEED_ENV in os.environ,
        examples=profiles.examples_path(config.getoption(EXAMPLES)),
        read_only=bool(config.getoption(READ_ONLY)),
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    config.addinivalue_line("markers", SERVERS_MARKER)
    # ``is not``: ``--leasecheck-seed 0`` gives 0, which ``in (None, False)`` would match.
    given = (config.getoption(option) for option in OPTIONS)
    if any(value is not None and value is not False for value in given):
        activate(config)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> None:
    """Collecting one of leasecheck's own property files activates the plugin, before
    pytest imports the module (which reads ``active_run()``)."""
    if PROPERTIES_DIR in file_path.parents:
        activate(parent.config)


def active(config: pytest.Config) -> bool:
    return RUN_SETTINGS in config.stash


def activate(config: pytest.Config) -> RunSettings:
    """Apply leasecheck's run settings to this session (once): its Hypothesis profile, its
    shrink bound and, in ci or with a seed, Hypothesis' forced seed. Only then do its
    collection hooks select properties. leasecheck's own test suite calls this from its
    conftest; nobody else's session is touched unless it asks (suite.md)."""
    if active(config):
        return config.stash[RUN_SETTINGS]
    try:
        run = _run_settings(config)
        chosen = profiles.hypothesis_settings(run.profile, run.examples, run.db, run.read_only)
    except (SharedDatabaseError, ValueError) as error:  # a bad option or LEASECHECK_* variable
        pytest.exit(str(error), returncode=pytest.ExitCode.USAGE_ERROR)
    config.stash[RUN_SETTINGS] = _ACTIVE["run"] = run
    settings.register_profile("leasecheck", chosen)
    settings.load_profile("leasecheck")
    # Hypothesis reads this bound when shrinking starts; the default is 300 s.
    shrinking_engine.MAX_SHRINKING_SECONDS = run.profile.shrink_seconds
    forced = (run.profile.name == "ci" or run.seeded) and not profiles.hunting()  # HypoFuzz
    pin_draws(run.seed if forced else None)
    if profiles.hunting():
        _hunt_worker.prepare()  # HypoFuzz's replays and shrinks, fixed for this process
    return run


def pin_draws(seed: int | None) -> None:
    """Make this process's Hypothesis draws those of ``leasecheck check``: one pool of
    literals (``constants_pool``), so draws stop depending on what else the process
    imported, and, given ``seed`` and no seed forced yet, Hypothesis' forced seed. What
    Hypothesis' own --hypothesis-seed does: every test draws from this seed, so the ci
    verdict depends only on the target, the seed and the example database.
    ``benchmarks/bench_margin.py`` calls it too, to run a machine as ``check`` does."""
    constants_pool.pin()
    if seed is not None and hypothesis_core.global_force_seed is None:
        hypothesis_core.global_force_seed = seed  # type: ignore[assignment]


def property_name(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("leasecheck")
    return str(marker.args[0]) if marker and marker.args else None


def servers_wanted(config: pytest.Config) -> bool:
    """Server-backed properties run only when asked: the default check stays server-free."""
    return bool(config.getoption(SERVERS)) or os.environ.get(SERVERS_ENV) == "1"


def _deselect(config: pytest.Config, items: list[pytest.Item], drop: list[pytest.Item]) -> None:
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if item not in drop]


def selected_families(config: pytest.Config) -> tuple[str, ...]:
    """The property name prefixes a run checks: each target option selects its family;
    no option checks the bundled worker and job queue (``queue.*`` needs ``--adapter``)."""
    chosen = {
        "lease.": config.getoption(IMPL),
        "jobs.": config.getoption(JOBS_IMPL),
        "queue.": config.getoption(ADAPTER),
    }
    wanted = tuple(prefix for prefix, value in chosen.items() if value)
    return wanted or ("lease.", "jobs.")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not active(config):
        return  # someone else's session: their ``servers`` marker is not ours to deselect
    servers = servers_wanted(config)
    if not servers:  # leasecheck's own server properties: a user's ``servers`` marker stays
        drop = [it for it in items if property_name(it) and it.get_closest_marker("servers")]
        _deselect(config, items, drop)
    wanted = selected_families(config)
    families = ("lease.", "jobs.", "queue.")

    def unwanted(item: pytest.Item) -> bool:
        if servers and item.get_closest_marker("servers"):
            return False  # asked for by --servers; they choose their own libraries
        name = property_name(item) or ""
        return name.startswith(families) and not name.startswith(wanted)

    keep = [item for item in items if not unwanted(item)]
    dropped = [item for item in items if item not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="session")
def lc_profile(pytestconfig: pytest.Config) -> profiles.Profile:
    """The active profile (quick, ci or deep)."""
    return activate(pytestconfig).profile


@pytest.fixture(scope="session")
def lc_seed(pytestconfig: pytest.Config) -> int:
    return activate(pytestconfig).seed


@pytest.fixture(scope="session")
def worker_path(request: pytest.FixtureRequest) -> Path | None:
    impl = request.config.getoption(IMPL)
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
    impl = request.config.getoption(JOBS_IMPL)
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
    """The queue library chosen by ``--leasecheck-adapter`` (bundled name, planted:NAME or
    a file)."""
    spec = request.config.getoption(ADAPTER)
    if not spec:
        pytest.exit(f"the queue.* properties need {ADAPTER} NAME|PATH", returncode=2)
    try:
        return load_library(str(spec))
    except AdapterError as error:
        pytest.exit(str(error), returncode=2)


@pytest.fixture(scope="session")
def queue_server(queue_library: QueueLibrary) -> Iterator[str | None]:
    """The URL of the server the library keeps its stores on (``Capabilities.server``),
    started for the run on a free port and stopped at its end; ``None`` for a library
    that needs none. A missing server binary ends the run with exit 2 and its install
    command. Durability is not what these properties test, so PostgreSQL runs without
    fsync and Redis without its append-only file."""
    kind = queue_library.capabilities.server
    if kind is None:
        yield None
        return
    with ExitStack() as stack:
        start = servers.start_for(queue_library.capabilities, durable=False)
        try:
            server = stack.enter_context(start)
        except servers.ServerMissing as missing:
            pytest.exit(str(missing), returncode=2)
        except servers.ServerError as error:  # leasecheck could not do its job: not VIOLATED
            pytest.exit(
                f"the {kind} server that {queue_library.name} needs did not start, so nothing "
                f"was checked: {error}",
                returncode=2,
            )
        yield server.url


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
    queue_library: QueueLibrary, request: pytest.FixtureRequest
) -> Callable[[str], AbstractContextManager[None]]:
    """``with judged("queue.exclusive"):`` turns a failure the library does not promise
    into an xfail "not promised" with its counterexample (a failure with
    ``--leasecheck-strict-promises``)."""
    strict = bool(request.config.getoption(STRICT))
    return lambda prop: judge(queue_library, prop, strict)


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A fresh directory on tmpfs for SQLite files, removed afterwards."""
    with scratch_dir() as path:
        yield path


@pytest.fixture
def no_leaked_children() -> Iterator[None]:
    """Fails the test if it leaves a child process of this one alive (one it started:
    a server started for the whole run, ``queue_server``, is not the test's)."""
    me = psutil.Process()
    before = {child.pid for child in me.children(recursive=True)}
    yield
    helpers = zygote.helper_pids()  # the fork engine's zygote and its spare: the run's
    left = [c for c in started_since(me, before) if c.pid not in helpers]
    for child in left:
        child.kill()
    psutil.wait_procs(left, timeout=5)
    assert not left, f"the test left child processes running: {[c.pid for c in left]}"


class Checked(Protocol):
    def __call__(self, text: str, **figures: object) -> None: ...


@pytest.fixture
def checked(record_property: Callable[[str, object], None]) -> Checked:
    """Call ``checked("110 kills", kills={...})`` to say what a property covered: the text
    is the summary's ``checked`` column, the figures travel with it as data."""

    def note(text: str, **figures: object) -> None:
        record_property(CHECKED_KEY, {"text": text, **figures})

    return note


class NotChecked(Protocol):
    def __call__(self, what: str, change: str, **figures: object) -> NoReturn: ...


@pytest.fixture
def not_checked(record_property: Callable[[str, object], None]) -> NotChecked:
    """Call ``not_checked("0 acks in 40 rounds", "raise --profile to deep")`` when a property
    exercised nothing: its row reads "not checked" with the figure and what to change, never
    "holds", and the run exits 2 (suite.md). The record travels as data, not as prose."""

    def stop(what: str, change: str, **figures: object) -> NoReturn:
        record_property(NOT_CHECKED_KEY, {"what": what, "change": change, **figures})
        pytest.skip(f"not checked: {what}; {change}")

    return stop
