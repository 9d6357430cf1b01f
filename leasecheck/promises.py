"""The three-way verdict of a generic property: holds, VIOLATED, or not promised.

A library is judged by its own promises (suite.md): when a ``queue.*`` property
fails, the adapter's ``Promises`` decide. Promised: the failure propagates (VIOLATED,
exit 1). Not promised: the test is marked xfail while the failure is being handled,
so the failure reaches the CLI as the xfail's context (``leasecheck._events`` records
it as data) and its text is the xfail's reason. ``leasecheck check`` reports it as
"not promised" without changing the exit status; ``--strict`` (``--strict-promises``
under pytest) makes it a failure.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from leasecheck.adapters.protocol import AdapterError, QueueLibrary

__all__ = ["counterexample_text", "judge"]


def counterexample_text(error: BaseException) -> str:
    """The error's message and the notes Hypothesis added (the shrunk program)."""
    notes = [str(note) for note in getattr(error, "__notes__", [])]
    return "\n".join([f"{type(error).__name__}: {error}", *notes])


def _version(library: QueueLibrary) -> str:
    try:
        return library.version()
    except AdapterError:
        return "(version unknown)"


@contextlib.contextmanager
def judge(
    library: QueueLibrary,
    prop: str,
    strict: bool,
) -> Iterator[None]:
    """Run a property's body; judge an ``AssertionError`` by ``library``'s promise of ``prop``."""
    try:
        yield
    except AssertionError as error:
        promise = library.promises.of(prop)
        if promise.promised:
            raise
        where = f"{library.name} {_version(library)}"
        text = counterexample_text(error)
        said = f"{prop} is not promised by {where} ({promise.source})"
        if strict:
            pytest.fail(f"{said}, and --strict makes that a failure:\n{text}", pytrace=False)
        pytest.xfail(f"{said}\n{text}")
