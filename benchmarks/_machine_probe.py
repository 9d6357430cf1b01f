"""One measurement in a fresh process, for ``bench_lease_machine.py --base``: steps per CPU second.

Run as ``python _machine_probe.py TREE KIND MACHINE EXAMPLES STEPS`` (KIND: ``machine``
or ``bare``; MACHINE: ``lease`` or ``jobs``). It imports leasecheck from the source tree
``TREE`` (this checkout or an exported older commit) and runs, derandomized, with no
example database, the tree's fixed pool of literals where it has one (``pin_literals``)
and the given budget:

- ``machine``: that tree's ``LeaseAgreement`` (bound to its bundled worker) or
  ``JobAgreement`` (bound to its bundled JobQueue), counting examples and steps
  (``counting``, the classes ``bench_lease_machine.py`` measures in its own process);
- ``bare``: ``bench_lease_machine.py``'s bare twin of this checkout's machine (``TREE``
  must be this checkout).

This module imports no leasecheck at the top, so that ``bench_lease_machine.py`` can
take ``counting`` and ``config`` from it whichever tree is on ``sys.path``. It prints
one JSON object: the steps, the examples, the CPU seconds of the run
(``time.process_time``), whether the pool was pinned and the tree leasecheck was
imported from.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant, run_state_machine_as_test


def config(examples: int, steps: int) -> settings:
    """Every measurement's settings: derandomized, no example database, no deadline."""
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )


def counting(machine: str) -> Any:
    """The imported tree's agreement machine ``machine`` (``lease``: ``LeaseAgreement``,
    ``jobs``: ``JobAgreement``), subclassed to count its examples and its invariant's
    checks (one before the first step and one after each). Unbound: ``bind`` it to a
    target. Its source does not change with the machine's, so neither does the seed
    Hypothesis derives from it for a derandomized run."""
    from leasecheck.stateful_tests.job_machine import JobAgreement
    from leasecheck.stateful_tests.lease_machine import LeaseAgreement

    base: Any = LeaseAgreement if machine == "lease" else JobAgreement
    checked = "consistent" if machine == "lease" else "views_agree"

    class Counting(base):  # type: ignore[misc]
        examples: ClassVar[int] = 0
        checks: ClassVar[int] = 0

        def __init__(self) -> None:
            super().__init__()
            Counting.examples += 1

    def check(self: Any) -> None:
        Counting.checks += 1
        getattr(super(Counting, self), checked)()

    setattr(Counting, checked, invariant()(check))
    Counting.__name__ = Counting.__qualname__ = f"Counting{base.__name__}"
    return Counting


def pin_literals(tree: Path) -> bool:
    """Draw with the tree's fixed pool of literals (``leasecheck.constants_pool``), as a
    check does, so that what this process imports does not change the programs. False
    for a tree from before the pool (0aa91dc): its draws mix in the literals of every
    local module imported, as its checks' did. (An editable install's import finder
    would hand such a tree this checkout's pool: only the tree's own counts.)"""
    try:
        from leasecheck import constants_pool
    except ImportError:
        return False
    if not Path(constants_pool.__file__).resolve().is_relative_to(tree.resolve()):
        return False
    return bool(constants_pool.pin())


def main(tree: Path, kind: str, machine: str, examples: int, steps: int) -> dict[str, Any]:
    pinned = pin_literals(tree)
    if kind == "bare":
        sys.path.insert(0, str(Path(__file__).parent))
        import bench_lease_machine

        subject = bench_lease_machine.MACHINES[machine][1]
    else:
        from leasecheck.targets.loader import load_jobs_target, load_worker

        subject = counting(machine)
        subject.bind(load_worker() if machine == "lease" else load_jobs_target())
    started = time.process_time()
    run_state_machine_as_test(subject, settings=config(examples, steps))
    cpu = time.process_time() - started
    import leasecheck

    return {
        "steps": subject.checks - subject.examples,  # one check before step 1
        "examples": subject.examples,
        "cpu": cpu,
        "pinned": pinned,
        "imported_from": str(Path(leasecheck.__file__).resolve().parents[1]),
    }


if __name__ == "__main__":
    tree, kind, machine, examples, steps = sys.argv[1:6]
    sys.path.insert(0, tree)
    print(json.dumps(main(Path(tree), kind, machine, int(examples), int(steps))))
