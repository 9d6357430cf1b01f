"""arq's own behaviour through its adapter, on a real Redis: run only in ``.venv-arq``.

arq pins ``redis<6``, so these run in an environment of their own; the main suite runs
them through ``tests/test_arq_adapter.py``, which starts
``.venv-arq/bin/python -m pytest tests/arq_scenarios.py`` (the file name keeps the main
run from collecting it where arq cannot be imported). The lease is the in-progress key's
expiry on the Redis server's clock (real time), so each wait is a real one, several
times the lease.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leasecheck.adapters import servers
from leasecheck.adapters.arq_redis import ArqRedis
from leasecheck.adapters.protocol import QueueAdapter, SharedClock, Unsupported

LEASE = 0.1
"""A real in-progress expiry: long beside a call (about 1 ms), short to wait out."""


class Store:
    def __init__(self, server: servers.Server, directory: Path) -> None:
        self.library = ArqRedis()
        self.clock = SharedClock.of(directory / "clock", self.library.capabilities)
        self.location = self.library.create(directory, server.url)
        self.a: QueueAdapter = self.library.connect(self.location, self.clock)
        self.b: QueueAdapter = self.library.connect(self.location, self.clock)

    def states(self) -> dict[str, str]:
        return {view.job: view.state for view in self.a.observe()}

    def close(self) -> None:
        self.a.close()
        self.b.close()
        self.clock.close()
        self.library.destroy(self.location)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[servers.Server]:
    try:
        with servers.start("redis", durable=False) as server:
            yield server
    except servers.ServerMissing as missing:  # pragma: no cover - CI installs it
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture
def store(redis_server: servers.Server) -> Iterator[Store]:
    with tempfile.TemporaryDirectory(prefix="leasecheck-arq-") as directory:
        made = Store(redis_server, Path(directory))
        yield made
        made.close()


def test_round_trip_and_retry(store: Store) -> None:
    store.a.enqueue("j0", "payload")
    assert store.states() == {"j0": "ready"}
    claim = store.b.claim("w", 10.0)
    assert claim is not None and claim.job == "j0"
    assert store.states() == {"j0": "leased"}
    assert store.a.claim("w", 10.0) is None, "a job in progress was started again"
    assert store.b.nack(claim)  # finish_job(finish=False): in-progress key deleted
    assert store.states() == {"j0": "ready"}, "a retried job did not stay in the queue"
    again = store.a.claim("w", 10.0)
    assert again is not None and store.a.ack(again)
    assert store.states() == {"j0": "done"}, "a finished job keeps its result"
    assert store.b.claim("w", 10.0) is None
    with pytest.raises(Unsupported):
        store.a.extend(again, 10.0)


def test_the_in_progress_key_is_the_lease(store: Store) -> None:
    store.a.enqueue("j0", "payload")
    first = store.a.claim("w0", LEASE)
    assert first is not None
    assert store.b.claim("w1", LEASE) is None
    time.sleep(LEASE * 2)
    second = store.b.claim("w1", 10.0)
    assert second is not None and second.job == "j0", "an expired in-progress key held"


def test_a_stale_finish_completes_the_job_another_worker_runs(store: Store) -> None:
    """The queue.stale-ack finding: w0's in-progress key expired and w1 started the job;
    w0's late finish_job deletes w1's in-progress key and the job, and stores w0's
    result: the job reads done while w1 runs it."""
    store.a.enqueue("j0", "payload")
    first = store.a.claim("w0", LEASE)
    time.sleep(LEASE * 2)
    second = store.b.claim("w1", 10.0)
    assert first is not None and second is not None and second.job == "j0"
    assert store.a.ack(first)
    assert store.states() == {"j0": "done"}, "the stale finish was fenced"
