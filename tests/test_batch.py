"""Batch mode (``leasecheck.batch``): many target files in one ``leasecheck check``.

Real files, real pool processes: the bundled worker and catalogue mutants written to
files get the verdicts they get alone (same profile and seed), a file that cannot be
loaded has its own row and stops nothing, ``--json`` holds one record per file in the
single check's shape, and a Ctrl-C (SIGINT) stops the whole batch with nothing left.
Properties are chosen with ``--property`` and the example count with
``LEASECHECK_MAX_EXAMPLES`` so that the whole file runs in well under a minute.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from leasecheck._outputs import PHASES
from leasecheck.batch import Job, batch_exit_code, expand, is_batch
from leasecheck.cli import main
from leasecheck.mutants import by_name, materialize
from leasecheck.targets import BUNDLED_WORKER

QUICK = ["--profile", "quick", "--seed", "0"]
PROPERTIES = ["--property", "lease.edges", "--property", "lease.agreement"]
SINGLE_RECORD_KEYS = {
    "property", "verdict", "seconds", "phases", "cpu", "checked", "figures",
    "counterexample", "left_running", "replay",
}  # fmt: skip


@pytest.fixture
def small_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Few Hypothesis examples, and a scratch root of the test's own that must end empty."""
    root = tmp_path / "scratch"
    root.mkdir()
    monkeypatch.setenv("LEASECHECK_SCRATCH", str(root))
    monkeypatch.setenv("LEASECHECK_MAX_EXAMPLES", "10")
    monkeypatch.setenv("LEASECHECK_EXAMPLES", str(tmp_path / "examples"))
    yield root
    assert list(root.iterdir()) == [], "the batch left scratch behind"


@pytest.fixture
def three_files(tmp_path: Path) -> list[Path]:
    """The bundled worker and two catalogue mutants that ``lease.edges`` catches (the
    first holds ``lease.agreement`` at this size, the second does not)."""
    directory = tmp_path / "class"
    directory.mkdir()
    good = directory / "worker_bundled.py"
    good.write_text(BUNDLED_WORKER.read_text())
    mutants = [by_name(n) for n in ("identifier-trailing-newline", "enqueue-conflict-not-raised")]
    return [good, *(materialize(mutant, directory) for mutant in mutants)]


def _verdicts(document: dict[str, object]) -> dict[str, tuple[str, list[str]]]:
    rows = document["properties"]
    assert isinstance(rows, list)
    return {row["property"]: (row["verdict"], row["checked"]) for row in rows}


