"""The lease-worker operation record: one table, both sides, one line, exact JSON."""

from __future__ import annotations

import copy
import inspect
import json
import math
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leasecheck.models import lease_model
from leasecheck.models._values import Held, Shown, from_json_value, to_json_value
from leasecheck.models.contracts import Snapshot
from leasecheck.models.lease_ops import LEASE_KINDS, LeaseOp, LeaseOutcome
from leasecheck.queue_impl import worker
from leasecheck.targets.lease_target import read_snapshot

HOOK_AND_CONNECTION = ("con", "fault")


@pytest.mark.parametrize("kind", ["enqueue", "claim", "finish", "redrive"])
def test_the_table_names_the_parameters_of_the_target_and_the_model(kind: str) -> None:
    """lease-worker.md's signatures, read from the bundled target and the model: a new
    argument that is missing from ``LEASE_KINDS`` fails here."""
    target = [p for p in inspect.signature(getattr(worker, kind)).parameters]
    model = list(inspect.signature(getattr(lease_model, kind)).parameters)[1:]  # after state
    spec = LEASE_KINDS[kind]
    assert tuple(p for p in target if p not in HOOK_AND_CONNECTION) == spec.params
    assert tuple(model) == spec.params
    defaults = {
        name: p.default
        for name, p in inspect.signature(getattr(worker, kind)).parameters.items()
        if p.default is not inspect.Parameter.empty and name not in HOOK_AND_CONNECTION
    }
    assert defaults == dict(spec.defaults)


def test_of_binds_positional_and_named_arguments_alike() -> None:
    assert LeaseOp.of("claim", "w1", 5) == LeaseOp.of("claim", owner="w1", now_ms=5)
    assert LeaseOp.of("claim", "w1", 5).value("lease_ms") == 1000
    with pytest.raises(TypeError, match="claim needs now_ms"):
        LeaseOp.of("claim", "w1")
    with pytest.raises(TypeError, match="no parameter 'lease'"):
        LeaseOp.of("claim", "w1", 5, lease=3)
    with pytest.raises(ValueError, match="'grab' is no lease-worker operation"):
        LeaseOp.of("grab", "w1")


def test_describe_is_one_line_with_names_and_the_fault() -> None:
    op = LeaseOp.of("claim", "w1", 5, 40, fault="after-claim")
    assert op.describe() == (
        "claim(owner='w1', now_ms=5, lease_ms=40); the fault hook raises at 'after-claim'"
    )


VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=5)
    | st.floats(allow_nan=False)
    | st.builds(Held, st.integers(0, 3)),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        | st.dictionaries(st.integers(), inner, max_size=2)
    ),
    max_leaves=10,
)


@settings(max_examples=60)
@given(VALUES)
def test_json_values_read_back_with_their_exact_types(value: object) -> None:
    back = from_json_value(json.loads(json.dumps(to_json_value(value))))
    assert lease_model_same(back, value)


def lease_model_same(left: object, right: object) -> bool:
    from leasecheck.models.contracts import same

    if isinstance(left, Held) or isinstance(right, Held):
        return left == right
    return same(left, right)


def test_odd_floats_and_values_without_json_keep_their_repr() -> None:
    back = from_json_value(json.loads(json.dumps(to_json_value([math.inf, -math.inf]))))
    assert back == [math.inf, -math.inf]
    assert math.isnan(from_json_value(to_json_value(math.nan)))

    class Sub(dict[str, int]):
        pass

    shown = from_json_value(json.loads(json.dumps(to_json_value(Sub(a=1)))))
    assert isinstance(shown, Shown) and repr(shown) == repr(Sub(a=1))


@settings(max_examples=40)
@given(
    st.sampled_from(sorted(LEASE_KINDS)).flatmap(
        lambda kind: st.tuples(
            st.just(kind),
            st.lists(
                VALUES,
                min_size=len(LEASE_KINDS[kind].required()),
                max_size=len(LEASE_KINDS[kind].params),
            ),
            st.none() | st.sampled_from(["after-claim", "after-commit"]),
        )
    )
)
def test_an_op_survives_json(case: tuple[str, list[object], str | None]) -> None:
    kind, args, fault = case
    op = LeaseOp.of(kind, *args, fault=fault)
    back = LeaseOp.from_json(json.loads(json.dumps(op.to_json())))
    assert back.describe() == op.describe()
    assert back == op or any(isinstance(v, float) and math.isnan(v) for v in args)


def test_an_outcome_survives_json_with_its_state() -> None:
    state = lease_model.enqueue(Snapshot(), {"id": "a", "qty": 1}, 0, 100).state
    ticket = lease_model.claim(state, "w1", 0).result
    outcomes = [
        LeaseOutcome(ticket, hooks=("after-claim",), state=state, sends=({"id": "a"},)),
        LeaseOutcome(error="Conflict", detail="Conflict: qty differs"),
        LeaseOutcome(True),
        LeaseOutcome(1),
    ]
    for outcome in outcomes:
        assert LeaseOutcome.from_json(json.loads(json.dumps(outcome.to_json()))) == outcome
    assert not LeaseOutcome(True).agrees_with(LeaseOutcome(1))


