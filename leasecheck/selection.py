"""``check --property NAME``: which property names exist, and choosing among them.

The names are the ``@pytest.mark.leasecheck("...")`` markers of the property modules,
read from their source (so naming one costs no import), plus the server-fault
properties whose names are constants in ``crash_harness.server_faults``. The pytest
side is the option ``--leasecheck-property NAME`` (repeatable) in
``leasecheck._events``, which keeps only the tests of the names given.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path

__all__ = ["PROPERTY_OPTION", "known_properties", "unknown_property"]

PROPERTY_OPTION = "--leasecheck-property"
PROPERTIES_DIR = Path(__file__).with_name("properties")
_MARKER = re.compile(r"""mark\.leasecheck\(\s*["']([\w.-]+)["']""")


def known_properties() -> list[str]:
    """Every property name a check can run, sorted."""
    from leasecheck.crash_harness.server_faults import FAULTS

    names = set(FAULTS)
    for module in PROPERTIES_DIR.glob("test_*.py"):
        names.update(_MARKER.findall(module.read_text(encoding="utf-8")))
    return sorted(names)


def unknown_property(names: Sequence[str]) -> str | None:
    """A sentence naming the first of ``names`` that is no property (with the closest
    name, and where to see them all), or None when every one is known."""
    known = known_properties()
    for name in names:
        if name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        every = ", ".join(known)
        return f"--property {name!r} is no leasecheck property{hint} (the properties: {every})"
    return None
