"""An older commit of this repository as a tree a benchmark can import from.

``export(base, prefix)`` writes ``git archive base`` into a fresh temporary directory
(the repository is not touched; the caller removes it); ``merge_base()`` is the commit
this checkout shares with ``main``, every benchmark's default base; ``byte_compile(tree)``
writes the bytecode of a tree's modules next to them, as ``pip install`` does;
``run_probe(script, tree, ...)`` runs a benchmark's probe script on a tree in a fresh
process and returns its figures; ``save_json(path, figures)`` writes a benchmark's
summary for ``--json`` (``bench_speed.py`` reads them: figures cross processes as data).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def export(base: str, prefix: str) -> Path:
    """``base`` exported with git archive into a fresh temporary directory (removed again
    when the export fails: not a repository, an unknown commit)."""
    tree = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", base], capture_output=True, check=True,
            timeout=120,
        ).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True, timeout=120)
    except BaseException:
        shutil.rmtree(tree, ignore_errors=True)
        raise
    return tree


def merge_base() -> str:
    """The commit this checkout shares with ``main``."""
    done = subprocess.run(
        ["git", "-C", str(REPO), "merge-base", "HEAD", "main"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return done.stdout.strip()


def byte_compile(tree: Path) -> None:
    """Write the bytecode of every module under ``tree``'s top-level folders (not the
    hidden ones: a virtual environment) into their ``__pycache__``, as ``pip install``
    does for an installed package. Without it, an environment with
    ``PYTHONDONTWRITEBYTECODE=1`` (some CI images and sandboxes set it) makes every
    process of every timed run compile the tree's modules from source again, which an
    installed leasecheck never does; ``compileall`` writes the files whatever that
    variable says, and Python reads them whatever it says."""
    folders = sorted(
        str(path) for path in tree.iterdir()
        if path.is_dir() and not path.is_symlink() and not path.name.startswith(".")
    )  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", *folders],
        capture_output=True, check=True, timeout=600,
    )  # fmt: skip


def run_probe(
    script: Path, tree: Path, *args: str, timeout: float = 1800, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run ``python script tree *args`` and return the JSON object it prints: a probe's
    figures. Raises when the probe fails, or when it did not import leasecheck from
    ``tree`` (its ``imported_from``): an editable install's import finder can otherwise
    load this checkout on both sides."""
    command = [sys.executable, str(script), str(tree), *args]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(
            f"{script.name} {' '.join(args)} failed on {tree}:\n{done.stderr[-2000:]}"
        )
    figures: dict[str, Any] = json.loads(done.stdout)
    loaded = Path(figures["imported_from"])
    if loaded != tree.resolve():
        raise RuntimeError(f"{script.name} was given {tree} but imported {loaded}")
    return figures


def save_json(path: Path | None, figures: dict[str, Any]) -> None:
    """Write a benchmark's summary ``figures`` to ``path`` (its ``--json``), if given."""
    if path is not None:
        path.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n", encoding="utf-8")
