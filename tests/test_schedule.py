"""The order of a check: longest recorded properties first, handed out one at a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from leasecheck import _schedule
from leasecheck.selection import known_properties


class Node:
    """The part of an xdist worker controller a scheduler talks to."""

    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True


class Config:
    """The options xdist's load scheduling reads: ``-n`` (as ``--tx``) and its chunk size."""

    def __init__(self, workers: int) -> None:
        self.options = {"tx": [f"{workers}*popen"], "maxschedchunk": None}

    def getvalue(self, name: str) -> Any:
        return self.options[name]

    getoption = getvalue


def scheduler(nodes: list[Node], collection: list[str]) -> _schedule.LongestFirst:
    scheduling = _schedule.LongestFirst(Config(len(nodes)))
    for node in nodes:
        scheduling.add_node(node)
        scheduling.add_node_collection(node, collection)
    scheduling.schedule()
    return scheduling


def test_every_shipped_property_has_a_recorded_cost() -> None:
    shipped = {name for name in known_properties() if name.startswith(("lease.", "jobs."))}
    assert shipped - set(_schedule.COSTS) == set(), "record a cost for a new ci property"


def test_the_longest_tests_go_to_different_workers_first() -> None:
    a, b = Node("gw0"), Node("gw1")
    scheduling = scheduler([a, b], [f"t{n}" for n in range(6)])
    assert (a.sent, b.sent) == ([0, 5], [1, 4])  # behind each first test: a shortest one
    scheduling.mark_test_complete(b, 1)  # b finished its first: it gets the longest left
    assert b.sent == [1, 4, 2]
    scheduling.mark_test_complete(a, 0)
    assert a.sent == [0, 5, 3]
    scheduling.mark_test_complete(a, 5)
    assert a.shutting_down and not b.shutting_down


def test_nothing_long_waits_behind_the_longest_test() -> None:
    nodes = [Node(f"gw{n}") for n in range(4)]
    scheduler(nodes, [f"t{n}" for n in range(19)])  # the gate: 19 tests, 4 workers
    assert [node.sent for node in nodes] == [[0, 18], [1, 17], [2, 16], [3, 15]]


def test_a_worker_started_in_place_of_a_crashed_one_gets_two_tests() -> None:
    """xdist replaces a worker that died (a target that calls os._exit): the new worker
    holds nothing, and one test alone never starts (pytest waits for the next one), so
    it must get two, or one and the end. Before, the run waited until its budget."""
    a, b = Node("gw0"), Node("gw1")
    scheduling = scheduler([a, b], [f"t{n}" for n in range(6)])
    assert scheduling.remove_node(a) == "t0"  # a died running t0; t5 goes back
    c = Node("gw2")
    scheduling.add_node(c)
    scheduling.add_node_collection(c, [f"t{n}" for n in range(6)])
    scheduling.schedule()
    assert len(c.sent) == 2 and not c.shutting_down
    for index in list(c.sent):
        scheduling.mark_test_complete(c, index)
    for index in list(b.sent):
        scheduling.mark_test_complete(b, index)
    assert sorted(b.sent + c.sent) == [1, 2, 3, 4, 5]
    assert all(node.shutting_down for node in (b, c))


def test_more_workers_than_tests_are_shut_down_at_once() -> None:
    nodes = [Node(f"gw{n}") for n in range(4)]
    scheduler(nodes, ["only"])
    assert [node.sent for node in nodes] == [[0], [], [], []]
    assert all(node.shutting_down for node in nodes)


def test_auto_gives_the_waiting_properties_workers_of_their_own() -> None:
    assert _schedule.auto_workers() >= 1 + _schedule.WAITING_WORKERS


class Item:
    """A collected test as ``order`` sees it: its property name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def ordered(workers: int) -> list[str]:
    items: list[Any] = [Item(name) for name in sorted(_schedule.COSTS)]
    _schedule.order(items, lambda item: item.name, workers)
    return [item.name for item in items]


def by_cost(names: list[str]) -> list[str]:
    return sorted(names, key=lambda name: -_schedule.COSTS[name])


def test_every_waiting_property_is_a_shipped_one() -> None:
    assert set(_schedule.WAITS) <= set(_schedule.COSTS)


def test_the_extra_workers_begin_with_the_properties_that_wait() -> None:
    """On 2 cores (3 workers): the two longest first, one to each core's worker, then
    the waits, most first, for the third worker; the end of the run computes."""
    got = ordered(2 + _schedule.WAITING_WORKERS)
    waits = sorted(_schedule.WAITS, key=lambda name: -_schedule.WAITS[name])
    longest = by_cost(list(_schedule.COSTS))
    assert got[:2] == longest[:2] == ["jobs.agreement", "lease.agreement"]
    assert got[2 : 2 + len(waits)] == waits
    rest = [name for name in longest[2:] if name not in _schedule.WAITS]
    assert got[2 + len(waits) :] == rest
    assert not set(got[-5:]) & set(_schedule.WAITS)


def test_one_worker_and_no_spare_worker_keep_the_longest_first() -> None:
    longest = by_cost(list(_schedule.COSTS))
    assert ordered(1) == longest
    assert ordered(_schedule.WAITING_WORKERS) == longest


def test_a_longest_property_that_waits_keeps_its_place() -> None:
    """The waits move behind the longest only: on 2 workers (one computing) the
    longest stays first, and a wait among the first ``workers - spare`` is not moved."""
    items: list[Any] = [Item(name) for name in ("lease.single-winner", "jobs.edges")]
    _schedule.order(items, lambda item: item.name, 2)
    assert [item.name for item in items] == ["lease.single-winner", "jobs.edges"]
    assert ordered(2)[0] == "jobs.agreement"
    assert ordered(2)[1] == max(_schedule.WAITS, key=lambda name: _schedule.WAITS[name])


RECORDER = """
import json, os
import pytest

def _ran(name: str) -> None:
    with open(os.environ["RAN_OUT"], "a") as out:
        out.write(json.dumps([os.environ["PYTEST_XDIST_WORKER"], name]) + "\\n")
"""


def test_three_real_workers_start_the_third_with_a_wait(tmp_path: Path) -> None:
    """A real ``pytest -n 3`` with the check's plugin: each xdist worker sorts by its
    ``workercount``, and the third worker's first test is the one that waits most, not
    the third longest (lease.power-loss)."""
    names = ["jobs.edges", "lease.configuration", "lease.single-winner", "lease.power-loss",
             "lease.agreement", "jobs.agreement"]  # fmt: skip
    tests = "".join(
        f"\n@pytest.mark.leasecheck({name!r})\ndef test_{n}() -> None:\n    _ran({name!r})\n"
        for n, name in enumerate(names)
    )
    (tmp_path / "test_order.py").write_text(RECORDER + tests)
    out = tmp_path / "ran.jsonl"
    env = {**os.environ, "RAN_OUT": str(out), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "3", "-p", "xdist.plugin",
         "-p", "leasecheck._events", "-p", "no:cacheprovider", "-W", "ignore",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_order.py")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    first: dict[str, str] = {}
    for line in out.read_text().splitlines():
        worker, name = json.loads(line)
        first.setdefault(worker, name)
    assert sorted(first.values()) == ["jobs.agreement", "lease.agreement", "lease.single-winner"]
