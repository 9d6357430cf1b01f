"""``open-while-own-claim``: a connection opened while another process holds a live claim,
on a broker scheduled at its verbs (issue 27: "a connection opened (fresh or reopened)
while other processes hold live claims", for every library). The claim is P1's own there:
a claim the harness seeded would belong to the harness's client."""

from __future__ import annotations

from pathlib import Path

from leasecheck.adapters.nats_jetstream import NatsJetstream
from leasecheck.adapters.server_plants import ResettingNats
from leasecheck.crash_harness._queue_scenarios import VERB_BOUNDS, queue_scenario
from leasecheck.crash_harness.queue_interleavings import explore_queue


def test_the_brokers_ci_plan_opens_a_connection_beside_a_live_claim() -> None:
    assert ("open-while-own-claim", 2) in VERB_BOUNDS["ci"]
    scenario = queue_scenario("open-while-own-claim")
    assert not scenario.claimed()  # the seeds are ready: P1 claims, then acks
    assert [verb.name for verb in scenario.programs[1]] == ["open", "claim"]


def test_a_connection_that_resets_the_consumer_gives_up_a_live_claim(
    tmp_path: Path, nats_url: str
) -> None:
    """nats-jetstream holds; the planted reset forgets the deliveries other connections
    hold, so a live claim is given up. NATS does not promise exclusive delivery (its
    AckWait only), so the breach is "not promised", never VIOLATED."""
    scenario = queue_scenario("open-while-own-claim")
    fine = explore_queue(NatsJetstream(), scenario, tmp_path / "fine", 2, server=nats_url)
    assert fine.violated is None and fine.unpromised is None
    assert fine.exploration.explored > 0
    found = explore_queue(ResettingNats(), scenario, tmp_path / "reset", 2, server=nats_url)
    assert found.violated is None, found.violated.text
    assert found.unpromised is not None, found.exploration
    assert found.unpromised.prop == "queue.exclusive", found.unpromised.text
    assert "its live lease was given up" in found.unpromised.text
    assert "P2 calls open()" in found.unpromised.run.interleaving()
