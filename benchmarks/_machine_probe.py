"""One measurement in a fresh process, for ``bench_lease_machine.py --base``: steps per CPU second.

Run as ``python _machine_probe.py TREE KIND MACHINE EXAMPLES STEPS`` (KIND: ``machine``
or ``bare``; MACHINE: ``lease`` or ``jobs``). It imports leasecheck from the source tree
``TREE`` (this checkout or an exported older commit) and runs, derandomized, with no
example database and the given budget:

- ``machine``: that tree's ``LeaseAgreement`` (bound to its bundled worker) or
  ``JobAgreement`` (bound to its bundled JobQueue), counting examples and steps the way
  ``bench_lease_machine.py``'s counting machines do (its invariant, called once before
  the first step and once after each);
- ``bare``: ``bench_lease_machine.py``'s bare twin of this checkout's machine (``TREE``
  must be this checkout).

It prints one JSON object: the steps, the examples, the CPU seconds of the run
(``time.process_time``) and the tree leasecheck was imported from.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, ClassVar


def counting(machine: str) -> Any:
    """The tree's agreement machine ``machine``, bound to its bundled target, counting."""
    from hypothesis.stateful import invariant

    from leasecheck.targets.loader import load_jobs_target, load_worker

    if machine == "lease":
        from leasecheck.stateful_tests.lease_machine import LeaseAgreement

        class CountingAgreement(LeaseAgreement):
            examples: ClassVar[int] = 0
            checks: ClassVar[int] = 0

            def __init__(self) -> None:
                super().__init__()
                CountingAgreement.examples += 1

            @invariant()
            def consistent(self) -> None:
                CountingAgreement.checks += 1
                super().consistent()

        CountingAgreement.bind(load_worker())
        return CountingAgreement
    from leasecheck.stateful_tests.job_machine import JobAgreement

    class CountingJobs(JobAgreement):
        examples: ClassVar[int] = 0
        checks: ClassVar[int] = 0

        def __init__(self) -> None:
            super().__init__()
            CountingJobs.examples += 1

        @invariant()
        def views_agree(self) -> None:
            CountingJobs.checks += 1
            super().views_agree()

    CountingJobs.bind(load_jobs_target())
    return CountingJobs


def main(kind: str, machine: str, examples: int, steps: int) -> dict[str, Any]:
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    if kind == "bare":
        sys.path.insert(0, str(Path(__file__).parent))
        import bench_lease_machine

        subject = bench_lease_machine.MACHINES[machine][1]
    else:
        subject = counting(machine)
    config = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    started = time.process_time()
    run_state_machine_as_test(subject, settings=config)
    cpu = time.process_time() - started
    import leasecheck

    return {
        "steps": subject.checks - subject.examples,  # one check before step 1
        "examples": subject.examples,
        "cpu": cpu,
        "imported_from": str(Path(leasecheck.__file__).resolve().parents[1]),
    }


if __name__ == "__main__":
    tree, kind, machine, examples, steps = sys.argv[1:6]
    sys.path.insert(0, tree)
    print(json.dumps(main(kind, machine, int(examples), int(steps))))