def test_each_file_gets_in_the_batch_the_verdicts_it_gets_alone(
    three_files: list[Path],
    small_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    alone = {}
    for path in three_files:
        # Alone, each file starts from an empty example database, as each does in the
        # batch (which only reads it): no file replays another's counterexample.
        monkeypatch.setenv("LEASECHECK_EXAMPLES", str(tmp_path / f"examples-{path.stem}"))
        out = tmp_path / f"{path.stem}.json"
        args = ["--impl", str(path), *QUICK, *PROPERTIES, "-n", "0", "--json", str(out)]
        code = main(["check", *args])
        alone[str(path)] = (code, _verdicts(json.loads(out.read_text())))
    monkeypatch.setenv("LEASECHECK_EXAMPLES", str(tmp_path / "examples"))
    capsys.readouterr()
    batch_json = tmp_path / "batch.json"
    code = main(["check", "--impl", str(three_files[0].parent), *QUICK, *PROPERTIES,
                 "-n", "2", "--json", str(batch_json)])  # fmt: skip
    text = capsys.readouterr().out
    document = json.loads(batch_json.read_text())
    batch = {r["file"]: (r["exit_code"], _verdicts(r)) for r in document["files"]}
    assert batch == alone
    assert code == document["exit_code"] == 1
    assert [alone[str(p)][1]["lease.edges"][0] for p in three_files] == ["holds", *["VIOLATED"] * 2]
    # The table: one row per file, one column per property, the summary's words.
    assert "exit  agreement     edges" in text, text
    assert any(line.split()[1:4] == ["0", "holds", "holds"] and "worker_bundled.py" in line
               for line in text.splitlines()), text  # fmt: skip
    replay = f"replay: leasecheck check --impl {three_files[1]} --profile quick --seed 0"
    # Each violated file names its first failing property, and the others after "also:".
    assert replay in text and (
        "VIOLATED: lease.edges" in text or "also: VIOLATED lease.edges" in text
    ), text
    assert "violated in 2 of 3 files" in text


def test_an_unloadable_file_has_its_row_stops_nothing_and_the_batch_exits_2(
    tmp_path: Path, small_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, broken = tmp_path / "good.py", tmp_path / "broken.py"
    good.write_text(BUNDLED_WORKER.read_text())
    broken.write_text("import no_such_module_for_leasecheck\n")
    out = tmp_path / "batch.json"
    code = main(["check", "--impl", str(broken), str(good), *QUICK,
                 "--property", "lease.edges", "--json", str(out)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 2
    row = next(line for line in captured.out.splitlines() if line.lstrip().startswith(str(broken)))
    assert "cannot load: lease worker" in row and "ModuleNotFoundError" in row, row
    assert "cannot load" in captured.err and str(broken) in captured.err
    document = json.loads(out.read_text())
    assert document["exit_code"] == 2 and [r["file"] for r in document["files"]] == [
        str(broken),
        str(good),
    ]
    unloaded, checked = document["files"]
    assert unloaded["load_error"] and unloaded["properties"] == [] and unloaded["exit_code"] == 2
    assert checked["exit_code"] == 0 and checked["load_error"] is None
    # Each file's record is the single check's --json document, property records and all.
    assert {"leasecheck", "exit_code", "interrupted", "problem", "seconds"} <= set(checked)
    (edges,) = checked["properties"]
    assert set(edges) == SINGLE_RECORD_KEYS and set(edges["phases"]) == set(PHASES)
    assert edges["verdict"] == "holds" and edges["checked"][0].endswith("edge calls")


def test_ctrl_c_stops_the_whole_batch_and_leaves_nothing_running(
    tmp_path: Path, small_run: Path
) -> None:
    mark = f"{random.randint(10**6, 10**7)}.5"
    stalling = tmp_path / "stalls.py"
    body = (
        '    """Quarantine overdue or exhausted jobs, then lease the lowest-seq claimable one."""\n'
    )
    source = BUNDLED_WORKER.read_text()
    stall = (f"    import subprocess, time\n    subprocess.Popen(['sleep', {mark!r}], "
             f"start_new_session=True)\n    time.sleep(3600)\n")  # fmt: skip
    stalling.write_text(source.replace(body, body + stall))
    good = tmp_path / "good.py"
    good.write_text(source)
    command = [sys.executable, "-m", "leasecheck", "check", "--impl", str(stalling), str(good),
               *QUICK, "--property", "lease.edges", "-n", "2"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for(f"the stalled target's `sleep {mark}`", lambda: _sleeping(mark))
        tree = psutil.Process(process.pid).children(recursive=True)
        os.kill(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        for left in _sleeping(mark):
            left.kill()
    assert process.returncode == 130, err
    assert "interrupted after" in err.decode() and "nothing of the batch is left" in err.decode()
    alive = [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == [] and _sleeping(mark) == [], alive


def _sleeping(mark: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if process.info["cmdline"] == ["sleep", mark]:
            found.append(process)
    return found


def _wait_for(what: str, ready: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.05)


def test_one_file_is_the_single_check_several_or_a_directory_a_batch(tmp_path: Path) -> None:
    one, two = tmp_path / "a.py", tmp_path / "b.py"
    for path in (one, two, tmp_path / "__init__.py", tmp_path / "conftest.py"):
        path.write_text("")
    assert not is_batch([one], []) and not is_batch([one], [two])
    assert is_batch([one, two], []) and is_batch([tmp_path], []) and is_batch([], [one, two])
    assert expand("--impl", [tmp_path, one]) == [Job("--impl", one), Job("--impl", two)]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"holds no \.py file"):
        expand("--impl", [empty])


@pytest.mark.parametrize(
    ("codes", "verdicts", "expected"),
    [((0, 0), ("holds",), 0), ((0, 1), ("holds",), 1), ((1, 2), ("holds",), 2),
     ((1, 1), ("not checked",), 2), ((0, 0), ("not run",), 2)],
)  # fmt: skip
def test_the_batch_exit_status(
    codes: tuple[int, ...], verdicts: tuple[str, ...], expected: int
) -> None:
    records = [{"exit_code": code, "properties": [{"verdict": v} for v in verdicts]}
               for code in codes]  # fmt: skip
    assert batch_exit_code(records, len(records)) == expected
    assert batch_exit_code(records[:1], 2) == 2  # a file without a record was not checked


def test_options_of_the_single_check_are_refused_in_a_batch_with_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--impl", str(tmp_path), str(tmp_path), "--export", "x"]) == 2
    assert "--export checks one target" in capsys.readouterr().err
