"""crash_harness.power_libraries: the real SQLite queue libraries under the power-loss model.

Needs the ``power`` extra (``pip install -e '.[power]'``, part of ``dev``); a library
that is not installed fails with that command, never a silent skip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from leasecheck.crash_harness.power_libraries import INSTALL, LIBRARIES, check_library

EXPECTED = {
    "litequeue": "not promised",
    "persist-queue": "holds",
    "localqueue": "not promised",
    "localqueue-durable": "holds",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_library_verdict(name: str, tmp_path: Path) -> None:
    library = LIBRARIES[name]
    if not library.installed():
        pytest.fail(f"{library.module} is not installed; install it with `{INSTALL}`")
    report = check_library(library, tmp_path, limit=32)
    assert report.cuts > 10 and report.states > report.cuts
    assert report.verdict(library) == EXPECTED[name], report.first
    if report.losses:
        assert "acknowledged put of ['item-0'] is gone" in report.first


def test_unknown_library_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from leasecheck.crash_harness.power_libraries import main

    assert main(["nosuchqueue"]) == 2
    assert "choose from litequeue" in capsys.readouterr().out
