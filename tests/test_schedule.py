"""The order of a check: longest recorded properties first, handed out one at a time."""

from __future__ import annotations

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
