"""Every planted bug of ``leasecheck.mutants.crash_bugs`` is caught by the property it names.

Each mutant is written to a file and loaded with ``load_worker(path)``, exactly like a
user's ``--impl`` target, then checked with small sizes; the failure must say what
went wrong in the words of the spec and how to replay it. One mutant also goes
through ``pytest --leasecheck-impl`` end to end.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from leasecheck.crash_harness._queue_files import QueueFiles
from leasecheck.crash_harness._states import World
from leasecheck.crash_harness.atomicity import check_every_point
from leasecheck.crash_harness.duplicate_send import check_duplicate_send
from leasecheck.crash_harness.engine import Engine
from leasecheck.crash_harness.races import check_races
from leasecheck.crash_harness.random_kills import _replan, _Shrink, check_random_kills
from leasecheck.crash_harness.single_winner import check_single_winner
from leasecheck.models.evidence import evidence_of
from leasecheck.models.lease_ops import LeaseOp
from leasecheck.mutants import Mutant, by_name, materialize
from leasecheck.mutants.crash_bugs import MUTANTS
from leasecheck.targets import load_worker
from leasecheck.targets.loader import BUNDLED_WORKER

Check = Callable[[ModuleType, Path], object]

CHECKS: dict[str, Check] = {
    "lease.crash-points": lambda module, path: check_every_point(module, path, 2, 0),
    "lease.crash-random": lambda module, path: check_random_kills(module, path, 10, 0),
    "lease.single-winner": lambda module, path: check_single_winner(module, path, 1, 0),
    "lease.races": lambda module, path: check_races(module, path, 3, 20, 0),
    "lease.duplicate-send": lambda module, path: check_duplicate_send(module, path, 1, 0),
}

EXPECTED = {
    "redrive-audit-committed-alone": "a kill before COMMIT must roll the whole operation back",
    "finish-hook-after-commit": "at 'after-finish' (before COMMIT) the stored state is not",
    "finish-two-transactions": "at 'after-finish' (before COMMIT) the stored state is not",
    "claim-commit-hook-before-commit": "a kill after COMMIT must keep the committed operation",
    "open-queue-deletes-rows": "open_queue on an existing queue file changed its rows",
    "open-queue-recreates-tables": "open_queue on an existing queue file changed its rows",
    "claim-selects-outside-lock": "while that lease was live, to B",
    "finish-ignores-marker": "a stale finish must return False and change nothing",
    "run-once-sends-twice": "the recovery must send exactly twice",
}


def test_every_crash_mutant_has_a_check_and_an_expected_message() -> None:
    assert {m.name for m in MUTANTS} == set(EXPECTED)
    assert {m.caught_by for m in MUTANTS} <= set(CHECKS)


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_is_caught_by_its_property(
    mutant: Mutant, scratch: Path, no_leaked_children: None
) -> None:
    module = load_worker(materialize(mutant, scratch))
    with pytest.raises(AssertionError) as caught:
        CHECKS[mutant.caught_by](module, scratch)
    message = str(caught.value)
    assert EXPECTED[mutant.name] in message
    assert f"replay with --leasecheck-seed 0 (property {mutant.caught_by})" in message
    evidence = evidence_of(caught.value)
    assert evidence is not None, "the failure carries its evidence as data"
    assert evidence.step(evidence.parted) is not None, "and names the step where it parts"


def test_a_mutant_fails_the_property_through_pytest_impl(scratch: Path) -> None:
    mutant = next(m for m in MUTANTS if m.name == "redrive-audit-committed-alone")
    path = materialize(mutant, scratch)
    properties = Path(__file__).parents[1] / "leasecheck" / "properties"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", str(properties / "test_crash_points.py"),
         "--leasecheck-impl", str(path), "--leasecheck-profile", "quick", "-p", "no:xdist",
         "-q"],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert run.returncode == 1, run.stdout + run.stderr
    assert "a kill before COMMIT must roll the whole operation back" in run.stdout


POINT_MUTANTS = [m for m in MUTANTS if m.caught_by == "lease.crash-points"]


def _first_failures(module: ModuleType, scratch: Path, states_per_point: int) -> list[str]:
    """The failure lease.crash-points reports with one, two and three lanes (seed 0)."""
    messages = []
    for lanes in (1, 2, 3):
        (scratch / f"lanes-{lanes}").mkdir()
        with pytest.raises(AssertionError) as caught:
            check_every_point(module, scratch / f"lanes-{lanes}", states_per_point, 0, lanes=lanes)
        messages.append(str(caught.value))
    return messages


@pytest.mark.parametrize("mutant", POINT_MUTANTS, ids=lambda m: m.name)
def test_two_lanes_report_the_failure_one_lane_finds(
    mutant: Mutant, scratch: Path, no_leaked_children: None
) -> None:
    """lease.crash-points runs two children at once (and forks a third while a killed one
    dies); the failure it reports (message, scenario, replay line) is the one of a single
    child at a time, with two lanes and with three."""
    module = load_worker(materialize(mutant, scratch))
    messages = _first_failures(module, scratch, 2)
    assert messages[0] == messages[1] == messages[2]


def test_two_lanes_kill_what_one_lane_kills(scratch: Path, no_leaked_children: None) -> None:
    module = load_worker()
    tables = []
    for lanes in (1, 2, 3):
        (scratch / f"lanes-{lanes}").mkdir()
        tables.append(check_every_point(module, scratch / f"lanes-{lanes}", 2, 1, lanes=lanes))
    assert tables[0].kills == tables[1].kills == tables[2].kills
    # one fork per kill, one for the template file, one for the last claims
    assert {table.forks for table in tables} == {tables[0].total + 2}


def test_two_lanes_report_a_failed_next_claim_before_a_later_failed_kill(
    scratch: Path, no_leaked_children: None
) -> None:
    """Case 0 (claim@after-claim) holds but the next claim on its file fails; case 1
    (claim@after-commit) fails at its kill, and its child runs while case 0's claim is
    still to be checked. One child at a time meets the claim first: so must two."""
    mutant = next(m for m in MUTANTS if m.name == "claim-commit-hook-before-commit")
    path = materialize(mutant, scratch)
    check = '    _check_identifier("claim", "owner", owner)\n'
    source = path.read_text()
    assert check in source
    planted = (
        check + '    if owner == "next":\n        return None  # the next claim finds nothing\n'
    )
    path.write_text(source.replace(check, planted, 1))
    module = load_worker(path)
    messages = _first_failures(module, scratch, 1)
    assert "on the reopened file returned None" in messages[0]
    assert messages[0] == messages[1] == messages[2]


def test_lanes_report_a_waiting_next_claim_before_a_kill_that_fails_before_the_kill(
    scratch: Path, no_leaked_children: None
) -> None:
    """Case 1's file (queue-2.db) fails its next claim; case 2 (finish(ok)@after-finish)
    fails before its child is killed (a hook out of the spec's order). With more than one
    lane no child has been sent the claim on case 1's file yet when case 2 fails (the next
    child is forked only while a killed one dies): one more child must make it, so the
    failure reported is still the claim's, as one child at a time finds it."""
    path = scratch / "worker.py"
    source = BUNDLED_WORKER.read_text()
    check = '    _check_identifier("claim", "owner", owner)\n'
    claim_fails = check + (
        '    if owner == "next" and con.execute("PRAGMA database_list").fetchone()[2]'
        '.endswith("queue-2.db"):\n        raise RuntimeError("planted")\n'
    )
    hook = '        _hook(fault, "after-finish")\n'
    early_hook = '        _hook(fault, "after-commit")\n' + hook
    assert check in source and hook in source
    path.write_text(source.replace(check, claim_fails, 1).replace(hook, early_hook, 1))
    module = load_worker(path)
    messages = _first_failures(module, scratch, 1)
    assert "on the reopened file raised RuntimeError" in messages[0], messages[0]
    assert messages[0] == messages[1] == messages[2]


