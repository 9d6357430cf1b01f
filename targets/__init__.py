"""Targets: how a file under test is loaded, seen through its contract, and compared.

This layer sits between the models and the harnesses (queue_impl < models < targets <
stateful_tests, crash_harness < leasecheck):

- ``targets.loader``: the one target loader (``load_worker``, ``load_jobs_target``).
- ``targets.lease_target``: a worker module and a connection as a ``LeaseQueue``, and
  its stored rows as a ``Snapshot``.
- ``targets.lease_compare`` / ``targets.job_compare``: the one comparison core per
  contract, used by every harness.
- ``targets.scratch``: tmpfs scratch directories for queue files.
"""

from leasecheck.targets.lease_compare import LeaseOutcome, differences, error_kind, same
from leasecheck.targets.lease_target import LeaseTarget, read_snapshot, write_snapshot
from leasecheck.targets.loader import (
    BUNDLED_JOBS,
    BUNDLED_WORKER,
    JOBQUEUE_METHODS,
    WORKER_NAMES,
    TargetError,
    load_jobs_target,
    load_module,
    load_worker,
)
from leasecheck.targets.scratch import scratch_dir

__all__ = [
    "BUNDLED_JOBS",
    "BUNDLED_WORKER",
    "JOBQUEUE_METHODS",
    "WORKER_NAMES",
    "LeaseOutcome",
    "LeaseTarget",
    "TargetError",
    "differences",
    "error_kind",
    "load_jobs_target",
    "load_module",
    "load_worker",
    "read_snapshot",
    "same",
    "scratch_dir",
    "write_snapshot",
]
