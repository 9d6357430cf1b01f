"""``leasecheck adapters new NAME``: a commented template adapter and its test, ready to run.

The adapter template runs a small stand-in queue on SQLite, so the files pass
``leasecheck check`` as written; a user replaces each body marked TODO with the call
of their library (docs/writing-an-adapter.md walks through it). Nothing is
overwritten: an existing file is a usage error naming it.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["TemplateError", "write_template"]

TEMPLATES = Path(__file__).with_name("templates")
_NAME = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")


class TemplateError(Exception):
    """The template cannot be written; the message says why and what to do."""


def write_template(name: str, directory: Path) -> tuple[Path, Path]:
    """Write ``directory/<name>.py`` and ``directory/test_<name>.py``; their paths."""
    if not _NAME.fullmatch(name):
        raise TemplateError(
            f"adapter name {name!r}: use lowercase letters, digits and '-' or '_' between "
            f"words, starting with a letter (e.g. 'my-queue')"
        )
    module = name.replace("-", "_")
    words = "".join(word.capitalize() for word in re.split(r"[-_]", name))
    values = {
        "name": name, "title": name, "filename": f"{module}.py",
        "test_filename": f"test_{module}.py", "library_class": words,
        "adapter_class": f"{words}Adapter",
    }  # fmt: skip
    adapter, test = directory / values["filename"], directory / values["test_filename"]
    for path in (adapter, test):
        if path.exists():
            raise TemplateError(f"{path} exists; remove it or choose another name")
    adapter.write_text((TEMPLATES / "adapter.py.txt").read_text().format(**values))
    test.write_text((TEMPLATES / "test_adapter.py.txt").read_text().format(**values))
    return adapter, test
