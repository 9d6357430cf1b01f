"""crash_harness.power_loss: the spec's setting is reported truthfully, mutants are caught."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from leasecheck.crash_harness.power_loss import Settings, check_power_loss
from leasecheck.mutants import by_name, materialize
from leasecheck.runner import PROPERTIES_DIR
from leasecheck.targets import BUNDLED_WORKER, load_worker


def _variant(directory: Path, find: str, replace: str) -> ModuleType:
    path = directory / f"worker_{abs(hash(replace))}.py"
    path.write_text(BUNDLED_WORKER.read_text().replace(find, replace))
    return load_worker(path)


def test_spec_setting_loses_only_the_documented_last_commit(scratch: Path) -> None:
    report = check_power_loss(load_worker(), scratch, 2, 64, 0, strict=False)
    assert report.histories == 2 and report.cuts > report.operations
    assert report.spec_losses > 0, "lease-worker.md's DELETE+FULL is documented to lose one"
    assert "FINDING about lease-worker.md" in report.render()
    assert report.settings == {Settings("delete", 2)}


def test_strict_mode_fails_the_spec_setting_with_a_one_op_counterexample(scratch: Path) -> None:
    with pytest.raises(AssertionError) as raised:
        check_power_loss(load_worker(), scratch, 2, 64, 0, strict=True)
    text = str(raised.value)
    assert "lease.power-loss (strict)" in text
    assert "unlink of queue.db-journal (no directory fsync after it)" in text
    assert "PRAGMA synchronous=EXTRA" in text
    assert "op 0:" in text and "op 1:" not in text, "shrunk to the one op that was lost"
    assert "the queue file holds 1 job (durable)" in text, "and to the job that op changes"


def test_synchronous_extra_holds_even_in_strict_mode(scratch: Path) -> None:
    sync = 'con.execute("PRAGMA synchronous=FULL")'
    module = _variant(scratch, sync, 'con.execute("PRAGMA synchronous=EXTRA")')
    report = check_power_loss(module, scratch, 2, 64, 0, strict=True)
    assert report.spec_losses == 0 and report.states > 1000


@pytest.mark.parametrize("name", ["synchronous-off", "journal-memory", "wal-normal"])
def test_power_mutants_are_caught_in_the_default_mode(scratch: Path, name: str) -> None:
    module = load_worker(materialize(by_name(name), scratch))
    with pytest.raises(AssertionError, match="what would have kept it: PRAGMA"):
        check_power_loss(module, scratch, 3, 64, 0, strict=False)


def test_a_torn_operation_is_named_as_such_with_no_pragma_for_it(scratch: Path) -> None:
    """A redrive split into two transactions leaves, after a cut between them, an audit row
    beside a job still dead: no state of the model. Every write reached the disk, so no
    pragma would have kept anything (an outside tester's report read "an operation that
    had returned to its caller is not in the reopened file" and "synchronous=EXTRA")."""
    module = load_worker(materialize(by_name("redrive-audit-committed-alone"), scratch))
    with pytest.raises(AssertionError) as raised:
        check_power_loss(module, scratch, 6, 64, 0, strict=False)
    message = str(raised.value)
    headline = message.splitlines()[0]
    assert "none of the states the history passed through (an operation was torn)" in headline
    assert "not on disk at the cut: nothing" in message
    assert "what would have kept it: no pragma: every write reached the disk" in message
    assert "synchronous=EXTRA" not in message


def test_same_seed_same_states(scratch: Path) -> None:
    first = check_power_loss(load_worker(), scratch / "a", 1, 32, 7, strict=False)
    second = check_power_loss(load_worker(), scratch / "b", 1, 32, 7, strict=False)
    assert (first.cuts, first.states, first.spec_losses) == (
        second.cuts,
        second.states,
        second.spec_losses,
    )


@pytest.mark.parametrize(
    ("settings", "remedy"),
    [
        (Settings("delete", 0), "synchronous=FULL"),
        (Settings("memory", 2), "journal_mode=DELETE"),
        (Settings("wal", 1), "synchronous=FULL"),
        (Settings("delete", 2), "synchronous=EXTRA"),
        (Settings("wal", 2), "no pragma"),
    ],
)
def test_remedy_names_the_pragma(settings: Settings, remedy: str) -> None:
    assert remedy in settings.remedy()


def test_missing_strace_exits_2_with_the_install_command(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(PROPERTIES_DIR / "test_power_loss.py"),
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "apt-get install -y strace" in done.stdout + done.stderr
