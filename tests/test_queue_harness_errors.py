"""An exception of leasecheck's own code is exit 2, never VIOLATED; a library's stays its own.

Last session a ``KeyError`` in ``queue.interleavings`` (a server with no plan) read as
"VIOLATED" against the library. Here the same kind of harness bug is planted for real: a
user adapter file that, when loaded, gives the ci profile a scenario the harness does not
have, so the harness's own lookup (``_queue_scenarios.queue_scenario``) raises
``KeyError``. The row must read "not checked" with what leasecheck raised, and the run
exit 2 (suite.md: "leasecheck itself could not do its job"). The control: an adapter
whose own code raises ``KeyError`` is judged as the library (VIOLATED, exit 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from leasecheck._blame import HARNESS_CHANGE, harness_problem
from leasecheck.adapters.protocol import AdapterError
from leasecheck.crash_harness._queue_scenarios import queue_scenario
from leasecheck.runner import NOT_CHECKED, VIOLATED, CheckOptions, run_check

PLANTED_HARNESS = """
from leasecheck.adapters.lease_worker import LeaseWorker
from leasecheck.crash_harness import _queue_scenarios

# The plant: the harness's ci plan names a scenario it does not define.
_queue_scenarios.BOUNDS["ci"] = (("no-such-scenario", 1),)


class PlantedHarness(LeaseWorker):
    name = "planted-harness"
"""
LIBRARY_RAISES = """
from pathlib import Path

from leasecheck.adapters.lease_worker import LeaseWorker


class RaisingLibrary(LeaseWorker):
    name = "raising-library"

    def create(self, directory: Path, server: str | None) -> str:
        return {}["the library's own lookup"]
"""

PLANTED_CHILD_HARNESS = """
from leasecheck.adapters.lease_worker import LeaseWorker
from leasecheck.crash_harness import _queue_scenarios as qs

# The plant: a scenario whose program calls a verb the harness's child does not know, so
# the child's own lookup of the verb raises KeyError in a forked process.
bogus = qs.QueueScenario("bogus", (qs.Seed("a"),), ((qs.Verb("claim", "p1"),
                                                     qs.Verb("frobnicate", "p1")),))
qs.SCENARIOS = (*qs.SCENARIOS, bogus)
qs.BOUNDS["ci"] = (("bogus", 1),)


class PlantedChildHarness(LeaseWorker):
    name = "planted-child-harness"
"""
LIBRARY_RAISES_IN_A_CHILD = """
import os

from leasecheck.adapters.lease_worker import LeaseWorker, LeaseWorkerAdapter
from leasecheck.adapters.protocol import QueueAdapter, QueueClock
from leasecheck.crash_harness import _queue_scenarios as qs

PARENT = os.getpid()
qs.BOUNDS["ci"] = (("claim-claim", 1),)


class ClosesBadly(LeaseWorkerAdapter):
    def close(self) -> None:
        super().close()
        if os.getpid() != PARENT:
            raise {}["the library's own lookup, on close"]


class RaisingInAChild(LeaseWorker):
    name = "raising-in-a-child"

    def connect(self, location: str, clock: QueueClock) -> QueueAdapter:
        return ClosesBadly(location, clock)
"""


def _run(tmp_path: Path, text: str) -> tuple[object, object]:
    path = tmp_path / "adapter_under_test.py"
    path.write_text(text)
    options = CheckOptions(
        adapter=str(path), profile="ci", workers="0", properties=("queue.interleavings",)
    )
    result = run_check(options)
    return result, result.properties["queue.interleavings"]


def test_a_keyerror_in_the_harness_is_exit_2_not_violated(tmp_path: Path) -> None:
    result, row = _run(tmp_path, PLANTED_HARNESS)
    assert row.verdict == NOT_CHECKED, result.log[-3000:]  # type: ignore[attr-defined]
    assert result.exit_code == 2  # type: ignore[attr-defined]
    record = row.figures["not_checked"]  # type: ignore[attr-defined]
    assert record["what"].startswith("leasecheck's own code raised KeyError: "), record
    assert "no-such-scenario" in record["what"]
    assert "crash_harness/_queue_scenarios.py:" in record["what"]
    assert record["change"] == HARNESS_CHANGE
    json.dumps(record)  # data, as it travels


def test_a_keyerror_of_the_library_is_still_judged_as_the_librarys(tmp_path: Path) -> None:
    result, row = _run(tmp_path, LIBRARY_RAISES)
    assert row.verdict == VIOLATED, result.log[-3000:]  # type: ignore[attr-defined]
    assert result.exit_code == 1  # type: ignore[attr-defined]
    assert "not_checked" not in row.figures  # type: ignore[attr-defined]


def test_a_keyerror_in_a_child_of_the_harness_is_exit_2(tmp_path: Path) -> None:
    """Raised in a forked process, outside any operation: before, the exploration stopped
    at that schedule and the property read "holds"."""
    result, row = _run(tmp_path, PLANTED_CHILD_HARNESS)
    assert row.verdict == NOT_CHECKED, result.log[-3000:]  # type: ignore[attr-defined]
    assert result.exit_code == 2  # type: ignore[attr-defined]
    what = row.figures["not_checked"]["what"]  # type: ignore[attr-defined]
    assert what.startswith("leasecheck's own code raised KeyError: 'frobnicate'"), what
    assert "crash_harness/queue_interleavings.py:" in what and "'bogus'" in what


def test_a_library_raising_in_a_child_outside_an_operation_is_its_own(tmp_path: Path) -> None:
    result, row = _run(tmp_path, LIBRARY_RAISES_IN_A_CHILD)
    assert row.verdict == VIOLATED, result.log[-3000:]  # type: ignore[attr-defined]
    assert result.exit_code == 1  # type: ignore[attr-defined]
    assert "raising-in-a-child raised outside any operation" in str(row.details)  # type: ignore[attr-defined]


def _raised(call: object) -> BaseException:
    with pytest.raises(BaseException) as caught:
        call()  # type: ignore[operator]
    return caught.value


def test_whose_failure_it_is_the_raising_frame_decides() -> None:
    import redis

    from leasecheck.queue_impl.worker import open_queue

    harness = _raised(lambda: queue_scenario("no-such-scenario"))
    assert (harness_problem(harness) or "").startswith("leasecheck's own code raised KeyError")
    library = _raised(lambda: redis.Redis.from_url("nope://"))  # raised inside redis-py
    assert harness_problem(library) is None
    target = _raised(lambda: open_queue("/nonexistent-dir/x.db"))  # the bundled target's
    assert harness_problem(target) is None
    assert harness_problem(AssertionError("finish returned 'done'")) is None
    adapter_word = _raised(lambda: _raise(AdapterError("saq dropped the enqueue of 'a'")))
    assert harness_problem(adapter_word) is None


def _raise(error: Exception) -> None:
    raise error
