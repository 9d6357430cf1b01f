"""One run of the generic agreement machine, shared by queue.no-loss and queue.stale-ack.

Each property enforces one generic property and adopts the rest (see
``stateful_tests.queue_machine``). A library on a real clock sleeps through every
program, so it gets the profile's ``queue_examples_real`` programs instead of
``queue_examples``, and is not shrunk: on real time a replay need not repeat the run
(Hypothesis would call it flaky), so a failure is reported as the machine saw it, with
the calls as they ran. Its leases are sized by its measured call latency
(``_real_leases``), so that a loaded machine cuts about as many programs short as a
quiet one, and the row prints the stretch.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import Phase, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from leasecheck.adapters.protocol import QueueLibrary
from leasecheck.profiles import Profile
from leasecheck.properties._real_leases import call_latency_ms, real_scale, scaled
from leasecheck.stateful_tests.queue_machine import QueueMachine

__all__ = ["CHANGE_REAL", "MachineRun", "run_machine"]

CHANGE_REAL = (
    "run on a less loaded machine (fewer -n workers), or make the library's clock movable "
    "(Capabilities.clock='patched', see docs/writing-an-adapter.md)"
)
"""What to change when most real-time programs were cut short."""


@dataclass(frozen=True)
class MachineRun:
    """What one run of the machine exercised."""

    text: str
    """For ``checked``: the programs, and on real time how many were cut short."""
    programs: int
    set_aside: int
    """Real clock: programs judged no further after a call ran across a lease's end."""
    zombie_acks: int
    """Acks sent by a claim whose job another claim had taken since."""

    def unjudged(self) -> str | None:
        """Why the run judged nothing worth a verdict (``not_checked``), or None."""
        if self.programs and 2 * self.set_aside > self.programs:
            return (
                f"{self.set_aside} of {self.programs} programs on real time were cut short "
                f"(a call ran across a lease's end), so most were never judged"
            )
        return None


def run_machine(
    library: QueueLibrary, prop: str, profile: Profile, server: str | None
) -> MachineRun:
    """Run the machine enforcing ``prop`` (stores on ``server``, if the library needs one);
    what it exercised."""
    real = library.capabilities.real_time
    examples = profile.queue_examples_real if real else profile.queue_examples
    machine = QueueMachine.bound(library, frozenset({prop}), server)
    stretch = None
    if real and library.capabilities.server_lease is None:  # a server's one lease is fixed
        stretch = real_scale(call_latency_ms(library, server))
        machine = scaled(machine, stretch.scale)
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
        text += f" on real time ({machine.set_aside[0]} cut short: a call across a lease end"
        text += f"; {stretch.text()})" if stretch is not None else ")"
    return MachineRun(text, machine.programs[0], machine.set_aside[0], machine.zombie_acks[0])
