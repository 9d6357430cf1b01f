"""The names the test process and the command line share: the plugin's options, the
environment variables and the ``user_properties`` keys of its events.

Plain strings only, so the command line reads a run's events without importing pytest
or Hypothesis (``leasecheck check`` starts its test process about a second sooner);
``plugin`` and ``_events`` export the same names.
"""

from __future__ import annotations

__all__ = [
    "ADAPTER",
    "CHECKED_KEY",
    "CPU_KEY",
    "CRASHED_KEY",
    "DB",
    "EVENTS_ENV",
    "EXAMPLES",
    "FAILURE_KEY",
    "HARNESS_KEY",
    "IMPL",
    "JOBS_IMPL",
    "NOT_CHECKED_KEY",
    "OPTIONS",
    "PROFILE",
    "READ_ONLY",
    "RESOURCE_KEY",
    "SEED",
    "SERVERS",
    "STACKS_ENV",
    "STRICT",
    "TARGETS_ENV",
]

IMPL, JOBS_IMPL, PROFILE = "--leasecheck-impl", "--leasecheck-jobs-impl", "--leasecheck-profile"
SEED, EXAMPLES, DB = "--leasecheck-seed", "--leasecheck-examples", "--leasecheck-db"
SERVERS, ADAPTER = "--leasecheck-servers", "--leasecheck-adapter"
STRICT = "--leasecheck-strict-promises"
READ_ONLY = "--leasecheck-read-only-examples"
OPTIONS = (IMPL, JOBS_IMPL, PROFILE, SEED, EXAMPLES, DB, SERVERS, ADAPTER, STRICT, READ_ONLY)
"""Every option of the plugin: each starts with ``--leasecheck-`` (suite.md), and giving
any of them activates the plugin."""

EVENTS_ENV = "LEASECHECK_EVENTS"
STACKS_ENV = "LEASECHECK_STACKS"
TARGETS_ENV = "LEASECHECK_TARGET_FILES"
"""The contract's target files, separated by ``os.pathsep``, whose calls a test process
watches for a block (``_blocked``); unset for a library's run."""
FAILURE_KEY = "leasecheck:failure"
"""The ``user_properties`` key of a failure's structured counterexample."""
RESOURCE_KEY = "leasecheck:resource"
"""The ``user_properties`` key of a failure of leasecheck's environment (a full disk)."""
HARNESS_KEY = "leasecheck:harness"
"""The ``user_properties`` key of a failure of leasecheck's own code (``_blame``): exit 2."""
CPU_KEY = "leasecheck:cpu"
"""The ``user_properties`` key of the CPU seconds a test's body used: its worker's and
those of the children it reaped (a property's cost as data, for ``--json``)."""
CRASHED_KEY = "leasecheck:crashed"
"""On the report pytest-xdist makes for a test whose worker process died under it: the
worker's id. The row reads CRASHED, never VIOLATED: no assertion failed."""
CHECKED_KEY = "leasecheck:checked"
"""The ``user_properties`` key of what a property covered (a dict: text and figures)."""
NOT_CHECKED_KEY = "leasecheck:not-checked"
"""The ``user_properties`` key of a property that exercised nothing (a dict: what, change)."""
