"""Fixtures for the server-backed properties: which libraries, and their running servers.

The library is the one ``--adapter NAME|PATH`` names (``leasecheck check --adapter NAME
--servers``), loaded by the one loader (``adapters.registry``), so a user's adapter file
gets the server faults too. Without ``--adapter`` they come from
``LEASECHECK_SERVER_ADAPTERS``, kept as an alias: a comma list of names from
``SERVER_ADAPTERS`` or ``module:Class`` specs (default: all four bundled ones). One
server of each kind is started per test module, only when a selected library needs it,
and each property makes its own store
on it (a database or a key prefix). A server binary or a library that is not installed
ends the run with exit 2 and the install command: never a silent skip.

Imported by name into the property module rather than put in a conftest, so these
fixtures never clash with fixtures of the same purpose elsewhere.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from leasecheck.adapters import servers
from leasecheck.adapters.protocol import AdapterError, QueueLibrary
from leasecheck.adapters.registry import PLANTED_PREFIX
from leasecheck.adapters.registry import load_library as load_adapter
from leasecheck.adapters.server_adapters import SERVER_ADAPTERS
from leasecheck.crash_harness._server_agent import load_library

__all__ = ["library_server", "selected_adapters", "server_library"]

ADAPTERS_ENV = "LEASECHECK_SERVER_ADAPTERS"


def selected_adapters() -> list[str]:
    """The library names ``LEASECHECK_SERVER_ADAPTERS`` asks for (default: all)."""
    raw = os.environ.get(ADAPTERS_ENV, "")
    names = [name.strip() for name in raw.split(",") if name.strip()] or list(SERVER_ADAPTERS)
    unknown = [name for name in names if name not in SERVER_ADAPTERS and ":" not in name]
    if unknown:
        raise pytest.UsageError(
            f"${ADAPTERS_ENV}={raw!r} names {unknown}; use a comma list of "
            f"{', '.join(SERVER_ADAPTERS)} or module:Class specs"
        )
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One run per library: the ``--adapter`` one, else ``LEASECHECK_SERVER_ADAPTERS``'."""
    if "server_library" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("--leasecheck-adapter")
        names = [str(chosen)] if chosen else selected_adapters()
        metafunc.parametrize("server_library", names, indirect=True, scope="module")


@pytest.fixture(scope="module")
def server_library(request: pytest.FixtureRequest) -> QueueLibrary:
    """One server-backed library, installed (else exit 2 with its pip command)."""
    spec: str = request.param
    try:
        if spec in SERVER_ADAPTERS or ":" not in spec or spec.startswith(PLANTED_PREFIX):
            library: QueueLibrary = load_adapter(spec)  # the one loader --adapter uses
        else:
            library = load_library(spec)  # module:Class, from LEASECHECK_SERVER_ADAPTERS
        library.version()
    except AdapterError as missing:
        pytest.exit(str(missing), returncode=2)
    if library.capabilities.server is None:
        pytest.skip(
            f"{library.name} keeps its queue on no server: the server faults apply to "
            f"libraries that declare Capabilities.server"
        )
    if isinstance(elsewhere := getattr(library, "server_faults_elsewhere", None), str):
        pytest.skip(f"{library.name} runs servers of its own, not the faults' one: {elsewhere}")
    return library


class _Servers:
    """At most one running server of each kind, started on first use."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self.stack, self.running = stack, dict[str, servers.Server]()

    def get(self, library: QueueLibrary) -> servers.Server:
        kind = library.capabilities.server
        assert kind is not None
        if kind not in self.running:
            start = servers.start_for(library.capabilities, durable=True)
            try:
                self.running[kind] = self.stack.enter_context(start)
            except servers.ServerMissing as missing:
                pytest.exit(str(missing), returncode=2)
            except servers.ServerError as error:  # leasecheck could not do its job
                pytest.exit(
                    f"the {kind} server the server faults need did not start, so nothing "
                    f"was checked: {error}",
                    returncode=2,
                )
        return self.running[kind]


@pytest.fixture(scope="module")
def _server_pool() -> Iterator[_Servers]:
    with contextlib.ExitStack() as stack:
        yield _Servers(stack)


@pytest.fixture
def library_server(server_library: QueueLibrary, _server_pool: _Servers) -> servers.Server:
    """The running server ``server_library`` needs (Redis with AOF and fsync at every write)."""
    kind = server_library.capabilities.server
    if kind is None:
        raise AdapterError(f"{server_library.name} needs no server; it is not a server adapter")
    return _server_pool.get(server_library)
