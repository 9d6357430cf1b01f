"""What targets are checked against: pure in-memory reference models and the model checker.

Nothing here touches SQLite, processes or threads; ``contracts`` declares the
operations a target and its model share; ``lease_ops``, ``job_ops`` and ``queue_ops`` the
one record of an operation and of its outcome per contract (docs/operations.md).
"""

from leasecheck.models.contracts import JobQueueLike, JobRow, LeaseQueue, RedriveRow, Snapshot
from leasecheck.models.job_ops import JobOp, JobOutcome
from leasecheck.models.lease_ops import LeaseOp, LeaseOutcome
from leasecheck.models.queue_ops import QueueOp, QueueOutcome

__all__ = [
    "JobOp",
    "JobOutcome",
    "JobQueueLike",
    "JobRow",
    "LeaseOp",
    "LeaseOutcome",
    "LeaseQueue",
    "QueueOp",
    "QueueOutcome",
    "RedriveRow",
    "Snapshot",
]
