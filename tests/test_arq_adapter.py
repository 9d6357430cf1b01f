"""arq, in its own environment: ``.venv-arq`` (arq pins ``redis<6``; kombu needs >=6.4).

This file runs in the main suite and drives the other environment: arq's scenarios
(``tests/arq_scenarios.py``) and ``leasecheck check --adapter arq``. Without
``.venv-arq`` it fails, with the command that makes it; it never skips.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from leasecheck.adapters.protocol import GENERIC_PROPERTIES

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-arq"
MAKE = f"cd {ROOT} && python3 -m venv .venv-arq && .venv-arq/bin/pip install -e '.[test,arq]'"
ALLOWED = {
    "queue.ack-final": {"holds", "not checked"},
    "queue.no-loss": {"holds", "not checked"},
    "queue.exclusive": {"holds", "not promised", "not checked"},
    "queue.stale-ack": {"holds", "not promised", "not checked"},
    "queue.linearizable": {"holds", "not promised", "not checked"},
    "queue.interleavings": {"holds", "not checked"},
}
"""What each verdict may be: no promise of arq's broken (its promises are in
adapters/arq_redis.py); on a loaded machine a real-time property may be "not checked"."""


def _bin(name: str) -> Path:
    found = VENV / "bin" / name
    if not found.exists():
        pytest.fail(f"{found} is missing: make arq's environment with: {MAKE}", pytrace=False)
    return found


def test_arq_scenarios_in_its_environment() -> None:
    done = subprocess.run(
        [str(_bin("python")), "-m", "pytest", str(ROOT / "tests" / "arq_scenarios.py"),
         "-p", "no:xdist", "-p", "no:cacheprovider", "-q"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_arq_gets_the_generic_properties() -> None:
    """``leasecheck check --adapter arq`` in arq's environment (quick profile; the ci
    figures are in docs/findings.md): no promise broken."""
    with tempfile.TemporaryDirectory(prefix="leasecheck-arq-check-") as directory:
        record = Path(directory) / "check.json"
        done = subprocess.run(
            [str(_bin("leasecheck")), "check", "--adapter", "arq", "--profile", "quick",
             "-n", "0", "--json", str(record)],
            capture_output=True, text=True, timeout=600, cwd=directory, check=False,
        )  # fmt: skip
        assert done.returncode in (0, 2), done.stdout[-3000:] + done.stderr[-2000:]
        verdicts = _verdicts(record)
    assert set(verdicts) == set(ALLOWED) and set(GENERIC_PROPERTIES) <= set(verdicts), verdicts
    for prop, verdict in verdicts.items():
        assert verdict in ALLOWED[prop], (prop, verdict, done.stdout[-3000:])
    assert (done.returncode == 2) == ("not checked" in verdicts.values()), verdicts


def test_arq_stale_ack_reads_not_promised_every_run() -> None:
    """arq runs on the Redis server's clock, so whether a program met a stale ack once
    depended on timing (holds, not promised, holds in three runs): the machine's
    ``lease_runs_out`` now times a lease out on purpose and ``zombie_ack`` takes that
    zombie first, and on real time that shape runs first as a fixed program until one run
    of it is judged, so every run meets it; the pacer judges only calls clear of a lease's
    end. The verdict follows arq's promise (none: finish_job deletes whoever holds it)."""
    with tempfile.TemporaryDirectory(prefix="leasecheck-arq-check-") as directory:
        record = Path(directory) / "check.json"
        done = subprocess.run(
            [str(_bin("leasecheck")), "check", "--adapter", "arq", "--profile", "ci",
             "--seed", "0", "-n", "0", "--property", "queue.stale-ack", "--json", str(record)],
            capture_output=True, text=True, timeout=600, cwd=directory, check=False,
        )  # fmt: skip
        verdicts = _verdicts(record)
    assert verdicts == {"queue.stale-ack": "not promised"}, done.stdout[-3000:]


def _verdicts(record: Path) -> dict[str, str]:
    rows = json.loads(record.read_text())["properties"]
    return {row["property"]: row["verdict"] for row in rows}


def test_the_main_environment_names_the_command_for_arq() -> None:
    """Where arq is not installed (the main environment), ``--adapter arq`` is exit 2
    with the command that installs it; where it is, the adapter loads."""
    if importlib.util.find_spec("arq") is not None:
        from leasecheck.adapters.registry import load_library

        assert load_library("arq").version()
        return
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "check", "--adapter", "arq"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert ".venv-arq/bin/pip install -e '.[test,arq]'" in done.stderr + done.stdout
