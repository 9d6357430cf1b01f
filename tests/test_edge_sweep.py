"""stateful_tests.edge_sweep (lease.edges, jobs.edges): every edge tried, failures replayable.

The bundled targets agree with the models on every edge program; a planted bug at an
edge is reported as a short program in the agreement machine's own ``state.rule(...)``
form, which replays: pasted after ``LeaseAgreement.bind(...)``/``JobAgreement.bind``
it raises the same disagreement.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from leasecheck.models import edges
from leasecheck.mutants import by_name, materialize
from leasecheck.stateful_tests import edge_sweep
from leasecheck.stateful_tests.job_machine import JobAgreement
from leasecheck.stateful_tests.lease_machine import LeaseAgreement
from leasecheck.targets.loader import load_jobs_target, load_worker


def test_bundled_targets_agree_on_every_edge() -> None:
    lease = edge_sweep.sweep_lease(load_worker())
    jobs = edge_sweep.sweep_jobs(load_jobs_target())
    assert lease.failure is None and jobs.failure is None
    assert lease.programs >= len(edges.LEASE_STARTS) + 5 and lease.calls > 300
    assert jobs.programs > 20


def test_every_outside_character_is_tried() -> None:
    assert len(edges.OUTSIDE_ALPHABET) == 100 - 64  # string.printable minus the alphabet
    assert all(f"a{c}" in edges.OUTSIDE_IDENTIFIERS for c in " \t\n@.:/\\'\"")


def test_policies_reach_six_attempts_with_and_without_power_of_two_caps() -> None:
    policies = list(edge_sweep.edge_policies())
    assert max(p.max_attempts for p in policies) == 6
    powers = {p.base_backoff_millis * 2**k for p in policies for k in range(7)}
    assert any(p.max_backoff_millis in powers for p in policies)
    assert any(p.max_backoff_millis not in powers for p in policies)


@pytest.mark.parametrize(
    ("mutant", "words"),
    [
        ("identifier-allows-at-sign", "'a@'"),
        ("clock-top-refused", "Start('near-clock-top')"),
        ("ticket-token-top-refused", "Start('token-top')"),
        ("finish-ignores-attempt", "change=Shift('attempt', -1)"),
        ("rollback-on-exception-only", "fault=Hook('after-claim', interrupt=True)"),
    ],
)
def test_lease_edge_failure_is_a_short_replayable_program(
    mutant: str, words: str, scratch: Path
) -> None:
    module = load_worker(materialize(by_name(mutant), scratch))
    failure = edge_sweep.sweep_lease(module).failure
    assert failure is not None
    assert len(failure.lines) <= 10 and words in "\n".join(failure.lines), failure.render()
    namespace = {"state": LeaseAgreement.bind(module)(), **vars(edge_sweep)}
    namespace.update(vars(__import__("leasecheck.stateful_tests.lease_machine", fromlist=["*"])))
    try:
        with pytest.raises(AssertionError):
            exec("\n".join(failure.lines), namespace)
    finally:
        namespace["state"].teardown()


def test_job_edge_failure_names_the_dozen_jobs(scratch: Path) -> None:
    target = load_jobs_target(materialize(by_name("jobs-dead-letters-sorted-by-id"), scratch))
    failure = edge_sweep.sweep_jobs(target).failure
    assert failure is not None
    assert "Backlog(12, 0)" in failure.lines[0], failure.render()
    assert "dead_letters" in failure.message or "fail(" in failure.lines[-1], failure.render()


def test_a_fault_that_is_no_exception_must_roll_back_too(scratch: Path) -> None:
    """lease-worker.md: roll back "on any error before COMMIT", no transaction left open
    "whatever happens": a target that rolls back only on ``Exception`` is named for the
    transaction it left open (not for the uncommitted rows it reads back)."""
    from leasecheck.models.contracts import InjectedInterrupt

    assert not issubclass(InjectedInterrupt, Exception)
    module = load_worker(materialize(by_name("rollback-on-exception-only"), scratch))
    failure = edge_sweep.sweep_lease(module).failure
    assert failure is not None and failure.program == "faults that are no Exception"
    assert "still inside a transaction" in failure.message, failure.render()
    assert edge_sweep.sweep_lease(load_worker()).failure is None


def test_a_probe_the_target_wrongly_accepted_is_printed(scratch: Path) -> None:
    """A refused submit that still uses up an id hides its change until a later submit:
    the printed program keeps every probe, so that it fails as printed."""
    from leasecheck.targets import BUNDLED_JOBS

    source = BUNDLED_JOBS.read_text()
    take_first = '        job_type = _optional_str("type", type)\n'
    counted = "            seq = len(self._jobs) + 1\n"
    assert source.count(take_first) == 1 and source.count(counted) == 1
    takes = (
        "        with self._lock:\n"
        "            self._taken = getattr(self, '_taken', 0) + 1\n"
        "            seq_taken = self._taken\n"
    )
    source = source.replace(take_first, takes + take_first)
    source = source.replace(counted, "            seq = seq_taken\n")
    path = scratch / "job_queue.py"
    path.write_text(source)
    target = load_jobs_target(path)
    failure = edge_sweep.sweep_jobs(target).failure
    assert failure is not None and failure.program == "blank values", failure
    assert "state.submit(type=None" in failure.lines[1], failure.render()
    JobAgreement.bind(target)
    namespace = {"state": JobAgreement(), **vars(edge_sweep)}
    with pytest.raises(AssertionError, match="returned job id"):
        exec("\n".join(failure.lines), namespace)
