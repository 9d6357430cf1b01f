"""queue.exclusive: no job ever has two live leases, with real processes racing.

Issue 11: "lease exclusion: no job ever has two live leases (checked with real
processes racing)". ``crash_harness.queue_races.check_exclusive`` releases the racer
processes' claims together from a gate, round after round, and checks every claim
against the leases still live by the shared clock. Stale claims send nacks and extends
between races (issue 22): two live leases reached through a stale call the library took
are judged by its promise of ``queue.stale-ack`` too (a library that does not fence
stale claims says so there), then by ``queue.exclusive``. A second delivery after the
library recorded the first claim's delivery lost (``ReportsLosses``: RabbitMQ requeues a
closed connection's deliveries) is set aside and counted; most set aside is "not checked".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest

from leasecheck.adapters.protocol import QueueLibrary
from leasecheck.crash_harness.queue_races import StaleCallBreach, check_exclusive
from leasecheck.plugin import Checked, NotChecked
from leasecheck.profiles import Profile


@pytest.mark.leasecheck("queue.exclusive")
def test_queue_exclusive(
    multiprocess_library: QueueLibrary,
    queue_server: str | None,
    judged: Callable[[str], AbstractContextManager[None]],
    scratch: Path,
    lc_profile: Profile,
    lc_seed: int,
    no_leaked_children: None,
    checked: Checked,
    not_checked: NotChecked,
) -> None:
    processes, rounds = lc_profile.race_processes, lc_profile.race_rounds
    with judged("queue.exclusive"), _fencing(judged):
        report = check_exclusive(
            multiprocess_library, scratch, processes, rounds, lc_seed, queue_server
        )
    print(f"queue.exclusive: {report.render()}")
    if report.raced == 0:
        not_checked(
            f"no race: {report.rounds} rounds, none with two claimers ({processes} processes)",
            "raise --profile (ci races 3 processes for 200 rounds)",
            rounds=report.rounds, raced=0,
        )  # fmt: skip
    if report.lost * 2 > report.wins:
        not_checked(
            f"{report.lost} of {report.wins} won claims lost their delivery with their "
            "connection before a second claim (set aside, not judged)",
            "rerun on a quieter machine (a lost connection ends a lease early)",
            rounds=report.rounds, wins=report.wins, lost=report.lost,
        )  # fmt: skip
    aside = f", {report.lost} set aside (delivery lost)" if report.lost else ""
    checked(
        f"{report.rounds} race rounds of {processes} processes{aside}",
        rounds=report.rounds, raced=report.raced, overlapped=report.overlapped,
        stale_calls=report.stale, lost=report.lost,
    )  # fmt: skip


@contextmanager
def _fencing(judged: Callable[[str], AbstractContextManager[None]]) -> Iterator[None]:
    """A breach through a stale claim's call: "not promised" unless the library fences stale
    claims (``queue.stale-ack``); promised, it goes on to ``queue.exclusive``'s promise."""
    try:
        yield
    except StaleCallBreach as breach:
        with judged("queue.stale-ack"):
            raise breach from None
