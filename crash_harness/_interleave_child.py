"""The child side of ``crash_harness.interleavings``: one process's calls, paused at every
SQL statement and every fault hook.

A child opens the target's connection (``open_queue``) before anything is scheduled,
says it is ready, and then runs its calls one by one. ``sqlite3.connect`` is wrapped in
the child, so a connection the target opens itself (``run_file``) reports its
statements too. Each statement is reported through ``set_trace_callback`` just before
SQLite runs it (the callback fires at the statement's first step, before it asks for
any lock) and the child blocks until the engine answers; each ``fault`` hook blocks the
same way. Around each call it reports ``invoke`` and then the finished ``Operation``
(its outcome as data), without waiting.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from leasecheck.crash_harness.engine import Channel
from leasecheck.crash_harness.zygote import Task
from leasecheck.models._history import Operation
from leasecheck.models._linear_specs import BUSY, OPEN_TRANSACTION
from leasecheck.models.lease_ops import Held, LeaseOp, LeaseOutcome
from leasecheck.targets.lease_compare import error_kind

__all__ = ["HELD", "child_body", "trace_new_connections"]

HELD = Held()
"""A ``finish`` ticket argument meaning: the ticket this process's last claim returned."""


def _outcome(module: ModuleType, con: sqlite3.Connection, run: Callable[[], Any]) -> LeaseOutcome:
    try:
        value = run()
    except Exception as error:
        text = str(error).lower()
        busy = isinstance(error, sqlite3.OperationalError) and ("locked" in text or "busy" in text)
        kind = BUSY if busy else error_kind(error, module)
        outcome = LeaseOutcome(error=kind, detail=str(error))
    else:
        outcome = LeaseOutcome(value)
    if con.in_transaction:
        outcome = LeaseOutcome(error=OPEN_TRANSACTION, detail=f"after it {outcome.describe()}")
        con.set_trace_callback(None)
        con.execute("ROLLBACK")
    return outcome


def _trace_new_connections(
    channel: Channel, opened: list[sqlite3.Connection] | None = None
) -> list[bool]:
    """Wrap ``sqlite3.connect`` in this child: connections opened while the returned flag
    is set report every statement (the target's own ``open_queue`` in ``run_file``, a
    library's own connection); each connection is also appended to ``opened``, if given,
    so that one opened before the flag was set can be traced later."""
    tracing = [False]
    connect = sqlite3.connect

    def traced_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        con: sqlite3.Connection = connect(*args, **kwargs)
        if opened is not None:
            opened.append(con)
        if tracing[0]:
            con.set_trace_callback(channel.trace)
        return con

    sqlite3.connect = traced_connect  # type: ignore[assignment]  # the child only
    return tracing


trace_new_connections = _trace_new_connections


def _run_call(
    module: ModuleType, con: sqlite3.Connection, path: Path, channel: Channel,
    where: tuple[str, int], call: LeaseOp, held: list[dict[str, Any]],
) -> None:  # fmt: skip
    """Run one call, reporting ``invoke`` before and the ``Operation`` after it."""
    op = call.resolve(held)
    if op is None:
        return
    channel.send("invoke", where[1])
    outcome = _outcome(module, con, lambda: op.apply(module, con, channel.fault, path))
    con.set_trace_callback(channel.trace)
    if op.kind == "claim" and outcome.error is None and type(outcome.result) is dict:
        held.append(dict(outcome.result))
    channel.send("op", Operation(where[0], where[1], op, 0, 0, outcome))


def child_body(
    module: ModuleType, path: Path, name: str, calls: tuple[LeaseOp, ...]
) -> Callable[[Channel], str]:
    """The body the fork engine runs in process ``name``; a ``Task``, so the zygote forks
    it (a small process)."""
    return Task(_run_child, (module, path, name, calls))


def _run_child(
    module: ModuleType, path: Path, name: str, calls: tuple[LeaseOp, ...], channel: Channel
) -> str:
    tracing = _trace_new_connections(channel)
    con = module.open_queue(str(path))
    try:
        channel.ask("ready")
        tracing[0] = True
        con.set_trace_callback(channel.trace)
        held: list[dict[str, Any]] = []
        for index, call in enumerate(calls, 1):
            _run_call(module, con, path, channel, (name, index), call, held)
        tracing[0] = False
        con.set_trace_callback(None)
    finally:
        con.close()
    return name
