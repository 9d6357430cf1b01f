"""RabbitMQ's ``consumer_timeout`` through kombu's ``pyamqp`` transport, on a real broker.

RabbitMQ's docs (Consumers, "Delivery Acknowledgement Timeout"): a consumer that does not
acknowledge a delivery within ``consumer_timeout`` has its channel closed with
``PRECONDITION_FAILED``, and the channel's unacknowledged deliveries are requeued: the
broker's own lease. The broker here is started with ``consumer_timeout = 1000`` ms
(``adapters.servers.rabbitmq``); the test measures when the lease really ends.

Observed on RabbitMQ 3.10.8: the timeout is enforced by a periodic check, so a 1 s
timeout ended after about 60 s; the late ack of the timed-out delivery is refused (the
channel is closed), so on RabbitMQ a stale ack is fenced by the channel.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from leasecheck.adapters import servers

kombu: Any = importlib.import_module("kombu")  # the brokers extra: a missing one fails

TIMEOUT_MS = 1000
BOUND = 120.0
"""Seconds the redelivery is waited for (the broker's check ran after about 60 s)."""


@pytest.fixture(scope="module")
def broker() -> Iterator[servers.Server]:
    try:
        with servers.rabbitmq(consumer_timeout_ms=TIMEOUT_MS) as server:
            yield server
    except servers.ServerMissing as missing:  # pragma: no cover - CI installs it
        pytest.fail(str(missing), pytrace=False)


def test_consumer_timeout_requeues_and_fences_the_late_ack(broker: servers.Server) -> None:
    with kombu.Connection(broker.url) as first, kombu.Connection(broker.url) as second:
        exchange = kombu.Exchange("lc", type="direct")
        mine: Any = kombu.Queue("lc", exchange, routing_key="lc")(first.channel())
        mine.declare()
        theirs: Any = kombu.Queue("lc", exchange, routing_key="lc")(second.channel())
        kombu.Producer(mine.channel, exchange=exchange, routing_key="lc").publish("j0")
        held = mine.get(no_ack=False)
        assert held is not None
        start, closed, again = time.monotonic(), None, None
        while again is None and time.monotonic() - start < BOUND:
            if closed is None:
                try:
                    first.drain_events(timeout=0.05)  # a live worker's I/O loop
                except TimeoutError:
                    pass
                except kombu.exceptions.OperationalError:
                    raise
                except Exception as error:  # amqp raises its ChannelError subclasses
                    assert "PRECONDITION_FAILED" in str(error), error
                    closed = time.monotonic() - start
            again = theirs.get(no_ack=False)
        assert closed is not None and again is not None, "the delivery was never timed out"
        assert again.delivery_info["redelivered"] and again.body == "j0"
        assert closed > TIMEOUT_MS / 1000, closed
        print(f"consumer_timeout {TIMEOUT_MS} ms ended the lease after {closed:.1f} s")
        with pytest.raises(Exception, match=r"PRECONDITION_FAILED|closed"):
            held.ack()  # the late ack: its channel is gone
            first.drain_events(timeout=0.5)
        again.ack()
