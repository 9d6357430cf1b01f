"""Record a real process's file system calls with strace and read them back as events.

Why strace (ptrace) and not a SQLite VFS: a target is any ``worker.py`` that uses
Python's stdlib ``sqlite3`` (or a library with its own SQLite build, like
localqueue's Rust one). An apsw VFS only sees apsw's bundled SQLite, so it could
never observe those. A FUSE layer (LazyFS) needs a FUSE device and a binary that is
not packaged for Debian. Recording the system calls of the real child process, as
the ALICE crash-consistency tool does (Pillai et al., OSDI 2014), sees every write,
sync and directory change whatever library issues them; strace is one Debian
package (``apt-get install -y strace``) and ptrace works in an unprivileged child.

``-xx`` prints every string byte as ``\\xHH``, so no quote, comma or parenthesis
inside a buffer can confuse the parser, and ``-s`` is large enough for any page a
database writes (a truncated buffer is an error, never silently short data).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "STRACE_INSTALL",
    "Close",
    "Dup",
    "Event",
    "Open",
    "Rename",
    "Seek",
    "Sync",
    "TraceError",
    "TraceTimeout",
    "Truncate",
    "Unlink",
    "Write",
    "parse_trace",
    "record",
    "strace_command",
]

STRACE_INSTALL = "apt-get install -y strace"
MAX_STRING = 1 << 24
SYSCALLS = (
    "open,openat,creat,write,pwrite64,writev,pwritev,pwritev2,lseek,ftruncate,fsync,fdatasync,"
    "unlink,unlinkat,rename,renameat,renameat2,close,dup,dup2,dup3,fcntl"
)


class TraceError(Exception):
    """strace is missing, or its output could not be read; the message says what to do."""


class TraceTimeout(AssertionError):
    """The traced process did not end within its deadline (the target may hang)."""


@dataclass(frozen=True)
class Open:
    fd: int
    path: str
    creates: bool
    truncates: bool
    appends: bool


@dataclass(frozen=True)
class Write:
    fd: int
    data: bytes
    offset: int | None
    """None: at the descriptor's position (``write``/``writev``)."""


@dataclass(frozen=True)
class Seek:
    fd: int
    position: int


@dataclass(frozen=True)
class Truncate:
    fd: int
    size: int


@dataclass(frozen=True)
class Sync:
    fd: int


@dataclass(frozen=True)
class Unlink:
    path: str


@dataclass(frozen=True)
class Rename:
    old: str
    new: str


@dataclass(frozen=True)
class Close:
    fd: int


@dataclass(frozen=True)
class Dup:
    fd: int
    new: int


Event = Open | Write | Seek | Truncate | Sync | Unlink | Rename | Close | Dup


def strace_command(output: Path, argv: list[str]) -> list[str]:
    """The command that runs ``argv`` under strace, recording to ``output``."""
    strace = shutil.which("strace")
    if strace is None:
        raise TraceError(
            f"lease.power-loss records system calls with strace, which is not installed; "
            f"install it with `{STRACE_INSTALL}`"
        )
    return [
        strace, "-f", "-qq", "-xx", "-s", str(MAX_STRING), "--seccomp-bpf",
        "-e", f"trace={SYSCALLS}", "-o", str(output), *argv,
    ]  # fmt: skip


def record(argv: list[str], cwd: Path, log: Path, timeout: float) -> list[Event]:
    """Run ``argv`` in ``cwd`` under strace and return its file events.

    The tracer and the traced process share a new process group, so a deadline that
    runs out kills both (no tracee is ever left running, detached from its tracer).
    """
    process = subprocess.Popen(
        strace_command(log, argv), cwd=cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=timeout)
    except BaseException as error:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if isinstance(error, subprocess.TimeoutExpired):
            raise TraceTimeout(
                f"{' '.join(argv)} did not end within {timeout:.0f} s under strace; the "
                f"target may hang"
            ) from None
        raise
    if process.returncode != 0:
        text = output.decode(errors="replace")[-3000:]
        raise TraceError(f"the traced process exited with status {process.returncode}:\n{text}")
    return parse_trace(log.read_text(), str(cwd))


_LINE = re.compile(r"^(\d+)\s+(\w+)\((.*)\)\s+=\s+(-?\d+|0x[0-9a-f]+)(?:\s|$)")
_UNFINISHED = re.compile(r"^(\d+)\s+(.*)\s+<unfinished \.\.\.>$")
_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. \w+ resumed>(.*)$")


