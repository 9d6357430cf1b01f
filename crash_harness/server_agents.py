"""The harness side of the server-fault worker processes (``_server_agent``).

``Agent`` starts one worker process, sends it commands and reads its answers with a
deadline (a paused or dead worker is a named ``AgentError``, never a hang), and can
pause and resume it with SIGSTOP/SIGCONT. ``Agent.close`` always reaps the process.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from leasecheck.adapters.servers import die_with_parent

__all__ = ["Agent", "AgentError", "AgentRefused"]

REPLY_TIMEOUT = 60.0


class AgentError(Exception):
    """A worker process did not answer in time, or died."""


class AgentRefused(AgentError):
    """The library raised while doing the command (its message is in the error)."""


class Agent:
    """One worker process holding one adapter connection."""

    def __init__(self, spec: str, location: str, clock: Path, real: bool, offset: float,
                 name: str, log: Path) -> None:  # fmt: skip
        self.name = name
        command = [sys.executable, "-m", "leasecheck.crash_harness._server_agent",
                   spec, location, str(clock), "1" if real else "0", repr(offset)]  # fmt: skip
        with log.open("ab") as errors:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                preexec_fn=die_with_parent,
            )  # fmt: skip
        self._buffer = b""
        self.log = log
        try:
            self.reply(f"start of worker {name!r}")
        except BaseException:
            self.close()
            raise

    def send(self, op: str, **args: Any) -> None:
        """Send one command without waiting (a paused worker reads it when resumed)."""
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps({"op": op, **args}) + "\n").encode())
        self.process.stdin.flush()

    def call(self, op: str, **args: Any) -> Any:
        """Send one command and wait (bounded) for its answer."""
        self.send(op, **args)
        return self.reply(f"{op} on worker {self.name!r}")

    def reply(self, what: str, timeout: float = REPLY_TIMEOUT) -> Any:
        answer = json.loads(self._line(what, timeout))
        if not answer["ok"]:
            raise AgentRefused(f"{what}: {answer['error']}")
        return answer["value"]

    def _line(self, what: str, timeout: float) -> bytes:
        assert self.process.stdout is not None
        fd, deadline = self.process.stdout.fileno(), time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise AgentError(f"{what}: no answer within {timeout:g} s; {self._tail()}")
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise AgentError(f"{what}: the worker process ended; {self._tail()}")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _tail(self) -> str:
        text = self.log.read_text(errors="replace").strip() if self.log.exists() else ""
        return "its stderr ends: " + (" | ".join(text.splitlines()[-3:]) or "(empty)")

    def pause(self) -> None:
        """SIGSTOP: the process keeps its connection and its claims, and runs nothing."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def close(self) -> None:
        """Ask the worker to exit; kill it if it does not within 10 s; always reap it."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGCONT)
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            self.send("exit")
        with contextlib.suppress(OSError, ValueError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def kill(self) -> None:
        """SIGKILL the worker (its connection dies with it) and reap it."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:  # fmt: skip
        self.close()
