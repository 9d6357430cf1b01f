"""The child side of ``lease.configuration``: paths, open files and ``send``'s contract.

Each case runs target code in a forked child (a FIFO or a target that loops must not
take the harness with it) and returns one plain record ``{"case", "problem"}`` per
check, ``problem`` None when the sentence held. Every expectation is a sentence of
lease-worker.md, quoted in the check that makes it:

- ``run_file``: "path must be an existing regular file, else FileNotFoundError (never
  create a queue)" and "closes the connection on success and on failure" (a ``send``
  that raises something that is no ``Exception``, as Ctrl-C does, is a failure too);
- ``open_queue``: "closes the connection if initialisation fails", "A real file, not
  :memory:", "never touches existing rows";
- every DB function: "The connection ... is not closed by the function", "no
  transaction is left open";
- hooks: a falsy callable is still "a callable" and is called; each hook sees, through
  the call's own connection, the changes the spec makes before it (redrive's audit row
  before its reset: "in this order");
- ``run_once``: ``send`` is called "outside any transaction" and between the two clock
  readings, Retryable and Permanent are matched with isinstance, and finish gets "the
  ticket from claim (whatever send did to its dict or to the DB)".

File descriptors are counted in ``/proc/self/fd`` while the error is still held: a
connection a target forgot to close stays open until its frame is freed, so counting
after ``except`` has dropped the traceback would miss it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from leasecheck.models.contracts import InjectedInterrupt

__all__ = ["callback_cases", "path_cases", "read_only_cases", "resource_cases"]

Record = dict[str, Any]
CLOCK_START = 1000
WAL_HEADER = b"\x02\x02"
"""Bytes 18-19 of an SQLite file in WAL mode (1, 1 for a rollback journal)."""
JOB = {"id": "j1", "qty": 7}


def _fds() -> set[str]:
    """The open file descriptors of this process (the listing's own fd excluded)."""
    return {fd for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}")}


def _record(case: str, problem: str | None) -> Record:
    return {"case": case, "problem": problem}


def _clock(*readings: int) -> Callable[[], int]:
    """A clock that gives ``readings``, then refuses: run_once reads it twice, "`t1 =
    clock()`" and "Then `t2 = clock()`", and a third reading is named as such."""
    values = iter(readings)

    def clock() -> int:
        for value in values:
            return value
        raise AssertionError(
            f"clock() was read {len(readings) + 1} times; run_once reads it twice (t1, t2)"
        )

    return clock


def _seeded(module: ModuleType, path: Path, jobs: int = 1) -> None:
    """A queue file made by the target holding ``jobs`` pending jobs."""
    con = module.open_queue(str(path))
    try:
        for number in range(jobs):
            module.enqueue(con, {"id": f"j{number + 1}", "qty": 7}, 0, 60000)
    finally:
        con.close()


def _tables(path: Path) -> set[str]:
    """The user tables of the SQLite file at ``path`` (plain SQLite, read only)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    finally:
        con.close()
    return {name for (name,) in rows} - {"sqlite_sequence"}


# --- file descriptors on every call and every error path ------------------------------------


def _leak(before: set[str], call: str) -> str | None:
    opened = _fds() - before
    if not opened:
        return None
    names = sorted(_fd_target(fd) for fd in opened)
    return f"{call} left {len(opened)} file descriptor(s) open: {names}"


def _fd_target(fd: str) -> str:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/self/fd/{fd}")
    return f"fd {fd}"


def _connection_kept(con: sqlite3.Connection, call: str) -> str | None:
    """The spec: the connection "is not closed by the function" and no transaction is
    left open, on the error paths too."""
    try:
        con.execute("SELECT 1").fetchone()
    except sqlite3.ProgrammingError:
        return f"{call} closed the caller's connection; the spec says it is not closed"
    if con.in_transaction:
        return f"{call} returned with a transaction open; 'no transaction is left open'"
    return None


def _db_calls(module: ModuleType) -> list[tuple[str, Callable[[sqlite3.Connection], Any]]]:
    """A call of every DB function along each of its paths: success, no change, error."""
    ticket: dict[str, Any] = {}

    def claimed(con: sqlite3.Connection) -> Any:
        ticket.update(module.claim(con, "w1", CLOCK_START, 1000) or {})
        return ticket

    def boom(_: dict[str, Any]) -> object:
        raise RuntimeError("send failed in a way the spec does not name")

    return [
        ("enqueue (new id)", lambda c: module.enqueue(c, dict(JOB), 0, 60000)),
        ("enqueue (same id, same qty)", lambda c: module.enqueue(c, dict(JOB), 0, 60000)),
        ("enqueue (Conflict)", lambda c: module.enqueue(c, {"id": "j1", "qty": 8}, 0, 60000)),
        ("enqueue (ValueError)", lambda c: module.enqueue(c, {"id": "j 1", "qty": 1}, 0, 1)),
        ("claim (ValueError)", lambda c: module.claim(c, "w 1", CLOCK_START)),
        ("claim (a job)", claimed),
        ("claim (no job)", lambda c: module.claim(c, "w1", CLOCK_START)),
        ("finish (ValueError)", lambda c: module.finish(c, {"id": "j1"}, "ok", CLOCK_START)),
        ("finish (stale)", lambda c: module.finish(c, {**ticket, "token": 99}, "ok", 1001)),
        ("finish (ok)", lambda c: module.finish(c, dict(ticket), "ok", CLOCK_START + 1)),
        ("redrive (not dead)", lambda c: module.redrive(c, "j1", 1002, 100, "n")),
        ("redrive (missing)", lambda c: module.redrive(c, "nope", 1002, 100, "n")),
        ("enqueue (second job)", lambda c: module.enqueue(c, {"id": "j2", "qty": 1}, 0, 60000, 16)),
        ("run_once (send raises)", lambda c: module.run_once(c, "w1", _clock(2000, 2001), boom, 1)),
        ("run_once (BadAck)", lambda c: module.run_once(c, "w1", _clock(4000, 4001), _bad, 1)),
        ("run_once (clock back)", lambda c: module.run_once(c, "w1", _clock(6000, 5999), _ok, 1)),
        ("run_once (ok)", lambda c: module.run_once(c, "w1", _clock(8000, 8001), _ok, 1)),
        ("run_once (no job)", lambda c: module.run_once(c, "w1", _clock(9000, 9001), _ok, 1)),
    ]


def _ok(_: dict[str, Any]) -> object:
    return True


def _bad(_: dict[str, Any]) -> object:
    return 1  # truthy, but not exactly True


def resource_cases(module: ModuleType, directory: Path) -> list[Record]:
    """Every DB function on one connection: no file opened or left, the connection kept."""
    path = directory / "resources.db"
    records = []
    before_open = _fds()
    con = module.open_queue(str(path))
    try:
        baseline = _fds()
        for call, run in _db_calls(module):
            with contextlib.suppress(Exception):
                run(con)
            records.append(_record(f"fds after {call}", _leak(baseline, call)))
            records.append(_record(f"connection after {call}", _connection_kept(con, call)))
    finally:
        con.close()
    records.append(_record("fds after open_queue + close", _leak(before_open, "open_queue")))
    records += _run_file_closes(module, directory)
    return records


def _captured_connections() -> list[sqlite3.Connection]:
    """The connections held by the target's frames between ``run_file`` and ``send``."""
    found: dict[int, sqlite3.Connection] = {}
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code is not _run_file_closes.__code__:
        for value in frame.f_locals.values():
            if isinstance(value, sqlite3.Connection):
                found[id(value)] = value
        frame = frame.f_back
    return list(found.values())


def _run_file_closes(module: ModuleType, directory: Path) -> list[Record]:
    """run_file "closes the connection on success and on failure": the connection it
    opened is caught in ``send`` and must be closed once run_file has returned or raised."""
    records = []
    answers: tuple[tuple[str, object], ...] = (
        ("success", True), ("failure", RuntimeError("send failed")),
        ("an interrupt", InjectedInterrupt("send interrupted")),  # no Exception, as Ctrl-C
    )  # fmt: skip
    for label, answer in answers:
        path = directory / f"run-file-{label.replace(' ', '-')}.db"
        _seeded(module, path)
        held: list[sqlite3.Connection] = []

        def send(
            _: dict[str, Any], answer: object = answer, held: list[sqlite3.Connection] = held
        ) -> object:
            held.extend(_captured_connections())
            if isinstance(answer, BaseException):
                raise answer
            return answer

        before = _fds()
        try:
            module.run_file(str(path), "w1", _clock(10, 11), send, 1)
        except (Exception, InjectedInterrupt):
            records.append(_record(f"fds while run_file's {label} error is held", _leak(
                before, f"run_file on {label} (while its error was still held)"
            )))  # fmt: skip
        records.append(_record(f"fds after run_file on {label}", _leak(before, "run_file")))
        still_open = [c for c in held if _is_open(c)]
        records.append(_record(f"connection closed by run_file on {label}", (
            f"run_file left the connection it opened open after {label} (send's callers "
            f"held {len(held)} connection(s), {len(still_open)} still open)"
        ) if still_open else None))  # fmt: skip
        for con in still_open:
            con.close()
    return records


def _is_open(con: sqlite3.Connection) -> bool:
    try:
        con.execute("SELECT 1")
    except sqlite3.ProgrammingError:
        return False
    return True


# --- every kind of path -------------------------------------------------------------------


@contextlib.contextmanager
def _unix_socket(path: Path) -> Iterator[None]:
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        yield
    finally:
        server.close()


def _odd_paths(module: ModuleType, directory: Path) -> dict[str, Path]:
    """One path of each kind that is not an existing regular file, and the queue file."""
    queue = directory / "queue.db"
    _seeded(module, queue)
    paths = {
        "missing file": directory / "missing.db",
        "directory": directory / "a-directory",
        "FIFO": directory / "fifo",
        "Unix socket": directory / "socket",
        "dangling symlink": directory / "dangling",
        "symlink to a directory": directory / "link-to-directory",
    }
    paths["directory"].mkdir()
    os.mkfifo(paths["FIFO"])
    paths["dangling symlink"].symlink_to(directory / "never-created.db")
    paths["symlink to a directory"].symlink_to(paths["directory"])
    return paths


def path_cases(module: ModuleType, directory: Path) -> list[Record]:
    """run_file and open_queue on every kind of path."""
    paths = _odd_paths(module, directory)
    with _unix_socket(paths["Unix socket"]):
        records = [_run_file_refuses(module, kind, path, directory) for kind, path in paths.items()]
        records += [_open_fails_closed(module, kind, paths[kind]) for kind in _UNOPENABLE]
    records += _symlink_cases(module, directory)
    records += _content_cases(module, directory)
    records.append(_run_file_opens_a_wal_file(module, directory / "wal.db"))
    records.append(_open_creates(module, directory / "new" / "queue.db"))
    records += [_memory_refused(module, name) for name in (":memory:", "")]
    return records


_UNOPENABLE = ("directory", "FIFO", "Unix socket", "symlink to a directory")


def _listing(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def _run_file_refuses(module: ModuleType, kind: str, path: Path, directory: Path) -> Record:
    """The spec: path "must be an existing regular file, else FileNotFoundError"."""
    sent: list[object] = []
    before, listing = _fds(), _listing(directory)
    try:
        module.run_file(str(path), "w1", _clock(10, 11), sent.append, 1)
    except FileNotFoundError:
        problem = None
    except Exception as error:
        problem = f"raised {type(error).__name__}: {error} instead of FileNotFoundError"
    else:
        problem = "returned instead of raising FileNotFoundError"
    problem = problem or _leak(before, f"run_file({kind})")
    if problem is None and _listing(directory) != listing:
        problem = f"created {sorted(set(_listing(directory)) - set(listing))}; never create"
    if problem is None and sent:
        problem = "called send"
    return _record(f"run_file on a {kind}", problem and f"run_file on a {kind}: {problem}")


def _open_fails_closed(module: ModuleType, kind: str, path: Path) -> Record:
    """open_queue on a path SQLite cannot open: any error, its connection closed."""
    before = _fds()
    try:
        con = module.open_queue(str(path))
    except Exception:
        problem = _leak(before, f"open_queue({kind}) failing (while its error was held)")
    else:
        con.close()
        problem = f"open_queue on a {kind} returned a connection instead of raising"
    return _record(f"open_queue on a {kind}", problem)


def _symlink_cases(module: ModuleType, directory: Path) -> list[Record]:
    """A symlink to a queue file: the spec does not say whether it counts as a regular file
    (os.path.isfile follows it), so run_file may refuse it or run the job; either way the
    link stays a link and the queue file keeps its rows."""
    queue = directory / "linked.db"
    _seeded(module, queue)
    link = directory / "link-to-queue"
    link.symlink_to(queue)
    before = _fds()
    try:
        result = module.run_file(str(link), "w1", _clock(10, 11), _ok, 1)
    except FileNotFoundError:
        result = "refused"
    except Exception as error:
        result = f"raised {type(error).__name__}: {error}"
    problem = _leak(before, "run_file(symlink)")
    if result not in ("refused", {"id": "j1", "token": 1, "status": "done"}):
        problem = f"run_file on a symlink to a queue file {result!r}"
    if not link.is_symlink():
        problem = "run_file replaced the symlink with a file"
    return [_record("run_file on a symlink to a queue file", problem)]


def _content_cases(module: ModuleType, directory: Path) -> list[Record]:
    """A corrupt (non-SQLite) file and an empty file, through open_queue and run_file."""
    records = []
    junk = b"this is a text file, not an SQLite database\n" * 100
    for function in ("open_queue", "run_file"):
        path = directory / f"corrupt-{function}.db"
        path.write_bytes(junk)
        before = _fds()
        try:
            _call(module, function, path)
        except Exception:
            problem = _leak(before, f"{function}(corrupt file) failing (error still held)")
        else:
            problem = f"{function} on a non-SQLite file returned instead of raising"
        if path.read_bytes() != junk:
            problem = f"{function} changed a non-SQLite file; it must never touch it"
        records.append(_record(f"{function} on a corrupt file", problem))
        records.append(_empty_case(module, function, directory / f"empty-{function}.db"))
    return records


def _call(module: ModuleType, function: str, path: Path) -> object:
    if function == "open_queue":
        module.open_queue(str(path)).close()
        return None
    return module.run_file(str(path), "w1", _clock(10, 11), _ok, 1)


def _empty_case(module: ModuleType, function: str, path: Path) -> Record:
    """An empty file is an existing regular file and an empty SQLite database: open_queue
    creates both tables in it; run_file may do the same (finding no job) or refuse it."""
    path.write_bytes(b"")
    before = _fds()
    try:
        result = _call(module, function, path)
    except Exception as error:
        result = error
    problem = _leak(before, f"{function}(empty file)")
    if function == "open_queue" and result is not None:
        problem = f"open_queue on an empty file raised {result!r}; it creates both tables"
    elif result is None and _tables(path) != {"jobs", "redrives"}:
        problem = f"{function} on an empty file left the tables {sorted(_tables(path))}"
    elif result is not None and path.stat().st_size:
        problem = f"run_file on an empty file raised {result!r} after changing the file"
    return _record(f"{function} on an empty file", problem)


def _run_file_opens_a_wal_file(module: ModuleType, path: Path) -> Record:
    """run_file "Opens with `open_queue`", which sets "`journal_mode=DELETE`": a queue file
    that another program left in WAL mode is in rollback-journal mode after run_file
    (bytes 18-19 of the file's header 1, 1), as it is after open_queue. A run_file that
    connects on its own leaves it in WAL mode."""
    case = "run_file on a queue file left in WAL mode"
    _seeded(module, path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        mode = con.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    finally:
        con.close()
    if mode != "wal":
        return _record(case, None)  # this file system cannot hold a WAL file: nothing to see
    try:
        module.run_file(str(path), "w1", _clock(10, 11), _ok, 1)
    except Exception as error:
        return _record(case, f"run_file raised {error!r} on a queue file in WAL mode")
    if path.read_bytes()[18:20] == WAL_HEADER:
        return _record(
            case, "run_file left the file in WAL mode: run_file opens with open_queue, whose "
            "journal_mode=DELETE takes any file it opens, an existing one too, out of WAL mode",
        )  # fmt: skip
    return _record(case, None)


def _open_creates(module: ModuleType, path: Path) -> Record:
    """open_queue on a missing file in an existing directory creates the queue."""
    path.parent.mkdir()
    try:
        module.open_queue(str(path)).close()
    except Exception as error:
        return _record("open_queue on a missing file", f"open_queue raised {error!r}")
    tables = _tables(path)
    problem = None if tables == {"jobs", "redrives"} else f"it created the tables {tables}"
    return _record("open_queue on a missing file", problem)


def _memory_refused(module: ModuleType, name: str) -> Record:
    """The spec: "A real file, not :memory:" (an in-memory connection is wrong)."""
    try:
        con = module.open_queue(name)
    except Exception:
        return _record(f"open_queue({name!r})", None)
    try:
        files = [row[2] for row in con.execute("PRAGMA database_list") if row[1] == "main"]
    finally:
        con.close()
    with contextlib.suppress(OSError):
        os.remove(name)
    real = bool(files and files[0])
    problem = None if real else f"open_queue({name!r}) opened an in-memory database"
    return _record(f"open_queue({name!r})", problem)


def read_only_cases(module: ModuleType, directory: Path) -> list[Record]:
    """A read-only queue file: open_queue may open it or raise; a write then fails with no
    transaction left open, no file left open and the file unchanged. A read-only empty
    file cannot get its tables: open_queue raises and closes its connection.

    Root ignores mode bits, so a child running as root drops to ``nobody`` first (after
    entering ``directory`` through an fd: its ancestors may be closed to others)."""
    queue, empty = directory / "read-only.db", directory / "read-only-empty.db"
    _seeded(module, queue)
    empty.write_bytes(b"")
    for path in (queue, empty):
        path.chmod(0o444)
    _drop_root(directory)
    queue, empty = Path(queue.name), Path(empty.name)
    before_bytes = queue.read_bytes()
    records = []
    before = _fds()
    try:
        con = module.open_queue(str(queue))
    except Exception:
        records.append(_record("open_queue on a read-only queue", _leak(before, "open_queue")))
    else:
        with contextlib.suppress(Exception):
            module.claim(con, "w1", CLOCK_START)
        records.append(_record("claim on a read-only queue", _connection_kept(con, "claim")))
        con.close()
    try:
        module.run_file(str(queue), "w1", _clock(CLOCK_START, CLOCK_START + 1), _ok, 1)
    except Exception:
        problem = _leak(before, "run_file(read-only queue) failing (error still held)")
    else:
        problem = "run_file on a read-only queue returned; its claim cannot be written"
    records.append(_record("run_file on a read-only queue", problem))
    if queue.read_bytes() != before_bytes:
        records.append(_record("read-only queue unchanged", "the read-only file changed"))
    records.append(_open_fails_closed(module, "read-only empty file", empty))
    return records


def _drop_root(directory: Path) -> None:
    """As root: become ``nobody`` with ``directory`` as the working directory."""
    if os.geteuid() != 0:
        os.chdir(directory)
        return
    directory.chmod(0o755)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        os.fchdir(fd)
    finally:
        os.close(fd)


NOBODY = 65534


# --- send's contract ------------------------------------------------------------------------


def callback_cases(module: ModuleType, directory: Path) -> list[Record]:
    """run_once calls send outside any transaction and finishes with claim's ticket."""
    cases: list[tuple[str, Callable[[Path], Callable[[dict[str, Any]], object]], str]] = [
        ("send writes the job's row", lambda p: _writer(p, "reason = reason"), "done"),
        ("send bumps the job's token", lambda p: _writer(p, "token = token + 5"), "stale"),
        ("send changes its dict", lambda p: _scribbler, "done"),
        ("send raises a Retryable subclass", lambda p: _raiser(module.Retryable), "pending"),
        ("send raises a Permanent subclass", lambda p: _raiser(module.Permanent), "dead"),
    ]
    return [
        *(_callback(module, directory / f"callback-{n}.db", *case) for n, case in enumerate(cases)),
        _clock_after_send(module, directory / "clock-after-send.db"),
        *(
            _send_answer(module, directory / f"answer-{n}.db", answer)
            for n, answer in enumerate(SEND_ANSWERS)
        ),
        _falsy_hook(module, directory / "falsy-hook.db"),
        _hooks_see_their_changes(module, directory / "hooks-see.db"),
    ]


SEND_ANSWERS: tuple[object, ...] = (
    "ok", 1.0, "True", [True], ConnectionRefusedError("refused"), TimeoutError("timed out"),
    InjectedInterrupt("send interrupted"), KeyboardInterrupt(), SystemExit(3),
)  # fmt: skip
"""What a send may return or raise that is neither exactly ``True`` nor a Retryable or a
Permanent: run_once raises ``BadAck`` for a return value ("another return value → raise
BadAck") and lets an exception through, an ``OSError`` or one that is no ``Exception``
(Ctrl-C, ``sys.exit``) too ("Any other exception, and BadAck, propagate and leave the job
leased")."""


def _send_answer(module: ModuleType, path: Path, answer: object) -> Record:
    case = (
        f"send raises {answer!r}" if isinstance(answer, BaseException)
        else f"send returns {answer!r}"
    )  # fmt: skip
    _seeded(module, path)

    def send(_: dict[str, Any]) -> object:
        if isinstance(answer, BaseException):
            raise answer
        return answer

    wanted: type[BaseException] = (
        type(answer) if isinstance(answer, BaseException) else module.BadAck
    )
    con = module.open_queue(str(path))
    try:
        result: object = module.run_once(con, "w1", _clock(10, 11), send, 1)
    except BaseException as error:  # this child's own Ctrl-C and exit are send's, here
        result = error
    finally:
        con.close()
    problem = None
    if not isinstance(result, wanted):
        problem = f"run_once gave {result!r}; the spec's answer is to raise {wanted.__name__}"
    else:
        status = _status(path, "j1")
        if status != "leased":
            problem = f"run_once raised {wanted.__name__} but left the job {status}, not leased"
    return _record(case, problem and f"{case}: {problem}")


def _status(path: Path, job: str) -> str:
    con = sqlite3.connect(path, isolation_level=None)
    try:
        row = con.execute("SELECT status FROM jobs WHERE id = ?", (job,)).fetchone()
    finally:
        con.close()
    return "missing" if row is None else str(row[0])


def _clock_after_send(module: ModuleType, path: Path) -> Record:
    """run_once: "`t1 = clock()`; claim at t1 ... Else call `send(...)` once ... Then
    `t2 = clock()`": the second reading is taken after send returned (a slow delivery
    is finished at the time it ended, not at a time read before it)."""
    case = "the second clock reading comes after send"
    _seeded(module, path)
    order: list[str] = []
    readings = iter((10, 11))

    def clock() -> int:
        order.append("clock")
        return next(readings, 11)

    def send(_: dict[str, Any]) -> object:
        order.append("send")
        return True

    con = module.open_queue(str(path))
    try:
        module.run_once(con, "w1", clock, send, 1)
    except Exception as error:
        return _record(case, f"{case}: run_once raised {error!r} on a plain delivery")
    finally:
        con.close()
    sent = order.index("send") if "send" in order else -1
    ordered = order[:1] == ["clock"] and sent > 0 and "clock" in order[sent + 1 :]
    return _record(case, None if ordered else (
        f"{case}: run_once called clock and send in the order {order}; the spec's is "
        f"clock (t1), send, clock (t2)"
    ))  # fmt: skip


class _FalsyHook(list[str]):
    """A ``fault`` that records each point and is falsy while it has none (an empty list):
    "`fault` is `None` (never called) or a callable taking the point name"; ``if fault:``
    would skip it."""

    def __call__(self, point: str) -> None:
        self.append(point)


def _falsy_hook(module: ModuleType, path: Path) -> Record:
    case = "a falsy fault callable is called"
    _seeded(module, path)
    con = module.open_queue(str(path))
    seen: dict[str, list[str]] = {}
    try:
        seen["claim"] = hook = _FalsyHook()
        ticket = module.claim(con, "w1", 10, 1000, hook)
        seen["finish"] = hook = _FalsyHook()
        module.finish(con, ticket, "permanent", 11, 0, hook)
        seen["redrive"] = hook = _FalsyHook()
        module.redrive(con, "j1", 12, 1000, "n1", hook)
    except Exception as error:
        return _record(case, f"{case}: {error!r} with a falsy fault callable")
    finally:
        con.close()
    wanted = {
        "claim": ["after-claim", "after-commit"], "finish": ["after-finish", "after-commit"],
        "redrive": ["after-audit", "after-redrive", "after-commit"],
    }  # fmt: skip
    wrong = [f"{call} called it at {seen[call]}, not {points}" for call, points in wanted.items()
             if seen.get(call) != points]  # fmt: skip
    return _record(case, (
        f"{case}: a fault that is an empty list with __call__ (falsy, but callable): "
        f"{'; '.join(wrong)}. lease-worker.md: fault is None (never called) or a callable"
    ) if wrong else None)  # fmt: skip


class _LookingHook:
    """A ``fault`` that, at each point, reads every job's status and the number of audit
    rows through the connection the call was given (inside its transaction)."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.seen: list[tuple[str, dict[str, str], int]] = []

    def __call__(self, point: str) -> None:
        rows = self.con.execute("SELECT id, status FROM jobs ORDER BY seq").fetchall()
        audits = self.con.execute("SELECT count(*) FROM redrives").fetchone()[0]
        self.seen.append((point, {str(job): str(status) for job, status in rows}, audits))


def _hooks_see_their_changes(module: ModuleType, path: Path) -> Record:
    """Each hook sees the changes the spec makes before it, in the call's own transaction:
    claim's ``after-claim`` the quarantine ("1. quarantine ... 3. ...; fault('after-claim')")
    and the lease; finish's ``after-finish`` the new status; redrive "in this order: insert
    ... into redrives; fault('after-audit'); set pending ...; fault('after-redrive')"."""
    case = "each hook sees the changes made before it"
    con = module.open_queue(str(path))
    try:
        module.enqueue(con, {"id": "j1", "qty": 7}, 0, 50)  # its deadline passes at 50
        module.enqueue(con, {"id": "j2", "qty": 7}, 0, 60000)
        claim, finish, redrive = _LookingHook(con), _LookingHook(con), _LookingHook(con)
        ticket = module.claim(con, "w1", 100, 1000, claim)
        module.finish(con, ticket, "permanent", 101, 0, finish)
        module.redrive(con, "j2", 102, 1000, "n1", redrive)
    except Exception as error:
        return _record(case, f"{case}: {error!r} with a fault that reads the queue")
    finally:
        con.close()
    leased, dead, pending = (
        {"j1": "dead", "j2": status} for status in ("leased", "dead", "pending")
    )  # fmt: skip
    wanted = {
        "claim (j1's deadline passed, j2 claimable)": (
            claim.seen, [("after-claim", leased, 0), ("after-commit", leased, 0)]),
        "finish(j2, 'permanent')": (
            finish.seen, [("after-finish", dead, 0), ("after-commit", dead, 0)]),
        "redrive('j2')": (redrive.seen, [
            ("after-audit", dead, 1), ("after-redrive", pending, 1), ("after-commit", pending, 1),
        ]),
    }  # fmt: skip
    wrong = [_first_difference(call, seen, points)
             for call, (seen, points) in wanted.items() if seen != points]  # fmt: skip
    return _record(case, (
        f"{case}: each hook read every job's status and the audit rows through the call's "
        f"connection; {'; '.join(wrong)}"
    ) if wrong else None)  # fmt: skip


def _first_difference(
    call: str, seen: list[tuple[str, dict[str, str], int]],
    wanted: list[tuple[str, dict[str, str], int]],
) -> str:  # fmt: skip
    """Where a call's hooks first saw something else than the spec's order gives."""
    for (point, statuses, audits), (_, want, want_audits) in zip(seen, wanted, strict=False):
        if (statuses, audits) != (want, want_audits):
            return (
                f"{call}: at {point!r} the hook saw {statuses} and {audits} audit row(s); the "
                f"spec's order gives {want} and {want_audits}"
            )
    points = [point for point, _, _ in seen]
    return f"{call}: the hooks were called at {points}, not at {[p for p, _, _ in wanted]}"


def _callback(
    module: ModuleType,
    path: Path,
    case: str,
    make_send: Callable[[Path], Callable[[dict[str, Any]], object]],
    status: str,
) -> Record:
    _seeded(module, path)
    con = module.open_queue(str(path))
    send = make_send(path)
    try:
        result = module.run_once(con, "w1", _clock(10, 11), send, 1)
    except Exception as error:
        result = error
    finally:
        con.close()
    expected = {"id": "j1", "token": 1, "status": status}
    problem = getattr(send, "problem", None)
    if problem is None and result != expected:
        problem = f"run_once returned {result!r}; the spec's result is {expected!r}"
    return _record(case, problem and f"{case}: {problem}")


class _Writer:
    """A send that writes the claimed job's row through a connection of its own, with no
    busy wait: it fails at once if run_once still holds a transaction."""

    def __init__(self, path: Path, assignment: str) -> None:
        self.path, self.assignment = path, assignment
        self.problem: str | None = None

    def __call__(self, event: dict[str, Any]) -> object:
        own = sqlite3.connect(self.path, isolation_level=None, timeout=0)
        try:
            own.execute("BEGIN IMMEDIATE")
            own.execute(f"UPDATE jobs SET {self.assignment} WHERE id = ?", (event["id"],))
            own.execute("COMMIT")
        except sqlite3.OperationalError as error:
            self.problem = (
                f"send's own connection could not write the job's row ({error}): run_once "
                f"called send inside a transaction; the spec says outside any transaction"
            )
        finally:
            own.close()
        return True


def _writer(path: Path, assignment: str) -> _Writer:
    return _Writer(path, assignment)


def _scribbler(event: dict[str, Any]) -> object:
    event["id"], event["qty"] = "someone-else", 999
    return True


def _raiser(base: type[Exception]) -> Callable[[dict[str, Any]], object]:
    subclass = type(f"Custom{base.__name__}", (base,), {})

    def send(_: dict[str, Any]) -> object:
        raise subclass("a subclass: run_once must match it with isinstance")

    return send
