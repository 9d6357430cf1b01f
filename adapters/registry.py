"""Which adapters ``--adapter NAME|PATH`` can load, and the loader.

A bundled adapter is a name mapped to ``"module:attribute"``, imported only when it
is asked for, so a library that is not installed costs nothing until it is checked.
``planted:NAME`` loads a planted-bug adapter (``adapters.planted``). Anything else
ending in ``.py`` is a user's adapter file: a Python file defining one class that
satisfies ``QueueLibrary`` (``name``, ``capabilities``, ``promises``, ``version``,
``create``, ``connect``), so a team can check its in-house queue.

Every failure is an ``AdapterLoadError`` whose message names the adapter and what to
do; a library that is not installed names the pip command. The CLI turns it into
exit status 2, never a skip.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from leasecheck.adapters.broker_adapters import BROKER_ADAPTERS
from leasecheck.adapters.protocol import AdapterError, Capabilities, Promises, QueueLibrary
from leasecheck.adapters.server_adapters import SERVER_ADAPTERS

__all__ = [
    "BUNDLED",
    "INSTALL_REAL",
    "AdapterLoadError",
    "describe_promises",
    "load_library",
    "missing_members",
    "refusal",
]

BUNDLED: dict[str, str] = {
    "lease-worker": "leasecheck.adapters.lease_worker:LeaseWorker",
    "litequeue": "leasecheck.adapters.litequeue:Litequeue",
    "persist-queue": "leasecheck.adapters.persist_queue:PersistQueue",
    "persist-queue-defaults": "leasecheck.adapters.persist_queue:PersistQueueDefaults",
    "localqueue": "leasecheck.adapters.localqueue:Localqueue",
    "femtoqueue": "leasecheck.adapters.femtoqueue:Femtoqueue",
    **SERVER_ADAPTERS,
    **BROKER_ADAPTERS,
}
"""Bundled adapters: name -> "module:attribute" (the server-backed ones last)."""

INSTALL_REAL = "pip install 'leasecheck[real]'"
PLANTED_PREFIX = "planted:"
REAL_GRANULARITY = 0.01
"""The coarsest lease a real-clock library may have (the shortest real lease is 15 ms)."""
MEMBERS = ("name", "capabilities", "promises", "version", "create", "connect")


class AdapterLoadError(AdapterError):
    """``--adapter`` names nothing usable; the message says which and what to do."""


def load_library(spec: str, *, checkable: bool = True) -> QueueLibrary:
    """The library ``spec`` names (bundled name, ``planted:NAME`` or a .py path), ready to
    use; ``checkable=False`` also loads one the generic properties refuse (``refusal``),
    to list its promises."""
    supported = _supported if checkable else (lambda library, spec: library)
    if spec.startswith(PLANTED_PREFIX):
        return supported(_planted(spec.removeprefix(PLANTED_PREFIX)), spec)
    if spec in BUNDLED:
        return supported(_bundled(spec), spec)
    if spec.endswith(".py") or Path(spec).exists():
        return supported(_from_file(Path(spec)), spec)
    names = ", ".join(BUNDLED)
    raise AdapterLoadError(
        f"--adapter {spec!r} is neither a bundled adapter ({names}) nor a Python file"
        f"{_did_you_mean(spec, list(BUNDLED))}; run `leasecheck adapters` to list them, or "
        f"pass the path of your adapter file"
    )


def _did_you_mean(wrong: str, names: list[str], prefix: str = "") -> str:
    """``" (did you mean 'litequeue'?)"`` for the closest known name, or nothing."""
    close = difflib.get_close_matches(wrong.lower(), names, n=1, cutoff=0.6)
    return f" (did you mean {prefix + close[0]!r}?)" if close else ""


def _supported(library: QueueLibrary, spec: str) -> QueueLibrary:
    """Refuse an adapter whose declarations the engines cannot honour, naming the fix."""
    reason = refusal(library, spec)
    if reason:
        raise AdapterLoadError(reason)
    return library


def refusal(library: QueueLibrary, spec: str) -> str:
    """Why the generic properties cannot run ``library`` (empty: they can)."""
    capabilities = library.capabilities
    coarse = capabilities.lease_granularity > REAL_GRANULARITY
    # A lease that is the server's one setting is leased for exactly (server_lease).
    if capabilities.real_time and coarse and capabilities.server_lease is None:
        return (
            f"adapter {spec!r} declares clock='real' with leases of at least "
            f"{capabilities.lease_granularity} s: on real time the generic properties lease "
            f"for as little as 15 ms, so they need a library that can lease for "
            f"{REAL_GRANULARITY * 1000:.0f} ms or less (or one whose clock can be patched)"
        )
    return ""


def _bundled(name: str) -> QueueLibrary:
    module_name, attribute = BUNDLED[name].split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name == module_name:
            raise AdapterLoadError(
                f"adapter {name!r}: this installation has no module {module_name}; "
                f"reinstall leasecheck (pip install -e .) from a checkout that has it"
            ) from error
        raise AdapterLoadError(
            f"adapter {name!r} needs the Python package {error.name!r}, which is not "
            f"installed; install the queue libraries with: {INSTALL_REAL}"
        ) from error
    library: QueueLibrary = getattr(module, attribute)()
    _check_version(library, name)
    return library


def _check_version(library: QueueLibrary, where: str) -> None:
    try:
        library.version()
    except AdapterError as error:
        raise AdapterLoadError(f"adapter {where!r}: {error}") from error
    except ImportError as error:
        raise AdapterLoadError(
            f"adapter {where!r}: its library is not installed ({error}); "
            f"install it with: {INSTALL_REAL}"
        ) from error


def _planted(name: str) -> QueueLibrary:
    from leasecheck.adapters.planted import (
        CONTROLS,
        PLANTED,
        PlantedBug,
        PlantedControl,
        planted_library,
    )

    catalogue: tuple[PlantedBug | PlantedControl, ...] = (*PLANTED, *CONTROLS)
    for bug in catalogue:
        if bug.name == name:
            return planted_library(bug)()
    names = [bug.name for bug in catalogue]
    known = ", ".join(PLANTED_PREFIX + name for name in names)
    raise AdapterLoadError(
        f"no planted adapter {name!r}{_did_you_mean(name, names, PLANTED_PREFIX)}; "
        f"the catalogue has: {known}"
    )


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise AdapterLoadError(
            f"adapter file {str(path)!r} is not a file; pass the path of a Python file that "
            f"defines a QueueLibrary class (see adapters/protocol.py)"
        )
    digest = hashlib.sha256(str(path.resolve()).encode() + path.read_bytes()).hexdigest()[:16]
    name = f"leasecheck_adapter_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise AdapterLoadError(f"adapter file {str(path)!r} cannot be imported as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as error:  # even SystemExit: the message must name the file
        del sys.modules[name]
        raise AdapterLoadError(
            f"adapter file {str(path)!r} failed to import: {type(error).__name__}: {error}; "
            f"fix the file so that `python {path}` runs without error"
        ) from error
    return module


def missing_members(candidate: Any) -> list[str]:
    """What ``candidate`` lacks to be a ``QueueLibrary`` (empty: nothing)."""
    missing = [member for member in MEMBERS if not hasattr(candidate, member)]
    if "capabilities" not in missing and not isinstance(candidate.capabilities, Capabilities):
        missing.append("capabilities (a Capabilities instance)")
    if "promises" not in missing and not isinstance(candidate.promises, Promises):
        missing.append("promises (a Promises instance)")
    return missing


def _from_file(path: Path) -> QueueLibrary:
    module = _import_file(path)
    classes = [
        value
        for value in vars(module).values()
        if isinstance(value, type) and value.__module__ == module.__name__
    ]
    fits = [cls for cls in classes if not missing_members(cls)]
    if len(fits) == 1:
        library: QueueLibrary = fits[0]()
        _check_version(library, str(path))
        return library
    if fits:
        names = ", ".join(cls.__name__ for cls in fits)
        raise AdapterLoadError(
            f"adapter file {str(path)!r} defines {len(fits)} QueueLibrary classes ({names}); "
            f"keep one per file"
        )
    raise AdapterLoadError(_nothing_fits(path, classes))


def _nothing_fits(path: Path, classes: list[type]) -> str:
    if not classes:
        return (
            f"adapter file {str(path)!r} defines no class; define one class with "
            f"{', '.join(MEMBERS)} (the QueueLibrary protocol in adapters/protocol.py)"
        )
    closest = min(classes, key=lambda cls: len(missing_members(cls)))
    return (
        f"adapter file {str(path)!r}: class {closest.__name__} is not a QueueLibrary: it has "
        f"no {', '.join(missing_members(closest))}; see adapters/protocol.py"
    )


def describe_promises(library: QueueLibrary) -> list[str]:
    """The library's declared promises, one line each, for ``leasecheck adapters``."""
    from leasecheck.adapters.protocol import GENERIC_PROPERTIES

    promises = library.promises
    lines = [
        f"delivery {promises.delivery}; ordering: {promises.ordering}",
        f"fencing: {promises.fencing}",
        f"recovery: {promises.recovery}",
        f"durability: {promises.durability}",
    ]
    for prop in GENERIC_PROPERTIES:
        promise = promises.of(prop)
        word = "promised" if promise.promised else "not promised"
        lines.append(f"{prop:<20} {word:<13} {promise.source}")
    return lines
