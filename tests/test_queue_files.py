"""The crash harness's reads of a queue file: a kept connection reads what a new one would."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from leasecheck.crash_harness._queue_files import read_stored, read_stored_open
from leasecheck.models.contracts import JobRow, Snapshot
from leasecheck.targets.lease_target import read_snapshot, write_snapshot
from leasecheck.targets.loader import load_worker


def _file(path: Path, *ids: str) -> Snapshot:
    """A queue file made by the bundled worker's ``open_queue``, holding pending jobs ``ids``."""
    state = Snapshot(jobs=tuple(JobRow(i, 1, "pending", 0, 3, 0, 0, 5000) for i in ids))
    con = load_worker().open_queue(str(path))
    try:
        write_snapshot(con, state)
    finally:
        con.close()
    return state


def test_a_kept_connection_sees_another_process_s_writes(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    before = _file(path, "a")
    state, stored = read_stored_open(path, "after the kill")
    try:
        assert state == before
        after = _file(path, "a", "b")  # another connection writes, as the next claim does
        assert stored.read("after the next claim") == after == read_stored(path, "again")
    finally:
        stored.close()


def test_a_replaced_file_is_read_from_its_path_not_from_the_kept_connection(
    tmp_path: Path,
) -> None:
    path, other = tmp_path / "queue.db", tmp_path / "other.db"
    _file(path, "a")
    _, stored = read_stored_open(path, "after the kill")
    try:
        replacement = _file(other, "z")
        os.replace(other, path)  # a target that rebuilds its file under the same name
        assert stored.read("after the next claim") == replacement
    finally:
        stored.close()
    with sqlite3.connect(path) as con:  # the kept connection is closed: the file is free
        con.execute("BEGIN EXCLUSIVE")
        con.rollback()
    con.close()


def test_a_read_leaves_no_transaction_and_holds_no_lock(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    stored = _file(path, "a", "b")
    con = sqlite3.connect(path, isolation_level=None, timeout=0)
    other = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        assert read_snapshot(con) == stored
        assert not con.in_transaction
        other.execute("BEGIN EXCLUSIVE")  # fails at once if the read still held its lock
        other.execute("ROLLBACK")
    finally:
        con.close()
        other.close()


def test_a_read_inside_a_target_s_open_transaction_leaves_it_open(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    _file(path, "a")
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")  # what a target that forgets its COMMIT leaves
        con.execute("DELETE FROM jobs")
        assert read_snapshot(con) == Snapshot()  # the rows the connection sees
        assert con.in_transaction  # still open, for the machine to report
        con.execute("ROLLBACK")
    finally:
        con.close()


def test_a_failing_read_raises_its_own_error_and_ends_its_transaction(tmp_path: Path) -> None:
    con = sqlite3.connect(tmp_path / "empty.db", isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such table: jobs"):
            read_snapshot(con)
        assert not con.in_transaction
    finally:
        con.close()
