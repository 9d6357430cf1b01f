"""Counterexamples: the shrunk program of a failure, its length, and its pytest export.

A stateful property fails with Hypothesis' falsifying program (``state = Machine()``,
one ``state.<operation>(...)`` line per step, ``state.teardown()``). The export turns
that program into a standalone pytest file that binds the same target, replays the
steps (with the invariant checks Hypothesis printed between them), so it fails while the
bug is present and passes once it is fixed. Process-level properties print their
scenario as numbered steps; their export re-runs that property at the same profile
and seed.
"""

from __future__ import annotations

import importlib
import inspect
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Counterexample", "export", "parse"]

_MACHINES = {
    "LeaseAgreement": ("stateful_tests.lease_machine", "load_worker"),
    "JobAgreement": ("stateful_tests.job_machine", "load_jobs_target"),
    "QueueMachine": ("stateful_tests.queue_machine", "load_library"),  # parsed, not exported
}
_START = re.compile(r"^state = (\w+)\(\)\s*$")
_STEP = re.compile(r"^\s*\d+\.\s")
_STEP_LINE = re.compile(r"^(?:[\w(), ]+ = )?state\.\w+\(")
"""``state.claim(...)``, ``t = state.claim(...)`` or ``(t0,) = state.run_file(...)``."""
_ERROR_LINE = re.compile(r"^E(?: {1,7}|$)(.*)$")
"""pytest marks the lines of the raised error with ``E`` and seven spaces."""


@dataclass(frozen=True)
class Counterexample:
    """What a failure report says: the program (if stateful) and the message lines."""

    machine: str | None
    program: tuple[str, ...]
    message: tuple[str, ...]

    @property
    def steps(self) -> int:
        """How many operations the shrunk counterexample has (invariant checks excluded)."""
        if self.machine:
            skip = {"teardown", *_invariant_names(self.machine)}
            return sum(1 for line in self.program if _called(line) not in skip)
        return sum(1 for line in self.message if _STEP.match(line))

    def text(self, limit: int = 40) -> str:
        lines = [*self.program, *([""] if self.program and self.message else []), *self.message]
        shown = lines[:limit]
        if len(lines) > limit:
            shown.append(f"... ({len(lines) - limit} more lines in the full report)")
        return "\n".join(shown)


def _called(line: str) -> str:
    match = re.search(r"state\.(\w+)\(", line)
    return match.group(1) if match else ""


def _invariant_names(machine: str) -> set[str]:
    """The machine's @invariant methods, which Hypothesis prints between steps."""
    module = importlib.import_module(_MACHINES[machine][0])
    cls = getattr(module, machine)
    return {
        name
        for name, method in inspect.getmembers(cls, inspect.isfunction)
        if getattr(method, "hypothesis_stateful_invariant", None) is not None
    }


def _unprefixed(line: str) -> str:
    """A report line without pytest's ``E   `` marker."""
    match = _ERROR_LINE.match(line)
    return match.group(1) if match else line


def _program(lines: list[str]) -> tuple[str | None, tuple[str, ...]]:
    """The last complete falsifying program in the report (the shrunk one)."""
    found: tuple[str | None, tuple[str, ...]] = (None, ())
    machine: str | None = None
    program: list[str] = []
    for line in map(_unprefixed, lines):
        start = _START.match(line)
        if start and start.group(1) in _MACHINES:
            machine, program = start.group(1), []
        elif machine is not None and _STEP_LINE.match(line):
            program.append(line.rstrip())
            if line.strip() == "state.teardown()":
                found, machine = (machine, tuple(program)), None
        elif line.strip():
            machine = None  # not a program after all
    return found


def parse(report: str) -> Counterexample:
    """Read a pytest failure report into a ``Counterexample``."""
    lines = report.splitlines()
    machine, program = _program(lines)
    return Counterexample(machine, program, tuple(_message(lines)))


_MESSAGE_ENDS = ("assert ", "Failing test case", "Falsifying example", "state = ")


def _message(lines: list[str]) -> list[str]:
    """The raised error's own text, without pytest's introspection or Hypothesis' notes."""
    message: list[str] = []
    for raw in lines:
        match = _ERROR_LINE.match(raw)
        if not match:
            if message:
                break  # the error's lines are contiguous
            continue
        line = match.group(1).rstrip()
        if line.lstrip().startswith(_MESSAGE_ENDS):
            break
        message.append(line)
    while message and not message[-1].strip():
        message.pop()
    return textwrap.dedent("\n".join(message)).splitlines()


_STATEFUL_TEMPLATE = '''"""Counterexample found by leasecheck: property {prop} on {target}.

It fails while the bug is present and passes once it is fixed.
Run it with:  pytest {filename}
"""

from leasecheck.targets import {loader}
from {module} import {names}

TARGET = {target!r}


def test_{slug}() -> None:
    {machine}.bind({loader}(TARGET))
    state = {machine}()
    try:
{steps}
    finally:
        state.teardown()
'''

_RERUN_TEMPLATE = '''"""Counterexample found by leasecheck: property {prop} on {target}.

Re-runs that property with the same profile and seed; it fails while the bug is
present and passes once it is fixed.  Run it with:  pytest {filename}

What failed:
{message}
"""

import subprocess
import sys

from leasecheck.runner import CHECK_INI, PROPERTIES_DIR

COMMAND = [
    sys.executable, "-m", "pytest", str(PROPERTIES_DIR), "-c", str(CHECK_INI),
    "--rootdir", str(PROPERTIES_DIR), "-q", "-n", "0",
    {option!r}, {target!r}, "--profile", {profile!r}, "--leasecheck-seed", {seed!r},
    "-k", {selector!r},
]


def test_{slug}() -> None:
    result = subprocess.run(COMMAND, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:]
'''


def _names_used(program: tuple[str, ...], module_name: str) -> set[str]:
    """The helper types a printed program calls (``When(...)``, ``Send(...)``), from the
    machine's module, so the exported file can construct them."""
    module = importlib.import_module(module_name)
    called = {name for line in program for name in re.findall(r"\b([A-Z]\w*)\(", line)}
    return {name for name in called if hasattr(module, name)}


def _slug(name: str) -> str:
    return re.sub(r"\W+", "_", name).strip("_").lower()


def export(
    directory: Path,
    prop: str,
    example: Counterexample,
    *,
    target: Path,
    option: str,
    profile: str,
    seed: int,
    nodeid: str,
) -> Path:
    """Write ``example`` as ``directory/test_<property>.py`` and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    slug = _slug(f"{prop}_counterexample")
    path = directory / f"test_{_slug(prop)}.py"
    if example.machine:
        module, loader = _MACHINES[example.machine]
        names = ", ".join(sorted({example.machine, *_names_used(example.program, module)}))
        body = [line for line in example.program if line.strip() != "state.teardown()"]
        steps = "\n".join(f"        {line}" for line in body)
        text = _STATEFUL_TEMPLATE.format(
            prop=prop, target=str(target), filename=path.name, loader=loader, module=module,
            machine=example.machine, slug=slug, steps=steps or "        pass", names=names,
        )  # fmt: skip
    else:
        selector = nodeid.rsplit("::", 1)[-1].split("[", 1)[0]
        message = "\n".join(f"    {line}" for line in example.message[:30])
        text = _RERUN_TEMPLATE.format(
            prop=prop, target=str(target), filename=path.name, message=message, option=option,
            profile=profile, seed=str(seed), selector=selector, slug=slug,
        )  # fmt: skip
    path.write_text(text)
    return path
