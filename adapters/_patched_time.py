"""Make a library read leasecheck's clock: its time functions replaced, module by module.

Libraries that read the client's clock through a helper of their own (rq's
``rq.utils.now``/``current_timestamp``, saq's ``saq.utils.now``) import it by name into
many modules. ``patch_time`` replaces every binding of such a helper in the library's
loaded modules with one that reads the process's current clock (``use_clock``), so a
test moves the library's time by advancing a ``QueueClock``. One clock per process: the last
adapter connected sets it, which is what a one-connection-per-process property needs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from leasecheck.adapters.protocol import QueueClock

__all__ = ["current_clock", "patch_time", "use_clock"]

_clock: list[QueueClock] = []
_patched: set[str] = set()


def use_clock(clock: QueueClock) -> None:
    """From now on, every patched helper in this process reads ``clock``."""
    _clock[:] = [clock]


def current_clock() -> QueueClock:
    if not _clock:
        raise RuntimeError("no clock was set: call use_clock(clock) when connecting")
    return _clock[0]


def patch_time(package: str, helpers: Mapping[str, Callable[..., Any]]) -> None:
    """Replace, in every loaded module of ``package``, each binding of the helpers named.

    ``helpers`` maps a helper's name in ``{package}.utils``-style modules to its
    replacement; a binding is replaced only where it *is* the library's original
    function, so an unrelated attribute of the same name is left alone.
    """
    if package in _patched:
        return
    originals = {name: _original(package, name) for name in helpers}
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == package or module_name.startswith(package + ".")):
            continue
        for name, original in originals.items():
            if getattr(module, name, None) is original:
                setattr(module, name, helpers[name])
    _patched.add(package)


def _original(package: str, name: str) -> Callable[..., Any]:
    utils = sys.modules[f"{package}.utils"]
    found: Callable[..., Any] = getattr(utils, name)
    return found
