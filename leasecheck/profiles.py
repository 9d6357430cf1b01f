"""Settings profiles, chosen in one place: ``quick``, ``ci`` and ``deep``.

A profile fixes both Hypothesis' settings and the scale of the process-level
properties (kills, race rounds, explored scope). It is chosen by ``--profile`` or
the environment variable ``LEASECHECK_PROFILE`` (default ``ci``); the seed for
every non-Hypothesis random choice comes from ``--leasecheck-seed`` /
``LEASECHECK_SEED`` (default 0), so the ``ci`` verdict depends only on the target,
the seed and the committed example database.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase, ReadOnlyDatabase

from leasecheck.shared_db import DB_ENV, open_database

__all__ = ["PROFILES", "Profile", "current_profile", "current_seed", "hypothesis_settings"]

PROFILE_ENV = "LEASECHECK_PROFILE"
SEED_ENV = "LEASECHECK_SEED"
EXAMPLES_ENV = "LEASECHECK_EXAMPLES"
HUNT_ENV = "LEASECHECK_HUNT"
"""Set to 1 by ``leasecheck hunt`` only: the example database is writable in every profile."""
MAX_EXAMPLES_ENV = "LEASECHECK_MAX_EXAMPLES"
"""Overrides the profile's Hypothesis example count (e.g. 1: replay the database, barely search)."""


@dataclass(frozen=True, kw_only=True)
class Profile:
    """How hard every property tries."""

    name: str
    max_examples: int
    """Hypothesis examples per stateful property."""
    step_count: int
    """Maximum rules per stateful example."""
    crash_states: int
    """Generated starting states per (operation, fault point) in the crash harness."""
    random_kills: int
    """Kills at random instants."""
    race_rounds: int
    """Rounds of N processes released together from a barrier."""
    race_processes: int
    parallel_histories: int
    """Parallel histories per linearizability property."""
    thread_rounds: int
    """Rounds of the JobQueue thread hammer (``jobs.threads``): a count, not seconds, so a
    loaded machine runs the same rounds, only slower (about 0.14 s a round on 2 cores)."""
    explore_scope: str
    """Scope name for the model checker (``models.lease_explorer``, ``models.job_explorer``)."""
    shrink_seconds: int = 30
    """How long Hypothesis may shrink one failure (every attempt runs real SQLite)."""
    power_histories: int = 3
    """Histories traced by lease.power-loss (each cut at every write, sync and unlink)."""
    power_states: int = 64
    """Most crash states per cut point of lease.power-loss (all of them when fewer)."""
    queue_examples: int = 500
    """Programs per generic agreement property (``queue.no-loss``, ``queue.stale-ack``)."""
    queue_rounds: int = 40
    """Kill rounds of ``queue.ack-final`` and rounds per history of ``queue.linearizable``."""
    queue_examples_real: int = 100
    """Programs per generic agreement property on a real-clock library (``clock="real"``):
    its leases run out in real time, so each program sleeps (about 0.15 s)."""
    token_polls: int = 65_536
    """Polls of one job in ``jobs.edges``' token run (``stateful_tests.job_tokens``): any
    token scheme with up to about ``token_polls**2 / 128`` values repeats within it for
    certain (2**25 at ci, 2**33 at deep)."""


PROFILES = {
    "quick": Profile(
        name="quick", max_examples=100, step_count=20, crash_states=2, random_kills=20,
        race_rounds=20, race_processes=3, parallel_histories=25, thread_rounds=6,
        explore_scope="small", shrink_seconds=15, power_histories=1, queue_examples=50,
        queue_rounds=10, queue_examples_real=20, token_polls=4_096,
    ),
    "ci": Profile(
        name="ci", max_examples=1000, step_count=15, crash_states=10, random_kills=120,
        race_rounds=200, race_processes=3, parallel_histories=100, thread_rounds=16,
        explore_scope="ci", shrink_seconds=30,
    ),
    "deep": Profile(
        name="deep", max_examples=2000, step_count=80, crash_states=20, random_kills=1000,
        race_rounds=500, race_processes=6, parallel_histories=1000, thread_rounds=160,
        explore_scope="deep", shrink_seconds=300, power_histories=30, power_states=512,
        queue_examples=2000, queue_rounds=400, queue_examples_real=1000, token_polls=2**20,
    ),
}  # fmt: skip


