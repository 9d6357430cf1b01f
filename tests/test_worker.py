"""Example-based tests of the bundled lease worker, one or more per rule of lease-worker.md.

Every test runs on a real SQLite file on tmpfs. Every worker call goes through ``Q``, which
asserts that no transaction is left open after it, whatever happened; the ``connect``
fixture closes every connection and fails on a leaked file handle.
"""

from __future__ import annotations

import copy
import re
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from leasecheck.models.contracts import JobRow, RedriveRow, Snapshot
from leasecheck.queue_impl import worker
from leasecheck.targets import read_snapshot, write_snapshot

T0 = 1_000
MAX_NOW = 10**15 - 60000
Connect = Callable[..., sqlite3.Connection]


class Q:
    """The bundled worker on one connection; each call asserts it left no transaction open."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con

    def __getattr__(self, name: str) -> Callable[..., Any]:
        function = getattr(worker, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(self.con, *args, **kwargs)
            finally:
                assert self.con.in_transaction is False, f"{name} left a transaction open"

        return call

    def snap(self) -> Snapshot:
        return read_snapshot(self.con)

    def put(self, *jobs: JobRow, redrives: tuple[RedriveRow, ...] = ()) -> Snapshot:
        write_snapshot(self.con, Snapshot(jobs, redrives))
        return self.snap()

    def job(self, job_id: str) -> JobRow:
        row = self.snap().job(job_id)
        assert row is not None, f"job {job_id!r} is missing"
        return row


class Boom(Exception):
    """The error a fault hook raises in these tests."""


class Hooks:
    """A fault hook that records every point and raises ``error`` at ``fail_at``."""

    def __init__(self, fail_at: str | None = None, error: BaseException | None = None) -> None:
        self.calls: list[str] = []
        self.fail_at = fail_at
        self.error = error or Boom(f"fault at {fail_at}")

    def __call__(self, point: str) -> None:
        self.calls.append(point)
        if point == self.fail_at:
            raise self.error


PENDING = JobRow("a", 5, "pending", 0, 3, 0, T0, T0 + 5000)
LEASED = JobRow("b", 5, "leased", 1, 3, 1, T0, T0 + 5000, "w1", T0 + 1000)
DEAD = JobRow("c", 7, "dead", 3, 3, 3, T0 + 100, T0 + 5000, reason="exhausted")
DONE = JobRow("d", 2, "done", 1, 3, 1, T0 + 50, T0 + 5000)
AUDIT = RedriveRow("c", 2, T0, "earlier")
TICKET_B = {"id": "b", "qty": 5, "owner": "w1", "token": 1, "attempt": 1, "lease_until": T0 + 1000}


def leased(row: JobRow, owner: str, lease_until: int) -> JobRow:
    """``row`` after a claim by ``owner``: a new attempt and token."""
    attempts, token = row.attempts + 1, row.token + 1
    return replace(
        row,
        status="leased",
        attempts=attempts,
        token=token,
        owner=owner,
        lease_until=lease_until,
        reason=None,
    )


def finished(row: JobRow, status: str, reason: str | None, available_at: int) -> JobRow:
    """``row`` after a finish (or a quarantine) that leaves ``status``."""
    return replace(
        row, status=status, reason=reason, available_at=available_at, owner=None, lease_until=None
    )


def ticket(**changes: object) -> dict[str, Any]:
    return {**TICKET_B, **changes}


def ticket_without(key: str) -> dict[str, Any]:
    return {k: v for k, v in TICKET_B.items() if k != key}


@pytest.fixture
def q(connect: Connect) -> Q:
    return Q(connect())


@pytest.fixture
def prepared(q: Q) -> Q:
    """A queue holding one job of each status and one audit row."""
    q.put(PENDING, LEASED, DEAD, DONE, redrives=(AUDIT,))
    return q


# --- value rules: every bad input is a ValueError that changes nothing ---------------------

BASE: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "enqueue": (({"id": "n", "qty": 5}, T0, 1000), {"max_attempts": 3}),
    "claim": (("w2", T0 + 10), {"lease_ms": 1000}),
    "finish": ((TICKET_B, "ok", T0 + 10), {"delay_ms": 0}),
    "redrive": (("c", T0 + 10, 1000, "ops"), {}),
}


class Str(str):
    pass


class Dict(dict[str, Any]):
    pass


BAD_IDENTIFIERS = {
    "empty": "",
    "65-chars": "a" * 65,
    "trailing-newline": "a\n",
    "space": "a b",
    "dot": "a.b",
    "accented": "é",
    "fullwidth": "\uff41",
    "arabic-digit": "\u0661",
    "str-subclass": Str("a"),
    "bytes": b"a",
    "int": 1,
    "none": None,
}


BAD_JITTERS = {
    "true": True,
    "false": False,
    "nan": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
    "negative": -0.1,
    "above": 1.0001,
    "two": 2,
    "huge-int": 10**400,
    "str": "0.5",
    "none": None,
}
BAD_OUTCOMES: dict[str, object] = {
    "upper": "OK",
    "done": "done",
    "empty": "",
    "none": None,
    "subclass": Str("ok"),
    "bytes": b"ok",
    "list": ["ok"],
}


def bad_ints(low: int, high: int) -> dict[str, object]:
    return {
        "true": True,
        "false": False,
        "float": float(low),
        "str": str(low),
        "none": None,
        "below": low - 1,
        "above": high + 1,
    }


def case(fn: str, where: int | str, value: object, fragment: str, label: str) -> Any:
    """One bad call: the valid ``BASE`` call of ``fn`` with argument ``where`` replaced."""
    args, kwargs = list(BASE[fn][0]), dict(BASE[fn][1])
    if isinstance(where, int):
        args[where] = value
    else:
        kwargs[where] = value
    return pytest.param(fn, tuple(args), kwargs, fragment, id=f"{fn}-{label}")


def bad_cases() -> Iterator[Any]:
    for label, value in BAD_IDENTIFIERS.items():
        yield case("enqueue", 0, {"id": value, "qty": 5}, "event['id']", f"id-{label}")
        yield case("claim", 0, value, "owner", f"owner-{label}")
        yield case("finish", 0, ticket(id=value), "ticket['id']", f"ticket-id-{label}")
        yield case("finish", 0, ticket(owner=value), "ticket['owner']", f"ticket-owner-{label}")
        yield case("redrive", 0, value, "job_id", f"job_id-{label}")
        yield case("redrive", 3, value, "note", f"note-{label}")
    for label, value in bad_ints(0, MAX_NOW).items():
        yield case("enqueue", 1, value, "now_ms", f"now-{label}")
        yield case("claim", 1, value, "now_ms", f"now-{label}")
        yield case("finish", 2, value, "now_ms", f"now-{label}")
        yield case("redrive", 1, value, "now_ms", f"now-{label}")
    for label, value in bad_ints(1, 1000).items():
        yield case("enqueue", 0, {"id": "n", "qty": value}, "event['qty']", f"qty-{label}")
        yield case("finish", 0, ticket(qty=value), "ticket['qty']", f"ticket-qty-{label}")
    for label, value in bad_ints(1, 60000).items():
        yield case("enqueue", 2, value, "ttl_ms", f"ttl-{label}")
        yield case("claim", "lease_ms", value, "lease_ms", f"lease_ms-{label}")
        yield case("redrive", 2, value, "ttl_ms", f"ttl-{label}")
    for label, value in bad_ints(1, 16).items():
        yield case("enqueue", "max_attempts", value, "max_attempts", f"max_attempts-{label}")
        yield case("finish", 0, ticket(attempt=value), "ticket['attempt']", f"attempt-{label}")
    for label, value in bad_ints(1, 10**15).items():
        yield case("finish", 0, ticket(token=value), "ticket['token']", f"token-{label}")
        yield case("finish", 0, ticket(lease_until=value), "ticket['lease_until']", f"lu-{label}")
    for label, value in bad_ints(0, 60000).items():
        yield case("finish", "delay_ms", value, "delay_ms", f"delay-{label}")
    yield from dict_cases()
    for label, value in BAD_OUTCOMES.items():
        yield case("finish", 1, value, "outcome", f"outcome-{label}")


def dict_cases() -> Iterator[Any]:
    not_dicts = {"none": None, "list": [("id", "n"), ("qty", 5)], "str": "n", "int": 5}
    for label, value in not_dicts.items():
        yield case("enqueue", 0, value, "event", f"event-{label}")
        yield case("finish", 0, value, "ticket", f"ticket-{label}")
    yield case("enqueue", 0, Dict(id="n", qty=5), "event", "event-dict-subclass")
    yield case("enqueue", 0, {"id": "n"}, "event", "event-missing-qty")
    yield case("enqueue", 0, {"qty": 5}, "event", "event-missing-id")
    yield case("enqueue", 0, {"id": "n", "qty": 5, "ttl": 1}, "event", "event-extra-key")
    yield case("finish", 0, Dict(TICKET_B), "ticket", "ticket-dict-subclass")
    yield case("finish", 0, {**TICKET_B, "status": "leased"}, "ticket", "ticket-extra-key")
    for key in TICKET_B:
        yield case("finish", 0, ticket_without(key), "ticket", f"ticket-missing-{key}")


@pytest.mark.parametrize(("fn", "args", "kwargs", "fragment"), list(bad_cases()))
def test_bad_input_is_a_value_error_that_changes_nothing(
    prepared: Q, fn: str, args: tuple[Any, ...], kwargs: dict[str, Any], fragment: str
) -> None:
    before, inputs = prepared.snap(), copy.deepcopy((args, kwargs))
    hooks = Hooks()
    extra = {"fault": hooks} if fn in ("claim", "finish", "redrive") else {}
    with pytest.raises(ValueError, match=f"^{fn}: {re.escape(fragment)} must "):
        getattr(prepared, fn)(*args, **kwargs, **extra)
    assert prepared.snap() == before
    assert (args, kwargs) == inputs, "the caller's arguments were modified"
    assert hooks.calls == []


@pytest.mark.parametrize("job_id", ["a", "b", "d", "zz"])
def test_redrive_of_a_job_that_is_not_dead_is_a_value_error(prepared: Q, job_id: str) -> None:
    before, hooks = prepared.snap(), Hooks()
    with pytest.raises(ValueError, match=f"redrive: .*job {job_id!r}.*only a dead job"):
        prepared.redrive(job_id, T0 + 10, 1000, "ops", fault=hooks)
    assert prepared.snap() == before
    assert hooks.calls == []


def test_message_names_the_value_and_the_rule(q: Q) -> None:
    with pytest.raises(ValueError) as error:
        q.claim("a b", T0)
    assert str(error.value) == (
        "claim: owner must be an identifier (1-64 ASCII letters, digits, _ or -), got owner='a b'"
    )
    with pytest.raises(ValueError, match=r"lease_ms must be an exact int \(not bool\)"):
        q.claim("w", T0, True)


@pytest.mark.parametrize("name", ["a" * 64, "_", "-", "Z9", "a-b_C"])
def test_identifier_boundaries_are_accepted(q: Q, name: str) -> None:
    assert q.enqueue({"id": name, "qty": 1}, T0, 1000) is True
    claimed = q.claim(name, T0)
    assert claimed["owner"] == name
    assert q.finish(claimed, "permanent", T0) == "dead"
    assert q.redrive(name, T0, 1, name) is True


def test_range_boundaries_are_accepted(q: Q) -> None:
    assert q.enqueue({"id": "a", "qty": 1000}, MAX_NOW, 60000, 16) is True
    assert q.job("a").deadline == 10**15
    assert q.claim("w", MAX_NOW, 60000)["lease_until"] == 10**15
    top = ticket(id="a", qty=1000, owner="w", lease_until=10**15, token=10**15, attempt=16)
    assert q.finish(top, "retry", MAX_NOW, 60000) is False  # valid values, stale marker
    assert q.finish(ticket(id="a", owner="w", qty=1000, lease_until=10**15), "ok", 0) == "done"


# --- retry_delay ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((1, 100, 1000, 1), 100),
        ((4, 100, 1000, 1), 800),
        ((5, 100, 1000, 1), 1000),  # capped
        ((5, 100, 1000, 0.5), 500),  # cap first, then jitter (not min(1000, 1600 * 0.5))
        ((3, 100, 1000, 0.5), 200),
        ((1, 7, 7, 0.5), 3),  # floor
        ((5, 100, 1000, 0.999), 999),
        ((16, 60000, 60000, 1.0), 60000),
        ((16, 1, 60000, 1), 32768),
        ((2, 100, 100, 1), 100),  # cap_ms == base_ms
        ((1, 100, 1000, 0), 0),
        ((1, 100, 1000, 0.0), 0),
    ],
)
def test_retry_delay(args: tuple[int, int, int, float], expected: int) -> None:
    result = worker.retry_delay(*args)
    assert result == expected
    assert type(result) is int


def bad_retry_delay_cases() -> Iterator[Any]:
    base = (1, 100, 1000, 0.5)
    limits = {0: (1, 16), 1: (1, 60000), 2: (100, 60000)}
    names = ("attempt", "base_ms", "cap_ms")
    for index, (low, high) in limits.items():
        for label, value in bad_ints(low, high).items():
            args = (*base[:index], value, *base[index + 1 :])
            yield pytest.param(args, names[index], id=f"{names[index]}-{label}")
    for label, value in BAD_JITTERS.items():
        yield pytest.param((*base[:3], value), "jitter", id=f"jitter-{label}")


@pytest.mark.parametrize(("args", "name"), list(bad_retry_delay_cases()))
def test_retry_delay_rejects(args: tuple[object, ...], name: str) -> None:
    call: Callable[..., object] = worker.retry_delay
    with pytest.raises(ValueError, match=f"^retry_delay: {name} must "):
        call(*args)


# --- open_queue ----------------------------------------------------------------------------

SCHEMA = {
    "jobs": """CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE, qty INTEGER NOT NULL,
  status TEXT NOT NULL CHECK(status IN ('pending','leased','done','dead')),
  attempts INTEGER NOT NULL, max_attempts INTEGER NOT NULL, token INTEGER NOT NULL,
  available_at INTEGER NOT NULL, deadline INTEGER NOT NULL,
  owner TEXT, lease_until INTEGER, reason TEXT)""",
    "redrives": """CREATE TABLE redrives (seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL, token INTEGER NOT NULL, at_ms INTEGER NOT NULL, note TEXT NOT NULL)""",
}


def test_open_queue_creates_the_schema_and_settings(connect: Connect) -> None:
    con = connect()
    tables = dict(con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    assert {name: tables[name] for name in SCHEMA} == SCHEMA
    assert con.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert con.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    assert con.execute("PRAGMA busy_timeout").fetchone() == (1000,)  # timeout=1 second
    assert con.isolation_level is None
    assert con.in_transaction is False
    assert read_snapshot(con) == Snapshot()


def test_reopening_keeps_every_row(connect: Connect, queue_file: Path) -> None:
    first = Q(connect())
    stored = first.put(PENDING, LEASED, DEAD, DONE, redrives=(AUDIT,))
    second = connect()  # open_queue on a file another connection holds open
    assert read_snapshot(second) == stored
    first.con.close()
    second.close()
    assert read_snapshot(connect(queue_file)) == stored


@pytest.mark.parametrize("path", ["", ":memory:", Path(":memory:"), None, 3])
def test_open_queue_needs_a_real_file(path: object, scratch: Path) -> None:
    call: Callable[..., object] = worker.open_queue
    with pytest.raises(ValueError, match=r"^open_queue: path must name a real file"):
        call(path)
    assert list(scratch.iterdir()) == []


def test_open_queue_closes_the_connection_when_initialisation_fails(
    scratch: Path, scratch_open_files: Callable[[], list[str]]
) -> None:
    garbage = scratch / "not-a-queue.db"
    garbage.write_bytes(b"this is not an SQLite database " * 100)
    with pytest.raises(sqlite3.DatabaseError):
        worker.open_queue(garbage)
    assert scratch_open_files() == []
    assert garbage.read_bytes() == b"this is not an SQLite database " * 100


# --- enqueue ------------------------------------------------------------------------------


def test_enqueue_inserts_a_pending_job(q: Q) -> None:
    event = {"id": "a", "qty": 5}
    assert q.enqueue(event, T0, 5000) is True
    assert q.enqueue({"id": "b", "qty": 1}, T0 + 1, 1, 16) is True
    assert event == {"id": "a", "qty": 5}
    assert q.snap().jobs == (PENDING, JobRow("b", 1, "pending", 0, 16, 0, T0 + 1, T0 + 2))


@pytest.mark.parametrize("stored", [PENDING, replace(LEASED, id="a"), replace(DONE, id="a")])
def test_enqueue_duplicate_keeps_the_whole_row(q: Q, stored: JobRow) -> None:
    before = q.put(stored)
    assert q.enqueue({"id": "a", "qty": stored.qty}, T0 + 99, 60000, 16) is False
    assert q.snap() == before


def test_enqueue_other_qty_is_a_conflict(q: Q) -> None:
    before = q.put(PENDING)
    with pytest.raises(worker.Conflict, match="job 'a' already exists with qty=5, got qty=6"):
        q.enqueue({"id": "a", "qty": 6}, T0, 1000)
    assert q.snap() == before


def test_exceptions_are_distinct_exception_subclasses() -> None:
    classes = (worker.Conflict, worker.Retryable, worker.Permanent, worker.BadAck)
    assert all(issubclass(cls, Exception) for cls in classes)
    assert len({cls for cls in classes for other in classes if issubclass(cls, other)}) == 4
    assert not any(issubclass(cls, ValueError) for cls in classes)


# --- claim --------------------------------------------------------------------------------


def test_claim_leases_the_lowest_seq_job(q: Q) -> None:
    q.put(replace(PENDING, id="x", available_at=T0 + 1), PENDING, replace(PENDING, id="z"))
    claimed = q.claim("w1", T0, 300)
    assert claimed == ticket(id="a", lease_until=T0 + 300)
    assert type(claimed) is dict
    assert q.job("a") == leased(PENDING, "w1", T0 + 300)


def test_claim_respects_available_at(q: Q) -> None:
    q.put(replace(PENDING, available_at=T0 + 50))
    assert q.claim("w", T0 + 49) is None
    assert q.claim("w", T0 + 50)["id"] == "a"  # available_at <= now


def test_claim_takes_over_an_expired_lease_only(q: Q) -> None:
    q.put(replace(LEASED, reason="retry"))
    assert q.claim("w2", T0 + 999) is None
    claimed = q.claim("w2", T0 + 1000)  # lease_until <= now
    assert (claimed["token"], claimed["attempt"], claimed["owner"]) == (2, 2, "w2")
    row = q.job("b")
    assert (row.status, row.owner, row.lease_until, row.reason) == ("leased", "w2", T0 + 2000, None)


@pytest.mark.parametrize(
    ("deadline", "lease_until"),
    [(T0 + 999, T0 + 999), (T0 + 1000, T0 + 1000), (T0 + 1001, T0 + 1000)],
)
def test_claim_caps_the_lease_at_the_deadline(q: Q, deadline: int, lease_until: int) -> None:
    q.put(replace(PENDING, deadline=deadline))
    assert q.claim("w", T0, 1000)["lease_until"] == lease_until
    assert q.job("a").lease_until == lease_until


QUARANTINE_CASES = [
    # (row, now, expected reason or None when the row is not quarantined)
    pytest.param(replace(PENDING, deadline=T0 + 10), T0 + 10, "deadline", id="pending-deadline"),
    pytest.param(replace(PENDING, deadline=T0 + 10), T0 + 9, None, id="pending-before-deadline"),
    pytest.param(replace(PENDING, attempts=3), T0, "exhausted", id="pending-exhausted"),
    pytest.param(replace(PENDING, attempts=2), T0 + 10**6, "deadline", id="late-not-exhausted"),
    pytest.param(replace(PENDING, attempts=3, deadline=T0), T0, "deadline", id="deadline-wins"),
    pytest.param(replace(PENDING, available_at=T0 + 99, attempts=4), T0, "exhausted", id="later"),
    pytest.param(replace(LEASED, attempts=3), T0 + 1000, "exhausted", id="expired-exhausted"),
    pytest.param(replace(LEASED, attempts=3), T0 + 999, None, id="live-last-attempt"),
    pytest.param(replace(LEASED, deadline=T0 + 1000), T0 + 1000, "deadline", id="expired-late"),
    pytest.param(replace(DONE, attempts=3, deadline=T0), T0 + 10, None, id="done-untouched"),
    pytest.param(replace(DEAD, deadline=T0), T0 + 10, None, id="dead-untouched"),
]


@pytest.mark.parametrize(("row", "now", "reason"), QUARANTINE_CASES)
def test_claim_quarantine_commits_without_a_target_or_hook(
    q: Q, row: JobRow, now: int, reason: str | None
) -> None:
    hooks = Hooks()
    q.put(replace(row, available_at=max(row.available_at, now + 1)))  # nothing to claim
    before = q.job(row.id)
    assert q.claim("w2", now, fault=hooks) is None
    if reason is None:
        assert q.job(row.id) == before
    else:
        assert q.job(row.id) == finished(before, "dead", reason, before.available_at)
    assert hooks.calls == []


def test_claim_quarantines_then_claims_another_job(q: Q) -> None:
    q.put(replace(PENDING, id="late", deadline=T0), PENDING)
    assert q.claim("w", T0)["id"] == "a"
    assert (q.job("late").status, q.job("late").reason) == ("dead", "deadline")


# --- finish -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "outcome", "delay", "status", "reason", "available_at"),
    [
        (LEASED, "ok", 300, "done", None, T0 + 10),
        (replace(LEASED, reason="retry"), "ok", 0, "done", None, T0 + 10),
        (LEASED, "permanent", 300, "dead", "permanent", T0 + 10),
        (LEASED, "retry", 300, "pending", "retry", T0 + 310),
        (LEASED, "retry", 4989, "pending", "retry", T0 + 4999),  # now + delay == deadline - 1
        (LEASED, "retry", 4990, "dead", "deadline", T0 + 10),  # now + delay == deadline
        (replace(LEASED, attempts=3, token=3), "retry", 0, "dead", "exhausted", T0 + 10),
        (replace(LEASED, attempts=3, token=3), "retry", 4990, "dead", "exhausted", T0 + 10),
        (replace(LEASED, attempts=2, token=2), "retry", 0, "pending", "retry", T0 + 10),
    ],
)
def test_finish_outcomes(
    q: Q, row: JobRow, outcome: str, delay: int, status: str, reason: str | None, available_at: int
) -> None:
    q.put(row)
    held = ticket(attempt=row.attempts, token=row.token)
    kept = dict(held)
    assert q.finish(held, outcome, T0 + 10, delay) == status
    assert held == kept
    assert q.job("b") == finished(row, status, reason, available_at)


def test_retried_job_is_claimable_at_available_at(q: Q) -> None:
    q.put(LEASED)
    assert q.finish(TICKET_B, "retry", T0 + 10, 200) == "pending"
    assert q.claim("w2", T0 + 209) is None
    assert q.claim("w2", T0 + 210)["token"] == 2


@pytest.mark.parametrize(
    "stale",
    [
        ticket(qty=6),
        ticket(owner="w2"),
        ticket(token=2),
        ticket(attempt=2),
        ticket(lease_until=T0 + 999),
        ticket(lease_until=T0 + 1001),
        ticket(id="a"),
        ticket(id="d"),
        ticket(id="c", qty=7, token=3, attempt=3),
        ticket(id="zz"),
    ],
)
def test_finish_with_a_stale_ticket_changes_nothing(prepared: Q, stale: dict[str, Any]) -> None:
    before, hooks = prepared.snap(), Hooks()
    assert prepared.finish(stale, "ok", T0 + 10, fault=hooks) is False
    assert prepared.snap() == before
    assert hooks.calls == []


@pytest.mark.parametrize(("now", "result"), [(T0 + 999, "done"), (T0 + 1000, False)])
def test_finish_at_the_lease_boundary(q: Q, now: int, result: object) -> None:
    q.put(LEASED)
    assert q.finish(TICKET_B, "ok", now) == result


def test_finish_at_the_deadline_is_stale(q: Q) -> None:
    # lease_until beyond the deadline cannot come from claim, so only the deadline rule refuses
    q.put(replace(LEASED, deadline=T0 + 500))
    before = q.snap()
    assert q.finish(TICKET_B, "ok", T0 + 500) is False
    assert q.snap() == before
    assert q.finish(TICKET_B, "ok", T0 + 499) == "done"


def test_a_stale_worker_cannot_overwrite_the_new_lease(q: Q) -> None:
    q.enqueue({"id": "a", "qty": 5}, T0, 5000)
    old = q.claim("w1", T0, 100)
    new = q.claim("w2", T0 + 100, 100)
    assert q.finish(old, "ok", T0 + 101) is False
    assert q.finish({**old, "lease_until": new["lease_until"]}, "ok", T0 + 101) is False
    assert q.finish(new, "ok", T0 + 101) == "done"
    assert (q.job("a").token, q.job("a").attempts) == (2, 2)


# --- redrive ------------------------------------------------------------------------------


def test_redrive_gives_a_fresh_budget_and_keeps_the_token(q: Q) -> None:
    q.put(replace(DEAD, max_attempts=5, owner=None), redrives=(AUDIT,))
    assert q.redrive("c", T0 + 20, 700, "ops") is True
    fresh = replace(DEAD, max_attempts=5, status="pending", attempts=0, reason=None)
    fresh = replace(fresh, available_at=T0 + 20, deadline=T0 + 720)
    assert q.snap() == Snapshot((fresh,), (AUDIT, RedriveRow("c", 3, T0 + 20, "ops")))
    assert q.claim("w", T0 + 20)["token"] == 4


# --- hooks and faults ---------------------------------------------------------------------

Operation = Callable[[Q, Callable[[str], object] | None], object]
OPERATIONS: dict[str, tuple[tuple[JobRow, ...], Operation, list[str]]]
OPERATIONS = {
    "claim": (
        (replace(PENDING, id="late", deadline=T0), PENDING),  # quarantine and a target
        lambda q, fault: q.claim("w2", T0 + 10, fault=fault),
        ["after-claim", "after-commit"],
    ),
    "finish": (
        (PENDING, LEASED),
        lambda q, fault: q.finish(TICKET_B, "retry", T0 + 10, 100, fault=fault),
        ["after-finish", "after-commit"],
    ),
    "redrive": (
        (PENDING, DEAD),
        lambda q, fault: q.redrive("c", T0 + 10, 1000, "ops", fault=fault),
        ["after-audit", "after-redrive", "after-commit"],
    ),
}
FAULT_CASES = [(op, point) for op, (_, _, points) in OPERATIONS.items() for point in points]


@pytest.mark.parametrize("op", OPERATIONS)
def test_hooks_are_called_in_order(q: Q, op: str) -> None:
    rows, run, points = OPERATIONS[op]
    q.put(*rows, redrives=(AUDIT,))
    hooks = Hooks()
    run(q, hooks)
    assert hooks.calls == points


@pytest.mark.parametrize("op", OPERATIONS)
def test_each_hook_sees_its_own_change(connect: Connect, queue_file: Path, op: str) -> None:
    rows, run, points = OPERATIONS[op]
    reference = Q(connect(queue_file.with_name("reference.db")))
    before = reference.put(*rows, redrives=(AUDIT,))
    run(reference, None)
    after = reference.snap()
    audited = Snapshot(before.jobs, after.redrives)  # the audit row comes first, on its own
    expected = {"after-audit": (True, audited), "after-commit": (False, after)}
    q, seen = Q(connect()), {}
    q.put(*rows, redrives=(AUDIT,))
    run(q, lambda point: seen.update({point: (q.con.in_transaction, q.snap())}))
    assert seen == {point: expected.get(point, (True, after)) for point in points}


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.enqueue({"id": "a", "qty": 5}, T0, 1000),  # a duplicate: nothing to write
        lambda q: q.claim("w", T0 - 1),  # nothing to quarantine or claim
        lambda q: q.finish(ticket(token=9), "ok", T0),  # a stale ticket
    ],
    ids=["enqueue-duplicate", "claim-nothing", "finish-stale"],
)
def test_every_call_takes_the_write_lock_first(
    connect: Connect, call: Callable[[Q], object]
) -> None:
    q, writer = Q(connect()), connect()
    before = q.put(PENDING, LEASED)
    writer.execute("BEGIN IMMEDIATE")  # BEGIN IMMEDIATE must wait for it, then give up
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        call(q)
    writer.execute("ROLLBACK")
    assert q.snap() == before


@pytest.mark.parametrize(("op", "point"), FAULT_CASES)
def test_a_fault_rolls_back_everything_before_commit(
    connect: Connect, queue_file: Path, op: str, point: str
) -> None:
    rows, run, points = OPERATIONS[op]
    q, reference = Q(connect()), Q(connect(queue_file.with_name("reference.db")))
    reference.put(*rows, redrives=(AUDIT,))
    expected_result, committed = run(reference, None), reference.snap()
    before = q.put(*rows, redrives=(AUDIT,))
    hooks = Hooks(fail_at=point)
    with pytest.raises(Boom) as raised:
        run(q, hooks)
    assert raised.value is hooks.error
    assert hooks.calls == points[: points.index(point) + 1]
    if point == "after-commit":
        assert q.snap() == committed
    else:
        assert q.snap() == before
        assert run(q, None) == expected_result  # nothing of the failed call survives
        assert q.snap() == committed


def test_keyboard_interrupt_in_a_hook_rolls_back(q: Q) -> None:
    before = q.put(replace(PENDING, id="late", deadline=T0), PENDING)
    with pytest.raises(KeyboardInterrupt):
        q.claim("w", T0, fault=Hooks("after-claim", KeyboardInterrupt()))
    assert q.snap() == before


def test_a_failing_commit_rolls_back(connect: Connect) -> None:
    q, reader = Q(connect()), connect()
    before = q.put(replace(PENDING, id="late", deadline=T0), PENDING)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM jobs").fetchone()  # a SHARED lock blocks COMMIT
    hooks = Hooks()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        q.claim("w", T0, fault=hooks)
    reader.execute("COMMIT")
    assert hooks.calls == ["after-claim"]
    assert q.snap() == before


# --- run_once -----------------------------------------------------------------------------


class Readings:
    """A clock that returns ``readings`` in turn and counts how often it was read."""

    def __init__(self, *readings: object) -> None:
        self.readings = list(readings)
        self.reads = 0

    def __call__(self) -> Any:  # Any: it also returns invalid readings on purpose
        self.reads += 1
        return self.readings.pop(0)


class Send:
    """A ``send`` that records what it got and answers with ``reply`` (raised if an error)."""

    def __init__(
        self,
        reply: object = True,
        during: Callable[[], None] | None = None,
        keep: list[dict[str, Any]] | None = None,
    ) -> None:
        self.reply, self.during = reply, during
        self.got: list[dict[str, Any]] = []
        self.kept = keep if keep is not None else []

    def __call__(self, job: dict[str, Any]) -> object:
        self.got.append(copy.deepcopy(job))
        self.kept.append(job)
        if self.during is not None:
            self.during()
        if isinstance(self.reply, BaseException):
            raise self.reply
        return self.reply


def test_run_once_without_a_job_does_not_send(q: Q) -> None:
    clock, send = Readings(T0), Send()
    assert q.run_once("w", clock, send, 0.5) is None
    assert (clock.reads, send.got) == (1, [])


def test_run_once_delivers_and_finishes(q: Q) -> None:
    q.put(PENDING)
    clock, send = Readings(T0, T0 + 20), Send()
    assert q.run_once("w", clock, send, 0.5, 300) == {"id": "a", "token": 1, "status": "done"}
    assert send.got == [{"id": "a", "qty": 5}]
    assert q.job("a") == replace(PENDING, status="done", attempts=1, token=1, available_at=T0 + 20)


def test_run_once_sends_outside_any_transaction(q: Q, connect: Connect) -> None:
    q.put(PENDING)
    other = connect()
    seen: list[JobRow | None] = []

    def meanwhile() -> None:
        assert q.con.in_transaction is False
        other.execute("BEGIN IMMEDIATE")  # fails after timeout=1 if the worker held the lock
        other.execute("COMMIT")
        seen.append(read_snapshot(other).job("a"))

    q.run_once("w", Readings(T0, T0 + 1), Send(during=meanwhile), 0.5, 300)
    assert seen == [leased(PENDING, "w", T0 + 300)]


def test_run_once_keeps_its_marker_whatever_send_does(q: Q, connect: Connect) -> None:
    q.put(PENDING)
    other = connect()

    def vandal(job: dict[str, Any]) -> bool:
        job.update(id="zz", qty=999, token=7, owner="w9")
        worker.enqueue(other, {"id": "new", "qty": 1}, T0, 1000)
        return True

    result = q.run_once("w", Readings(T0, T0 + 1), vandal, 0.5)
    assert result == {"id": "a", "token": 1, "status": "done"}
    assert [(row.id, row.status) for row in q.snap().jobs] == [("a", "done"), ("new", "pending")]


def test_run_once_gives_send_a_fresh_dict_each_time(q: Q) -> None:
    q.put(PENDING, replace(PENDING, id="b"))
    dicts: list[dict[str, Any]] = []
    for _ in range(2):
        q.run_once("w", Readings(T0, T0), Send(keep=dicts), 0.5)
    assert dicts == [{"id": "a", "qty": 5}, {"id": "b", "qty": 5}]
    assert all(type(job) is dict for job in dicts) and dicts[0] is not dicts[1]


@pytest.mark.parametrize("reply", [1, "True", None, False, {"ok": True}, 1.0])
def test_run_once_needs_exactly_true(q: Q, reply: object) -> None:
    q.put(PENDING)
    with pytest.raises(worker.BadAck, match=re.escape(f"got {reply!r}")):
        q.run_once("w", Readings(T0, T0 + 1), Send(reply), 0.5)
    assert q.job("a").status == "leased"
    assert q.job("a").token == 1


class LateRetry(worker.Retryable):
    pass


@pytest.mark.parametrize(
    ("attempts", "jitter", "error", "delay"),
    [
        (0, 0.5, worker.Retryable(), 50),
        (2, 1, worker.Retryable(), 400),
        (2, 0.25, LateRetry(), 100),
        (0, 0, worker.Retryable("timeout"), 0),
    ],
)
def test_run_once_retries_with_the_backoff_delay(
    q: Q, attempts: int, jitter: float, error: Exception, delay: int
) -> None:
    row = replace(PENDING, attempts=attempts, token=attempts, max_attempts=5)
    q.put(row)
    result = q.run_once("w", Readings(T0, T0 + 20), Send(error), jitter)
    assert result == {"id": "a", "token": attempts + 1, "status": "pending"}
    expected = finished(leased(row, "w", T0 + 1000), "pending", "retry", T0 + 20 + delay)
    assert q.job("a") == expected


def test_run_once_retry_past_the_budget_or_deadline_is_dead(q: Q) -> None:
    q.put(replace(PENDING, max_attempts=1), replace(PENDING, id="b", deadline=T0 + 100))
    assert q.run_once("w", Readings(T0, T0), Send(worker.Retryable()), 1)["status"] == "dead"
    assert q.run_once("w", Readings(T0, T0), Send(worker.Retryable()), 1)["status"] == "dead"
    reasons = [(row.status, row.reason) for row in q.snap().jobs]
    assert reasons == [("dead", "exhausted"), ("dead", "deadline")]


def test_run_once_permanent(q: Q) -> None:
    q.put(PENDING)
    result = q.run_once("w", Readings(T0, T0 + 5), Send(worker.Permanent("409")), 0.5)
    assert result == {"id": "a", "token": 1, "status": "dead"}
    assert (q.job("a").reason, q.job("a").available_at) == ("permanent", T0 + 5)


@pytest.mark.parametrize("error", [RuntimeError("boom"), worker.BadAck("from send"), KeyError("k")])
def test_run_once_other_errors_propagate_and_keep_the_lease(q: Q, error: Exception) -> None:
    q.put(PENDING)
    with pytest.raises(type(error)) as raised:
        q.run_once("w", Readings(T0, T0 + 1), Send(error), 0.5)
    assert raised.value is error
    assert (q.job("a").status, q.job("a").owner, q.job("a").token) == ("leased", "w", 1)


def test_run_once_late_finish_is_stale(q: Q) -> None:
    q.put(PENDING)
    result = q.run_once("w", Readings(T0, T0 + 300), Send(), 0.5, 300)
    assert result == {"id": "a", "token": 1, "status": "stale"}
    assert q.job("a").status == "leased"


@pytest.mark.parametrize("second", [T0 - 1, True, -1, float(T0 + 1), None, MAX_NOW + 1])
def test_run_once_bad_second_clock_keeps_the_claim(q: Q, second: object) -> None:
    q.put(PENDING)
    with pytest.raises(ValueError, match=r"^run_once: "):
        q.run_once("w", Readings(T0, second), Send(), 0.5, 300)
    assert q.job("a") == leased(PENDING, "w", T0 + 300)


def bad_run_once_cases() -> list[Any]:
    bad = [("jitter", BAD_JITTERS), ("owner", BAD_IDENTIFIERS), ("lease_ms", bad_ints(1, 60000))]
    return [
        pytest.param({name: value}, name, id=f"{name}-{label}")
        for name, values in bad
        for label, value in values.items()
    ]


@pytest.mark.parametrize(("bad", "name"), bad_run_once_cases())
def test_run_once_rejects_bad_arguments_before_claiming(
    prepared: Q, bad: dict[str, object], name: str
) -> None:
    before, clock, send = prepared.snap(), Readings(T0 + 10, T0 + 11), Send()
    arguments = {"owner": "w2", "clock": clock, "send": send, "jitter": 0.5, "lease_ms": 300}
    with pytest.raises(ValueError, match=f"^run_once: .*{name}"):
        prepared.run_once(**{**arguments, **bad})
    assert prepared.snap() == before
    assert send.got == []
    if name == "jitter":
        assert clock.reads == 0  # jitter is validated first


@pytest.mark.parametrize("first", [True, -1, float(T0), None, MAX_NOW + 1, "1000"])
def test_run_once_bad_first_clock_claims_nothing(prepared: Q, first: object) -> None:
    before, send = prepared.snap(), Send()
    with pytest.raises(ValueError, match=r"^run_once: the first clock\(\) reading must"):
        prepared.run_once("w2", Readings(first, T0 + 11), send, 0.5)
    assert prepared.snap() == before
    assert send.got == []


# --- run_file -----------------------------------------------------------------------------


def test_run_file_runs_once_and_closes_its_connection(
    connect: Connect, queue_file: Path, scratch_open_files: Callable[[], list[str]]
) -> None:
    setup = Q(connect())
    setup.put(PENDING, replace(PENDING, id="b"))
    setup.con.close()
    for job_id in ("a", "b"):
        result = worker.run_file(queue_file, "w", Readings(T0, T0 + 1), Send(), 0.5)
        assert result == {"id": job_id, "token": 1, "status": "done"}
        assert scratch_open_files() == []
    assert worker.run_file(str(queue_file), "w", Readings(T0), Send(), 0.5) is None
    assert scratch_open_files() == []


def test_run_file_closes_its_connection_on_failure(
    connect: Connect, queue_file: Path, scratch_open_files: Callable[[], list[str]]
) -> None:
    setup = Q(connect())
    setup.put(PENDING)
    setup.con.close()
    with pytest.raises(RuntimeError):
        worker.run_file(queue_file, "w", Readings(T0, T0), Send(RuntimeError("down")), 0.5)
    assert scratch_open_files() == []
    assert read_snapshot(connect()).job("a") == leased(PENDING, "w", T0 + 1000)


@pytest.mark.parametrize("kind", ["missing", "directory", "missing-parent"])
def test_run_file_needs_an_existing_file(scratch: Path, kind: str) -> None:
    paths = {"missing": "nope.db", "directory": "dir", "missing-parent": "no/q.db"}
    path = scratch / paths[kind]
    if kind == "directory":
        path.mkdir()
    send = Send()
    with pytest.raises(FileNotFoundError, match="run_file: path must be an existing queue file"):
        worker.run_file(path, "w", Readings(T0, T0), send, 0.5)
    assert sorted(p.name for p in scratch.rglob("*")) == (["dir"] if kind == "directory" else [])
    assert send.got == []


def test_a_queue_file_without_its_tables_is_named_as_open_queues_finding(scratch: Path) -> None:
    """The harness seeds files that the target's open_queue made: a missing table is the
    target's (open_queue creates both when absent), said so, not a bare OperationalError."""
    con = sqlite3.connect(scratch / "no-tables.db", isolation_level=None)
    try:
        with pytest.raises(AssertionError, match="made with the target's open_queue"):
            write_snapshot(con, Snapshot())
        assert not con.in_transaction
    finally:
        con.close()
