"""queue.no-loss: the generic agreement machine, enforcing queue.no-loss.

Issue 11: "no job is lost: after every lease expires and recovery runs, every
enqueued job is done, failed or claimable". After each step the store must hold
every job the model holds; at the end the machine expires every lease, runs the
library's recovery and claims until nothing is left: no job may stay behind.

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


@pytest.mark.leasecheck("queue.no-loss")
def test_queue_no_loss(
    queue_library: QueueLibrary,
    queue_server: str | None,
    judged: Callable[[str], AbstractContextManager[None]],
    lc_profile: Profile,
    checked: Callable[[str], None],
    not_checked: NotChecked,
) -> None:
    with judged("queue.no-loss"):
        run = run_machine(queue_library, "queue.no-loss", lc_profile, queue_server)
    if (why := run.unjudged()) is not None:
        not_checked(why, CHANGE_REAL, programs=run.programs, set_aside=run.set_aside)
    checked(run.text)
