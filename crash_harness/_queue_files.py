"""Queue files for the crash properties: built for a model state, read back after a kill.

Target code only ever runs in forked children, so a target that hangs or exits can
not take the harness with it. The one exception would be building a file for a
given state; instead a child runs the target's ``open_queue`` once on a template
file, and each case writes its state with plain SQLite
(``targets.lease_target.write_snapshot``) into an in-memory copy of the template's
image (``Connection.deserialize``) and writes that image out as its file: the same
database the template copied and written in place would hold, without a rollback
journal created and deleted for every case. Reading back also uses plain SQLite: the
first read of a file with a hot journal rolls the journal back, exactly as the
target's next ``open_queue`` would.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from leasecheck.crash_harness.engine import Channel, ChildResult, Engine, ErrorInfo
from leasecheck.crash_harness.zygote import Task
from leasecheck.models.contracts import Snapshot
from leasecheck.models.lease_ops import LeaseOp
from leasecheck.targets.lease_target import read_snapshot, write_snapshot

__all__ = [
    "IntegrityFailure",
    "LeftOpen",
    "QueueFiles",
    "Scenario",
    "StoredFile",
    "check_opened",
    "op_body",
    "read_again",
    "read_stored",
    "read_stored_open",
    "sequence_body",
    "session_body",
    "side_by_side",
]

READ_TIMEOUT_S = 5.0


class LeftOpen(Exception):
    """Raised in a child when a target call returned with a transaction still open."""


def op_body(
    module: ModuleType,
    path: Path,
    op: LeaseOp,
    *,
    hooked: bool = True,
    traced: bool = False,
) -> Callable[[Channel], Any]:
    """A child body: open the queue with the target's ``open_queue``, run ``op``, close.

    Right after opening it reports the rows it found (event ``("opened", snapshot)``),
    so a harness can tell an ``open_queue`` that touched existing rows from the op.
    A ``Task``: the zygote forks it.
    """
    return Task(_run_op, (module, path, op, hooked, traced))


def _run_op(
    module: ModuleType,
    path: Path | str,
    op: LeaseOp,
    hooked: bool,
    traced: bool,
    channel: Channel,
    stop: str | None = None,
    report_opened: bool = True,
) -> Any:
    """``stop``: block only at that fault point (``Channel.fault_until``), else at every one.
    ``report_opened``: send the rows found right after ``open_queue`` (``check_opened``)."""
    con = module.open_queue(str(path))
    try:
        if report_opened:
            channel.send("event", ("opened", read_snapshot(con)))
        if traced:
            con.set_trace_callback(channel.trace)
        hook = channel.fault if stop is None else channel.fault_until(stop)
        value = op.apply(module, con, hook if hooked else None)
        if con.in_transaction:
            raise LeftOpen(f"{op.describe()} returned {value!r} with a transaction open")
        return value
    finally:
        con.set_trace_callback(None)
        con.close()


def session_body(module: ModuleType) -> Callable[[Channel], Any]:
    """A child body that serves commands: one fork for a claim and the next kill.

    ``("claim", path, op)`` runs ``op`` without hooks on the queue at ``path`` (opened
    and closed with the target's ``open_queue``) and reports its ``ChildResult`` as the
    event ``("claimed", outcome)`` (not the rows it found: the harness has just read
    that file itself); ``("op", path, op, point)`` runs ``op`` hooked, like
    ``op_body``, blocking only at ``point`` (every point before it is reported as passed,
    ``Channel.fault_until``), and is the body's last command (the harness kills it
    there); ``("stop", None, None)`` ends the body. The harness may send several
    commands at once: the body reads the next one when it is done with the last.
    """
    return Task(_run_session, (module,))


def _run_session(module: ModuleType, channel: Channel) -> Any:
    while True:
        command, path, op, *stop = channel.receive()
        if command == "op":
            return _run_op(module, path, op, True, False, channel, *stop)
        if command == "stop":
            return None
        try:
            value = _run_op(module, path, op, False, False, channel, report_opened=False)
            outcome = ChildResult(value)
        except Exception as error:
            outcome = ChildResult(error=ErrorInfo.from_exception(error))
        channel.send("event", ("claimed", outcome))


def sequence_body(module: ModuleType, path: Path, ops: list[LeaseOp]) -> Callable[[Channel], Any]:
    """A child body: open the queue, run ``ops`` one after another (no hooks), close.

    Returns one ``ChildResult`` per op, so a raising op does not hide the ones after it.
    """
    return Task(_run_sequence, (module, path, ops))


def _run_sequence(module: ModuleType, path: Path, ops: list[LeaseOp], channel: Channel) -> Any:
    con = module.open_queue(str(path))
    try:
        outcomes = []
        for op in ops:
            try:
                outcomes.append(ChildResult(op.apply(module, con)))
            except Exception as error:
                outcomes.append(ChildResult(error=ErrorInfo.from_exception(error)))
        return outcomes
    finally:
        con.close()


@dataclass
class QueueFiles:
    """Fresh queue files in ``directory``, each created by the target's ``open_queue``."""

    engine: Engine
    module: ModuleType
    directory: Path
    _template: Path | None = None
    made: int = 0
    _image: bytes | None = None

    def template(self) -> Path:
        if self._template is None:
            path = self.directory / "template.db"
            child = self.engine.fork("open_queue", _open_only(self.module, path))
            outcome = child.outcome(f"open_queue({str(path)!r}) on a new file")
            if outcome.raised:
                raise AssertionError(
                    f"open_queue({str(path)!r}) on a new file {outcome.describe()}; "
                    f"the crash properties need a target that can create a queue"
                )
            self._template = path
        return self._template

    def fresh(self, state: Snapshot) -> Path:
        """A new queue file holding exactly ``state``: the template's image with ``state``
        written into it (in memory), written out."""
        self.made += 1
        path = self.directory / f"queue-{self.made}.db"
        if self._image is None:
            self._image = self.template().read_bytes()
        # Bytes 18-19 of the header are 1 for a rollback journal and 2 for WAL (SQLite's
        # file format, 1.3.4); an in-memory database cannot run in WAL mode, so a WAL
        # target's file is written on disk from a copy of the template, as before.
        in_memory = self._image[18:20] == b"\x01\x01"
        if in_memory:
            con = sqlite3.connect(":memory:", isolation_level=None)
        else:
            path.write_bytes(self._image)
            con = sqlite3.connect(path, isolation_level=None)
        try:
            if in_memory:
                con.deserialize(self._image)
            write_snapshot(con, state)
            if in_memory:
                path.write_bytes(con.serialize())
        finally:
            con.close()
        return path

    def remove(self, path: Path) -> None:
        for leftover in (
            path,
            *(path.with_name(path.name + end) for end in ("-journal", "-wal", "-shm")),
        ):
            leftover.unlink(missing_ok=True)


