"""crash_harness.configuration (lease.configuration): what it checks and how it says so.

The bundled worker passes every group of checks, each group having run; a planted
bug in each group is found and reported in the words of the spec, naming the value
it saw and what was expected (the kill table checks every configuration mutant; these
tests check the messages a student reads).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from leasecheck.crash_harness.configuration import BUSY_RATIO, check_configuration
from leasecheck.mutants import by_name, materialize
from leasecheck.targets.loader import load_worker

GROUPS = (
    "pragmas",
    "half schema",
    "busy timeout",
    "schema kills",
    "resources",
    "paths",
    "read-only",
    "callbacks",
)


def test_bundled_worker_passes_every_group(scratch: Path) -> None:
    report = check_configuration(load_worker(), scratch)
    assert report.problems == []
    assert all(report.checks[group] > 0 for group in GROUPS), report.checks
    assert report.kills >= 5  # a kill before each statement of first-time creation
    low, high = BUSY_RATIO
    assert all(low <= wait <= high for wait in report.busy_waits), report.busy_waits


@pytest.mark.parametrize(
    ("mutant", "words"),
    [
        (
            "journal-wal",
            "PRAGMA journal_mode is 'wal' on open_queue's connection, expected 'delete'",
        ),
        ("busy-timeout-zero", "times the promised timeout=1 (accepted: 0.5x to 3x)"),
        ("schema-two-transactions", "both tables must be created in one transaction"),
        (
            "schema-only-when-jobs-absent",
            "on a file holding only the jobs table, open_queue created no table 'redrives'",
        ),
        ("run-file-leaks-on-failure", "left 1 file descriptor(s) open"),
        ("run-file-accepts-fifo", "run_file on a FIFO: raised OperationalError"),
        ("retryable-exact-type", "send raises a Retryable subclass: run_once returned"),
    ],
)
def test_planted_bug_is_reported_in_the_spec_words(mutant: str, words: str, scratch: Path) -> None:
    module = load_worker(materialize(by_name(mutant), scratch))
    work = scratch / "work"
    work.mkdir()
    report = check_configuration(module, work)
    assert any(words in problem for problem in report.problems), report.problems
