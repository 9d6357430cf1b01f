"""Counterexamples as data: built from the raised exception, sent as a record, formatted."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, rule, run_state_machine_as_test

from leasecheck.counterexample import Counterexample
from leasecheck.models.evidence import Lease, Recorder, attach
from leasecheck.stateful_tests.program import CHECKS, check


class Toy(RuleBasedStateMachine):
    """Fails when a ticket claimed second is finished: the shape of a stale-ticket bug."""

    tickets = Bundle("tickets")

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    @rule(target=tickets)
    def claim(self) -> int:
        self.n += 1
        return self.n

    @rule(ticket=tickets, outcome=st.sampled_from(["ok", "retry"]))
    def finish(self, ticket: int, outcome: str) -> None:
        message = "finish returned 'done' on the target but False on the model"
        assert not (ticket == 1 and self.n >= 2 and outcome == "ok"), message

    @check
    def tokens_never_decrease(self) -> None:
        assert self.n >= 0


def _failure() -> AssertionError:
    quiet = settings(max_examples=500, database=None, phases=[Phase.generate, Phase.shrink])
    with pytest.raises(AssertionError) as raised:
        run_state_machine_as_test(Toy, settings=quiet)
    return raised.value


def test_the_shrunk_program_comes_from_the_exception_itself() -> None:
    example = Counterexample.from_error(_failure())
    assert example.machine == "Toy"
    assert example.program[-1] == "state.teardown()"
    assert any("state.finish(" in line for line in example.program)
    assert "tokens_never_decrease" in CHECKS
    assert example.steps == 3  # claim, claim, finish: invariant checks are not steps


def test_the_message_is_the_errors_own_text_without_introspection() -> None:
    example = Counterexample.from_error(_failure())
    assert example.message == (
        "AssertionError: finish returned 'done' on the target but False on the model",
    )


def test_a_process_scenario_counts_its_numbered_steps() -> None:
    error = AssertionError(
        "after SIGKILL at after-claim the reopened file is neither before nor after\n"
        "  1. enqueue a (qty 1) at t=0\n  2. claim by w1 at t=0, killed at after-claim\n"
        "  3. reopen: job 'a' is leased"
    )
    example = Counterexample.from_error(error)
    assert example.machine is None and example.steps == 3
    assert example.message[0].startswith("AssertionError: after SIGKILL at after-claim")


def test_a_record_survives_the_trip_through_the_events_file() -> None:
    example = Counterexample.from_error(_failure())
    assert Counterexample.from_record(example.record()) == example


def test_evidence_attached_where_the_failure_is_raised_travels_in_the_record() -> None:
    """A harness attaches its evidence to the error it raises (or to the error a wrapper
    raises ``from`` it); the record carries it as JSON, and reads back equal."""
    record = Recorder()
    record.step("A", "claim('A', 0, 10)", "claim", 0.0, "a", 1, target="returned a ticket")
    record.lease(Lease("target", "a", 1, "A", 0.0, 10.0, record.last))
    record.event("kill", "A", 0.0, "SIGKILL")
    evidence = record.evidence("two processes won the same job at once")
    try:
        try:
            raise attach(AssertionError("two processes won"), evidence)
        except AssertionError as inner:
            raise AssertionError("two processes won\nscenario: ...") from inner
    except AssertionError as error:
        example = Counterexample.from_error(error)
    assert example.evidence == evidence
    sent = json.loads(json.dumps(example.record()))
    assert Counterexample.from_record(sent).evidence == evidence
    assert Counterexample.from_record({**sent, "evidence": None}).evidence is None
    unreadable = {**sent, "evidence": {**sent["evidence"], "steps": [{"surprise": 1}]}}
    assert Counterexample.from_record(unreadable).evidence is None


def test_an_error_without_evidence_records_none() -> None:
    assert Counterexample.from_error(_failure()).evidence is None


def test_an_exported_rerun_names_its_target_relative_to_itself(tmp_path: Path) -> None:
    """A re-run export (a process-level property) imports only ``leasecheck.replay``,
    finds its target relative to its own location, and ``$LEASECHECK_IMPL`` retargets it."""
    from leasecheck import replay
    from leasecheck.counterexample import export

    target = tmp_path / "src" / "worker.py"
    example = Counterexample(None, (), ("AssertionError: two winners",), 0)
    path = export(
        tmp_path / "tests" / "leasecheck", "lease.single-winner", example, target=target,
        option="--impl", profile="ci", seed=0, nodeid="x.py::test_single_winner",
    )  # fmt: skip
    text = path.read_text()
    tree = ast.parse(text)
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert [(getattr(n, "module", None), [a.name for a in n.names]) for n in imports] == [
        ("leasecheck", ["replay"])
    ]
    assert "replay.target('../../src/worker.py', __file__, env='LEASECHECK_IMPL')" in text
    assert "replay.rerun('--impl', TARGET, 'test_single_winner', profile='ci', seed=0)" in text
    assert replay.target("../../src/worker.py", str(path), "LEASECHECK_IMPL") == str(target)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LEASECHECK_IMPL", "/fixed/worker.py")
        assert replay.target("../../src/worker.py", str(path), "LEASECHECK_IMPL") == (
            "/fixed/worker.py"
        )


def test_a_failures_step_count_is_its_evidences_operations() -> None:
    """A parallel program numbers only its prefix (``1.``) and labels the rest ``P1#1``:
    the header's count comes from the recorded operations, not from the message's
    numbered lines (an outside tester read "(1 steps)" over a 4-operation program)."""
    recorder = Recorder()
    for index, (actor, name) in enumerate(
        [("prefix", "enqueue"), ("P1", "claim"), ("P2", "claim"), ("P2", "finish")]
    ):
        recorder.step(actor, name, name, float(index), end=float(index) + 0.5)
    message = "prefix:\n  1. enqueue(...)\nP1:\n  P1#1. claim(...)\nP2:\n  P2#1. claim(...)"
    error = attach(AssertionError(message), recorder.evidence("not linearizable"))
    assert Counterexample.from_error(error).steps == 4
    assert Counterexample.from_error(AssertionError(message)).steps == 1  # no evidence


def test_a_model_paths_clock_moves_count_as_its_steps() -> None:
    """A model-check run numbers its clock moves among its operations ("3. the clock
    moves to t=101"): the header counts them too (an outside tester read "(3 steps)"
    over a run of 6 numbered steps)."""
    recorder = Recorder()
    recorder.step("queue", "enqueue", "enqueue", 100.0)
    for now in (101, 102, 103):
        recorder.event("clock", "clock", float(now), f"t={now}")
    recorder.step("d1", "claim", "claim", 103.0)
    message = "\n".join(f"  {n}. step" for n in range(1, 6))
    error = attach(AssertionError(message), recorder.evidence("disagrees"))
    assert Counterexample.from_error(error).steps == 5
