"""``from queue_impl.jobs import ...`` for older target files: the same objects as
``leasecheck.jobs`` (the documented import), so enums and exceptions compare equal."""

from leasecheck.jobs import (
    IllegalStateError,
    JobStatus,
    JobView,
    Lease,
    RetryPolicy,
    TimeSource,
)

__all__ = ["IllegalStateError", "JobStatus", "JobView", "Lease", "RetryPolicy", "TimeSource"]
