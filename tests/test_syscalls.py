"""crash_harness._syscalls: strace logs read back as file events, from a real traced run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from leasecheck.crash_harness import _syscalls
from leasecheck.crash_harness._syscalls import (
    Open,
    Rename,
    Sync,
    TraceError,
    Unlink,
    Write,
    parse_trace,
)


def _hex(text: str) -> str:
    return '"' + "".join(f"\\x{byte:02x}" for byte in text.encode()) + '"'


def test_parse_trace_reads_each_kind_and_drops_failed_calls() -> None:
    log = "\n".join(
        [
            f"7 openat(AT_FDCWD, {_hex('q.db')}, O_RDWR|O_CREAT, 0644) = 3",
            f"7 pwrite64(3, {_hex('ab')}, 2, 4096) = 2",
            "7 fdatasync(3)                      = 0",
            f"7 unlink({_hex('/d/q.db-journal')}) = 0",
            f"7 unlink({_hex('/d/missing')}) = -1 ENOENT (No such file or directory)",
            f"7 rename({_hex('a')}, {_hex('b')} <unfinished ...>",
            "7 <... rename resumed>) = 0",
        ]
    )
    assert parse_trace(log, "/d") == [
        Open(3, "/d/q.db", creates=True, truncates=False, appends=False),
        Write(3, b"ab", 4096),
        Sync(3),
        Unlink("/d/q.db-journal"),
        Rename("/d/a", "/d/b"),
    ]


def test_a_cut_buffer_is_an_error_not_short_data() -> None:
    with pytest.raises(TraceError, match="MAX_STRING"):
        parse_trace(f'1 write(3, {_hex("abc")[:-1]}"..., 9) = 9', "/")


def test_records_a_real_process(tmp_path: Path) -> None:
    script = (
        "import os\n"
        "fd = os.open('f', os.O_WRONLY | os.O_CREAT, 0o600)\n"
        "os.write(fd, b'hello'); os.fsync(fd); os.close(fd)\n"
        "os.rename('f', 'g'); os.unlink('g')\n"
    )
    events = _syscalls.record([sys.executable, "-c", script], tmp_path, tmp_path / "log", 60)
    mine = [e for e in events if str(tmp_path) in repr(e) or isinstance(e, Write | Sync)]
    assert Open(mine[0].fd, str(tmp_path / "f"), True, False, False) in mine  # type: ignore[union-attr]
    assert Write(mine[0].fd, b"hello", None) in mine  # type: ignore[union-attr]
    assert Rename(str(tmp_path / "f"), str(tmp_path / "g")) in mine
    assert Unlink(str(tmp_path / "g")) in mine


def test_missing_strace_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(TraceError, match="apt-get install -y strace"):
        _syscalls.strace_command(Path("log"), ["true"])
