"""beanstalkd through greenstalk: is deletion a fenced ack? Observed on a real server.

beanstalkd's protocol (doc/protocol.md, "delete"): "The delete command removes a job from
the server entirely. It is normally used by the client when the job has successfully
run to completion. A client can delete jobs that it has reserved, ready jobs, delayed
jobs, and jobs that are buried." So a *reserved* job may be deleted, released, touched or
buried only by the connection that reserved it; anyone else gets ``NOT_FOUND``. Each test
is one scenario on a server of its own. A reservation is ended by ``release`` (or by
closing the connection), never by waiting out a TTR: on this beanstalkd (1.12) a
reservation's TTR expiry was sometimes not processed for seconds (docs/findings.md), so
no verdict here depends on it.

The generic adapter (``adapters/beanstalkd.py``) came later: it runs the server on a
clock the harness moves, so its TTR expiries do not depend on real time; these
scenarios stay on a real clock, with no TTR run out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import greenstalk  # pip install 'leasecheck[brokers]': a missing one fails, never skips
import pytest

from leasecheck.adapters import servers

Clients = tuple[Any, Any, Any]
TUBE = "leasecheck"
TTR = 60


@pytest.fixture
def port() -> Iterator[int]:
    """A server per test: it starts in about 10 ms."""
    try:
        with servers.beanstalkd() as server:
            yield server.port
    except servers.ServerMissing as missing:  # pragma: no cover - CI installs it
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture
def clients(port: int) -> Iterator[Clients]:
    made = [greenstalk.Client(("127.0.0.1", port), use=TUBE, watch=TUBE) for _ in range(3)]
    yield made[0], made[1], made[2]
    for client in made:
        client.close()


def _state(client: Any, job: int) -> str:
    try:
        return str(client.stats_job(job)["state"])
    except greenstalk.NotFoundError:
        return "gone"


@pytest.mark.parametrize("verb", ["delete", "touch", "release", "bury"])
def test_only_the_reserving_connection_may_end_a_reserved_job(clients: Clients, verb: str) -> None:
    a, b, _ = clients
    job = a.put("j0", ttr=TTR)
    held = a.reserve(timeout=0)
    with pytest.raises(greenstalk.NotFoundError):
        getattr(b, verb)(held)
    assert _state(b, job) == "reserved"
    a.delete(held)
    assert _state(b, job) == "gone"


def test_a_stale_delete_after_another_connection_reserved_is_refused(clients: Clients) -> None:
    """A gives the job back (``release``), B reserves it, A's late delete: refused."""
    a, b, _ = clients
    job = a.put("j0", ttr=TTR)
    first = a.reserve(timeout=0)
    a.release(first)
    second = b.reserve(timeout=0)
    assert second.id == job and b.stats_job(job)["reserves"] == 2
    with pytest.raises(greenstalk.NotFoundError):
        a.delete(first)  # the stale ack
    assert _state(b, job) == "reserved"
    b.delete(second)
    assert _state(b, job) == "gone"


def test_the_fence_is_the_connection_not_the_reservation(clients: Clients) -> None:
    """One connection shared by two runs of a job (a worker process whose first run gave
    the job back, then reserved it again): the first run's delete ends the second's."""
    a, b, _ = clients
    job = a.put("j0", ttr=TTR)
    first = a.reserve(timeout=0)
    a.release(first)
    second = a.reserve(timeout=0)
    assert second.id == first.id == job and a.stats_job(job)["reserves"] == 2
    a.delete(first)
    assert _state(b, job) == "gone", "beanstalkd refused a delete of its own reservation"


def test_a_ready_job_may_be_deleted_by_anyone(clients: Clients) -> None:
    """Between a job's release (or its TTR) and the next reserve, any client's delete
    succeeds, the late worker's included."""
    a, b, c = clients
    job = a.put("j0", ttr=TTR)
    a.release(a.reserve(timeout=0))
    c.delete(job)
    assert _state(b, job) == "gone"


def test_touch_keeps_and_a_closed_connection_releases(clients: Clients) -> None:
    a, b, _ = clients
    job = a.put("j0", ttr=60)
    held = a.reserve(timeout=0)
    a.touch(held)
    assert a.stats_job(job)["time-left"] >= 58
    a.close()  # a worker whose connection dies gives its jobs back at once
    assert b.reserve(timeout=0).id == job


def test_bury_keeps_a_job_out_of_reach_until_kicked(clients: Clients) -> None:
    a, b, _ = clients
    job = a.put("j0", ttr=TTR)
    a.bury(a.reserve(timeout=0))
    assert _state(b, job) == "buried"
    with pytest.raises(greenstalk.TimedOutError):
        b.reserve(timeout=0)
    assert b.kick(1) == 1 and b.reserve(timeout=0).id == job


def test_ttr_is_whole_seconds_and_at_least_one(clients: Clients) -> None:
    a, _, _ = clients
    assert a.stats_job(a.put("j0", ttr=0))["ttr"] == 1
