"""Real-clock libraries (``clock="real"``): the pacer, and the generic properties on real time.

localqueue (and a server's ``NOW()``) reads a clock no adapter can move, so the
engines run such a library on very short real leases and keep every call clear of
the instants a lease may end (``adapters.timing``). To see that this judges right in
both directions, the bundled lease worker and each planted-bug adapter are declared
``clock="real"`` in a user adapter file: the lease worker then reads the real clock
(its ``now`` argument comes from ``SharedClock(real=True)``), must still hold every
property, and each planted bug must still be caught by the property it names.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from leasecheck.adapters.planted import PLANTED, PlantedBug
from leasecheck.adapters.protocol import GENERIC_PROPERTIES
from leasecheck.adapters.timing import MARGIN_MS, ROOM_MS, CallTimes, Pacer
from leasecheck.properties._queue_machine import SHAPE_TRIES
from leasecheck.runner import HOLDS, NOT_CHECKED, VIOLATED, CheckOptions, run_check

REAL_LEASE_WORKER = '''
from dataclasses import replace
from leasecheck.adapters.lease_worker import LeaseWorker

class RealClockLeaseWorker(LeaseWorker):
    """The bundled lease worker, reading the system clock."""
    capabilities = replace(LeaseWorker.capabilities, clock="real")
'''

REAL_PLANTED = '''
from dataclasses import replace
from leasecheck.adapters.planted import PLANTED, planted_library

_Base = planted_library(next(bug for bug in PLANTED if bug.name == {name!r}))

class RealClockPlanted(_Base):
    """A planted bug on the system clock."""
    name = "real-clock:" + {name!r}
    capabilities = replace(_Base.capabilities, clock="real")
'''


def _verdicts(adapter: Path, profile: str, **options: object) -> dict[str, str]:
    result = run_check(CheckOptions(adapter=str(adapter), profile=profile, workers="0", **options))  # type: ignore[arg-type]
    return {name: prop.verdict for name, prop in result.properties.items()}


def test_the_lease_worker_on_the_real_clock_holds_every_property(tmp_path: Path) -> None:
    adapter = tmp_path / "real_lease_worker.py"
    adapter.write_text(REAL_LEASE_WORKER)
    rows = (*GENERIC_PROPERTIES, "queue.interleavings")
    verdicts = _verdicts(adapter, "quick")
    assert set(verdicts) == set(rows), verdicts
    # On real time a loaded machine may cut most programs of the two program-drawing
    # properties short, or leave no zombie ack among the quick profile's few: that is
    # reported honestly as "not checked" (exit 2), never as a pass or a violation.
    timing = {"queue.no-loss", "queue.stale-ack"}
    for prop, verdict in verdicts.items():
        assert verdict == HOLDS or (prop in timing and verdict == NOT_CHECKED), (prop, verdict)


@pytest.mark.parametrize("bug", PLANTED, ids=[bug.name for bug in PLANTED])
def test_each_planted_bug_on_the_real_clock_is_caught_by_its_property(
    bug: PlantedBug, tmp_path: Path
) -> None:
    adapter = tmp_path / "real_planted.py"
    adapter.write_text(REAL_PLANTED.format(name=bug.name))
    verdicts = _verdicts(adapter, "ci", first=bug.caught_by, stop_at_first_failure=True)
    assert verdicts[bug.caught_by] == VIOLATED, verdicts


# --- the pacer ----------------------------------------------------------------------------


def test_the_pacer_sleeps_past_a_lease_end_that_is_about_to_begin() -> None:
    pacer = Pacer()
    start = pacer.now()
    pacer.leased(start, start, 20)
    assert pacer.clear() == pytest.approx(start, abs=2)  # the end is 17 ms away: no wait
    time.sleep((20 - MARGIN_MS - ROOM_MS) / 1000)
    after = pacer.clear()
    assert after > start + 20 + MARGIN_MS
    assert not pacer.ambiguous(after, after)


def test_a_call_across_a_lease_end_is_ambiguous_and_counted() -> None:
    pacer = Pacer()
    pacer.leased(100, 102, 50)  # the lease ends somewhere in 147..155
    assert not pacer.ambiguous(140, 146)
    assert pacer.ambiguous(146, 148)
    assert pacer.ambiguous(150, 151)
    assert not pacer.ambiguous(156, 170)
    assert pacer.set_aside == 2


def test_a_lease_on_a_server_tick_ends_anywhere_in_its_slack() -> None:
    """A server that checks leases on a tick (RabbitMQ's ``consumer_timeout``) ends one
    up to ``slack_ms`` late: a call in that window is ambiguous, one after it is not."""
    pacer = Pacer(slack_ms=40)
    pacer.leased(100, 102, 300)  # ends somewhere in 397..445
    assert not pacer.ambiguous(390, 396)
    assert pacer.ambiguous(430, 431), "a call inside the tick's slack was judged"
    assert not pacer.ambiguous(446, 460)


def test_a_server_lease_is_every_engines_lease_and_is_not_refused() -> None:
    """An adapter whose lease is the server's one setting: every real-time lease an
    engine wants is that one, and the registry runs it although it is above 10 ms."""
    from dataclasses import replace

    from leasecheck.adapters._rabbitmq import CAPABILITIES, LEASE_MS, SLACK_MS
    from leasecheck.adapters.kombu_amqp import KombuAmqp
    from leasecheck.adapters.registry import refusal

    assert CAPABILITIES.real_lease_ms(15) == CAPABILITIES.real_lease_ms(1000) == LEASE_MS
    assert CAPABILITIES.slack_ms == SLACK_MS
    coarse = replace(CAPABILITIES, server_lease=None)
    assert coarse.real_lease_ms(15) == 15
    assert refusal(KombuAmqp(), "kombu-amqp") == ""

    class Coarse(KombuAmqp):  # the same lease, not declared the server's: refused
        capabilities = coarse

    assert "clock='real'" in refusal(Coarse(), "coarse")


def test_wait_out_returns_after_every_lease_has_ended() -> None:
    pacer = Pacer()
    now = pacer.now()
    pacer.leased(now, now + 1, 15)
    pacer.leased(now, now + 1, 5)
    assert pacer.wait_out() > now + 1 + 15 + MARGIN_MS
    assert pacer.ends == []


def test_the_room_follows_the_runs_call_times_within_a_share_of_the_shortest_lease() -> None:
    """Under load a call takes longer than ``ROOM_MS``: given the run's call times, the
    pacer keeps a call from starting within the slow end of them of a lease's end, but
    never within more than a quarter of the shortest lease (else no lease stays live)."""
    times = CallTimes()
    pacer = Pacer(times=times)
    assert pacer.room() == ROOM_MS  # no call timed yet
    for took in [2] * 90 + [20] * 10:
        times.add(took)
    assert pacer.room() == 20
    pacer.leased(0, 1, 60)  # the shortest lease: the room at most 15 ms
    assert pacer.room() == 15
    assert Pacer().room() == ROOM_MS  # without the run's times: fixed, as the races use it
    for room, waits in ((20, True), (ROOM_MS, False)):  # the run's times, the fixed room
        pacer = Pacer(times=times if room == 20 else None)
        now = pacer.now()
        pacer.leased(now - 385, now - 385, 400)  # the end begins 12 ms from now
        assert (pacer.clear() > now + 15 + MARGIN_MS) == waits, room
    pacer = Pacer(times=times)
    now = pacer.now()
    pacer.leased(now - 350, now - 350, 400)  # 47 ms from now: clear of a 20 ms room
    assert pacer.clear() < now + 47
    assert not pacer.ambiguous(now, now + 1)
    assert len(times.recent) == 101  # the call's time joined the run's


SLOW_OBSERVE = '''
import time
from dataclasses import replace
from leasecheck.adapters.lease_worker import LeaseWorker

class SlowObserve(LeaseWorker):
    """The bundled lease worker on the system clock, whose observe takes 0.25 s: longer
    than the shortest real lease the machine gives (at most 75 ms), so the stale-ack
    shape, which observes after a claim of that lease, is cut short in every run."""
    name = "slow-observe"
    capabilities = replace(LeaseWorker.capabilities, clock="real")

    def connect(self, location, clock):
        queue = super().connect(location, clock)
        observe = queue.observe

        def slow():
            time.sleep(0.25)
            return observe()

        queue.observe = slow
        return queue
'''


def test_stale_ack_reads_not_checked_when_its_fixed_program_is_never_judged(
    tmp_path: Path,
) -> None:
    """On real time ``queue.stale-ack`` first runs the shape that makes a stale ack until
    one run is judged; when no run can be (every call of it crosses a lease's end), the
    row says so: "not checked" with that reason, not "holds" from programs cut short."""
    adapter = tmp_path / "slow_observe.py"
    adapter.write_text(SLOW_OBSERVE)
    options = CheckOptions(
        adapter=str(adapter), profile="quick", workers="0", properties=("queue.stale-ack",)
    )
    result = run_check(options)
    row = result.properties["queue.stale-ack"]
    assert row.verdict == NOT_CHECKED, row
    why = row.figures["not_checked"]
    assert isinstance(why, dict) and "lease_runs_out()" in str(why["what"]), why
    assert f"all {SHAPE_TRIES} runs" in str(why["what"]), why
