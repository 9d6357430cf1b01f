"""``leasecheck adapters new NAME``: the template adapter and its test run as written.

The template is a working stand-in queue (SQLite), so a user starts from files that
pass, then replaces each TODO with their library's call. It must load as a user's
adapter file, pass its own smoke test, hold the properties, and never overwrite.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from leasecheck.adapter_template import write_template
from leasecheck.adapters.registry import load_library
from leasecheck.cli import main
from leasecheck.runner import HOLDS, CheckOptions, run_check


def test_adapters_new_writes_an_adapter_and_its_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["adapters", "new", "my-queue"]) == 0
    assert "docs/writing-an-adapter.md" in capsys.readouterr().out
    adapter, test = tmp_path / "my_queue.py", tmp_path / "test_my_queue.py"
    library = load_library(str(adapter))
    assert (library.name, library.version()) == ("my-queue", "0.0 (stand-in)")
    assert adapter.read_text().count("# TODO") >= 10
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:cacheprovider",
         "-k", "round_trip"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_template_holds_the_machine_properties(tmp_path: Path) -> None:
    adapter, _ = write_template("stand-in", tmp_path)
    chosen = ("queue.stale-ack", "queue.exclusive")
    result = run_check(
        CheckOptions(adapter=str(adapter), profile="ci", workers="0", properties=chosen)
    )
    verdicts = {name: prop.verdict for name, prop in result.properties.items()}
    assert verdicts == dict.fromkeys(chosen, HOLDS), result.log[-3000:]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["adapters", "new"], "needs a name"),
        (["adapters", "new", "My Queue"], "use lowercase letters"),
    ],
)
def test_adapters_new_refuses_a_bad_name(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert expected in capsys.readouterr().err


def test_adapters_new_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_mine.py").write_text("# mine\n")
    assert main(["adapters", "new", "mine"]) == 2
    assert "test_mine.py exists" in capsys.readouterr().err
    assert (tmp_path / "test_mine.py").read_text() == "# mine\n"
    assert not (tmp_path / "mine.py").exists()
