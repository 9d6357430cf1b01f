"""queue.stale-ack: the generic agreement machine, enforcing queue.stale-ack.

Issue 11: "a stale worker's ack (its lease expired and the job was claimed again) is
refused, or changes nothing". The machine lets leases expire, claims again from
the other connection and acks with the old claim; the job must stay the new
holder's.

``stateful_tests.queue_machine.QueueMachine`` drives the library (two connections on
one store) and ``models.queue_model`` side by side and enforces only this property;
what the library does about the others is adopted, so a failure here is this one.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

from leasecheck.adapters.protocol import QueueLibrary
from leasecheck.plugin import NotChecked
from leasecheck.profiles import Profile
from leasecheck.properties._queue_machine import CHANGE_REAL, run_machine


@pytest.mark.leasecheck("queue.stale-ack")
def test_queue_stale_ack(
    queue_library: QueueLibrary,
    queue_server: str | None,
    judged: Callable[[str], AbstractContextManager[None]],
    lc_profile: Profile,
    checked: Callable[[str], None],
    not_checked: NotChecked,
) -> None:
    with judged("queue.stale-ack"):
        run = run_machine(queue_library, "queue.stale-ack", lc_profile, queue_server)
    if (why := run.unjudged()) is not None:
        not_checked(why, CHANGE_REAL, programs=run.programs, set_aside=run.set_aside)
    if run.zombie_acks == 0:
        # On real time a zombie's ack comes late in a program, after a lease ran out, so
        # it is what a cut-short program loses first: say so before blaming the adapter.
        cut = (
            f"; {run.set_aside} were cut short on real time, where a zombie ack comes last"
            if run.set_aside
            else ""
        )
        change = (
            CHANGE_REAL
            if run.set_aside
            else "raise --profile (deep draws more programs), or check that claim returns a "
            "job whose lease expired"
        )
        not_checked(
            f"no zombie ack in {run.programs} programs: no claim acked after its job was "
            f"claimed again{cut}",
            change,
            programs=run.programs, set_aside=run.set_aside,
        )  # fmt: skip
    checked(run.text)
