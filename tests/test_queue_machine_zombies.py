"""The generic machine reaches a zombie whose lease timed out (``lease_runs_out``), and
``zombie_ack`` takes it before one that gave its job back.

kombu's Redis transport is the library that needs both: a nacked message's late ack is
refused by kombu itself (``Message.ack`` of a rejected message raises), while the late
ack of a delivery whose visibility timeout ran out removes the redelivered message
(``QoS.ack`` by the delivery tag every redelivery shares). Before, 500 ci programs met
only nack-made zombies and ``queue.stale-ack`` read "holds" on kombu-redis. The programs
below are the rules called in order, as a shrunk Hypothesis program reads.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from leasecheck.adapters.registry import load_library
from leasecheck.stateful_tests.queue_machine import Held, QueueMachine

STALE = "queue.stale-ack"


@pytest.fixture
def machine(redis_url: str) -> Iterator[QueueMachine]:
    bound = QueueMachine.bound(load_library("kombu-redis"), frozenset({STALE}), redis_url)
    running = bound()
    running.first_job()
    running.observed()
    yield running
    running.teardown()


def _step(machine: QueueMachine, rule: str, *args: object) -> object:
    result = getattr(machine, rule)(*args)
    machine.observed()
    return result


def test_lease_runs_out_makes_a_timed_out_zombie(machine: QueueMachine) -> None:
    first = _step(machine, "claim", 0, 150)
    again = _step(machine, "lease_runs_out")
    assert isinstance(first, Held) and isinstance(again, Held), (first, again)
    assert again.claim is not None and again.claim.job == "j0", "j0 was not redelivered"
    with pytest.raises(AssertionError, match=f"^{STALE} violated by kombu-redis: .*deleted it"):
        _step(machine, "zombie_ack", 0)
    machine.failed = True  # what Hypothesis' run does after a failure: no drain


def test_zombie_ack_takes_the_timed_out_zombie_first(machine: QueueMachine) -> None:
    """c0 gave j0 back (kombu refuses its late ack), c1 got j0 and timed out, c2 got j0:
    the zombie acked is c1, whose ack removes c2's message."""
    given_back = _step(machine, "claim", 0, 150)
    assert isinstance(given_back, Held)
    _step(machine, "nack", given_back, 0)
    _step(machine, "claim", 1, 150)
    _step(machine, "lease_runs_out")
    with pytest.raises(
        AssertionError,
        match=f"^{STALE} violated by kombu-redis: at observe\\(\\) after ack of <claim c1 ",
    ):
        _step(machine, "zombie_ack", 1)
    machine.failed = True
