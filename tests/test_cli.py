"""The ``leasecheck`` command: exit statuses and the sentences users read.

Usage mistakes and targets that cannot be loaded must exit 2 with a sentence that
names the file and says what to do; these never start pytest.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from leasecheck.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leasecheck", *args],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["check", "--profile", "fast"], "argument --profile: invalid choice: 'fast'"),
        (["check", "-n", "many"], "-n takes a number of workers or 'auto', not 'many'"),
        (["check", "--seed", "x"], "argument --seed: invalid int value: 'x'"),
        (["check", "--bogus"], "unrecognized arguments: --bogus"),
        ([], "the following arguments are required"),
    ],
)
def test_usage_errors_exit_2_and_say_what_to_do(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err
    assert "--help` to see every option" in err


def test_missing_impl_file_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "worker.py"
    assert main(["check", "--impl", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"--impl {str(missing)!r} is not a file" in err
    assert "pass the path of a lease worker file" in err


def test_impl_with_a_syntax_error_names_the_file_and_the_error(tmp_path: Path) -> None:
    broken = tmp_path / "worker.py"
    broken.write_text("def claim(:\n")
    done = run_cli("check", "--impl", str(broken))
    assert done.returncode == 2
    assert f"cannot load --impl {str(broken)!r}" in done.stderr
    assert "SyntaxError" in done.stderr


def test_impl_missing_names_lists_them(tmp_path: Path) -> None:
    partial = tmp_path / "worker.py"
    partial.write_text("class Conflict(Exception): pass\ndef claim(): pass\n")
    done = run_cli("check", "--impl", str(partial))
    assert done.returncode == 2
    assert "does not define Retryable, Permanent, BadAck, retry_delay" in done.stderr


def test_impl_that_exits_while_importing_is_a_load_error(tmp_path: Path) -> None:
    quitter = tmp_path / "worker.py"
    quitter.write_text("import sys\nsys.exit(3)\n")
    done = run_cli("check", "--impl", str(quitter))
    assert done.returncode == 2
    assert "failed to import: SystemExit: 3" in done.stderr


def test_jobs_impl_without_jobqueue_says_what_to_define(tmp_path: Path) -> None:
    empty = tmp_path / "job_queue.py"
    empty.write_text("X = 1\n")
    done = run_cli("check", "--jobs-impl", str(empty))
    assert done.returncode == 2
    assert "does not define a class JobQueue" in done.stderr


def test_export_must_be_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "out"
    afile.write_text("")
    assert main(["check", "--export", str(afile)]) == 2
    assert "is a file; pass a directory" in capsys.readouterr().err
