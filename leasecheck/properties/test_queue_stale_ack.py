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
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from adapters.protocol import QueueLibrary
from leasecheck.profiles import Profile
from stateful_tests.queue_machine import QueueMachine


@pytest.mark.leasecheck("queue.stale-ack")
def test_queue_stale_ack(
    queue_library: QueueLibrary,
    judged: Callable[[str], AbstractContextManager[None]],
    lc_profile: Profile,
    checked: Callable[[str], None],
) -> None:
    machine = QueueMachine.bound(queue_library, frozenset({"queue.stale-ack"}))
    chosen = settings(
        settings.get_profile("leasecheck"),
        max_examples=lc_profile.queue_examples,
        stateful_step_count=lc_profile.step_count,
    )
    with judged("queue.stale-ack"):
        run_state_machine_as_test(machine, settings=chosen)
    checked(f"{lc_profile.queue_examples} programs of up to {lc_profile.step_count} steps")
