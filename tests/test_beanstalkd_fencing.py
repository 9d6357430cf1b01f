"""beanstalkd through greenstalk: is deletion a fenced ack? Observed on a real server.

beanstalkd's protocol (doc/protocol.md, "delete"): "The delete command removes a job from
the server entirely. It is normally used by the client when the job has successfully
run to completion. A client can delete jobs that it has reserved, ready jobs, delayed
jobs, and jobs that are buried." So a *reserved* job may be deleted, released or touched
only by the connection that reserved it; everything else answers ``NOT_FOUND``. Each
test below is one scenario on a server started for the module, TTR = 1 s (beanstalkd's
smallest: a ``put`` with TTR 0 gets 1), every expiry waited out on the server's clock
with a bounded margin (``EXPIRED``).

Why no generic adapter: a beanstalkd lease (TTR) is fixed by the producer at ``put``,
in whole seconds of the server's clock, while the generic properties choose each
claim's lease at claim time and lease for tens of milliseconds on real time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import greenstalk  # pip install 'leasecheck[brokers]': a missing one fails, never skips
import pytest

from adapters import servers

Clients = tuple[Any, Any]

TTR = 1
EXPIRED = TTR + 0.3
"""How long a reservation is waited out: beanstalkd checks deadlines in its event loop,
so 300 ms past the TTR is room on a loaded machine (measured: within 5 ms)."""


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    try:
        with servers.beanstalkd() as server:
            yield server.port
    except servers.ServerMissing as missing:  # pragma: no cover - CI installs it
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture
def clients(port: int, request: pytest.FixtureRequest) -> Iterator[Clients]:
    tube = f"lc-{request.node.name}"[:200]
    a = greenstalk.Client(("127.0.0.1", port), use=tube, watch=tube)
    b = greenstalk.Client(("127.0.0.1", port), use=tube, watch=tube)
    yield a, b
    a.close()
    b.close()


def _state(client: Any, job: int) -> str:
    try:
        return str(client.stats_job(job)["state"])
    except greenstalk.NotFoundError:
        return "gone"


def test_only_the_reserving_connection_may_delete_a_reserved_job(clients: Clients) -> None:
    a, b = clients
    job = a.put("j0", ttr=TTR)
    held = a.reserve(timeout=0)
    for verb in (b.delete, b.touch, b.release, b.bury):
        with pytest.raises(greenstalk.NotFoundError):
            verb(held)
    assert _state(b, job) == "reserved"
    a.delete(held)
    assert _state(b, job) == "gone"


def test_a_stale_delete_after_another_connection_reserved_is_refused(clients: Clients) -> None:
    a, b = clients
    job = a.put("j0", ttr=TTR)
    first = a.reserve(timeout=0)
    time.sleep(EXPIRED)
    second = b.reserve(timeout=0)
    assert second.id == job and b.stats_job(job)["reserves"] == 2
    with pytest.raises(greenstalk.NotFoundError):
        a.delete(first)  # the stale ack: refused
    assert _state(b, job) == "reserved"
    b.delete(second)


def test_the_fence_is_the_connection_not_the_reservation(clients: Clients) -> None:
    """One connection shared by two runs of a job (a worker whose first run outlived its
    TTR, then reserved the job again): the first run's delete ends the second's job."""
    a, b = clients
    job = a.put("j0", ttr=TTR)
    first = a.reserve(timeout=0)
    time.sleep(EXPIRED)
    second = a.reserve(timeout=0)
    assert second.id == first.id == job
    a.delete(first)
    assert _state(b, job) == "gone", "beanstalkd refused a delete of its own reservation"


def test_a_ready_job_may_be_deleted_by_anyone(clients: Clients) -> None:
    """After the TTR and before anyone reserves again, the late worker's delete succeeds:
    the protocol lets any client delete a ready job."""
    a, b = clients
    job = a.put("j0", ttr=TTR)
    first = a.reserve(timeout=0)
    time.sleep(EXPIRED)
    assert _state(b, job) == "ready"
    a.delete(first)
    assert _state(b, job) == "gone"


def test_touch_keeps_and_a_closed_connection_releases(clients: Clients) -> None:
    a, b = clients
    job = a.put("j0", ttr=TTR)
    held = a.reserve(timeout=0)
    for _ in range(3):
        time.sleep(TTR * 0.6)
        a.touch(held)
    assert _state(b, job) == "reserved", "touch did not renew the TTR"
    a.close()  # a worker whose connection dies gives its jobs back at once
    assert b.reserve(timeout=0).id == job


def test_ttr_is_whole_seconds_and_at_least_one(clients: Clients) -> None:
    a, _ = clients
    assert a.stats_job(a.put("j0", ttr=0))["ttr"] == 1
