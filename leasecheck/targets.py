"""Public import path kept for exported counterexamples and users' scripts.

The target loader and the snapshot adapter live in the ``targets`` layer, below the
harnesses (``targets.loader``, ``targets.lease_target``); this module re-exports them.
"""

from targets.lease_compare import error_kind
from targets.lease_target import LeaseTarget, read_snapshot, write_snapshot
from targets.loader import (
    BUNDLED_JOBS,
    BUNDLED_WORKER,
    JOBQUEUE_METHODS,
    WORKER_NAMES,
    TargetError,
    load_jobs_target,
    load_module,
    load_worker,
)

__all__ = [
    "BUNDLED_JOBS",
    "BUNDLED_WORKER",
    "JOBQUEUE_METHODS",
    "WORKER_NAMES",
    "LeaseTarget",
    "TargetError",
    "error_kind",
    "load_jobs_target",
    "load_module",
    "load_worker",
    "read_snapshot",
    "write_snapshot",
]
