"""lease.configuration: open_queue's pragmas, the busy timeout, no file left open, every path.

See ``crash_harness.configuration``: the pragmas read back from the connection and the
file, a blocked writer timed against a second process holding the write lock, SIGKILL
before each statement of first-time schema creation, file descriptors counted after
every call and every error path, run_file and open_queue on every kind of path, and
``send``'s side of run_once's contract.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from leasecheck.crash_harness.configuration import check_configuration
from leasecheck.models.evidence import attach
from leasecheck.plugin import Checked


@pytest.mark.leasecheck("lease.configuration")
def test_configuration(
    worker_target: ModuleType, scratch: Path, no_leaked_children: None, checked: Checked
) -> None:
    report = check_configuration(worker_target, scratch)
    checked(
        f"{report.total} checks, {report.kills} kills",
        checks=dict(report.checks), busy_waits=report.busy_waits, kills=report.kills,
    )  # fmt: skip
    print(f"lease.configuration:\n{report.render()}")
    if report.problems:
        raise attach(AssertionError("\n".join(report.problems)), report.evidence())
