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

from adapters.registry import load_library
from leasecheck.runner import HOLDS, NOT_PROMISED, CheckOptions, run_check


def _orphaned_servers() -> set[int]:
    """Server processes nobody owns any more (their parent is init): what a run that
    forgot to stop its server leaves. Servers of tests running alongside have a parent."""
    names = ("redis-server", "postgres")
    return {
        p.pid for p in psutil.process_iter(["name", "ppid"])
        if p.info["name"] in names and p.info["ppid"] == 1
    }  # fmt: skip


@pytest.mark.parametrize("name", ["rq", "pgqueuer"])
def test_a_server_library_gets_the_generic_properties_on_its_own_server(name: str) -> None:
    before = _orphaned_servers()
    result = run_check(CheckOptions(adapter=name, profile="quick", workers="0"))
    library = load_library(name)
    assert result.exit_code == 0, {n: p.verdict for n, p in result.properties.items()}
    for prop, outcome in result.properties.items():
        promised = library.promises.of(prop).promised
        assert outcome.verdict in ((HOLDS,) if promised else (HOLDS, NOT_PROMISED)), prop
    assert _orphaned_servers() <= before, "the run left its server running"