def _open_only(module: ModuleType, path: Path) -> Callable[[Channel], None]:
    return Task(_run_open, (module, path))


def _run_open(module: ModuleType, path: Path, channel: Channel) -> None:
    module.open_queue(str(path)).close()


def read_stored(path: Path, after: str) -> Snapshot:
    """The state stored in ``path`` (rolling back a hot journal), checked for integrity."""
    state, stored = read_stored_open(path, after)
    stored.close()
    return state


def read_stored_open(path: Path, after: str) -> tuple[Snapshot, StoredFile]:
    """``read_stored``, and the connection it read with, left open (``StoredFile``, the
    caller closes it) for a later read of the same file that parses no schema."""
    try:
        con = sqlite3.connect(path, isolation_level=None, timeout=READ_TIMEOUT_S)
    except sqlite3.Error as error:
        raise AssertionError(f"the queue file could not be opened {after}: {error}") from error
    try:
        stored = StoredFile(path, con, _identity(path))
        return read_again(con, after), stored
    except BaseException:
        con.close()
        raise


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


@dataclass
class StoredFile:
    """A queue file the harness has read, with the connection it read it with."""

    path: Path
    con: sqlite3.Connection
    identity: tuple[int, int] | None
    """(device, inode) when it was opened: the file the connection reads."""

    def read(self, after: str) -> Snapshot:
        """``read_stored(path, after)``: on the open connection while ``path`` still names
        the file it opened, else (a target replaced the file) on a new one, as before."""
        if self.identity is None or _identity(self.path) != self.identity:
            return read_stored(self.path, after)
        return read_again(self.con, after)

    def close(self) -> None:
        self.con.close()


class IntegrityFailure(AssertionError):
    """``PRAGMA integrity_check`` did not say 'ok' (``read_again``)."""


def read_again(con: sqlite3.Connection, after: str) -> Snapshot:
    """The state stored in ``con``'s file now, checked for integrity (``read_stored``)."""
    try:
        (verdict,) = con.execute("PRAGMA integrity_check").fetchone()
        if verdict != "ok":
            raise IntegrityFailure(f"PRAGMA integrity_check says {verdict!r} {after}, not 'ok'")
        return read_snapshot(con)
    except sqlite3.OperationalError as error:
        raise AssertionError(
            f"reading the queue file {after} failed with {error!r}; every process touching it "
            f"had ended or was idle, so a lock was left behind (a transaction left open?)"
        ) from error


def check_opened(events: list[Any], before: Snapshot) -> None:
    """The rows a child saw right after ``open_queue`` must be the rows the file held."""
    for event in events:
        if isinstance(event, tuple) and event[:1] == ("opened",) and event[1] != before:
            seen: Snapshot = event[1]
            raise AssertionError(
                "open_queue on an existing queue file changed its rows (lease-worker.md: it "
                "creates the tables only if absent and never touches existing rows)\n"
                + side_by_side("the file held", before, "after open_queue", seen)
            )


def side_by_side(expected_label: str, expected: Snapshot, got_label: str, got: Snapshot) -> str:
    return f"{expected_label}:\n{expected.describe()}\n{got_label}:\n{got.describe()}"


@dataclass
class Scenario:
    """The numbered steps of one case, printed when it fails, with the seed to replay it."""

    property_name: str
    seed: int
    steps: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.steps.append(text)

    def text(self) -> str:
        lines = [f"  {number}. {step}" for number, step in enumerate(self.steps, 1)]
        replay = f"replay with --leasecheck-seed {self.seed} (property {self.property_name})"
        return "scenario:\n" + "\n".join(lines) + f"\n{replay}"

    def fail(self, message: str) -> AssertionError:
        return AssertionError(f"{message}\n{self.text()}")
