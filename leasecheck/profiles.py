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
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase, ReadOnlyDatabase

__all__ = ["PROFILES", "Profile", "current_profile", "current_seed", "hypothesis_settings"]

PROFILE_ENV = "LEASECHECK_PROFILE"
SEED_ENV = "LEASECHECK_SEED"
EXAMPLES_ENV = "LEASECHECK_EXAMPLES"


@dataclass(frozen=True)
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
    thread_seconds: float
    """Wall-clock budget of the JobQueue thread-hammer test."""
    explore_scope: str
    """Scope name for the model checker (see ``models.explorer``)."""
    shrink_seconds: int = 30
    """How long Hypothesis may shrink one failure (every attempt runs real SQLite)."""
    queue_examples: int = 500
    """Programs per generic agreement property (``queue.no-loss``, ``queue.stale-ack``)."""
    queue_rounds: int = 40
    """Kill rounds of ``queue.ack-final`` and rounds per history of ``queue.linearizable``."""


PROFILES = {
    "quick": Profile(
        *("quick", 100, 20, 2, 20, 20, 3, 25, 1.0, "small"),
        shrink_seconds=15,
        queue_examples=50,
        queue_rounds=10,
    ),
    "ci": Profile("ci", 1000, 15, 10, 120, 200, 3, 100, 2.0, "ci", shrink_seconds=30),
    "deep": Profile(
        *("deep", 2000, 80, 20, 1000, 500, 6, 1000, 20.0, "deep"),
        shrink_seconds=300,
        queue_examples=2000,
        queue_rounds=400,
    ),
}


def current_profile() -> Profile:
    name = os.environ.get(PROFILE_ENV, "ci")
    if name not in PROFILES:
        raise ValueError(
            f"unknown profile {name!r} from ${PROFILE_ENV}; use one of quick, ci, deep"
        )
    return PROFILES[name]


def current_seed() -> int:
    raw = os.environ.get(SEED_ENV, "0")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"${SEED_ENV}={raw!r} is not an integer; set it to e.g. 0") from None


def example_database(read_only: bool) -> ExampleDatabase:
    """Failing examples are kept here and replayed first (share it by committing it)."""
    path = Path(os.environ.get(EXAMPLES_ENV, ".leasecheck/examples"))
    database: ExampleDatabase = DirectoryBasedExampleDatabase(path)
    return ReadOnlyDatabase(database) if read_only else database


def hypothesis_settings(profile: Profile) -> settings:
    """The Hypothesis settings of ``profile`` (never time-based: no deadline)."""
    return settings(
        max_examples=profile.max_examples,
        stateful_step_count=profile.step_count,
        deadline=None,
        # Explicit: with CI=true in the environment Hypothesis' own default profile turns
        # derandomize on, which would ignore the seed and change the verdict under CI.
        derandomize=False,
        database=example_database(read_only=profile.name == "ci"),
        suppress_health_check=list(HealthCheck),
        # The explain phase re-runs the failing program many times to annotate lines; on
        # a state machine that opens SQLite files it can take minutes for little gain.
        phases=[phase for phase in Phase if phase is not Phase.explain],
        print_blob=True,
        report_multiple_bugs=False,
    )
