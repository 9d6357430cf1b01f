"""The server faults on the one ``--adapter`` path (issue 22): ``leasecheck check --adapter
NAME|PATH --servers`` runs queue.server-crash, queue.zombie-pause and queue.clock-skew on
that library, loaded by the one loader and judged by the one judge (so ``--strict``
applies), on a real Redis started for the run.
"""

from __future__ import annotations

from pathlib import Path

from leasecheck.runner import NOT_PROMISED, VIOLATED, CheckOptions, run_check

OVERPROMISING = '''
from leasecheck.adapters.server_plants import OverpromisingRq


class MyRq(OverpromisingRq):
    """rq, claiming (wrongly) that a stale ack changes nothing: a user's own adapter file."""
'''


def _zombie(adapter: str, strict: bool = False) -> tuple[str, int, str]:
    options = CheckOptions(
        adapter=adapter, profile="ci", workers="0", servers=True, strict=strict,
        properties=("queue.zombie-pause",),
    )  # fmt: skip
    result = run_check(options)
    row = result.properties["queue.zombie-pause"]
    example = row.counterexample
    said = "\n".join(example.message) if example is not None else ""
    return row.verdict, result.exit_code, f"{result.log}\n{said}"


def test_a_bundled_server_library_gets_the_faults_from_check_adapter() -> None:
    verdict, code, log = _zombie("rq")
    assert (verdict, code) == (NOT_PROMISED, 0), log[-3000:]
    assert "leasecheck check --adapter rq --servers --property queue.zombie-pause" in log


def test_strict_applies_to_the_server_faults() -> None:
    verdict, code, log = _zombie("rq", strict=True)
    assert (verdict, code) == (VIOLATED, 1), log[-3000:]


def test_a_users_adapter_file_gets_the_server_faults(tmp_path: Path) -> None:
    path = tmp_path / "my_rq.py"
    path.write_text(OVERPROMISING)
    verdict, code, log = _zombie(str(path))
    assert (verdict, code) == (VIOLATED, 1), log[-3000:]
