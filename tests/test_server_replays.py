"""Replays and reports on server-backed libraries (issue 22, item 4).

``leasecheck check --adapter rq|pgqueuer --export DIR`` writes a file that runs alone
under plain pytest: it starts the server its adapter declares (``Capabilities.server``)
through leasecheck's one starter (``replay.server``, or the re-run's own fixtures), fails
on the planted library and passes once ``$LEASECHECK_ADAPTER`` names a fixed one;
``--report DIR`` draws the server-backed failure from its evidence, a "not promised" one
too. Real Redis and PostgreSQL servers, started by the harness on free ports; nothing is
left in ``/dev/shm`` or the temp directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from leasecheck import replay
from leasecheck.targets.scratch import SCRATCH_ENV

OVERPROMISING_RQ = '''
from leasecheck.adapters.server_plants import OverpromisingRq


class PlantedRq(OverpromisingRq):
    """rq, claiming (wrongly) that a stale ack changes nothing."""
'''

FENCED_RQ = '''
from leasecheck.adapters.server_plants import FencedRq


class FixedRq(FencedRq):
    """rq whose ack is refused once its claim was recovered: the fixed library."""
'''

VOLATILE_PGQUEUER = '''
from leasecheck.adapters.server_plants import VolatilePgqueuer


class PlantedPgqueuer(VolatilePgqueuer):
    """pgqueuer on UNLOGGED tables, which PostgreSQL empties after a crash."""
'''


@pytest.fixture
def roots() -> Iterator[dict[str, str]]:
    """Private temp and scratch roots for every process the test starts (so other runs on
    the machine cannot blur the count); the test fails if anything is left in them: a
    server's directory, a store, a run's scratch directory."""
    # Not under tmp_path: PostgreSQL runs as its own user, who must reach its directory.
    top = Path(tempfile.mkdtemp(prefix="lc-replays-"))
    top.chmod(0o755)
    temp, scratch = top / "temp", top / "scratch"
    for root in (temp, scratch):
        root.mkdir()
        root.chmod(0o1777)
    try:
        yield {"TMPDIR": str(temp), SCRATCH_ENV: str(scratch)}
        left = sorted(str(path) for root in (temp, scratch) for path in root.iterdir())
        assert not left, f"left behind: {left}"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _env(roots: dict[str, str], adapter: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASECHECK_")}
    env.update(roots)
    if adapter is not None:
        env[replay.ENV["queue"]] = adapter
    return env


def _check(roots: dict[str, str], adapter: str, prop: str, directory: Path, *extra: str) -> str:
    """``leasecheck check --adapter FILE --property PROP --export --report``; its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "check", "--adapter", adapter,
         "--property", prop, "--profile", "ci", "-n", "0", "--export", str(directory / "out"),
         "--report", str(directory / "report"), *extra],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        env=_env(roots),
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    return done.stdout


def _plain_pytest(
    roots: dict[str, str], path: Path, adapter: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The exported file under plain pytest, run from its own directory (no conftest, no
    option), pointed at ``adapter`` through ``$LEASECHECK_ADAPTER`` if given."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path.name],
        cwd=path.parent, env=_env(roots, adapter), capture_output=True, text=True,
        timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _section(report: Path, prop: str, verdict: str) -> str:
    """The report's section of ``prop``, which must have ``verdict``."""
    page = (report / "index.html").read_text()
    head = f'<section class="lc-property" id="p-{prop.replace(".", "-")}"'
    assert f'{head} data-property="{prop}" data-verdict="{verdict}">' in page, page[-3000:]
    return page.split(head, 1)[1].split("</section>", 1)[0]


def test_an_rq_replay_starts_redis_fails_on_the_plant_and_passes_when_fenced(
    tmp_path: Path, roots: dict[str, str]
) -> None:
    planted, fixed = tmp_path / "planted_rq.py", tmp_path / "fixed_rq.py"
    planted.write_text(OVERPROMISING_RQ)
    fixed.write_text(FENCED_RQ)
    stdout = _check(roots, str(planted), "queue.stale-ack", tmp_path)
    exported = tmp_path / "out" / "test_queue_stale_ack.py"
    assert f"exported: {exported}" in stdout, stdout[-3000:]
    text = exported.read_text()
    assert "with replay.server(ADAPTER) as server:" in text
    assert "claims_0 = state.claim(" in text  # the shrunk program, step by step
    failed = _plain_pytest(roots, exported)
    assert failed.returncode == 1 and "queue.stale-ack" in failed.stdout, failed.stdout[-3000:]
    passed = _plain_pytest(roots, exported, str(fixed))
    assert passed.returncode == 0, passed.stdout[-3000:]
    section = _section(tmp_path / "report", "queue.stale-ack", "VIOLATED")
    assert "<svg" in section, "the server-backed failure has no picture"


def test_a_pgqueuer_server_fault_reruns_on_its_own_server_and_passes_when_durable(
    tmp_path: Path, roots: dict[str, str]
) -> None:
    planted = tmp_path / "planted_pgqueuer.py"
    planted.write_text(VOLATILE_PGQUEUER)
    stdout = _check(roots, str(planted), "queue.server-crash", tmp_path, "--servers")
    exported = tmp_path / "out" / "test_queue_server_crash.py"
    assert f"exported: {exported}" in stdout, stdout[-3000:]
    assert "servers=True" in exported.read_text()
    failed = _plain_pytest(roots, exported)
    assert failed.returncode == 1 and "queue.server-crash" in failed.stdout, failed.stdout[-3000:]
    passed = _plain_pytest(roots, exported, "pgqueuer")
    assert passed.returncode == 0, passed.stdout[-3000:]
    assert "<svg" in _section(tmp_path / "report", "queue.server-crash", "VIOLATED")


def test_a_not_promised_server_fault_on_rq_is_drawn(tmp_path: Path, roots: dict[str, str]) -> None:
    """rq does not promise queue.zombie-pause (its stale ack completes the job): exit 0,
    and the report still draws the counterexample."""
    report = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "check", "--adapter", "rq", "--servers",
         "--property", "queue.zombie-pause", "--profile", "ci", "-n", "0",
         "--report", str(report)],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        env=_env(roots),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "<svg" in _section(report, "queue.zombie-pause", "not promised")


def test_replay_server_yields_none_for_a_library_on_files() -> None:
    with replay.server("litequeue") as url:
        assert url is None
