"""The ``leasecheck`` command: exit statuses and the sentences users read.

Usage mistakes and targets that cannot be loaded must exit 2 with a sentence that
names the file and says what to do; these never start pytest.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import time
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


def test_missing_impl_file_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "worker.py"
    assert main(["check", "--impl", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"--impl {str(missing)!r} is not a file" in err
    assert "pass the path of a lease worker file" in err


@pytest.mark.parametrize(
    ("option", "filename", "source", "expected"),
    [
        ("--impl", "worker.py", "def claim(:\n", "SyntaxError"),
        (
            "--impl",
            "worker.py",
            "class Conflict(Exception): pass\ndef claim(): pass\n",
            "does not define Retryable, Permanent, BadAck, retry_delay",
        ),
        ("--impl", "worker.py", "import sys\nsys.exit(3)\n", "failed to import: SystemExit: 3"),
        ("--jobs-impl", "job_queue.py", "X = 1\n", "does not define a class JobQueue"),
    ],
    ids=["syntax-error", "missing-names", "exits-on-import", "no-jobqueue"],
)
def test_a_target_that_cannot_load_names_the_file_and_what_is_wrong(
    tmp_path: Path, option: str, filename: str, source: str, expected: str
) -> None:
    target = tmp_path / filename
    target.write_text(source)
    done = run_cli("check", option, str(target))
    assert done.returncode == 2
    assert f"cannot load {option} {str(target)!r}" in done.stderr
    assert expected in done.stderr


def test_export_must_be_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "out"
    afile.write_text("")
    assert main(["check", "--export", str(afile)]) == 2
    assert "is a file; pass a directory" in capsys.readouterr().err


# --- verdicts on real targets (each runs the lease-worker properties, quick profile) ----


RETRY_DELAY_START = '    _check_int("retry_delay", "attempt", attempt, 1, 16)\n'


def _mutant_file(directory: Path, find: str, replace: str) -> Path:
    """The bundled worker with ``find`` replaced, written as ``directory/worker.py``."""
    from leasecheck.targets import BUNDLED_WORKER

    source = BUNDLED_WORKER.read_text()
    assert source.count(find) == 1, find
    source = source.replace(find, replace)
    path = directory / "worker.py"
    path.write_text(source)
    return path


def run_check_cli(
    target: Path, *extra: str, budget: str = "60"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leasecheck", "check", "--impl", str(target),
         "--profile", "quick", "-n", "0", *extra],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        env={**os.environ, "LEASECHECK_BUDGET": budget},
    )  # fmt: skip


def test_a_target_that_hangs_gets_a_named_verdict(scratch: Path) -> None:
    forever = _mutant_file(scratch, RETRY_DELAY_START, "    while True:\n        pass\n")
    done = run_check_cli(forever, budget="15")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "HUNG" in done.stdout
    # The property and the target operation that was running, never a pytest node id
    # (the first property to call retry_delay: the agreement machine or the edge sweep).
    assert re.search(r"^HUNG: lease\.(agreement|edges)\b", done.stdout, re.MULTILINE), done.stdout
    # The outermost call into the target, and the function it was stuck in when that differs.
    stuck = (
        r"did not finish within 15 s while running "
        r"(retry_delay|\w+ \(worker\.py line \d+, in retry_delay\))"
    )
    assert re.search(stuck, done.stdout) or "running retry_delay (worker.py line " in done.stdout
    assert "the target may hang" in done.stdout
    for name in ("lease.linearizable", "lease.races"):  # never started: a row all the same
        assert re.search(rf"^  {re.escape(name)} +not run ", done.stdout, re.MULTILINE), name


def test_a_target_that_blocks_for_good_is_hung_at_once_and_the_rest_still_run(
    scratch: Path,
) -> None:
    """A ``cancel`` that takes its own lock twice: the test process sees the call stand
    still with nothing of it at work, and says so long before the budget; the properties
    the stopped run had not finished run again, so each has a verdict."""
    from leasecheck.targets import BUNDLED_JOBS

    needs = "needs a PENDING job but it is {job.status.name}"
    source = BUNDLED_JOBS.read_text()
    assert source.count(needs) == 1
    deadlocks = scratch / "job_queue.py"  # view() takes the lock cancel() holds
    deadlocks.write_text(source.replace(needs, "needs a PENDING job but it is {self.view(job_id)}"))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "check", "--jobs-impl", str(deadlocks),
         "-n", "0", "--property", "jobs.agreement", "--property", "jobs.edges"],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        env={**os.environ, "LEASECHECK_BUDGET": "400"},
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"^  jobs\.agreement +HUNG ", done.stdout, re.MULTILINE), done.stdout
    assert "blocked in cancel (job_queue.py line " in done.stdout, done.stdout
    assert ", in view): for 10 s that thread did not move" in done.stdout, done.stdout
    # The longest property runs first: jobs.edges had not run when the run was stopped.
    assert re.search(r"^  jobs\.edges +holds ", done.stdout, re.MULTILINE), done.stdout
    assert "not run" not in done.stdout
    assert took < 200, took  # the block was seen, not waited out (budget 400 s)


def test_a_target_that_exits_the_process_gets_a_named_verdict(scratch: Path) -> None:
    quitter = _mutant_file(scratch, RETRY_DELAY_START, "    os._exit(3)\n")
    done = run_check_cli(quitter)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "CRASHED" in done.stdout
    assert "the test process ended (exit status 3) while this property ran" in done.stdout


def test_a_target_that_kills_an_xdist_worker_reads_crashed_not_violated(scratch: Path) -> None:
    """Under -n, pytest-xdist replaces a dead worker and reports its test as failed: the
    row must still read CRASHED (no assertion failed), and nothing is exported as a
    counterexample of a crash."""
    quitter = _mutant_file(scratch, RETRY_DELAY_START, "    os._exit(3)\n")
    done = run_check_cli(quitter, "-n", "1", "--property", "lease.edges")
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"^  lease\.\S+ +CRASHED ", done.stdout, re.MULTILINE), done.stdout
    assert not re.search(r"^  lease\.\S+ +VIOLATED ", done.stdout, re.MULTILINE), done.stdout
    assert "died while this property ran" in done.stdout
    assert "crashed: lease.edges" in done.stdout and "violated:" not in done.stdout


def test_a_violation_is_reported_exported_and_the_export_replays(scratch: Path) -> None:
    zombie = _mutant_file(scratch, '    ("token", "token"),\n', "")
    export = scratch / "export"
    done = run_check_cli(zombie, "--export", str(export))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "VIOLATED: lease.agreement (" in done.stdout
    assert "returned 'done' on the target but returned False on the model" in done.stdout
    assert "replay: leasecheck check --impl" in done.stdout
    exported = export / "test_lease_agreement.py"
    assert exported.is_file()

    def pytest_on(path: Path, env: dict[str, str] | None = None) -> int:
        run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)]
        environment = {**os.environ, **(env or {})}
        return subprocess.run(run, capture_output=True, timeout=300, env=environment).returncode

    assert pytest_on(exported) == 1  # fails on the buggy worker
    # Portable: committed with the worker and moved elsewhere, it still finds it ...
    moved = scratch / "elsewhere" / "repo"
    shutil.copytree(export, moved / "export")
    shutil.copy(zombie, moved / "worker.py")
    zombie.unlink()
    assert pytest_on(moved / "export" / exported.name) == 1
    # ... it imports only leasecheck.replay, and an environment variable retargets it.
    tree = ast.parse(exported.read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    named = [(getattr(n, "module", None), [a.name for a in n.names]) for n in imports]
    assert named == [("leasecheck", ["replay"])]
    from leasecheck.targets import BUNDLED_WORKER

    fixed = {"LEASECHECK_IMPL": str(BUNDLED_WORKER)}
    assert pytest_on(moved / "export" / exported.name, fixed) == 0  # passes once fixed


def test_a_queue_violation_exports_a_replay_that_fails_until_the_library_is_fixed(
    scratch: Path,
) -> None:
    """``--adapter planted:recover-deletes-expired``: queue.no-loss exports the shrunk
    machine program, queue.linearizable a re-run; both fail on the planted library and
    pass on the lease-worker adapter; the report draws both failures."""
    export, report = scratch / "export", scratch / "report"
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "check", "--adapter",
         "planted:recover-deletes-expired", "--profile", "quick", "-n", "0",
         "--export", str(export), "--report", str(report)],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    replayed, rerun = export / "test_queue_no_loss.py", export / "test_queue_linearizable.py"
    assert f"exported: {replayed}" in done.stdout and f"exported: {rerun}" in done.stdout
    assert "claims_0 = state.claim(" in replayed.read_text()
    assert "no file can replay the" in rerun.read_text()

    def pytest_on(path: Path) -> subprocess.CompletedProcess[str]:
        run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)]
        return subprocess.run(run, capture_output=True, text=True, timeout=300)

    for path in (replayed, rerun):
        failed = pytest_on(path)
        assert failed.returncode == 1 and "queue." in failed.stdout, failed.stdout[-2000:]
        planted = repr("planted:recover-deletes-expired")
        path.write_text(path.read_text().replace(planted, repr("lease-worker")))
        fixed = pytest_on(path)
        assert fixed.returncode == 0, fixed.stdout[-2000:]
    page = (report / "index.html").read_text()
    for prop in ("queue.no-loss", "queue.linearizable"):
        section = page.split(f'data-property="{prop}" data-verdict')[1].split("</section>")[0]
        assert "<svg" in section and "lc-disagreement" in section, f"{prop}: no picture"


def test_an_export_with_nothing_violated_says_why_the_directory_is_empty(scratch: Path) -> None:
    """A stranger got an empty --export directory and no word: "not promised"
    counterexamples are not exported unless --strict makes them VIOLATED."""
    export = scratch / "export"
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "check", "--adapter", "litequeue", "--profile",
         "quick", "--property", "queue.stale-ack", "--export", str(export), "-n", "0"],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not promised: queue.stale-ack" in done.stdout, done.stdout
    assert f"--export {export}: nothing exported" in done.stdout, done.stdout
    assert "1 not promised; --strict makes those VIOLATED" in done.stdout


def test_the_command_line_starts_without_pytest_or_hypothesis() -> None:
    """``leasecheck check`` reads its test process' events as data (``_wire`` names), so
    the command line itself imports neither pytest nor Hypothesis: with Hypothesis'
    entry-point plugins (trio's) that import cost about a second before the test process
    even started."""
    code = (
        "import sys, leasecheck.cli, leasecheck.runner, leasecheck._outputs\n"
        "print(sorted(m for m in ('pytest', 'hypothesis', '_pytest') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert loaded.stdout.strip() == "[]", loaded.stdout
