"""What installing leasecheck puts into site-packages: one namespace and one compatibility name.

A wheel is built from this checkout and its top-level names are read back, so a generic
package of ours (``models``, ``adapters``, ...) can never again land where a user's own
folder of the same name would collide with it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import leasecheck.jobs
import leasecheck.queue_impl.jobs
from leasecheck.targets.loader import load_jobs_target

ROOT = Path(__file__).resolve().parents[1]
CARD_FOLDERS = ("queue_impl", "models", "stateful_tests", "crash_harness")
SKIP = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".leasecheck", "*_cache")


def _wheel(tmp_path: Path) -> zipfile.ZipFile:
    # Built from a copy, links kept as links: setuptools writes build/ and *.egg-info into
    # the tree it builds, and this checkout must stay as the test found it.
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(*SKIP))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("leasecheck-*.whl")
    return zipfile.ZipFile(wheel)


def test_the_wheel_installs_one_namespace_and_the_compatibility_name(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    names = wheel.namelist()
    top = {
        name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")
    }
    assert top == {"leasecheck", "queue_impl"}, f"top-level names installed: {sorted(top)}"
    for folder in CARD_FOLDERS:
        assert f"leasecheck/{folder}/__init__.py" in names, f"leasecheck.{folder} is not packaged"
    assert sorted(n for n in names if n.startswith("queue_impl/")) == [
        "queue_impl/__init__.py", "queue_impl/jobs.py", "queue_impl/py.typed",
    ]  # fmt: skip
    # The data files a check and `leasecheck adapters new` read, packaged as packages'
    # data (setuptools stops shipping data of a folder missing from `packages`).
    for data in ("check.ini", "templates/adapter.py.txt", "templates/test_adapter.py.txt"):
        assert f"leasecheck/{data}" in names, f"leasecheck/{data} is not packaged"
    (metadata,) = (name for name in names if name.endswith(".dist-info/METADATA"))
    assert "License-Expression: MIT" in wheel.read(metadata).decode().splitlines()


def test_the_card_folders_stay_at_the_top_of_the_repository() -> None:
    for folder in CARD_FOLDERS:
        assert (ROOT / folder / "__init__.py").is_file(), f"{folder}/ is not at the top"
        assert (ROOT / "leasecheck" / folder).resolve() == (ROOT / folder).resolve()


def _jobs_file(tmp_path: Path, import_line: str) -> Path:
    bundled = (ROOT / "queue_impl" / "job_queue.py").read_text()
    source, count = re.subn(
        r"^from leasecheck\.queue_impl\.jobs import \([^)]*\)$", import_line, bundled, flags=re.M
    )
    assert count == 1, "the bundled job queue no longer imports the given types in one statement"
    path = tmp_path / f"job_queue_{len(list(tmp_path.iterdir()))}.py"
    path.write_text(source)
    return path


def test_both_imports_of_the_given_types_give_the_same_objects(tmp_path: Path) -> None:
    names = "IllegalStateError, JobStatus, JobView, Lease, RetryPolicy, TimeSource"
    for line in (f"from leasecheck.jobs import {names}", f"from queue_impl.jobs import {names}"):
        module = sys.modules[load_jobs_target(_jobs_file(tmp_path, line)).__module__]
        assert module.JobStatus is leasecheck.jobs.JobStatus is leasecheck.queue_impl.jobs.JobStatus
        assert module.IllegalStateError is leasecheck.jobs.IllegalStateError