PROGRAM = [
    LeaseOp.of("enqueue", {"id": "a", "qty": 2}, 0, 500),
    LeaseOp.of("enqueue", {"id": "a", "qty": 3}, 0, 500),
    LeaseOp.of("claim", "w1", 10, 100),
    LeaseOp.of("claim", "w2", 20),
    LeaseOp.of("run_once", "w2", 200, 50),
    LeaseOp.of("redrive", "nope", 300, 10, "n"),
]


def test_apply_and_expect_agree_on_the_bundled_target(tmp_path: Path) -> None:
    con = worker.open_queue(tmp_path / "q.db")
    try:
        state = Snapshot()
        for op in PROGRAM:
            state, expected = op.expect(state)
            got = _outcome(lambda op=op: op.apply(worker, con))
            assert got.agrees_with(expected), (op.describe(), got, expected)
            assert read_snapshot(con) == state, op.describe()
    finally:
        con.close()


def _outcome(call: object) -> LeaseOutcome:
    try:
        return LeaseOutcome(call())  # type: ignore[operator]
    except Exception as error:
        return LeaseOutcome.raised(error, (worker.Conflict, ValueError))


@pytest.mark.parametrize(("point", "kept"), [("after-claim", False), ("after-commit", True)])
def test_a_fault_before_commit_rolls_back_and_after_it_keeps(
    tmp_path: Path, point: str, kept: bool
) -> None:
    con = worker.open_queue(tmp_path / "q.db")
    try:
        before = PROGRAM[0].expect(Snapshot())[0]
        PROGRAM[0].apply(worker, con)
        op = LeaseOp.of("claim", "w1", 10, fault=point)
        after, expected = op.expect(before)
        assert expected.error == "InjectedFault" and expected.hooks[-1] == point  # type: ignore[index]
        with pytest.raises(Exception, match=point):
            op.apply(worker, con)
        assert read_snapshot(con) == after
        assert (after != before) is kept
    finally:
        con.close()


def test_run_file_runs_on_the_path(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    con = worker.open_queue(path)
    try:
        PROGRAM[0].apply(worker, con)
        op = LeaseOp.of("run_file", "w1", 10)
        _, expected = op.expect(read_snapshot(con))
        assert op.apply(worker, sqlite3.connect(":memory:"), path=path) == expected.result
    finally:
        con.close()


def test_explorer_moves_become_records() -> None:
    ticket = ("a", 1, "w1", 1, 1, 110)
    keys = ("id", "qty", "owner", "token", "attempt", "lease_until")
    moves = {
        ("enqueue", "a", 1, 100, 50, 2): LeaseOp.of("enqueue", {"id": "a", "qty": 1}, 100, 50, 2),
        ("claim", "w1", 100, 10, "after-claim"): LeaseOp.of("claim", "w1", 100, 10,
                                                           fault="after-claim"),
        ("finish", "w1", ticket, "ok", 105, 0, None): LeaseOp.of(
            "finish", dict(zip(keys, ticket, strict=True)),
            "ok", 105, 0),
        ("redrive", "a", 120, 50, None): LeaseOp.of("redrive", "a", 120, 50, "n"),
    }  # fmt: skip
    for move, op in moves.items():
        assert LeaseOp.from_move(move) == op
    assert LeaseOp.from_move(("tick", 130)) is None


def test_crash_evidence_steps_carry_the_record() -> None:
    """A crash property's evidence step holds the operation as its record's JSON, and the
    counterexample's JSON keeps it (the report reads ``operation``, a tool the record)."""
    from leasecheck.crash_harness._evidence import HistoryRecorder
    from leasecheck.crash_harness.engine import ChildResult
    from leasecheck.models.evidence import Evidence

    recorder = HistoryRecorder(Snapshot(), 0)
    op = PROGRAM[0]
    recorder.ran(op, ChildResult(True))
    evidence = Evidence.from_json(json.loads(json.dumps(recorder.evidence("x").to_json())))
    [step] = evidence.steps
    assert step.call is not None and LeaseOp.from_json(step.call) == op
    assert step.operation == op.describe()


def test_a_deep_copy_is_equal_and_shares_no_value_that_can_change() -> None:
    class Name(str):  # a look-alike: a str subclass that carries a mutable attribute
        tags: list[str]

    owner = Name("w1")
    owner.tags = ["a"]
    ticket = {"id": "j1", "token": 3, "owner": "w1", "extra": [1, 2]}
    op = LeaseOp.of("finish", ticket, "ok", 5, 0, fault="after-finish")
    copied = copy.deepcopy(op)
    assert copied == op and copied.fault == "after-finish"
    assert copied.args[0][1] is not ticket and copied.args[0][1]["extra"] is not ticket["extra"]
    claim = copy.deepcopy(LeaseOp.of("claim", owner, 5))
    assert claim.args[0][1] == "w1" and claim.args[0][1] is not owner
    copied_owner = claim.args[0][1]
    assert isinstance(copied_owner, Name)
    assert copied_owner.tags == ["a"] and copied_owner.tags is not owner.tags
