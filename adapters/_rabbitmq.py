"""What the two RabbitMQ adapters share (kombu's ``pyamqp`` transport and Dramatiq's
``RabbitmqBroker``): their capabilities, the lease the broker is started with, the store
a location names, and the install check.

RabbitMQ has no per-claim lease. Its one lease is ``consumer_timeout``: a delivery not
acknowledged within it closes its channel with ``PRECONDITION_FAILED`` and the broker
requeues the channel's deliveries (https://www.rabbitmq.com/docs/3.10/consumers,
"Delivery Acknowledgement Timeout"). RabbitMQ 3.10 (Debian 12's 3.10.8 here) sets it
for the whole broker only: the per-queue ``x-consumer-timeout`` argument and the
``consumer-timeout`` policy key came with 3.12. And the broker compares a delivery's age
with the timeout on each channel's tick (``channel_tick_interval``, 60 s by default), so
a delivery's lease really ends at the first tick after it.

So the lease is a setting of the *server* (``Capabilities.server_lease``): the harness
starts one broker per check with ``consumer_timeout = LEASE_MS`` and a tick of
``TICK_MS`` (``adapters.servers.start_for``), and the engines lease for exactly
``LEASE_MS``, treating ``[LEASE_MS, LEASE_MS + SLACK_MS]`` after a delivery as the
lease's end (``Capabilities.lease_slack``): a call that ran across that window is not
judged (``adapters.timing.Pacer``). The slack is the tick and room for the broker's own
scheduling on a loaded machine.

A location is the server URL with the store's queue name as its fragment
(``amqp://guest:guest@127.0.0.1:5673//#lc-kombu-amqp-1a2b``): stores on one broker
never share a queue.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import ClassVar, Protocol

from leasecheck.adapters._libs import installed_version, split_at_hash
from leasecheck.adapters.protocol import (
    AdapterError,
    Capabilities,
    Lost,
    Promises,
    QueueAdapter,
    QueueClock,
)

__all__ = [
    "BROKERS_EXTRA",
    "CAPABILITIES",
    "CONFIRMS",
    "CONSUMERS",
    "LEASE_MS",
    "SLACK_MS",
    "TICK_MS",
    "RabbitmqConnection",
    "RabbitmqStore",
    "losses_path",
    "read_lost",
    "record_lost",
    "split_location",
]

BROKERS_EXTRA = "pip install 'leasecheck[brokers]'"
"""The command that installs kombu, py-amqp, Dramatiq and pika (the ``brokers`` extra)."""

CONFIRMS = "https://www.rabbitmq.com/docs/3.10/confirms"
CONSUMERS = "https://www.rabbitmq.com/docs/3.10/consumers"

LEASE_MS = 300
"""The broker's ``consumer_timeout`` for a check: long beside a call (a few ms), short
enough that a program's leases run out while it sleeps a few hundred ms."""
SLACK_MS = 40
"""How late after ``LEASE_MS`` a lease may end: the tick below, plus room for the
broker's scheduling on a loaded machine."""
TICK_MS = SLACK_MS // 4
"""``channel_tick_interval`` for a check (``servers.start_for``: a quarter of the slack)."""

CAPABILITIES = Capabilities(
    clock="real", extend=False, server="rabbitmq", ack_deletes=True,
    lease_granularity=LEASE_MS / 1000, one_lease=True,
    server_lease=LEASE_MS / 1000, lease_slack=SLACK_MS / 1000,
)  # fmt: skip
"""Real time (the broker's), no extend (AMQP 0-9-1 cannot renew a delivery), an ack
removes the message, and the lease is the broker's one ``consumer_timeout``."""


def split_location(location: str) -> tuple[str, str]:
    """``(server URL, queue name)`` of a location made by ``RabbitmqStore.create``."""
    return split_at_hash(location, "queue")


def losses_path(queue: str) -> Path:
    """The store's file of ``Lost`` records (JSON lines), shared by every process that
    connects to it: a racer records its own losses, the harness reads them all."""
    return Path(tempfile.gettempdir()) / f"leasecheck-rabbitmq-{queue}.lost.jsonl"


def record_lost(queue: str, worker: str, jobs: list[str], why: str) -> None:
    """Record that ``worker``'s live claims of ``jobs`` lost their deliveries now: their
    connection or channel ended, and RabbitMQ "automatically requeued" every
    unacknowledged delivery on it (CONFIRMS, "Automatic Requeueing")."""
    if not jobs:
        return
    at = time.monotonic_ns()
    lines = "".join(
        json.dumps({"worker": worker, "job": job, "at_ns": at, "why": why}) + "\n" for job in jobs
    )
    descriptor = os.open(losses_path(queue), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(descriptor, lines.encode())  # one append: whole lines, never interleaved
    finally:
        os.close(descriptor)


def read_lost(queue: str) -> list[Lost]:
    """Every ``Lost`` recorded for the store so far."""
    try:
        text = losses_path(queue).read_text()
    except FileNotFoundError:
        return []
    return [Lost(**json.loads(line)) for line in text.splitlines() if line.endswith("}")]


class RabbitmqStore:
    """The part of a RabbitMQ library that is the same for every client: one durable
    queue per store on a shared broker. A subclass names its distributions and modules
    (for ``version``) and opens its connection (``open``)."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities] = CAPABILITIES
    promises: ClassVar[Promises]
    distributions: ClassVar[tuple[tuple[str, str], ...]]
    """``(distribution, module)`` of every package the client needs (kombu and py-amqp)."""
    prefix: ClassVar[str] = "lc-"
    """The start of every queue name the adapter makes."""

    def version(self) -> str:
        versions = [installed_version(d, m, BROKERS_EXTRA) for d, m in self.distributions]
        return versions[0]

    def create(self, directory: Path, server: str | None) -> str:
        if not server:
            raise AdapterError(
                f"{self.name} keeps its queue in RabbitMQ: give create() the server URL "
                "(adapters.servers.rabbitmq() starts a throw-away one)"
            )
        location = f"{server}#{self.prefix}{uuid.uuid4().hex[:12]}"
        self.open(location).close()  # connecting declared the queue
        return location

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        """One connection; ``clock`` is unused: the broker reads its own time."""
        return self.open(location)

    def open(self, location: str) -> RabbitmqConnection:
        """The client's connection to the store at ``location``."""
        raise NotImplementedError

    def destroy(self, location: str) -> None:
        """Delete the store's queues (``DestroysStores``)."""
        raise NotImplementedError


class RabbitmqConnection(QueueAdapter, Protocol):
    """A connection of either RabbitMQ adapter: the protocol's verbs and a ready count."""

    def ready_count(self) -> int:
        """How many messages the queue holds ready (a passive ``queue.declare``)."""
