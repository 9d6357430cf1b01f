"""``leasecheck check --adapter NAME`` on a server-backed library: the five generic
properties, on a server leasecheck starts for the run and stops at its end.

rq (Redis, a patched clock) and pgqueuer (PostgreSQL, the server's real ``NOW()`` and a
lease that is the claimer's threshold, ``one_lease``) cover both kinds of server and
both kinds of clock. Neither library may break a property it promises, and no server
process may outlive the run.
"""

from __future__ import annotations

import psutil
import pytest

from leasecheck.adapters.protocol import QueueLibrary
from leasecheck.adapters.registry import load_library
from leasecheck.runner import HOLDS, NOT_CHECKED, NOT_PROMISED, VIOLATED, CheckOptions, run_check


def _orphaned_servers() -> set[int]:
    """Server processes nobody owns any more (their parent is init): what a run that
    forgot to stop its server leaves. Servers of tests running alongside have a parent."""
    names = ("redis-server", "postgres")
    return {
        p.pid for p in psutil.process_iter(["name", "ppid"])
        if p.info["name"] in names and p.info["ppid"] == 1
    }  # fmt: skip


# What leasecheck found (docs/findings.md, "Scheduling points inside server libraries"):
# rq's recovery sweep re-queues a job acknowledged while it ran, in the same schedule on
# every run (queue.interleavings, scenario sweep-ack, queue.ack-final).
FINDINGS: dict[str, dict[str, tuple[str, ...]]] = {"rq": {"queue.interleavings": (VIOLATED,)}}


@pytest.mark.parametrize("name", ["rq", "pgqueuer"])
def test_a_server_library_gets_the_generic_properties_on_its_own_server(name: str) -> None:
    before = _orphaned_servers()
    result = run_check(CheckOptions(adapter=name, profile="quick", workers="0"))
    library = load_library(name)
    verdicts = {n: p.verdict for n, p in result.properties.items()}
    found = FINDINGS.get(name, {})
    for prop, verdict in verdicts.items():
        assert verdict in found.get(prop, _allowed(library, prop)), (prop, verdicts)
    broken = 1 if VIOLATED in verdicts.values() else 0
    assert result.exit_code == (2 if NOT_CHECKED in verdicts.values() else broken), verdicts
    assert _orphaned_servers() <= before, "the run left its server running"


def _allowed(library: QueueLibrary, prop: str) -> tuple[str, ...]:
    """What ``prop`` may read on a library that keeps its promises: holds where promised;
    two leases reached through a stale call are judged by ``queue.stale-ack``'s promise
    too; and on real time a machine property whose programs were mostly cut short by a
    loaded machine reads "not checked", never "holds"."""
    promised = library.promises.of(prop).promised
    if prop == "queue.exclusive":
        promised = promised and library.promises.of("queue.stale-ack").promised
    allowed = (HOLDS,) if promised else (HOLDS, NOT_PROMISED)
    machine = prop in ("queue.no-loss", "queue.stale-ack")
    return (*allowed, NOT_CHECKED) if machine and library.capabilities.real_time else allowed
