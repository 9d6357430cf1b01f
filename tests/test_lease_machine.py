"""Tests of the agreement machine itself: it passes on the bundled worker, reports a
failure as a short replayable program, and says what failed side by side.

Whether each planted ``worker_bugs`` mutant is caught (with at most 10 steps) is
checked for the whole catalogue in ``tests/test_mutant_catalogue.py``; the mutant
runs here serve the tests of the failure report.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from types import ModuleType

import pytest
from _machines import Caught, Machine, mutant_settings
from hypothesis import settings

from leasecheck.mutants import Mutant, materialize
from leasecheck.mutants.worker_bugs import MUTANTS
from leasecheck.stateful_tests import lease_machine
from leasecheck.stateful_tests.lease_machine import LeaseAgreement
from leasecheck.targets import load_worker
from leasecheck.targets.lease_compare import same

# 1000 is what the ci profile runs: 500 left a fencing mutant unfound.
MUTANT_SETTINGS = mutant_settings(max_examples=1000, step_count=25)
BUNDLED_SETTINGS = settings(MUTANT_SETTINGS, max_examples=40)
LEASE = Machine(LeaseAgreement, load_worker, invariant="consistent")


def run_machine(module: ModuleType, config: settings = MUTANT_SETTINGS) -> Caught | None:
    """Run the machine on ``module``; how it failed, or None if it passed."""
    return LEASE.run(module, config)


def replay(module: ModuleType, program: list[str]) -> None:
    """Run a printed program the way an exported counterexample file does."""
    source = "\n".join(
        [
            "from leasecheck.stateful_tests.lease_machine import *",
            "LeaseAgreement.bind(module)",
            *program,
        ]
    )
    try:
        exec(source, {"module": module})
    finally:
        LeaseAgreement.bind(load_worker())


@pytest.fixture(scope="module")
def mutant_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("worker-mutants")


@pytest.fixture(scope="module")
def caught(mutant_dir: Path) -> dict[str, Caught | None]:
    """Mutant runs shared by several tests (each mutant runs once per process)."""
    return {}


def catch(mutant: Mutant, mutant_dir: Path, cache: dict[str, Caught | None]) -> Caught | None:
    if mutant.name not in cache:
        cache[mutant.name] = run_machine(load_worker(materialize(mutant, mutant_dir)))
    return cache[mutant.name]


# --- the machine on the bundled worker --------------------------------------------------


def test_machine_passes_on_the_bundled_worker() -> None:
    assert run_machine(load_worker(), BUNDLED_SETTINGS) is None


def test_teardown_closes_connections_and_removes_the_examples_files() -> None:
    state = LeaseAgreement()
    state.use_connection(1)  # the second connection opens on first use
    state.files.missing.write_text("a target created this")
    (state.directory / "queue.db").write_text("and this")
    cons, path = list(state.cons), state.path
    assert len(cons) == 2 and path.is_file()
    state.teardown()
    assert not path.exists() and not state.files.missing.exists()
    assert list(state.directory.iterdir()) == []
    following = LeaseAgreement()
    assert following.path != path  # a fresh copy of the template per example
    following.teardown()
    for con in cons:
        with pytest.raises(Exception, match="closed"):
            con.execute("SELECT 1")


# --- the catalogue (each mutant's kill is checked in tests/test_mutant_catalogue.py) ----


def test_catalogue_is_for_this_property() -> None:
    assert len(MUTANTS) >= 15
    # one of them (quarantine-lost-when-nothing-claimable) is shown shortest by the edge sweep
    assert {m.caught_by for m in MUTANTS} == {"lease.agreement", "lease.edges"}
    assert len({m.bug_class for m in MUTANTS}) == len(MUTANTS)
    assert all(m.real_world and m.target == "worker" for m in MUTANTS)


# --- the failure report ----------------------------------------------------------------


def _by_name(name: str) -> Mutant:
    return next(m for m in MUTANTS if m.name == name)


def test_a_wrong_result_is_reported_side_by_side(
    mutant_dir: Path, caught: dict[str, Caught | None]
) -> None:
    result = catch(_by_name("truthy-ack-accepted"), mutant_dir, caught)
    assert result is not None
    first = result.message.splitlines()[0]
    assert first.startswith(("run_once(", "run_file(")), first
    assert "Send('truthy')" in first
    assert "on the target but raised BadAck" in first and first.endswith("on the model")


def test_a_state_difference_names_the_rows_and_prints_both_snapshots(
    mutant_dir: Path, caught: dict[str, Caught | None]
) -> None:
    result = catch(_by_name("redrive-bumps-token"), mutant_dir, caught)
    assert result is not None
    assert result.message.startswith("after redrive(")
    assert "the stored state differs" in result.message
    bumped = re.search(r"job '\w+': token: target (\d+), model (\d+)", result.message)
    assert bumped is not None, result.message
    assert int(bumped[1]) == int(bumped[2]) + 1
    assert "target rows:" in result.message and "model rows:" in result.message


def test_the_printed_program_reads_like_a_script(
    mutant_dir: Path, caught: dict[str, Caught | None]
) -> None:
    result = catch(_by_name("ticket-mutated"), mutant_dir, caught)
    assert result is not None
    assert result.program[0] == "state = LeaseAgreement()"
    assert result.program[-1] == "state.teardown()"
    names = [line.split("state.", 1)[1].split("(", 1)[0] for line in result.steps]
    assert names[0] == "enqueue_first" and names[-1] == "finish", names
    # the ticket comes from the bundle, as a variable assigned where it was claimed
    assert any(line.startswith("(tickets_0,) = state.") for line in result.steps)
    assert "ticket=tickets_0" in result.steps[-1] or "ticket=tickets_1" in result.steps[-1]


@pytest.mark.parametrize(
    "name", ["ticket-mutated", "send-inside-transaction", "open-queue-wipes-rows"]
)
def test_the_printed_program_replays(
    name: str, mutant_dir: Path, caught: dict[str, Caught | None]
) -> None:
    mutant = _by_name(name)
    result = catch(mutant, mutant_dir, caught)
    assert result is not None
    with pytest.raises(AssertionError) as replayed:
        replay(load_worker(materialize(mutant, mutant_dir)), result.program)
    assert str(replayed.value).splitlines()[0] == result.message.splitlines()[0]
    replay(load_worker(), result.program)  # the same program passes once the bug is fixed


# --- small parts -----------------------------------------------------------------------


def test_results_are_compared_with_their_exact_types() -> None:
    assert not same(True, 1)
    assert not same({"status": 1}, {"status": True})
    assert not same({"a": 1}, lease_machine.TicketDict({"a": 1}))
    assert same({"id": "a", "token": [1, 2]}, {"id": "a", "token": [1, 2]})


@pytest.mark.parametrize(
    "value",
    [
        lease_machine.When(),
        lease_machine.When("now", delta=5),
        lease_machine.When("lease_until", "a", -1),
        lease_machine.Hook(),
        lease_machine.Hook("after-claim"),
        lease_machine.Send("truthy"),
        lease_machine.Clock(lease_machine.When(), True),
        lease_machine.Bad("jitter", math.nan),
        lease_machine.Shift("token", -1),
        lease_machine.Put("owner", "a\n"),
        lease_machine.Drop("qty"),
        lease_machine.Extra("seq"),
        lease_machine.Keep(),
        lease_machine.Subclass(),
    ],
    ids=repr,
)
def test_argument_values_print_as_code_that_rebuilds_them(value: object) -> None:
    namespace: dict[str, object] = {}
    exec("from leasecheck.stateful_tests.lease_machine import *", namespace)
    rebuilt = eval(repr(value), namespace)
    assert repr(rebuilt) == repr(value)
