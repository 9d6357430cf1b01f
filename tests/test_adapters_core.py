"""Real queue libraries through adapters: the generic properties, their verdicts, the CLI.

- the bundled lease worker, through its adapter, passes every generic property;
- each planted-bug adapter (``adapters/planted.py``) is caught by the property it names,
  and each planted control (a look-alike that breaks nothing) holds every property;
- a user's adapter file works, and what its library does not promise is reported as
  "not promised" with its counterexample (exit 0; 1 with ``--strict``);
- a broken adapter file, an unknown name and a library that is not installed exit 2
  with a sentence saying what to do.

Every check runs as ``leasecheck check`` does (``run_check``: pytest in a child
process, the ``ci`` profile, seed 0).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from leasecheck.adapters import registry
from leasecheck.adapters.planted import CONTROLS, PLANTED, PlantedBug, PlantedControl
from leasecheck.adapters.protocol import GENERIC_PROPERTIES
from leasecheck.cli import main
from leasecheck.runner import HOLDS, NOT_PROMISED, VIOLATED, CheckOptions, run_check

QUEUE_ROWS = (*GENERIC_PROPERTIES, "queue.interleavings")
"""Every row of ``leasecheck check --adapter NAME``: the generic properties, and the
statement-level schedules judged by them."""

USER_ADAPTER = '''
"""A team's in-house queue: acks by job id, and says so (it does not promise fencing)."""
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from leasecheck.adapters.lease_worker import LeaseWorker
from leasecheck.adapters.planted import AckIgnoresLease
from leasecheck.adapters.protocol import QueueClock, Promise, Promises, QueueAdapter


