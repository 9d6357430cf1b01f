"""The CLI's side of real queue libraries: ``--adapter`` preflight and ``leasecheck adapters``.

Kept apart from ``leasecheck/cli.py`` so the stable ``check`` command changes only by
calling these. A bundled adapter is loaded in this process (our own modules, plus
the library's import); a user's adapter file is loaded in a throwaway process with a
time bound, like ``--impl`` files, so a file that hangs or exits cannot take the CLI
with it. Either way a failure is a sentence naming the adapter and the fix (exit 2).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from leasecheck.adapters.protocol import AdapterError, QueueLibrary
from leasecheck.adapters.registry import (
    BUNDLED,
    PLANTED_PREFIX,
    describe_promises,
    load_library,
    refusal,
)

__all__ = [
    "AdapterUsageError",
    "adapters_command",
    "describe_library",
    "new_adapter",
    "preflight_adapter",
]

LOAD_TIMEOUT = 60.0


class AdapterUsageError(Exception):
    """``--adapter`` cannot be used; the message says which and what to do (exit 2)."""


def _is_file(spec: str) -> bool:
    return not spec.startswith(PLANTED_PREFIX) and spec not in BUNDLED and spec.endswith(".py")


def preflight_adapter(spec: str) -> str:
    """Load ``spec`` once before the run; its description for the header."""
    if not _is_file(spec):
        try:
            return describe_library(load_library(spec))
        except AdapterError as error:
            raise AdapterUsageError(str(error)) from None
    return _preflight_file(spec)


def _preflight_file(spec: str) -> str:
    code = (
        "import sys\nfrom leasecheck.adapters.protocol import AdapterError\n"
        "from leasecheck.adapters.registry import load_library\n"
        "from leasecheck.adapters_cli import describe_library\n"
        "try:\n    print(describe_library(load_library(sys.argv[1])))\n"
        "except AdapterError as e:\n    print(e, file=sys.stderr); sys.exit(2)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, spec], capture_output=True, text=True,
            timeout=LOAD_TIMEOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise AdapterUsageError(
            f"adapter file {spec!r} did not finish importing within {LOAD_TIMEOUT:.0f} s; "
            f"move work done at import time into functions"
        ) from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise AdapterUsageError(f"cannot load --adapter {spec!r}: {lines[0]}")
    return done.stdout.strip()


def describe_library(library: QueueLibrary) -> str:
    """``name version`` of a loaded library, for the header."""
    return f"{library.name} {library.version()}"


def new_adapter(name: str | None, directory: Path) -> int:
    """``leasecheck adapters new NAME``: write the template adapter and its test."""
    from leasecheck.adapter_template import TemplateError, write_template

    if not name:
        raise AdapterUsageError("`leasecheck adapters new` needs a name: adapters new my-queue")
    try:
        adapter, test = write_template(name, directory)
    except TemplateError as error:
        raise AdapterUsageError(str(error)) from None
    print(f"wrote {adapter} (a working stand-in: replace each TODO with your library's call)")
    print(f"wrote {test}")
    print(f"guide: docs/writing-an-adapter.md; check it: leasecheck check --adapter {adapter}")
    return 0


def adapters_command() -> int:
    """``leasecheck adapters``: every bundled adapter, its version and declared promises."""
    for name in BUNDLED:
        try:
            library = load_library(name, checkable=False)
        except AdapterError as error:
            print(f"{name}: cannot be loaded: {error}\n")
            continue
        capabilities = library.capabilities
        server = f"; started for the run: {capabilities.server}" if capabilities.server else ""
        if capabilities.server_lease is not None:
            server += (
                f", whose one lease is {capabilities.server_lease * 1000:.0f} ms "
                f"(+{capabilities.slack_ms} ms tick)"
            )
        print(f"{name}  ({describe_library(library)}; clock {capabilities.clock}{server})")
        print("\n".join(f"    {line}" for line in describe_promises(library)))
        refused = refusal(library, name)
        if refused:
            print(f"    generic properties: not run: {refused}")
        print()
    print(
        "check one with: leasecheck check --adapter NAME  (or --adapter path/to/adapter.py); "
        "planted-bug adapters: leasecheck mutants --list"
    )
    return 0
