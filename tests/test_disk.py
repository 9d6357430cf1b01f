"""crash_harness._disk: which states a power cut can leave, rule by rule."""

from __future__ import annotations

import random

from leasecheck.crash_harness._disk import CrashState, Disk, crash_states
from leasecheck.crash_harness._syscalls import Open, Sync, Unlink, Write


def _states(disk: Disk) -> list[CrashState]:
    return list(crash_states(disk, disk.cut("end"), 64, random.Random(0)))


def _contents(disk: Disk) -> set[tuple[tuple[str, bytes], ...]]:
    return {state.files for state in _states(disk)}


def test_unsynced_writes_may_each_be_lost_synced_ones_may_not() -> None:
    disk = Disk.holding("/d", "/m", {"f": b"...."})
    disk.feed(Open(3, "/d/f", False, False, False))
    disk.feed(Write(3, b"A", 0))
    disk.feed(Sync(3))
    disk.feed(Write(3, b"B", 1))
    disk.feed(Write(3, b"C", 2))
    assert _contents(disk) == {
        (("f", b"ABC."),),
        (("f", b"AB.."),),
        (("f", b"A.C."),),
        (("f", b"A..."),),
    }


def test_unlink_is_durable_only_after_a_directory_fsync() -> None:
    disk = Disk.holding("/d", "/m", {"f": b"x", "f-journal": b"j"})
    disk.feed(Unlink("/d/f-journal"))
    assert _contents(disk) == {
        (("f", b"x"),),
        (("f", b"x"), ("f-journal", b"j")),
    }
    disk.feed(Open(4, "/d", False, False, False))
    disk.feed(Sync(4))
    assert _contents(disk) == {(("f", b"x"),)}


def test_a_created_file_needs_its_directory_synced() -> None:
    disk = Disk.holding("/d", "/m", {})
    disk.feed(Open(3, "/d/new", True, False, False))
    disk.feed(Write(3, b"data", None))
    disk.feed(Sync(3))
    assert () in _contents(disk), "the file may be gone: its name was never made durable"
    lost = next(s for s in _states(disk) if not s.files).lost
    assert "creation of new (no directory fsync after it)" in lost[0].describe()


def test_acknowledgements_are_counted_from_the_marker_file() -> None:
    disk = Disk.holding("/d", "/m", {})
    disk.feed(Open(5, "/m", True, False, True))
    assert disk.feed(Write(5, b"ack 0\n", None)) is not None
    assert disk.cut("x").acked == 1