def test_a_wal_target_runs_through_every_fault_point(scratch: Path) -> None:
    """A worker in WAL mode (a correct one for process crashes: only power loss can cost
    it a commit) gets its kill table, not an error: its queue files cannot be built in
    memory, where SQLite has no WAL, so they are built on disk."""
    module = load_worker(materialize(by_name("wal-normal"), scratch))
    table = check_every_point(module, scratch, 1, 0)
    assert sum(table.kills.values()) >= 5, table
    assert not list(scratch.glob("queue-*.db-wal")), "a WAL file was left behind"


_BUDGET_CHECK = (
    '    if row["attempts"] >= row["max_attempts"]:\n        return "dead", "exhausted"\n'
)
_DEADLINE_CHECK = (
    '    if now_ms + delay_ms >= row["deadline"]:\n        return "dead", "deadline"\n'
)
LATE_BUDGET = Mutant(
    "retry-deadline-before-budget",
    "worker",
    "a retry's deadline is checked before its attempt budget (an outside tester's bug)",
    "two guard clauses swapped in a refactor",
    "lease.crash-random",
    ((_BUDGET_CHECK + _DEADLINE_CHECK, _DEADLINE_CHECK + _BUDGET_CHECK),),
)


def _shrink_late_retry(
    module: ModuleType, scratch: Path, jobs: int
) -> tuple[_Shrink, AssertionError | None]:
    """Shrink LATE_BUDGET's failure from ``jobs`` pending jobs, the first leased on its
    last attempt: w1 retries it past the deadline (acknowledged 'deadline' by the swapped
    guards), then w2 claims. The shrinker, and what it reported."""
    world = World(now=1000)
    for number in range(jobs):
        event = {"id": f"j{number}", "qty": 1}
        world, _ = world.apply(
            LeaseOp.of("enqueue", event=event, now_ms=1000, ttl_ms=5000, max_attempts=1)
        )
    world, claimed = world.apply(LeaseOp.of("claim", owner="w1", now_ms=1000, lease_ms=1000))
    ops = [
        LeaseOp.of("finish", ticket=claimed.result, outcome="retry", now_ms=1100, delay_ms=9000),
        LeaseOp.of("claim", owner="w2", now_ms=1200, lease_ms=100),
    ]
    with Engine() as engine:
        shrinker = _Shrink(engine, QueueFiles(engine, module, scratch), module, world, 0, 1)
        error = shrinker.attempt(ops)
        assert error is not None, "the acknowledged finish must disagree with the model"
        reported = shrinker.run(_replan(world, ops), error)
    return shrinker, reported


