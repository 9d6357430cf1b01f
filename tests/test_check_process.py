"""A check's test process tunes the cyclic collector for itself only (``_events``).

Real pytest processes with ``-p leasecheck._events``: with the runner's events file named
(``LEASECHECK_EVENTS``) the process uses ``GC_THRESHOLDS`` and freezes what is left once
its session ends; without it (anyone else's pytest that loads the plugin) nothing changes.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

from leasecheck._events import GC_THRESHOLDS
from leasecheck._wire import EVENTS_ENV

READER = """
import atexit, gc, json, os

def test_reads_the_collector() -> None:
    seen = {"during": list(gc.get_threshold())}

    def at_exit() -> None:  # after pytest's session has finished
        seen["frozen_at_exit"] = gc.get_freeze_count()
        with open(os.environ["GC_OUT"], "w") as out:
            json.dump(seen, out)

    atexit.register(at_exit)
"""


def _run(tmp_path: Path, events: bool) -> dict[str, object]:
    (tmp_path / "test_reader.py").write_text(READER)
    out = tmp_path / "gc.json"
    env = {**os.environ, "GC_OUT": str(out), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop(EVENTS_ENV, None)
    if events:
        env[EVENTS_ENV] = str(tmp_path / "events.jsonl")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "leasecheck._events", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_reader.py")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(out.read_text()))


def test_a_check_process_collects_rarely_and_freezes_at_the_end(tmp_path: Path) -> None:
    seen = _run(tmp_path, events=True)
    assert seen["during"] == list(GC_THRESHOLDS)
    assert isinstance(seen["frozen_at_exit"], int) and seen["frozen_at_exit"] > 0


def test_any_other_pytest_process_keeps_pythons_collector(tmp_path: Path) -> None:
    seen = _run(tmp_path, events=False)
    assert seen["during"] == list(gc.get_threshold()) != list(GC_THRESHOLDS)
    assert seen["frozen_at_exit"] == 0
