"""The crash harness's reads of a queue file: a kept connection reads what a new one would."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from leasecheck.crash_harness._queue_files import read_stored, read_stored_open
from leasecheck.models.contracts import JobRow, Snapshot
from leasecheck.targets.lease_target import write_snapshot
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