class ByIdQueue:
    name: ClassVar[str] = "by-id-queue"
    capabilities = LeaseWorker.capabilities
    promises: ClassVar[Promises] = replace(
        LeaseWorker.promises,
        properties={
            **LeaseWorker.promises.properties,
            "queue.stale-ack": Promise(False, "README: ack(job_id) completes the job by id"),
        },
    )

    def version(self) -> str:
        return "1.0"

    def create(self, directory: Path, server: str | None) -> str:
        return LeaseWorker().create(directory, server)

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return AckIgnoresLease(location, clock)
'''


def _check(adapter: str, **options: object) -> dict[str, str]:
    result = run_check(CheckOptions(adapter=adapter, profile="ci", workers="0", **options))  # type: ignore[arg-type]
    return {name: prop.verdict for name, prop in result.properties.items()} | {
        "exit": str(result.exit_code)
    }


def test_the_lease_worker_adapter_passes_every_generic_property() -> None:
    verdicts = _check("lease-worker")
    assert verdicts == {**dict.fromkeys(QUEUE_ROWS, HOLDS), "exit": "0"}


@pytest.mark.parametrize("bug", PLANTED, ids=[bug.name for bug in PLANTED])
def test_each_planted_bug_is_caught_by_the_property_it_names(bug: PlantedBug) -> None:
    verdicts = _check(f"planted:{bug.name}", first=bug.caught_by, stop_at_first_failure=True)
    assert verdicts[bug.caught_by] == VIOLATED, verdicts
    assert verdicts["exit"] == "1"


@pytest.mark.parametrize("control", CONTROLS, ids=[control.name for control in CONTROLS])
def test_each_planted_control_holds_every_property(control: PlantedControl) -> None:
    result = run_check(CheckOptions(adapter=f"planted:{control.name}", profile="ci", workers="0"))
    verdicts = {name: prop.verdict for name, prop in result.properties.items()}
    assert verdicts == dict.fromkeys(QUEUE_ROWS, HOLDS), result.log[-3000:]
    assert result.exit_code == 0
    assert "leased to None" not in result.log


def test_a_stale_ack_that_deletes_a_job_is_a_stale_ack_finding_not_a_loss() -> None:
    chosen = ("queue.stale-ack", "queue.no-loss")
    options = CheckOptions(adapter="planted:ack-deletes-by-id", profile="ci", workers="0")
    result = run_check(replace(options, properties=chosen))
    verdicts = {name: prop.verdict for name, prop in result.properties.items()}
    assert verdicts == {"queue.stale-ack": VIOLATED, "queue.no-loss": HOLDS}, result.log[-3000:]
    example = result.properties["queue.stale-ack"].counterexample
    assert example is not None
    text = "\n".join(example.message)
    assert "whose job was claimed again since, deleted it while" in text, text
    assert "None" not in text.split("Failing test case")[0], text


UNFENCED_NACK = USER_ADAPTER.replace("AckIgnoresLease", "NackIgnoresLease").replace(
    "acks by job id", "nacks by job id"
)


def test_two_leases_through_a_stale_nack_are_judged_by_the_fencing_promise(
    tmp_path: Path,
) -> None:
    path = tmp_path / "by_id_nack.py"
    path.write_text(UNFENCED_NACK)
    options = CheckOptions(adapter=str(path), profile="ci", workers="0")
    result = run_check(replace(options, properties=("queue.exclusive",)))
    prop = result.properties["queue.exclusive"]
    assert (prop.verdict, result.exit_code) == (NOT_PROMISED, 0), result.log[-3000:]
    example = prop.counterexample
    assert example is not None and any("as stale claim" in line for line in example.message)
    # The races, what queue.exclusive promises even without fencing, still ran after it.
    assert any("found no job held twice" in line for line in example.message), example


def test_an_ack_final_failure_tells_the_job_story_as_numbered_steps(tmp_path: Path) -> None:
    from leasecheck.adapters.registry import load_library
    from leasecheck.crash_harness.queue_crash import check_ack_final

    # 20 kill rounds, not 5: under load a round's workers may not ack before their kill
    # (the kill moment is real time), and five such rounds in a row were seen in one run.
    with pytest.raises(AssertionError) as failure:
        check_ack_final(load_library("planted:recover-revives-done"), tmp_path, 20, 0)
    story = str(failure.value).split("\n")[1:]
    assert story[0].startswith("  1. w") and " claimed job " in story[0], story
    assert any(" acked job " in line and line.endswith("-> True") for line in story), story
    assert any("SIGKILL w0 and w1" in line for line in story), story
    assert story[-1].endswith("again") or "the store holds job" in story[-1], story


def test_every_generic_property_has_a_planted_bug() -> None:
    assert {bug.caught_by for bug in PLANTED} == set(GENERIC_PROPERTIES)


def test_a_user_adapter_file_is_judged_by_its_own_promises(tmp_path: Path) -> None:
    path = tmp_path / "by_id_queue.py"
    path.write_text(USER_ADAPTER)
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "check", "--adapter", str(path), "-n", "0"],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "queue library: by-id-queue 1.0" in done.stdout
    assert "queue.stale-ack        not promised" in done.stdout
    assert "not promised: queue.stale-ack (a documented limitation, not a violation)" in (
        done.stdout
    )
    assert "README: ack(job_id) completes the job by id" in done.stdout
    assert "state.zombie_ack(" in done.stdout  # the shrunk program
    assert "not promised by the library and failing: queue.stale-ack" in done.stdout


def test_strict_turns_a_not_promised_failure_into_exit_1(tmp_path: Path) -> None:
    path = tmp_path / "by_id_queue.py"
    path.write_text(USER_ADAPTER)
    result = run_check(
        CheckOptions(adapter=str(path), strict=True, profile="ci", workers="0",
                     first="queue.stale-ack", stop_at_first_failure=True)
    )  # fmt: skip
    assert result.properties["queue.stale-ack"].verdict == VIOLATED
    assert result.exit_code == 1
    assert result.properties["queue.stale-ack"].verdict != NOT_PROMISED


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("class Queue:\n    name = 'q'\n", "class Queue is not a QueueLibrary: it has no"),
        ("x = 1\n", "defines no class; define one class with name, capabilities"),
        ("import leasecheck_no_such_package\n", "failed to import: ModuleNotFoundError"),
    ],
)
def test_a_broken_adapter_file_exits_2_naming_the_file(
    tmp_path: Path, source: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken_adapter.py"
    path.write_text(source)
    assert main(["check", "--adapter", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and expected in err


def test_an_unknown_adapter_name_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--adapter", "rabbit"]) == 2
    err = capsys.readouterr().err
    assert "run `leasecheck adapters` to list them" in err and "did you mean" not in err


@pytest.mark.parametrize(
    ("wrong", "meant"),
    [("litequeu", "litequeue"), ("persistqueue", "persist-queue"),
     ("planted:ack-ignore-lease", "planted:ack-ignores-lease")],
)  # fmt: skip
def test_a_misspelled_adapter_name_gets_did_you_mean(
    wrong: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--adapter", wrong]) == 2
    assert f"(did you mean {meant!r}?)" in capsys.readouterr().err


def test_a_misspelled_property_exits_2_with_did_you_mean(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check", "--adapter", "lease-worker", "--property", "queue.stal-ack"]) == 2
    err = capsys.readouterr().err
    assert "--property 'queue.stal-ack' is no leasecheck property" in err
    assert "did you mean 'queue.stale-ack'?" in err


def test_a_library_that_is_not_installed_exits_2_with_the_pip_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "leasecheck_fake_adapter.py").write_text(
        "import leasecheck_absent_library\n\nclass Fake:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry.BUNDLED, "fakelib", "leasecheck_fake_adapter:Fake")
    assert main(["check", "--adapter", "fakelib"]) == 2
    err = capsys.readouterr().err
    assert "needs the Python package 'leasecheck_absent_library'" in err
    assert "pip install 'leasecheck[real]'" in err


def test_leasecheck_adapters_lists_names_with_their_promises(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["adapters"]) == 0
    out = capsys.readouterr().out
    for name in registry.BUNDLED:
        assert out.count(f"{name}") >= 1
    assert "queue.stale-ack      promised      docs/lease-worker.md" in out
    # A library whose lease is its server's (RabbitMQ's one consumer_timeout) says so.
    assert "kombu-amqp  (kombu-amqp " in out
    assert "started for the run: rabbitmq, whose one lease is 300 ms (+40 ms tick)" in out
    assert "generic properties: not run" not in out


def test_mutants_list_shows_the_planted_adapters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutants", "--list"]) == 0
    out = capsys.readouterr().out
    for bug in PLANTED:
        assert f"planted:{bug.name}  [adapter, caught by {bug.caught_by}]" in out


def test_queue_properties_never_run_without_adapter() -> None:
    from leasecheck.runner import CHECK_INI, PROPERTIES_DIR

    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(PROPERTIES_DIR), "-c", str(CHECK_INI),
         "--rootdir", str(PROPERTIES_DIR), "--collect-only", "-q"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout
    assert "test_queue_" not in done.stdout
    assert "test_lease_agreement" in done.stdout


def _variant(tmp_path: Path, capabilities: str) -> Path:
    """The user adapter above with other declared capabilities."""
    path = tmp_path / "variant_queue.py"
    path.write_text(
        USER_ADAPTER.replace(
            "capabilities = LeaseWorker.capabilities",
            f"capabilities = replace(LeaseWorker.capabilities, {capabilities})",
        )
    )
    return path


def test_a_real_clock_with_whole_second_leases_is_refused_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    variant = _variant(tmp_path, "clock='real', lease_granularity=1.0")
    assert main(["check", "--adapter", str(variant)]) == 2
    assert "declares clock='real' with leases of at least 1.0 s" in capsys.readouterr().err


def test_a_single_process_library_is_not_run_and_never_passes(tmp_path: Path) -> None:
    path = _variant(tmp_path, "multiprocess=False")
    result = run_check(CheckOptions(adapter=str(path), profile="quick", workers="0"))
    not_run = {name for name, prop in result.properties.items() if prop.verdict == "not run"}
    assert not_run == {
        "queue.ack-final",
        "queue.exclusive",
        "queue.linearizable",
        "queue.interleavings",
    }
    assert result.exit_code == 2


def test_an_adapter_written_before_the_renames_still_loads() -> None:
    """``JobView`` and ``Clock`` became ``StoredJob`` and ``QueueClock``: an outside
    adapter importing the old names keeps working, warned."""
    from leasecheck.adapters import protocol

    with pytest.warns(DeprecationWarning, match="JobView is now StoredJob"):
        old = protocol.JobView
    assert old is protocol.StoredJob
    with pytest.warns(DeprecationWarning, match="Clock is now QueueClock"):
        from leasecheck.adapters.protocol import Clock
    assert Clock is protocol.QueueClock
    with pytest.raises(AttributeError):
        protocol.NoSuchName  # noqa: B018
