"""The given types of job-queue.md, for JobQueue target files: the one documented import.

    from leasecheck.jobs import IllegalStateError, JobStatus, JobView, Lease, RetryPolicy

They are defined once, in ``leasecheck.queue_impl.jobs``; this module re-exports them.
"""

from leasecheck.queue_impl.jobs import (
    IllegalStateError,
    JobStatus,
    JobView,
    Lease,
    RetryPolicy,
    TimeSource,
)

__all__ = ["IllegalStateError", "JobStatus", "JobView", "Lease", "RetryPolicy", "TimeSource"]