def current_profile(name: str | None = None) -> Profile:
    """The profile called ``name``, else ``$LEASECHECK_PROFILE``, else ``ci``."""
    where = "--profile" if name is not None else f"${PROFILE_ENV}"
    name = name if name is not None else os.environ.get(PROFILE_ENV, "ci")
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r} from {where}; use one of quick, ci, deep")
    return max_examples_from_env(PROFILES[name])


def max_examples_from_env(profile: Profile) -> Profile:
    """``profile`` with ``$LEASECHECK_MAX_EXAMPLES`` examples, if that is set."""
    raw = os.environ.get(MAX_EXAMPLES_ENV)
    if raw is None:
        return profile
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"${MAX_EXAMPLES_ENV}={raw!r} is not a positive integer; set e.g. 1")
    return replace(profile, max_examples=int(raw))


def current_seed(seed: int | None = None) -> int:
    """``seed``, else ``$LEASECHECK_SEED``, else 0."""
    if seed is not None:
        return seed
    raw = os.environ.get(SEED_ENV, "0")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"${SEED_ENV}={raw!r} is not an integer; set it to e.g. 0") from None


def examples_path(path: str | Path | None = None) -> Path:
    """``path``, else ``$LEASECHECK_EXAMPLES``, else ``.leasecheck/examples``."""
    return Path(path if path is not None else os.environ.get(EXAMPLES_ENV, ".leasecheck/examples"))


def db_url(url: str | None = None) -> str | None:
    """``url``, else ``$LEASECHECK_DB`` (a shared ``redis://`` example database), else None."""
    return url if url is not None else (os.environ.get(DB_ENV) or None)


def example_database(
    read_only: bool, path: Path | None = None, url: str | None = None
) -> ExampleDatabase:
    """Failing examples are kept here and replayed first (share it by committing it).

    ``url`` (a ``redis://`` URL, from ``--db``) names a database shared by a fleet
    (``leasecheck.shared_db``); otherwise the local example directory is used.
    """
    database: ExampleDatabase
    if url:
        database = open_database(url, where="--db")
    else:
        database = DirectoryBasedExampleDatabase(examples_path(path))
    return ReadOnlyDatabase(database) if read_only else database


def hunting() -> bool:
    """``leasecheck hunt`` writes its finds even with the ``ci`` profile's settings."""
    return os.environ.get(HUNT_ENV) == "1"


def hypothesis_settings(
    profile: Profile, examples: Path | None = None, url: str | None = None,
    read_only: bool = False,
) -> settings:  # fmt: skip
    """The Hypothesis settings of ``profile`` (never time-based: no deadline). The example
    database is only read in ``ci`` and with ``read_only`` (a batch: one file's finds are
    never replayed on another file)."""
    return settings(
        max_examples=profile.max_examples,
        stateful_step_count=profile.step_count,
        deadline=None,
        # Explicit: with CI=true in the environment Hypothesis' own default profile turns
        # derandomize on, which would ignore the seed and change the verdict under CI.
        derandomize=False,
        database=example_database(
            read_only=read_only or (profile.name == "ci" and not hunting()),
            path=examples,
            url=url,
        ),
        # Every health check but nested_given: no property nests @given, and HypoFuzz
        # refuses to fuzz a test whose settings suppress it (``leasecheck hunt``).
        suppress_health_check=[check for check in HealthCheck if check != HealthCheck.nested_given],
        # The explain phase re-runs the failing program many times to annotate lines; on
        # a state machine that opens SQLite files it can take minutes for little gain.
        phases=[phase for phase in Phase if phase is not Phase.explain],
        print_blob=True,
        report_multiple_bugs=False,
    )
