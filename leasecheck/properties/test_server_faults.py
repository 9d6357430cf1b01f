"""Server faults: a crashed server, a frozen worker, a skewed clock (``server_faults``).

Each property runs against every library of ``LEASECHECK_SERVER_ADAPTERS`` (default:
pgqueuer, procrastinate, rq, saq) on real PostgreSQL and Redis servers. They are marked
``servers`` and run only with ``--servers`` or ``LEASECHECK_SERVERS=1``, so the default
``leasecheck check`` stays fast and needs no server. A failure is VIOLATED where the
library promises the property (``Promises``), and "not promised" (an xfail carrying the
counterexample) where it does not.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.protocol import QueueLibrary
from adapters.servers import Server
from crash_harness.server_faults import (
    CLOCK_SKEW,
    SERVER_CRASH,
    ZOMBIE_PAUSE,
    FaultResult,
    run_fault,
)
from leasecheck.profiles import Profile

pytestmark = pytest.mark.servers
pytest_plugins = ["leasecheck.properties._server_fixtures"]
"""The fixtures ``server_library`` and ``library_server``, registered for this module's
tests only by name, so they never clash with another plugin's fixtures."""


def replay_command(request: pytest.FixtureRequest, profile: Profile, seed: int) -> str:
    """The one command that runs this property again on this library, profile and seed."""
    library = request.node.callspec.params["server_library"]
    test = request.node.originalname
    return (
        f"LEASECHECK_SERVER_ADAPTERS={library} pytest leasecheck/properties/"
        f"test_server_faults.py --leasecheck-servers -k {test} "
        f"--leasecheck-profile {profile.name} "
        f"--leasecheck-seed {seed}"
    )


def judge(result: FaultResult, checked: Any, replay: str) -> None:
    """Pass, fail (promised) or xfail (not promised), with the counterexample as the reason."""
    checked(f"{result.library}: {result.checked or 'a counterexample'}")
    if result.holds:
        return
    report = f"{result.report()}\n  replay: {replay}"
    if result.promise.promised:
        pytest.fail(report, pytrace=False)
    pytest.xfail(report)


@pytest.mark.leasecheck(SERVER_CRASH)
def test_server_crash(
    server_library: QueueLibrary, library_server: Server, lc_profile: Profile, lc_seed: int,
    checked: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """SIGKILL of the server, restart on the same data: acknowledged work survives."""
    result = run_fault(SERVER_CRASH, server_library, library_server, lc_profile.name, lc_seed)
    judge(result, checked, replay_command(request, lc_profile, lc_seed))


@pytest.mark.leasecheck(ZOMBIE_PAUSE)
def test_zombie_pause(
    server_library: QueueLibrary, library_server: Server, lc_profile: Profile, lc_seed: int,
    checked: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """A worker SIGSTOPped past its lease, then resumed: its stale ack changes nothing."""
    result = run_fault(ZOMBIE_PAUSE, server_library, library_server, lc_profile.name, lc_seed)
    judge(result, checked, replay_command(request, lc_profile, lc_seed))


@pytest.mark.leasecheck(CLOCK_SKEW)
def test_clock_skew(
    server_library: QueueLibrary, library_server: Server, lc_profile: Profile, lc_seed: int,
    checked: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """A worker whose clock runs ahead never takes a job whose lease is live."""
    result = run_fault(CLOCK_SKEW, server_library, library_server, lc_profile.name, lc_seed)
    judge(result, checked, replay_command(request, lc_profile, lc_seed))
