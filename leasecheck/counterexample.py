"""Counterexamples: a failure as data, its text, and its pytest export.

A property's failure travels from the test process to the CLI as a structured
record (``Counterexample.record``): the raised error's class and own message, and,
for a state machine, the shrunk program Hypothesis attached to the exception (see
``stateful_tests.program``). Nothing is read back out of printed reports. This
module only builds that record from the exception and formats it: the text the CLI
shows, and the export, a standalone pytest file that binds the same target and
replays the steps (with the invariant checks between them), so it fails while the
bug is present and passes once it is fixed. Process-level properties describe their
scenario as numbered steps; their export re-runs that property at the same profile
and seed, except ``lease.interleavings``: its failure carries the schedule itself (a
JSON record, ``ScheduleFailure``), and its export replays exactly that schedule.

A ``queue.*`` failure exports against the run's ``--adapter`` (a bundled name,
``planted:NAME`` or an adapter file): the generic queue machine's program
(``queue.no-loss``, ``queue.stale-ack``) is replayed step by step on that library,
enforcing the same property; the race and kill properties (``queue.exclusive``,
``queue.linearizable``, ``queue.ack-final``) are scheduled by the OS, so no file can
replay their interleaving: their export re-runs the property with the same adapter,
profile and seed, and says so.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stateful_tests.program import program_of

__all__ = ["Counterexample", "ScheduleFailure", "export"]

_MACHINES = {
    "LeaseAgreement": ("stateful_tests.lease_machine", "load_worker"),
    "JobAgreement": ("stateful_tests.job_machine", "load_jobs_target"),
}
QUEUE_MACHINE = "QueueMachine"


class ScheduleFailure(AssertionError):
    """A failing controlled schedule: the message, and the schedule as a JSON-ready record
    (``crash_harness.interleavings.Schedule.record``) that replays it exactly."""

    def __init__(self, message: str, schedule: dict[str, object]) -> None:
        super().__init__(message)
        self.schedule = schedule


def _numbered(line: str) -> bool:
    """A numbered scenario step of a process-level property (``  2. claim by w1 ...``)."""
    head = line.strip().split(".", 1)[0]
    return head.isdigit() and line.strip()[len(head) : len(head) + 2] == ". "


@dataclass(frozen=True)
class Counterexample:
    """A failure: the error's own message lines and, if stateful, the shrunk program."""

    machine: str | None
    program: tuple[str, ...]
    message: tuple[str, ...]
    steps: int = 0
    """Operations in the program, or numbered steps of a process-level scenario."""
    schedule: Mapping[str, object] | None = None
    """The failing schedule of ``lease.interleavings`` (its replayable record)."""

    @classmethod
    def from_error(cls, error: BaseException) -> Counterexample:
        """What ``error`` says, in the process that raised it."""
        message = _own_message(error)
        program = program_of(error)
        if program is not None:
            return cls(program.machine, program.lines, message, program.steps)
        schedule = error.schedule if isinstance(error, ScheduleFailure) else None
        return cls(None, (), message, sum(1 for line in message if _numbered(line)), schedule)

    def record(self) -> dict[str, object]:
        """JSON-ready, for the events file."""
        return {
            "machine": self.machine,
            "program": list(self.program),
            "message": list(self.message),
            "steps": self.steps,
            "schedule": None if self.schedule is None else dict(self.schedule),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> Counterexample:
        machine = record.get("machine")
        schedule = record.get("schedule")
        return cls(
            machine if isinstance(machine, str) else None,
            tuple(str(line) for line in _list(record.get("program"))),
            tuple(str(line) for line in _list(record.get("message"))),
            int(str(record.get("steps") or 0)),
            schedule if isinstance(schedule, dict) else None,
        )

    def text(self, limit: int = 40) -> str:
        lines = [*self.program, *([""] if self.program and self.message else []), *self.message]
        shown = lines[:limit]
        if len(lines) > limit:
            shown.append(f"... ({len(lines) - limit} more lines in the full report)")
        return "\n".join(shown)


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else []


def _own_message(error: BaseException) -> tuple[str, ...]:
    """``Class: text`` of the error, without the ``assert ...`` explanation pytest's
    assertion rewriting appends to a failed ``assert cond, message``."""
    lines = f"{type(error).__name__}: {error}".rstrip().splitlines()
    if isinstance(error, AssertionError):
        cut = next((i for i, line in enumerate(lines) if line.startswith("assert ")), len(lines))
        lines = lines[: max(cut, 1)]
    while lines and not lines[-1].strip():
        lines.pop()
    return tuple(lines)


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
{note}
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


_QUEUE_TEMPLATE = '''"""Counterexample found by leasecheck: property {prop} on {adapter}.

Replays the shrunk program of the generic queue machine on the same adapter (ADAPTER:
a bundled name, planted:NAME or an adapter file), enforcing {prop} after every step
as the run did. It fails while the bug is present and passes once it is fixed; set
ADAPTER to another library to run the same program there (a library that hands out
other jobs may leave a claims_N variable empty: the program no longer applies).
Run it with:  pytest {filename}
"""

from adapters.registry import load_library
from stateful_tests.queue_machine import QueueMachine

ADAPTER = {adapter!r}
PROPERTY = {prop!r}


def test_{slug}() -> None:
    machine = QueueMachine.bound(load_library(ADAPTER), frozenset({{PROPERTY}}))
    state = machine()
    try:
{steps}
    finally:
        state.teardown()
'''

_SCHEDULE_TEMPLATE = '''"""Counterexample found by leasecheck: property {prop} on {target}.

Replays exactly the failing schedule: the same processes, the same SQL statements
and fault hooks, in the same order (crash_harness.interleavings.replay). It fails
while the bug is present and passes once it is fixed (a fixed target may run other
statements, so the recorded choices no longer apply: the test then says so and
re-runs the property instead).  Run it with:  pytest {filename}

What failed:
{message}
"""

import subprocess
import sys

from crash_harness.interleavings import Schedule, ScheduleMismatch, replay
from leasecheck.runner import CHECK_INI, PROPERTIES_DIR
from leasecheck.targets import load_worker
from targets.scratch import scratch_dir

TARGET = {target!r}
SCHEDULE = Schedule.from_json({schedule!r})


def test_{slug}() -> None:
    with scratch_dir() as directory:
        try:
            run = replay(load_worker(TARGET), SCHEDULE, directory)
        except ScheduleMismatch:
            command = [
                sys.executable, "-m", "pytest", str(PROPERTIES_DIR), "-c", str(CHECK_INI),
                "--rootdir", str(PROPERTIES_DIR), "-q", "-n", "0", {option!r}, TARGET,
                "-k", "test_interleavings",
            ]
            result = subprocess.run(command, capture_output=True, text=True, timeout=900)
            assert result.returncode == 0, result.stdout[-4000:]
            return
    assert run.problem is None, run.interleaving() + "\\n" + run.problem
'''

_RACE_NOTE = """
Why a re-run and not a replay: this property runs real processes as the OS schedules
them (racing, or SIGKILLed at a random instant), so no file can replay the
interleaving that failed. The seed fixes
what the harness chooses (jobs, kill instants, clock moves), not the schedule, so a
re-run may need the profile's rounds to meet the bug again.
"""


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
    target: Path | str,
    option: str,
    profile: str,
    seed: int,
    nodeid: str,
) -> Path:
    """Write ``example`` as ``directory/test_<property>.py`` and return its path; for a
    ``queue.*`` property ``option`` is ``--adapter`` and ``target`` the adapter spec."""
    directory.mkdir(parents=True, exist_ok=True)
    slug = _slug(f"{prop}_counterexample")
    path = directory / f"test_{_slug(prop)}.py"
    if example.machine == QUEUE_MACHINE:
        body = [line for line in example.program if line.strip() != "state.teardown()"]
        text = _QUEUE_TEMPLATE.format(
            prop=prop, adapter=str(target), filename=path.name, slug=slug,
            steps="\n".join(f"        {line.strip()}" for line in body) or "        pass",
        )  # fmt: skip
    elif example.machine:
        module, loader = _MACHINES[example.machine]
        names = ", ".join(sorted({example.machine, *_names_used(example.program, module)}))
        body = [line for line in example.program if line.strip() != "state.teardown()"]
        steps = "\n".join(f"        {line}" for line in body)
        text = _STATEFUL_TEMPLATE.format(
            prop=prop, target=str(target), filename=path.name, loader=loader, module=module,
            machine=example.machine, slug=slug, steps=steps or "        pass", names=names,
        )  # fmt: skip
    elif example.schedule is not None:
        message = "\n".join(f"    {line}" for line in example.message[:30])
        text = _SCHEDULE_TEMPLATE.format(
            prop=prop, target=str(target), filename=path.name, message=message, slug=slug,
            schedule=json.dumps(dict(example.schedule)), option=option,
        )  # fmt: skip
    else:
        selector = nodeid.rsplit("::", 1)[-1].split("[", 1)[0]
        message = "\n".join(f"    {line}" for line in example.message[:30])
        note = _RACE_NOTE if option == "--adapter" else ""
        text = _RERUN_TEMPLATE.format(
            prop=prop, target=str(target), filename=path.name, message=message, option=option,
            profile=profile, seed=str(seed), selector=selector, slug=slug, note=note,
        )  # fmt: skip
    path.write_text(text)
    return path
