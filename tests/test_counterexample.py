"""Reading counterexamples out of pytest reports, and exporting them."""

from __future__ import annotations

from pathlib import Path

from leasecheck.counterexample import parse

REPORT = (Path(__file__).parent / "data" / "stateful_failure.txt").read_text()
"""A real pytest report of a failing Hypothesis state machine (see the file)."""

PROCESS_REPORT = """\
    def test_crash_points(worker_target):
>       check(...)
E       AssertionError: after SIGKILL at after-claim the reopened file is neither before nor after
E         1. enqueue a (qty 1) at t=0
E         2. claim by w1 at t=0, killed at after-claim
E         3. reopen: job 'a' is leased
E       assert False
crash_harness/atomicity.py:10: AssertionError
"""


def test_the_shrunk_program_is_read_from_a_stateful_report() -> None:
    example = parse(REPORT)
    assert example.machine == "LeaseAgreement"
    assert example.program[0] == "state.tokens_never_decrease()"
    assert "tickets_0 = state.claim(owner='w1')" in example.program
    assert example.program[-1] == "state.teardown()"


def test_the_message_is_the_errors_own_text_without_introspection() -> None:
    example = parse(REPORT)
    assert example.message == (
        "AssertionError: finish returned 'done' on the target but False on the model",
    )


def test_a_process_scenario_counts_its_numbered_steps() -> None:
    example = parse(PROCESS_REPORT)
    assert example.machine is None
    assert example.steps == 3
    assert example.message[0].startswith("AssertionError: after SIGKILL at after-claim")
    assert "assert False" not in example.message
