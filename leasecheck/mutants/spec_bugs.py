"""Planted bugs written from the spec-coverage table (docs/spec-coverage.md).

One mutant per sentence of lease-worker.md or job-queue.md that no earlier mutant
broke alone: the configuration and resource sentences of ``open_queue``/``run_file``,
``send``'s side of ``run_once``, exact types, both ends of every range, and the
JobQueue's scope. Each is a small edit of a bundled file, breaks that sentence and
nothing the spec leaves open, and names the property that kills it.
"""

from __future__ import annotations

from ._catalogue import Mutant

__all__ = ["MUTANTS"]

_CONNECT = "con = sqlite3.connect(path, isolation_level=None, timeout=1)"
_CREATE = (
    "        with _transaction(con):\n"
    "            con.execute(JOBS_TABLE)\n"
    "            con.execute(REDRIVES_TABLE)\n"
)
_DELIVER_EXCEPT = (
    "    except Retryable:\n"
    '        return "retry", retry_delay(ticket["attempt"], 100, 1000, jitter)\n'
    "    except Permanent:\n"
    '        return "permanent", 0\n'
)


def _config(name: str, bug_class: str, real_world: str, *edits: tuple[str, str]) -> Mutant:
    return Mutant(name, "worker", bug_class, real_world, "lease.configuration", tuple(edits))


CONFIGURATION: tuple[Mutant, ...] = (
    _config(
        "journal-wal",
        "open_queue switches the file to journal_mode=WAL (the spec says DELETE)",
        "'use WAL for concurrency' applied to a queue whose readers open the file with "
        "tools that expect a rollback journal",
        (
            '        con.execute("PRAGMA journal_mode=DELETE")\n',
            '        con.execute("PRAGMA journal_mode=WAL")\n',
        ),
    ),
    _config(
        "synchronous-normal",
        "open_queue sets synchronous=NORMAL (the spec says FULL)",
        "a speed tip applied to every SQLite connection of a service",
        (
            '        con.execute("PRAGMA synchronous=FULL")\n',
            '        con.execute("PRAGMA synchronous=NORMAL")\n',
        ),
    ),
    _config(
        "busy-timeout-zero",
        "open_queue connects with timeout=0: a writer blocked by another process fails at once",
        "a worker that crashes with 'database is locked' whenever a second worker commits",
        (_CONNECT, "con = sqlite3.connect(path, isolation_level=None, timeout=0)"),
    ),
    _config(
        "busy-timeout-five",
        "open_queue connects with timeout=5: a blocked writer hangs five seconds, not one",
        "Python's default-looking timeout=5.0 copied from the sqlite3 documentation",
        (_CONNECT, "con = sqlite3.connect(path, isolation_level=None, timeout=5)"),
    ),
    _config(
        "implicit-transactions",
        "open_queue keeps sqlite3's default isolation_level, so Python opens transactions itself",
        "a connection made with sqlite3.connect(path) and legacy implicit BEGINs",
        (_CONNECT, "con = sqlite3.connect(path, timeout=1)"),
    ),
    _config(
        "schema-two-transactions",
        "open_queue creates the two tables in autocommit mode, one transaction each",
        "a migration script that runs its CREATE statements one by one, so a crash between "
        "them leaves half a schema",
        (_CREATE, "        con.execute(JOBS_TABLE)\n        con.execute(REDRIVES_TABLE)\n"),
    ),
    _config(
        "schema-without-unique-id",
        "the jobs table is created without UNIQUE on id (the spec's statement has it)",
        "a hand-written schema that drops a constraint the code 'already checks'",
        (
            "  id TEXT NOT NULL UNIQUE, qty INTEGER NOT NULL,",
            "  id TEXT NOT NULL, qty INTEGER NOT NULL,",
        ),
    ),
    _config(
        "open-queue-leaks-connection",
        "open_queue does not close its connection when initialisation fails",
        "a constructor that opens a handle and raises without releasing it (fd exhaustion)",
        (
            "    except BaseException:\n        con.close()\n        raise\n    return con",
            "    except BaseException:\n        raise\n    return con",
        ),
    ),
    _config(
        "run-file-leaks-on-failure",
        "run_file closes its connection only when run_once succeeds",
        "a close() written after the call instead of in finally",
        (
            "        return run_once(con, owner, clock, send, jitter, lease_ms)\n"
            "    finally:\n        con.close()",
            "        result = run_once(con, owner, clock, send, jitter, lease_ms)\n"
            "    except BaseException:\n        raise\n    con.close()\n    return result",
        ),
    ),
    _config(
        "run-file-leaks-on-success",
        "run_file closes its connection only when run_once fails",
        "cleanup written in an except block, so the happy path keeps every handle",
        (
            "    finally:\n        con.close()",
            "    except BaseException:\n        con.close()\n        raise",
        ),
    ),
    _config(
        "run-file-accepts-fifo",
        "run_file checks that the path exists, not that it is a regular file",
        "os.path.exists used where os.path.isfile was meant: a FIFO or socket is opened",
        ("or not os.path.isfile(path):", "or not os.path.exists(path):"),
    ),
    _config(
        "open-queue-accepts-memory",
        "open_queue accepts ':memory:', a queue that vanishes with its connection",
        "a test-only in-memory database path that reaches production configuration",
        ('os.fspath(path) in ("", ":memory:")', 'os.fspath(path) in ("",)'),
    ),
    _config(
        "retryable-exact-type",
        "run_once recognises Retryable only by exact type, so a subclass propagates",
        "type(error) is RetryableError instead of isinstance, breaking client subclasses",
        (
            _DELIVER_EXCEPT,
            "    except Exception as error:\n"
            "        if type(error) is Retryable:\n"
            '            return "retry", retry_delay(ticket["attempt"], 100, 1000, jitter)\n'
            "        if isinstance(error, Permanent):\n"
            '            return "permanent", 0\n'
            "        raise\n",
        ),
    ),
    _config(
        "permanent-exact-type",
        "run_once recognises Permanent only by exact type, so a subclass propagates",
        "an error table keyed by exception class, missing the subclasses a client raises",
        (
            _DELIVER_EXCEPT,
            "    except Exception as error:\n"
            "        if isinstance(error, Retryable):\n"
            '            return "retry", retry_delay(ticket["attempt"], 100, 1000, jitter)\n'
            "        if type(error) is Permanent:\n"
            '            return "permanent", 0\n'
            "        raise\n",
        ),
    ),
    _config(
        "finish-with-refreshed-token",
        "run_once finishes with the token read back from the DB after send, not claim's ticket",
        "a worker that refreshes its lease marker before acking, so it acks a stolen job",
        (
            "    status = finish(con, ticket, outcome, t2, delay_ms)",
            "    (token,) = con.execute(\n"
            '        "SELECT token FROM jobs WHERE id = ?", (ticket["id"],)\n'
            "    ).fetchone()\n"
            '    status = finish(con, {**ticket, "token": token}, outcome, t2, delay_ms)',
        ),
    ),
)

MUTANTS: tuple[Mutant, ...] = CONFIGURATION
