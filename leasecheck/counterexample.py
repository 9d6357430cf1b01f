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
and seed, except ``lease.interleavings`` and ``jobs.interleavings``: their failure
carries the schedule itself (a JSON record: ``ScheduleFailure.schedule`` for processes,
the error's ``leasecheck_replay`` for threads), and their export replays exactly it.

A ``queue.*`` failure exports against the run's ``--adapter`` (a bundled name,
``planted:NAME`` or an adapter file): the generic queue machine's program
(``queue.no-loss``, ``queue.stale-ack``) is replayed step by step on that library,
enforcing the same property; the race and kill properties (``queue.exclusive``,
``queue.linearizable``, ``queue.ack-final``) are scheduled by the OS, so no file can
replay their interleaving: their export re-runs the property with the same adapter,
profile and seed, and says so; so do the server faults (``--servers``). A library that
keeps its stores on a server (``Capabilities.server``) gets that server started by the
exported file itself (``replay.server``), or by the re-run, through leasecheck's one
starter, so the file runs alone under plain pytest.

Every export is portable, so that a team can commit it: it imports only
``leasecheck.replay`` (a small interface kept stable) and names its target relative to
its own location (``replay.target``), or through ``$LEASECHECK_IMPL``,
``$LEASECHECK_JOBS_IMPL`` or ``$LEASECHECK_ADAPTER``.
"""

from __future__ import annotations

import importlib
import os
import pprint
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from leasecheck.models.evidence import Evidence, evidence_of
from leasecheck.replay import BUNDLED, ENV

__all__ = ["Counterexample", "ScheduleFailure", "export", "head", "steps_text"]

_MACHINES = {"LeaseAgreement": "lease", "JobAgreement": "jobs"}
_MODULES = {
    "lease": "leasecheck.stateful_tests.lease_machine",
    "jobs": "leasecheck.stateful_tests.job_machine",
}
QUEUE_MACHINE = "QueueMachine"
_KINDS = {"--impl": "lease", "--jobs-impl": "jobs", "--adapter": "queue"}


def head(lines: list[str], limit: int, where: str = "") -> list[str]:
    """The first ``limit`` of ``lines``, then a line saying how many more there are
    (``where``: where to read them)."""
    more = len(lines) - limit
    return lines[:limit] + ([f"... ({more} more lines{where})"] if more > 0 else [])


def steps_text(steps: int) -> str:
    """``1 step``, ``3 steps``: a counterexample's length as its header says it."""
    return f"{steps} step" if steps == 1 else f"{steps} steps"


