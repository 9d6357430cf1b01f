"""What targets are checked against: pure in-memory reference models and the model checker.

Nothing here touches SQLite, processes or threads; ``contracts`` declares the
operations a target and its model share.
"""

from leasecheck.models.contracts import JobQueueLike, JobRow, LeaseQueue, RedriveRow, Snapshot

__all__ = ["JobQueueLike", "JobRow", "LeaseQueue", "RedriveRow", "Snapshot"]