def test_crash_random_drops_the_job_rows_its_failure_does_not_need(
    scratch: Path, no_leaked_children: None
) -> None:
    """A kill late in a run starts from the dozens of jobs earlier kills left: the
    reported scenario keeps only the rows the failure needs (an outside tester's report
    printed some 40 jobs and "559 more lines"). Here 20 jobs, one leased on its last
    attempt; the swapped guards record its retry past the deadline as 'deadline'."""
    module = load_worker(materialize(LATE_BUDGET, scratch))
    shrinker, reported = _shrink_late_retry(module, scratch, jobs=20)
    assert reported is not None
    message = str(reported)
    # An attempt whose kill with the finish in flight holds (the SIGKILL came first) kills
    # the history again once it is acknowledged, which no SIGKILL races, so the row shrink
    # does not depend on the machine's load (it used to: such attempts held). Its time
    # budget may still stop it early on a very slow machine.
    assert 1 <= shrinker.kept <= 10, message
    assert f"from 20 to {shrinker.kept} job rows" in message, message


_OWNER_CHECK = '    _check_identifier("claim", "owner", owner)\n'
HANGING_CLAIM = Mutant(
    "retry-deadline-before-budget-hanging-claim",
    "worker",
    "LATE_BUDGET's swapped guards, and a claim by w2 that never returns",
    "a test-only pair: a bug the kills find, and a hang after it that they never wait for",
    "lease.crash-random",
    (
        (_BUDGET_CHECK + _DEADLINE_CHECK, _DEADLINE_CHECK + _BUDGET_CHECK),
        (
            _OWNER_CHECK,
            _OWNER_CHECK + '    if owner == "w2":\n        __import__("time").sleep(3600)\n',
        ),
    ),
)


def test_crash_random_shrinks_past_an_operation_that_hangs(
    scratch: Path, no_leaked_children: None
) -> None:
    """A shorter history that ends with an operation that hangs (here w2's claim, in
    flight and never awaited when the original kill came) is not waited for: the
    shrinker's second kill, once every operation is acknowledged, gives up on it after
    ``SETTLED_WAIT_S``, so the shrink still reaches the one finish and one job row within
    its budget (with the engine's 10 s deadline per wait it ran out of budget and
    reported the history unshrunk)."""
    module = load_worker(materialize(HANGING_CLAIM, scratch))
    shrinker, reported = _shrink_late_retry(module, scratch, jobs=3)
    assert reported is not None, "nothing smaller failed"
    found = evidence_of(reported)
    assert found is not None and found.extra["ops"] == "1", found
    assert shrinker.kept == 1, str(reported)


def test_a_history_from_a_seeded_start_names_that_start() -> None:
    """A crash case's scenario says where its history began: a quarter of them start from a
    state of ``models.edges`` near the bounds, not from an empty queue (an outside tester
    read "the model ran 4 operations from an empty queue: redrive(job_id='c', ...)",
    which no empty queue allows)."""
    import random

    from leasecheck.crash_harness._states import random_history
    from leasecheck.models.edges import LEASE_STARTS

    origins = set()
    for seed in range(40):
        world = random_history(random.Random(seed), 0, seeded=True)
        origins.add(world.origin())
        if world.start:
            assert world.state == LEASE_STARTS[world.start][1]
            assert repr(world.start) in world.origin() and "empty" not in world.origin()
        else:
            assert world.state.jobs == () and world.origin() == "an empty queue"
    assert "an empty queue" in origins and len(origins) > 1, origins