def _schedule_of(error: BaseException) -> Mapping[str, object] | None:
    """The replayable schedule a controlled-interleaving failure carries, if any."""
    if isinstance(error, ScheduleFailure):
        return error.schedule
    replay = getattr(error, "leasecheck_replay", None)
    return replay if isinstance(replay, dict) else None


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
    """The failing schedule of ``lease.interleavings`` or ``jobs.interleavings`` (its
    replayable record)."""
    evidence: Evidence | None = None
    """What the harness saw, as data (``models.evidence``), when it attached any."""

    @classmethod
    def from_error(cls, error: BaseException) -> Counterexample:
        """What ``error`` says, in the process that raised it."""
        from leasecheck.stateful_tests.program import program_of  # imports Hypothesis

        message, evidence = _own_message(error), evidence_of(error)
        program = program_of(error)
        if program is not None:
            return cls(program.machine, program.lines, message, program.steps, None, evidence)
        schedule = _schedule_of(error)
        if evidence is not None and evidence.steps:
            # The operations the harness recorded (and any it folded away): a parallel
            # program's P1#1 lines and a model path's setup count as much as numbered ones;
            # so do a model path's clock moves, numbered steps of its run.
            clock = sum(1 for event in evidence.events if event.kind == "clock")
            steps = len(evidence.steps) + evidence.folded + clock
        else:
            steps = sum(1 for line in message if _numbered(line))
        return cls(None, (), message, steps, schedule, evidence)

    def record(self) -> dict[str, object]:
        """JSON-ready, for the events file."""
        return {
            "machine": self.machine,
            "program": list(self.program),
            "message": list(self.message),
            "steps": self.steps,
            "schedule": None if self.schedule is None else dict(self.schedule),
            "evidence": self.evidence.to_json() if self.evidence else None,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> Counterexample:
        machine, evidence = record.get("machine"), record.get("evidence")
        schedule = record.get("schedule")
        return cls(
            machine if isinstance(machine, str) else None,
            tuple(str(line) for line in _list(record.get("program"))),
            tuple(str(line) for line in _list(record.get("message"))),
            int(str(record.get("steps") or 0)),
            schedule if isinstance(schedule, dict) else None,
            _evidence(evidence),
        )

    def text(self, limit: int = 40) -> str:
        lines = [*self.program, *([""] if self.program and self.message else []), *self.message]
        return "\n".join(head(lines, limit, " in the full report"))


def _evidence(value: object) -> Evidence | None:
    """The record's evidence; one this version cannot read is dropped, not fatal (the
    verdict and the text do not depend on it)."""
    if not isinstance(value, Mapping):
        return None
    try:
        return Evidence.from_json(value)
    except (TypeError, ValueError):
        return None


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


_PORTABLE = """
The target is {default!r}, relative to this file (commit both and it keeps working),
unless ${env} names another: {env}=path/to/fixed_{kind_file} pytest {filename}
This file imports only leasecheck.replay, whose interface leasecheck keeps stable."""

_STATEFUL_TEMPLATE = '''"""Counterexample found by leasecheck: property {prop} on {target_name}.

It fails while the bug is present and passes once it is fixed.
Run it with:  pytest {filename}
{portable}
"""

from leasecheck import replay

TARGET = replay.target({default!r}, __file__, env={env!r})
{names_line}

def test_{slug}() -> None:
    {machine} = replay.machine({kind!r}, TARGET)
    state = {machine}()
    try:
{steps}
    finally:
        state.teardown()
'''

_RERUN_TEMPLATE = '''"""Counterexample found by leasecheck: property {prop} on {target_name}.

Re-runs that property with the same profile and seed; it fails while the bug is
present and passes once it is fixed.  Run it with:  pytest {filename}
{portable}
{note}
What failed:
{message}
"""

from leasecheck import replay

TARGET = replay.target({default!r}, __file__, env={env!r})


def test_{slug}() -> None:
    result = {rerun}
    assert result.returncode == 0, result.stdout[-4000:]
'''


_QUEUE_TEMPLATE = '''"""Counterexample found by leasecheck: property {prop} on {target_name}.

Replays the shrunk program of the generic queue machine on the same adapter (a bundled
name, planted:NAME or an adapter file), enforcing {prop} after every step as the run
did. It fails while the bug is present and passes once it is fixed; set ${env} to
another library to run the same program there (a library that hands out other jobs may
leave a claims_N variable empty: the program no longer applies).
Run it with:  pytest {filename}
{portable}
"""

from leasecheck import replay

ADAPTER = replay.target({default!r}, __file__, env={env!r})


def test_{slug}() -> None:
    # The server the library keeps its stores on (none for a file-backed one), started
    # for this test by leasecheck's own starter and stopped at its end.
    with replay.server(ADAPTER) as server:
        machine = replay.machine({kind!r}, ADAPTER, server)
        state = machine()
        try:
{steps}
        finally:
            state.teardown()
'''

_SCHEDULE_TEMPLATE = '''"""Counterexample found by leasecheck: property {prop} on {target_name}.

Replays exactly the failing schedule: the same {actors}, the same {points}, in the
recorded order. It fails while the bug is present and passes once it is fixed.
Run it with:  pytest {filename}
{portable}
What failed:
{message}
"""

from leasecheck import replay

TARGET = replay.target({default!r}, __file__, env={env!r})
SCHEDULE = {record}


def test_{slug}() -> None:
    problem = replay.schedule({kind!r}, TARGET, SCHEDULE)
    assert problem is None, problem
'''

_RACE_NOTE = """
Why a re-run and not a replay: this property runs real processes as the OS schedules
them (racing, or SIGKILLed at a random instant), so no file can replay the
interleaving that failed. The seed fixes
what the harness chooses (jobs, kill instants, clock moves), not the schedule, so a
re-run may need the profile's rounds to meet the bug again.
"""


_FAULT_NOTE = """
Why a re-run and not a replay: a server fault (a SIGKILLed server, a SIGSTOPped worker, a
skewed clock) happens to real processes at real instants, so no file can replay it. The
re-run starts the server the library declares, as `leasecheck check --servers` does.
"""


def _server_fault(nodeid: str) -> bool:
    """A server fault's test (``--servers``): its re-run must select the server faults."""
    return nodeid.split("::", 1)[0].endswith("test_server_faults.py")


def _names_used(program: tuple[str, ...], module_name: str) -> set[str]:
    """The helper types a printed program calls (``When(...)``, ``Send(...)``), from the
    machine's module, so the exported file can construct them."""
    module = importlib.import_module(module_name)
    called = {name for line in program for name in re.findall(r"\b([A-Z]\w*)\(", line)}
    return {name for name in called if hasattr(module, name)}


def _slug(name: str) -> str:
    return re.sub(r"\W+", "_", name).strip("_").lower()


def _default(target: Path | str, directory: Path) -> str:
    """How an exported file names its target: the bundled one symbolically, a file
    relative to the export directory, an adapter name as it is."""
    from leasecheck.targets.loader import BUNDLED_JOBS, BUNDLED_WORKER

    text = str(target)
    if not text.endswith(".py"):
        return text
    path = Path(text).resolve()
    if path in (BUNDLED_WORKER.resolve(), BUNDLED_JOBS.resolve()):
        return BUNDLED
    return os.path.relpath(path, directory.resolve())


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
    ``queue.*`` property ``option`` is ``--adapter`` and ``target`` the adapter spec. The
    file imports only ``leasecheck.replay`` and names its target relative to itself."""
    directory.mkdir(parents=True, exist_ok=True)
    slug = _slug(f"{prop}_counterexample")
    path = directory / f"test_{_slug(prop)}.py"
    kind = _KINDS[option]
    env, default = ENV[kind], _default(target, directory)
    kind_file = {"lease": "worker.py", "jobs": "job_queue.py", "queue": "adapter.py"}[kind]
    common = {
        "prop": prop, "target_name": Path(str(target)).name, "filename": path.name,
        "slug": slug, "env": env, "default": default,
        "portable": _PORTABLE.format(default=default, env=env, kind_file=kind_file,
                                     filename=path.name),
    }  # fmt: skip
    if example.machine == QUEUE_MACHINE:
        body = [line for line in example.program if line.strip() != "state.teardown()"]
        steps = "\n".join(f"            {line.strip()}" for line in body) or "            pass"
        text = _QUEUE_TEMPLATE.format(**common, kind=f"queue:{prop}", steps=steps)
    elif example.machine:
        module_kind = _MACHINES[example.machine]
        used = sorted(_names_used(example.program, _MODULES[module_kind]) - {example.machine})
        names_line = (
            f"{', '.join(used)}{',' if len(used) == 1 else ''} = replay.names("
            f"{module_kind!r}, {', '.join(repr(n) for n in used)})\n"
            if used
            else ""
        )
        body = [line for line in example.program if line.strip() != "state.teardown()"]
        steps = "\n".join(f"        {line}" for line in body) or "        pass"
        text = _STATEFUL_TEMPLATE.format(
            **common, kind=module_kind, machine=example.machine, steps=steps,
            names_line=names_line,
        )  # fmt: skip
    elif example.schedule is not None:
        shown = "\n".join(f"    {line}" for line in example.message[:30])
        threads = kind == "jobs"
        text = _SCHEDULE_TEMPLATE.format(
            **common, kind=kind, message=shown.replace("\\", "\\\\").replace('"""', "'''"),
            record=pprint.pformat(dict(example.schedule), width=96, compact=True),
            actors="threads" if threads else "processes",
            points="lines and lock operations" if threads else "SQL statements and fault hooks",
        )  # fmt: skip
    else:
        selector = nodeid.rsplit("::", 1)[-1].split("[", 1)[0]
        message = "\n".join(f"    {line}" for line in example.message[:30])
        fault = _server_fault(nodeid)
        note = (_FAULT_NOTE if fault else _RACE_NOTE) if option == "--adapter" else ""
        servers = ", servers=True" if fault else ""
        rerun = (
            f"replay.rerun({option!r}, TARGET, {selector!r}, profile={profile!r}, "
            f"seed={seed}{servers})"
        )
        text = _RERUN_TEMPLATE.format(**common, message=message, note=note, rerun=rerun)
    path.write_text(text)
    return path
