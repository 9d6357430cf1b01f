"""One run of the generic agreement machine, shared by queue.no-loss and queue.stale-ack.

Each property enforces one generic property and adopts the rest (see
``stateful_tests.queue_machine``). A library on a real clock sleeps through every
program, so it gets the profile's ``queue_examples_real`` programs instead of
``queue_examples``, and is not shrunk: on real time a replay need not repeat the run
(Hypothesis would call it flaky), so a failure is reported as the machine saw it, with
the calls as they ran. Its leases are sized by its measured call latency
(``_real_leases``), so that a loaded machine cuts about as many programs short as a
quiet one, and the row prints the stretch.

On real time the one program shape that makes a stale ack (claim, the lease runs out and
another connection claims, the first claim's late ack: ``STALE_ACK_SHAPE``) is also run
as a fixed program before Hypothesis' programs, again until one run of it is judged
(at most ``SHAPE_TRIES``): whether the drawn programs that hold it were cut short
depended on the load, and with it the verdict (arq: holds at load 20, not promised at
17). A library without a fence then fails on that program in every run; one that fences
passes it and still meets Hypothesis' programs; if no run of it could be judged, the
drawn programs are not run (they would be cut short too) and the row reads "not
checked" (``MachineRun.unjudged``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import Phase, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from leasecheck.adapters.protocol import QueueLibrary
from leasecheck.profiles import Profile
from leasecheck.properties._real_leases import call_latency_ms, real_scale, scaled
from leasecheck.stateful_tests.queue_machine import LEASES_MS, QueueMachine

__all__ = ["CHANGE_REAL", "SHAPE_TRIES", "STALE_ACK_SHAPE", "MachineRun", "run_machine"]

CHANGE_REAL = (
    "run on a less loaded machine (fewer -n workers), or make the library's clock movable "
    "(Capabilities.clock='patched', see docs/writing-an-adapter.md)"
)
"""What to change when most real-time programs were cut short."""
SHAPE_TRIES = 8
"""How often a fixed program is run on real time until one run of it is judged."""


def stale_ack_shape(machine: QueueMachine) -> None:
    """claim, the lease runs out and the other connection claims, the first claim acks."""
    machine.first_job()
    machine.observed()
    machine.claim(conn=0, lease_ms=min(LEASES_MS))
    machine.observed()
    machine.lease_runs_out()
    machine.observed()
    machine.zombie_ack(conn=0)
    machine.observed()


STALE_ACK_SHAPE = "first_job(); claim(conn=0); lease_runs_out(); zombie_ack(conn=0)"
"""``stale_ack_shape`` as the row prints it."""
FIXED: dict[str, tuple[str, Callable[[QueueMachine], None]]] = {
    "queue.stale-ack": (STALE_ACK_SHAPE, stale_ack_shape),
}
"""The fixed program each property runs first on real time."""


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
    shape_unjudged: str | None = None
    """Real clock: the fixed program that no run of could be judged, if so."""

    def unjudged(self) -> str | None:
        """Why the run judged nothing worth a verdict (``not_checked``), or None."""
        if self.shape_unjudged is not None:
            return (
                f"the fixed program {self.shape_unjudged} was cut short in all {SHAPE_TRIES} "
                f"runs (a call ran across a lease's end), so the shape this property "
                f"needs was never judged"
            )
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
    shape = ""
    if real and prop in FIXED:
        shape, program = FIXED[prop]
        tries = _until_judged(machine, program)
        if tries > SHAPE_TRIES:  # the drawn programs would be cut short too: not run
            return MachineRun(f"the fixed program {shape}: never judged", 0, 0, 0, shape)
        shape = f", after the fixed program {shape} (judged on run {tries})"
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
    return MachineRun(
        text + shape, machine.programs[0], machine.set_aside[0], machine.zombie_acks[0]
    )


def _until_judged(machine: type[QueueMachine], program: Callable[[QueueMachine], None]) -> int:
    """Run ``program`` on fresh machines until one run is judged (no call ran across a
    lease's end), at most ``SHAPE_TRIES`` times; the number of the judged run, or
    ``SHAPE_TRIES + 1``. A disagreement it meets fails the property, with the calls as
    they ran. The runs are left out of the machine's counts: those are Hypothesis'."""
    counts = (machine.programs[0], machine.set_aside[0], machine.zombie_acks[0])
    try:
        for number in range(1, SHAPE_TRIES + 1):
            state = machine()
            try:
                program(state)
            except AssertionError:
                if not machine.failures:
                    raise
                raise AssertionError(machine.failures[-1]) from None
            finally:
                state.teardown()
            if not state.void:
                return number
        return SHAPE_TRIES + 1
    finally:
        machine.programs[0], machine.set_aside[0], machine.zombie_acks[0] = counts
