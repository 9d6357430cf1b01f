"""Length-prefixed pickle frames over a pipe: the only way a forked child and the harness talk.

Each frame is a 4-byte big-endian length and a pickle. A child writes small frames
(well under ``PIPE_BUF``), so a SIGKILL never leaves half a frame behind; a torn tail
is ignored anyway. The parent side never blocks without a deadline: it polls the
descriptor and reads only what is there.
"""

from __future__ import annotations

import os
import pickle
import struct
from collections.abc import Iterable
from typing import Any

__all__ = ["FrameReader", "read_frame_blocking", "write_frame", "write_frames"]

_HEADER = struct.Struct(">I")


def encode(value: Any) -> bytes:
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(payload)) + payload


def write_frame(fd: int, value: Any) -> None:
    """Write one whole frame (blocking; a child's frames are small)."""
    write_frames(fd, (value,))


def write_frames(fd: int, values: Iterable[Any]) -> None:
    """Write several whole frames with one ``write``: the reader wakes once for all of them."""
    data = memoryview(b"".join(encode(value) for value in values))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame_blocking(fd: int) -> tuple[bool, Any]:
    """(True, value), or (False, None) at end of file: the child side, which may block."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return False, None
    (size,) = _HEADER.unpack(header)
    payload = _read_exactly(fd, size)
    if payload is None:
        return False, None
    return True, pickle.loads(payload)


class FrameReader:
    """Parent side: bytes in, whole frames out."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def pop(self) -> tuple[bool, Any]:
        """(True, value) for the next complete frame, else (False, None)."""
        if len(self._buffer) < _HEADER.size:
            return False, None
        (size,) = _HEADER.unpack_from(self._buffer)
        end = _HEADER.size + size
        if len(self._buffer) < end:
            return False, None
        payload = bytes(self._buffer[_HEADER.size : end])
        del self._buffer[:end]
        return True, pickle.loads(payload)
