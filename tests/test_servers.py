"""The one server starter (``adapters.servers``): what it leaves behind, and what it refuses.

The servers' own start, kill and restart are exercised by ``test_server_adapters.py``;
this file covers the clean-up guarantees: a server dies with the process that started
it, and the next run removes the directories of a run that was killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from leasecheck.adapters import servers


@pytest.fixture
def temp_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="leasecheck-servers-root-"))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    yield root
    subprocess.run(["rm", "-rf", str(root)], check=False)


def test_orphaned_directories_are_removed_by_the_next_run(temp_root: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    orphan = temp_root / "leasecheck-pg-orphan"
    orphan.mkdir()
    (orphan / "leasecheck-owner").write_text(f"{dead.stdout.strip()} 1.0")
    alive = servers.owned_temp_dir("leasecheck-pg-")
    again = servers.owned_temp_dir("leasecheck-pg-")
    assert not orphan.exists(), "the directory of a dead run was kept"
    assert alive.exists() and again.exists(), "a live run's directory was removed"


def test_a_directory_being_made_is_not_taken_for_an_orphan(temp_root: Path) -> None:
    young = temp_root / "leasecheck-redis-young"
    young.mkdir()  # no owner file yet: another run is between mkdtemp and writing it
    servers.owned_temp_dir("leasecheck-redis-")
    assert young.exists()


def test_a_server_dies_with_the_process_that_started_it(temp_root: Path) -> None:
    code = (
        "import time\nfrom adapters import servers\n"
        "with servers.redis() as r:\n    print(r.pid, flush=True)\n    time.sleep(60)\n"
    )
    # The SIGKILLed harness cannot remove its server's directory: keep it under temp_root.
    env = {**os.environ, "TMPDIR": str(temp_root)}
    harness = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert harness.stdout is not None
        pid = int(harness.stdout.readline())
        assert psutil.Process(pid).name() == "redis-server"
    finally:
        harness.kill()  # SIGKILL: no finally block of the harness runs
        harness.wait(timeout=10)
        if harness.stdout is not None:
            harness.stdout.close()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"redis-server {pid} outlived its harness"
        time.sleep(0.05)


def test_a_database_name_must_be_plain() -> None:
    with pytest.raises(ValueError, match="database name 'a;drop' must be letters, digits"):
        servers.create_database("postgresql://postgres@127.0.0.1:1/postgres", "a;drop")
