"""One run of the generic agreement machine, shared by queue.no-loss and queue.stale-ack.

Each property enforces one generic property and adopts the rest (see
``stateful_tests.queue_machine``). A library on a real clock sleeps through every
program, so it gets the profile's ``queue_examples_real`` programs instead of
``queue_examples``, and is not shrunk: on real time a replay need not repeat the run
(Hypothesis would call it flaky), so a failure is reported as the machine saw it, with
the calls as they ran.
"""

from __future__ import annotations

from hypothesis import Phase, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from adapters.protocol import QueueLibrary
from leasecheck.profiles import Profile
from stateful_tests.queue_machine import QueueMachine

__all__ = ["run_machine"]


def run_machine(library: QueueLibrary, prop: str, profile: Profile, server: str | None) -> str:
    """Run the machine enforcing ``prop`` (stores on ``server``, if the library needs one);
    what it checked, for ``checked``."""
    real = library.capabilities.real_time
    examples = profile.queue_examples_real if real else profile.queue_examples
    machine = QueueMachine.bound(library, frozenset({prop}), server)
    base = settings.get_profile("leasecheck")
    chosen = settings(
        base,
        max_examples=examples,
        stateful_step_count=profile.step_count,
        phases=[Phase.explicit, Phase.reuse, Phase.generate] if real else base.phases,
    )
    try:
        run_state_machine_as_test(machine, settings=chosen)
    except (AssertionError, Flaky, ExceptionGroup):
        if not machine.failures:
            raise
        raise AssertionError(machine.failures[0]) from None
    text = f"{examples} programs of up to {profile.step_count} steps"
    if real:
        text += f" on real time ({machine.set_aside[0]} cut short: a call across a lease end)"
    return text
