"""``adapters._libs``: the install check and the job envelope the library adapters share."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
import types

import pytest

from leasecheck.adapters._libs import BROKERS_EXTRA, envelope, installed_version, job_of
from leasecheck.adapters.arq_redis import ARQ_INSTALL, ArqRedis
from leasecheck.adapters.beanstalkd import Beanstalkd
from leasecheck.adapters.dramatiq_redis import DramatiqRedis
from leasecheck.adapters.kombu_redis import KombuRedis
from leasecheck.adapters.litequeue import Litequeue
from leasecheck.adapters.localqueue import Localqueue
from leasecheck.adapters.nats_jetstream import NatsJetstream
from leasecheck.adapters.persist_queue import PersistQueue
from leasecheck.adapters.protocol import GENERIC_PROPERTIES, AdapterError, QueueLibrary


@pytest.mark.parametrize(
    ("library", "module"),
    [(Litequeue(), "litequeue"), (PersistQueue(), "persistqueue"), (Localqueue(), "localqueue")],
)
def test_a_missing_library_names_the_install_command(
    library: QueueLibrary, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a user without the ``real`` extra reads (the import system hides the module)."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == module else real_find_spec(name, *args),
    )
    with pytest.raises(AdapterError) as error:
        library.version()
    expected = f"{library.name} is not installed; install it with: pip install 'leasecheck[real]'"
    assert str(error.value) == expected


def test_an_unknown_distribution_is_missing() -> None:
    with pytest.raises(AdapterError, match=r"^no-such-lib-lc is not installed; install it with"):
        installed_version("no-such-lib-lc", "no_such_lib_lc")


def test_an_imported_module_without_a_spec_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """kombu replaces its module with a lazy one whose ``__spec__`` is None, on which
    ``find_spec`` raises: already imported is installed (the brokers' version())."""
    lazy = types.ModuleType("pytest")
    lazy.__spec__ = None
    monkeypatch.setitem(sys.modules, "pytest", lazy)
    assert installed_version("pytest", "pytest", BROKERS_EXTRA) == importlib.metadata.version(
        "pytest"
    )


@pytest.mark.parametrize(
    ("library", "distribution", "module", "install"),
    [
        (KombuRedis(), "kombu", "kombu", BROKERS_EXTRA),
        (NatsJetstream(), "nats-py", "nats", BROKERS_EXTRA),
        (DramatiqRedis(), "dramatiq", "dramatiq", BROKERS_EXTRA),
        (Beanstalkd(), "greenstalk", "greenstalk", BROKERS_EXTRA),
        (ArqRedis(), "arq", "arq", ARQ_INSTALL),
    ],
    ids=lambda value: getattr(value, "name", None),
)
def test_a_missing_broker_client_names_its_install(
    library: QueueLibrary, distribution: str, module: str, install: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Each broker adapter's version() is ``installed_version`` with its install command."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == module else real_find_spec(name, *args),
    )
    with pytest.raises(AdapterError) as error:
        library.version()
    assert str(error.value) == f"{distribution} is not installed; install it with: {install}"


def test_the_envelope_round_trips_as_text_bytes_or_decoded() -> None:
    text = envelope("job-1", "payload")
    assert job_of(text) == job_of(text.encode()) == job_of(json.loads(text)) == "job-1"


def test_a_foreign_row_is_reported_with_the_fix() -> None:
    with pytest.raises(AdapterError, match=r"did not enqueue .* use a fresh store"):
        job_of("hello")


LIBRARIES: list[QueueLibrary] = [Litequeue(), PersistQueue(), Localqueue()]


@pytest.mark.parametrize("library", LIBRARIES, ids=[lib.name for lib in LIBRARIES])
def test_every_generic_property_has_a_cited_promise(library: QueueLibrary) -> None:
    """Each library answers for every generic property, promised or not, with its source."""
    assert set(library.promises.properties) == set(GENERIC_PROPERTIES)
    for prop, promise in library.promises.properties.items():
        assert promise.source.strip(), f"{library.name}: {prop} names no source"
        if not promise.promised:
            assert promise.source.startswith("not mentioned"), (library.name, prop)