def parse_trace(text: str, cwd: str) -> list[Event]:
    """The file events of a strace log, in order; failed calls are dropped."""
    events: list[Event] = []
    pending: dict[str, str] = {}
    for raw in text.splitlines():
        line = _join_resumed(raw, pending)
        if line is None:
            continue
        match = _LINE.match(line)
        if match is None or int(match.group(4), 0) < 0:
            continue
        _, name, args, result = match.groups()
        event = _event(name, _split_args(args), int(result, 0), cwd)
        if event is not None:
            events.append(event)
    return events


def _join_resumed(raw: str, pending: dict[str, str]) -> str | None:
    """Glue ``<unfinished ...>`` and ``<... resumed>`` halves of one call (other threads)."""
    unfinished = _UNFINISHED.match(raw)
    if unfinished:
        pending[unfinished.group(1)] = unfinished.group(2)
        return None
    resumed = _RESUMED.match(raw)
    if resumed:
        head = pending.pop(resumed.group(1), None)
        return None if head is None else f"{resumed.group(1)} {head}{resumed.group(2)}"
    return raw


_PUNCTUATION = re.compile(r"[{}\[\],]")


def _split_args(args: str) -> list[str]:
    """Top-level comma-separated arguments (strings are hex-escaped: no commas or brackets
    inside). Only the commas and brackets are visited, not every character of a written
    buffer's escapes (a page written is 16 KB of text)."""
    if not any(bracket in args for bracket in "{}[]"):
        return [part.strip() for part in args.split(",")]
    parts, depth, start = [], 0, 0
    for found in _PUNCTUATION.finditer(args):
        char = found.group()
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
        elif depth == 0:
            index = found.start()
            parts.append(args[start:index].strip())
            start = index + 1
    parts.append(args[start:].strip())
    return parts


def _bytes(token: str) -> bytes:
    if token.endswith("..."):
        raise TraceError(
            f"strace cut a buffer short ({len(token)} characters shown); a single write is "
            f"larger than {MAX_STRING} bytes, raise crash_harness._syscalls.MAX_STRING"
        )
    if not (token.startswith('"') and token.endswith('"')):
        raise TraceError(f"expected a quoted string in the strace log, got {token[:40]!r}")
    return bytes.fromhex(token[1:-1].replace("\\x", ""))


def _path(token: str, cwd: str) -> str:
    return os.path.normpath(os.path.join(cwd, _bytes(token).decode("utf-8", "surrogateescape")))


def _iov(token: str) -> bytes:
    return b"".join(_bytes(m) for m in re.findall(r'iov_base=("[^"]*"(?:\.\.\.)?)', token))


def _event(name: str, args: list[str], result: int, cwd: str) -> Event | None:
    if name in ("open", "openat", "creat"):
        return _open(name, args, result, cwd)
    if name == "write":
        return Write(int(args[0]), _bytes(args[1]), None)
    if name == "pwrite64":
        return Write(int(args[0]), _bytes(args[1]), int(args[3]))
    if name == "writev":
        return Write(int(args[0]), _iov(args[1]), None)
    if name in ("pwritev", "pwritev2"):
        return Write(int(args[0]), _iov(args[1]), int(args[3]))
    return _other(name, args, result, cwd)


def _other(name: str, args: list[str], result: int, cwd: str) -> Event | None:
    if name == "lseek":
        return Seek(int(args[0]), result)
    if name == "ftruncate":
        return Truncate(int(args[0]), int(args[1]))
    if name in ("fsync", "fdatasync"):
        return Sync(int(args[0]))
    if name == "unlink":
        return Unlink(_path(args[0], cwd))
    if name == "unlinkat" and args[0] == "AT_FDCWD" and "AT_REMOVEDIR" not in args[2]:
        return Unlink(_path(args[1], cwd))
    if name == "rename":
        return Rename(_path(args[0], cwd), _path(args[1], cwd))
    if name in ("renameat", "renameat2") and args[0] == args[2] == "AT_FDCWD":
        return Rename(_path(args[1], cwd), _path(args[3], cwd))
    if name == "close":
        return Close(int(args[0]))
    if name in ("dup", "dup2", "dup3") or (name == "fcntl" and "F_DUPFD" in args[1]):
        return Dup(int(args[0]), result)
    return None


def _open(name: str, args: list[str], result: int, cwd: str) -> Open | None:
    if name == "openat":
        if args[0] != "AT_FDCWD" and not _bytes(args[1]).startswith(b"/"):
            return None  # relative to a directory descriptor: not how SQLite opens files
        args = args[1:]
    flags = "O_CREAT|O_TRUNC|O_WRONLY" if name == "creat" else args[1]
    return Open(
        result, _path(args[0], cwd), "O_CREAT" in flags, "O_TRUNC" in flags, "O_APPEND" in flags
    )
