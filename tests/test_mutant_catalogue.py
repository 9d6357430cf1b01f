"""The kill table: every planted bug in the public catalogue is caught.

Each mutant is checked the way a user's target is (``leasecheck check --impl FILE``
in a child process, ``ci`` profile, seed 0), by the same function as ``leasecheck
mutants``. A mutant must be caught by the property its entry names, and a stateful
counterexample must shrink to at most 10 steps. The table is printed at the end
of the run (see ``conftest.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from leasecheck.mutants import CATALOGUE, Mutant
from leasecheck.selfcheck import check_mutant

MAX_STEPS = 10
STATEFUL = ("lease.agreement", "jobs.agreement")
AT_CONSTRUCTION = frozenset({"jobs-table-shared-between-queues"})
"""Mutants whose bug shows before a program's first step (the machine's new queue
already holds another queue's job): their program is the construction alone."""


def _id(mutant: Mutant) -> str:
    """``PROPERTY/NAME``: ``-k lease.agreement`` selects the mutants that property must catch."""
    return f"{mutant.caught_by}/{mutant.name}"


@pytest.mark.parametrize("mutant", CATALOGUE, ids=_id)
def test_planted_bug_is_caught(
    mutant: Mutant, record_property: Callable[[str, object], None]
) -> None:
    kill = check_mutant(mutant, profile="ci")
    record_property(
        "kill", [mutant.name, kill.killed, kill.killer, kill.seconds, kill.steps, kill.note]
    )
    assert kill.killed, f"mutant {mutant.name!r} survived every property ({kill.note})"
    assert kill.killer == mutant.caught_by, (
        f"mutant {mutant.name!r} was caught by {kill.killer}, but its catalogue entry says "
        f"{mutant.caught_by}; correct the entry or find out why {mutant.caught_by} missed it"
    )
    if mutant.caught_by in STATEFUL:
        fewest = 0 if mutant.name in AT_CONSTRUCTION else 1
        assert fewest <= kill.steps <= MAX_STEPS, (
            f"mutant {mutant.name!r}: the shrunk program has {kill.steps} steps"
        )


def test_catalogue_entries_are_documented() -> None:
    for mutant in CATALOGUE:
        assert mutant.bug_class.strip() and mutant.real_world.strip(), mutant.name
        assert mutant.caught_by.startswith(("lease.", "jobs.")), mutant.name
        mutant.source()  # every edit still applies to the bundled file


QUICK = ("jobs-ready-boundary", "jobs-expiry-one-early", "quarantine-deadline-strict",
         "expiry-off-by-one-finish", "jobs-attempts-capped-at-five")  # fmt: skip
"""Mutants the model checks kill in a few seconds each."""


def test_mutants_checked_at_once_do_not_take_each_other_for_leftovers() -> None:
    """``leasecheck mutants -n 2``: each check in a process of its own. In threads of one
    process, a check that ended killed and reaped the other's test process as its own
    leftover, and that mutant read SURVIVED (2 to 5 of 7 such mutants, 3 runs of 3)."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "leasecheck", "mutants", "--profile", "ci", "-n", "2"]
    done = subprocess.run([*command, "--only", *QUICK], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(QUICK)}/{len(QUICK)} killed" in done.stdout, done.stdout
