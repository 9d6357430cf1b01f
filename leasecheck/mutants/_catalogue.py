"""The ``Mutant`` record and how a mutant becomes a target file."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["CATALOGUE", "Mutant", "by_name", "materialize"]

_FAMILIES = (
    "worker_bugs", "crash_bugs", "jobs_bugs", "explore_bugs", "race_bugs", "power_bugs",
    "interleaving_bugs", "interleaving_jobs_bugs", "spec_bugs",
)  # fmt: skip


@dataclass(frozen=True)
class Mutant:
    """One planted bug.

    ``edits`` are (find, replace) pairs applied in order to the bundled file of
    ``target``; each ``find`` must occur exactly once. ``caught_by`` names the
    property (``lease.agreement``, ``lease.crash-points``, ``jobs.threads``, ...)
    that is expected to catch it.
    """

    name: str
    target: Literal["worker", "jobs"]
    bug_class: str
    real_world: str
    caught_by: str
    edits: tuple[tuple[str, str], ...]

    @property
    def option(self) -> str:
        """The CLI / pytest option that checks this kind of target."""
        return "--impl" if self.target == "worker" else "--jobs-impl"

    def source(self) -> str:
        """The bundled source with every edit applied."""
        from leasecheck.targets.loader import BUNDLED_JOBS, BUNDLED_WORKER

        text = (BUNDLED_WORKER if self.target == "worker" else BUNDLED_JOBS).read_text()
        for find, replace in self.edits:
            count = text.count(find)
            if count != 1:
                raise ValueError(
                    f"mutant {self.name!r}: expected the text {find!r} exactly once in the "
                    f"bundled {self.target} but found it {count} times; update the mutant"
                )
            text = text.replace(find, replace)
        return text


def materialize(mutant: Mutant, directory: Path) -> Path:
    """Write ``mutant`` as a standalone target file in ``directory`` and return its path."""
    stem = "worker" if mutant.target == "worker" else "job_queue"
    path = directory / f"{stem}_{mutant.name.replace('-', '_')}.py"
    path.write_text(f"# leasecheck mutant {mutant.name}: {mutant.bug_class}\n{mutant.source()}")
    return path


def _gather() -> tuple[Mutant, ...]:
    found: list[Mutant] = []
    for family in _FAMILIES:
        try:
            module = importlib.import_module(f"leasecheck.mutants.{family}")
        except ModuleNotFoundError as error:
            if error.name != f"leasecheck.mutants.{family}":
                raise
            continue
        found.extend(module.MUTANTS)
    names = [m.name for m in found]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"mutant names must be unique; repeated: {duplicated}")
    return tuple(found)


CATALOGUE: tuple[Mutant, ...] = _gather()


def by_name(name: str) -> Mutant:
    for mutant in CATALOGUE:
        if mutant.name == name:
            return mutant
    known = ", ".join(m.name for m in CATALOGUE)
    raise KeyError(f"no mutant named {name!r}; the catalogue has: {known}")
