"""Task bodies that import nothing: what they report about the zygote is the zygote's own.

A body's module is imported in the zygote when its task is unpickled there, so a body
kept in a test module would bring that module's imports (psutil, subprocess) with it.
"""

from __future__ import annotations

import sys
from typing import Any


def imported(names: tuple[str, ...], channel: Any) -> list[str]:
    """Which of ``names`` the child's interpreter has imported."""
    return [name for name in names if name in sys.modules]
