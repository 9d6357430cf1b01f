"""What leasecheck checks by default: the bundled lease worker, JobQueue and HTTP receiver.

``worker`` implements lease-worker.md, ``jobs`` holds the given types of
job-queue.md, ``job_queue`` implements JobQueue, ``receiver`` is the HTTP
receiving server with its deduplicating inbox and its ``send`` client.
"""

__all__: list[str] = []
