"""Server faults: a crashed server, a frozen worker, a skewed clock, a frozen server
(``server_faults``).

Each property runs against the library of ``leasecheck check --adapter NAME|PATH
--servers`` (else, as an alias, every library of ``LEASECHECK_SERVER_ADAPTERS``;
default: pgqueuer, procrastinate, rq, saq) on real PostgreSQL and Redis servers. They
are marked ``servers`` and run only with ``--servers`` or ``LEASECHECK_SERVERS=1``, so
the default ``leasecheck check`` stays fast and needs no server. A failure is judged by
``leasecheck.promises.judge``, the one judge of every ``queue.*`` property: VIOLATED
where the library promises the property (``PROMISE_OF``), "not promised" (an xfail
carrying the counterexample) where it does not, and a failure either way with
``--strict``.
"""

from __future__ import annotations

from typing import Any

import pytest

from leasecheck.adapters.protocol import QueueLibrary
from leasecheck.adapters.servers import Server
from leasecheck.crash_harness.server_faults import (
    CLOCK_SKEW,
    SERVER_CRASH,
    SERVER_PAUSE,
    ZOMBIE_PAUSE,
    FaultNotRun,
    run_fault,
)
from leasecheck.models.evidence import attach
from leasecheck.plugin import NotChecked, property_name
from leasecheck.profiles import Profile
from leasecheck.promises import judge

pytestmark = pytest.mark.servers
pytest_plugins = ["leasecheck.properties._server_fixtures"]
"""The fixtures ``server_library`` and ``library_server``, registered for this module's
tests only by name, so they never clash with another plugin's fixtures."""


def _spec(request: pytest.FixtureRequest) -> str:
    """What selected the library (``--adapter``'s value or an alias entry)."""
    spec: str = request.node.callspec.params["server_library"]
    return spec


def replay_command(request: pytest.FixtureRequest, profile: Profile, seed: int) -> str:
    """The one command that runs this property again on this library, profile and seed."""
    spec, prop = _spec(request), property_name(request.node)
    if request.config.getoption("--leasecheck-adapter"):
        return (
            f"leasecheck check --adapter {spec} --servers --property {prop} "
            f"--profile {profile.name} --seed {seed}"
        )
    return (
        f"LEASECHECK_SERVER_ADAPTERS={spec} pytest leasecheck/properties/"
        f"test_server_faults.py --leasecheck-servers -k {request.node.originalname} "
        f"--leasecheck-profile {profile.name} --leasecheck-seed {seed}"
    )


def _fault(fault: str, library: QueueLibrary, server: Server, profile: Profile, seed: int,
           checked: Any, request: pytest.FixtureRequest) -> None:  # fmt: skip
    """Run ``fault``; a failure is judged by the one judge (``leasecheck.promises``), by the
    library's promise of ``PROMISE_OF[fault]`` (for a paused server, of the property its
    run broke: ``FaultResult.judged_by``), so ``--strict`` applies here as well. A
    run the harness could not carry through is "not checked" (exit 2), never a verdict."""
    not_checked: NotChecked = request.getfixturevalue("not_checked")
    try:
        result = run_fault(fault, library, server, profile.name, seed, _spec(request))
    except FaultNotRun as stopped:
        not_checked(str(stopped), f"rerun it alone: {replay_command(request, profile, seed)}")
    if result.unexercised:
        not_checked(f"{result.library}: {result.unexercised}",
                    "run the fault again; check that recover or claim returns a job whose "
                    "lease ran out (docs/writing-an-adapter.md, The verbs)")  # fmt: skip
    checked(f"{result.library}: {result.checked or 'a counterexample'}")
    if result.holds:
        return
    failure = AssertionError(
        f"{result.report()}\n  replay: {replay_command(request, profile, seed)}"
    )
    if result.evidence is not None:
        attach(failure, result.evidence)
    strict = bool(request.config.getoption("--leasecheck-strict-promises"))
    with judge(library, result.judged_by, strict):
        raise failure


@pytest.mark.leasecheck(SERVER_CRASH)
def test_server_crash(
    server_library: QueueLibrary, library_server: Server, lc_profile: Profile, lc_seed: int,
    checked: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """SIGKILL of the server, restart on the same data: acknowledged work survives."""
    _fault(SERVER_CRASH, server_library, library_server, lc_profile, lc_seed, checked, request)


@pytest.mark.leasecheck(ZOMBIE_PAUSE)
def test_zombie_pause(
    server_library: QueueLibrary, library_server: Server, lc_profile: Profile, lc_seed: int,
    checked: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """A worker SIGSTOPped past its lease, then resumed: its stale ack changes nothing."""
    _fault(ZOMBIE_PAUSE, server_library, library_server, lc_profile, lc_seed, checked, request)


@pytest.mark.leasecheck(CLOCK_SKEW)
def test_clock_skew(
    server_library: QueueLibrary, library_server: Server, lc_profile: Profile, lc_seed: int,
    checked: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """A worker whose clock runs ahead never takes a job whose lease is live."""
    _fault(CLOCK_SKEW, server_library, library_server, lc_profile, lc_seed, checked, request)


@pytest.mark.leasecheck(SERVER_PAUSE)
def test_server_pause(
    server_library: QueueLibrary, library_server: Server, lc_profile: Profile, lc_seed: int,
    checked: Any, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """The server SIGSTOPped while a worker acks, past the lease, then resumed: the ack says
    what happened (accepted: never delivered again; refused: delivered again)."""
    _fault(SERVER_PAUSE, server_library, library_server, lc_profile, lc_seed, checked, request)
