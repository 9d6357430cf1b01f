"""What a power cut can leave on disk, given the system calls a process made.

``Disk`` replays recorded events (``crash_harness._syscalls``) over a model of one
directory with two views: what the running process sees (every call applied), and
what is durable. The rules are the POSIX ones that crash-consistency work (ALICE,
OSDI 2014) and SQLite's own documentation assume:

- a write or truncate of a file is durable once an ``fsync``/``fdatasync`` of that
  file follows it; before that the OS may have flushed it or not, each write
  independently, so any subset of the unsynced writes may be on disk;
- a file's creation, unlink or rename is durable only once the *directory* is synced
  (``fsync`` of a descriptor opened on the directory); before that, the directory
  operations reach the disk in the order they were made (as on a journaling file
  system), so any prefix of them may be durable;
- the files present before the recording are durable (the harness builds them).

The ``-shm`` file of WAL mode is not modelled (see ``UNMODELLED``). Writes are whole
(no torn sectors): SQLite's journals are built to survive a torn
page, so leaving that out only makes the model kinder, never a false alarm.

``Disk.cut()`` describes the durable frontier right after the last event (a *cut
point*); ``crash_states`` lists the states a power cut there can leave: every
subset of unsynced writes when there are few, otherwise a seeded sample that always
includes "nothing unsynced reached the disk" and "everything did".
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from leasecheck.crash_harness._syscalls import (
    Close,
    Dup,
    Event,
    Open,
    Rename,
    Seek,
    Sync,
    Truncate,
    Unlink,
    Write,
)

__all__ = ["UNMODELLED", "CrashState", "Cut", "Disk", "crash_states"]

UNMODELLED = ("-shm",)
"""SQLite's WAL index: shared memory that the first connection after a reboot rebuilds
from the WAL, so what a power cut leaves in it never matters (and it is mmap-written,
which strace cannot see anyway)."""


@dataclass(frozen=True)
class Change:
    """One write (``data`` at ``offset``) or truncate (``data`` None, size ``offset``)."""

    name: str
    offset: int
    data: bytes | None

    def describe(self) -> str:
        if self.data is None:
            return f"truncate of {self.name} to {self.offset} bytes (no fsync of it after)"
        return (
            f"write of {len(self.data)} bytes at offset {self.offset} of {self.name} "
            f"(no fsync of it after)"
        )


@dataclass(frozen=True)
class DirChange:
    """``link`` (a creation), ``unlink`` or ``rename`` of a name in the directory."""

    kind: str
    name: str
    inode: int = -1
    new: str = ""

    def apply(self, names: dict[str, int]) -> None:
        if self.kind == "link":
            names[self.name] = self.inode
        elif self.kind == "unlink":
            names.pop(self.name, None)
        elif self.name in names:
            names[self.new] = names.pop(self.name)

    def describe(self) -> str:
        what = f"rename of {self.name} to {self.new}" if self.kind == "rename" else None
        what = what or ("creation" if self.kind == "link" else "unlink") + f" of {self.name}"
        return f"{what} (no directory fsync after it)"


@dataclass(frozen=True)
class Cut:
    """The durable frontier at one instant: what a power cut right here could keep."""

    number: int
    """Events replayed so far."""
    event: str
    acked: int
    """Acknowledgements the process had sent by then."""
    files: tuple[tuple[int, int, int], ...]
    """(inode, changes durable, changes made) for every file."""
    durable: tuple[tuple[str, int], ...]
    pending: tuple[DirChange, ...]


@dataclass(frozen=True)
class CrashState:
    """File contents by name after a power cut, and what did not reach the disk."""

    files: tuple[tuple[str, bytes], ...]
    lost: tuple[Change | DirChange, ...]

    def digest(self) -> str:
        hasher = hashlib.blake2b(digest_size=16)
        for name, content in self.files:
            hasher.update(name.encode() + b"\0" + len(content).to_bytes(8, "big") + content)
        return hasher.hexdigest()


@dataclass
class _Handle:
    inode: int | None
    """None: the directory itself."""
    position: int = 0
    appends: bool = False


@dataclass
class Disk:
    """A directory's volatile and durable state, fed with a process's recorded events."""

    directory: str
    marker: str
    """Each write to this file is one acknowledgement to the caller."""
    bases: list[bytes] = field(default_factory=list)
    changes: list[list[Change]] = field(default_factory=list)
    synced: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    names: dict[str, int] = field(default_factory=dict)
    durable: dict[str, int] = field(default_factory=dict)
    pending: list[DirChange] = field(default_factory=list)
    handles: dict[int, _Handle] = field(default_factory=dict)
    marker_fds: set[int] = field(default_factory=set)
    acked: int = 0
    events: int = 0

    @classmethod
    def holding(cls, directory: str, marker: str, files: dict[str, bytes]) -> Disk:
        """A disk whose ``files`` are all durable (the state before the recording)."""
        disk = cls(os.path.normpath(directory), marker)
        for name, content in sorted(files.items()):
            disk.names[name] = disk.durable[name] = disk._inode(content)
        return disk

    def _inode(self, content: bytes) -> int:
        self.bases.append(content)
        self.changes.append([])
        self.synced.append(0)
        self.sizes.append(len(content))
        return len(self.bases) - 1

    def feed(self, event: Event) -> str | None:
        """Apply one event; say what it did if a power cut after it could leave more."""
        self.events += 1
        if isinstance(event, Open):
            return self._open(event)
        if isinstance(event, Write | Truncate):
            return self._change(event)
        if isinstance(event, Sync):
            return self._sync(event.fd)
        if isinstance(event, Unlink | Rename):
            return self._dir_change(event)
        if isinstance(event, Seek) and event.fd in self.handles:
            self.handles[event.fd].position = event.position
        elif isinstance(event, Close):
            self.handles.pop(event.fd, None)
            self.marker_fds.discard(event.fd)
        elif isinstance(event, Dup) and event.fd in self.handles:
            self.handles[event.new] = self.handles[event.fd]
        return None

    def _name(self, path: str) -> str | None:
        parent, name = os.path.split(path)
        return name if parent == self.directory else None

    def _open(self, event: Open) -> str | None:
        self.handles.pop(event.fd, None)
        self.marker_fds.discard(event.fd)
        if event.path == self.marker:
            self.marker_fds.add(event.fd)
            return None
        if event.path == self.directory:
            self.handles[event.fd] = _Handle(None)
            return None
        name = self._name(event.path)
        if (
            name is None
            or name.endswith(UNMODELLED)
            or (name not in self.names and not event.creates)
        ):
            return None
        created = name not in self.names
        if created:
            self.names[name] = self._inode(b"")
            self.pending.append(DirChange("link", name, self.names[name]))
        self.handles[event.fd] = _Handle(self.names[name], appends=event.appends)
        if event.truncates:
            self._record(self.names[name], Change(name, 0, None))
        if created or event.truncates:
            return f"open({name!r}, {'O_CREAT' if created else 'O_TRUNC'})"
        return None

    def _change(self, event: Write | Truncate) -> str | None:
        if isinstance(event, Write) and event.fd in self.marker_fds:
            self.acked += 1
            return f"the caller is told operation {self.acked - 1}'s result"
        handle = self.handles.get(event.fd)
        if handle is None or handle.inode is None:
            return None
        name = self._name_of(handle.inode)
        if isinstance(event, Truncate):
            self._record(handle.inode, Change(name, event.size, None))
            return f"ftruncate({name!r}, {event.size})"
        offset = event.offset
        if offset is None:
            offset = self.sizes[handle.inode] if handle.appends else handle.position
            handle.position = offset + len(event.data)
        self._record(handle.inode, Change(name, offset, event.data))
        return f"write of {len(event.data)} bytes at offset {offset} of {name!r}"

    def _name_of(self, inode: int) -> str:
        return next((n for n, i in self.names.items() if i == inode), f"<deleted #{inode}>")

    def _record(self, inode: int, change: Change) -> None:
        self.changes[inode].append(change)
        if change.data is None:
            self.sizes[inode] = change.offset
        else:
            self.sizes[inode] = max(self.sizes[inode], change.offset + len(change.data))

    def _sync(self, fd: int) -> str | None:
        handle = self.handles.get(fd)
        if handle is None:
            return None
        if handle.inode is None:
            changed = bool(self.pending)
            self.durable, self.pending = dict(self.names), []
            return "fsync of the directory" if changed else None
        inode = handle.inode
        changed = self.synced[inode] != len(self.changes[inode])
        self.synced[inode] = len(self.changes[inode])
        return f"fsync of {self._name_of(inode)!r}" if changed else None

    def _dir_change(self, event: Unlink | Rename) -> str | None:
        if isinstance(event, Unlink):
            name = self._name(event.path)
            if name is None or name not in self.names:
                return None
            change = DirChange("unlink", name)
            what = f"unlink({name!r})"
        else:
            old, new = self._name(event.old), self._name(event.new)
            if old is None or new is None or old not in self.names:
                return None
            change = DirChange("rename", old, new=new)
            what = f"rename({old!r}, {new!r})"
        change.apply(self.names)
        self.pending.append(change)
        return what

    def cut(self, event: str) -> Cut:
        files = tuple(
            (inode, self.synced[inode], len(self.changes[inode]))
            for inode in range(len(self.bases))
        )
        durable = tuple(sorted(self.durable.items()))
        return Cut(self.events, event, self.acked, files, durable, tuple(self.pending))

    def content(self, inode: int, synced: int, chosen: list[Change]) -> bytes:
        data = bytearray(self.bases[inode])
        for change in [*self.changes[inode][:synced], *chosen]:
            if change.data is None:
                del data[change.offset :]
                data.extend(b"\0" * (change.offset - len(data)))
            else:
                end = change.offset + len(change.data)
                data.extend(b"\0" * (end - len(data)))
                data[change.offset : end] = change.data
        return bytes(data)


def crash_states(disk: Disk, cut: Cut, limit: int, rng: random.Random) -> Iterator[CrashState]:
    """Every state a power cut at ``cut`` can leave (a seeded sample past ``limit`` each)."""
    files = {inode: (synced, made) for inode, synced, made in cut.files}
    for kept in range(len(cut.pending), -1, -1):
        names = dict(cut.durable)
        for change in cut.pending[:kept]:
            change.apply(names)
        unsynced = [
            (inode, index)
            for inode in sorted(set(names.values()))
            for index in range(*files[inode])
        ]
        for chosen in _subsets(len(unsynced), limit, rng):
            yield _state(disk, names, files, unsynced, chosen, cut.pending[kept:])


def _subsets(count: int, limit: int, rng: random.Random) -> Iterator[frozenset[int]]:
    """All subsets of ``range(count)``, largest first, or ``limit`` of them sampled."""
    if count < 20 and 2**count <= limit:
        for size in range(count, -1, -1):
            for combo in itertools.combinations(range(count), size):
                yield frozenset(combo)
        return
    yield frozenset(range(count))
    yield frozenset()
    for _ in range(max(0, limit - 2)):
        yield frozenset(i for i in range(count) if rng.random() < 0.5)


def _state(
    disk: Disk,
    names: dict[str, int],
    files: dict[int, tuple[int, int]],
    unsynced: list[tuple[int, int]],
    chosen: frozenset[int],
    dropped_dir: tuple[DirChange, ...],
) -> CrashState:
    lost: list[Change | DirChange] = list(dropped_dir)
    contents = []
    for name, inode in sorted(names.items()):
        picked: list[Change] = []
        for position, (owner, index) in enumerate(unsynced):
            if owner != inode:
                continue
            change = disk.changes[inode][index]
            (picked if position in chosen else lost).append(change)
        contents.append((name, disk.content(inode, files[inode][0], picked)))
    return CrashState(tuple(contents), tuple(lost))
