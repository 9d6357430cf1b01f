"""The worker processes of the server faults: bounded waits, pause, and reaping.

These need no server: the agent is given a library whose store is a plain file, the
planted ``_FileQueue`` below, so the process plumbing is tested on its own.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import psutil
import pytest

from leasecheck.adapters._loop import LoopTimeout, PrivateLoop
from leasecheck.adapters._redis_store import split_location
from leasecheck.adapters.protocol import (
    AdapterError,
    Capabilities,
    Claim,
    QueueClock,
    SharedClock,
    StoredJob,
)
from leasecheck.crash_harness.server_agents import Agent, AgentError, AgentRefused


class FileQueue:
    """The smallest library: job names, one per line, in a file; claim pops the first."""

    name: ClassVar[str] = "file-queue"
    capabilities: ClassVar[Capabilities] = Capabilities(clock="injected")

    def connect(self, location: str, clock: QueueClock) -> FileQueue:
        self.path = Path(location)
        return self

    def enqueue(self, job: str, payload: str) -> None:
        with self.path.open("a") as file:
            file.write(job + "\n")

    def claim(self, worker: str, lease: float) -> Claim | None:
        jobs = self.path.read_text().split()
        if not jobs:
            return None
        self.path.write_text("".join(job + "\n" for job in jobs[1:]))
        return Claim(jobs[0], worker, None)

    def ack(self, claim: Claim) -> bool:
        raise AdapterError(f"refusing to ack {claim.job!r}")

    def observe(self) -> list[StoredJob]:
        return [StoredJob(job, "ready") for job in self.path.read_text().split()]

    def close(self) -> None:
        pass


SPEC = "test_server_agents:FileQueue"


@pytest.fixture(autouse=True)
def importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker process imports ``FileQueue`` from this file, by the name ``SPEC`` says."""
    here = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))


@pytest.fixture
def agent(scratch: Path, no_leaked_children: None) -> Iterator[Agent]:
    (scratch / "queue").write_text("")
    SharedClock(scratch / "clock").close()
    started = Agent(SPEC, str(scratch / "queue"), scratch / "clock", False, 0.0, "w1",
                    scratch / "w1.log")  # fmt: skip
    yield started
    started.close()


def test_commands_and_answers(agent: Agent) -> None:
    agent.call("enqueue", job="a")
    assert agent.call("observe") == [["a", "ready"]]
    assert agent.call("claim", worker="w1", lease=1.0) == {"job": "a", "token": None}
    assert agent.call("claim", worker="w1", lease=1.0) is None


def test_a_library_error_is_a_refusal_naming_it(agent: Agent) -> None:
    agent.call("enqueue", job="a")
    agent.call("claim", worker="w1", lease=1.0)
    with pytest.raises(AgentRefused, match="ack on worker 'w1': AdapterError: refusing to ack 'a'"):
        agent.call("ack", job="a")


def test_a_paused_worker_is_a_named_timeout_then_answers_when_resumed(agent: Agent) -> None:
    agent.pause()
    agent.send("observe")
    started = time.monotonic()
    with pytest.raises(AgentError, match=r"paused observe: no answer within 0\.3 s"):
        agent.reply("paused observe", timeout=0.3)
    assert time.monotonic() - started < 2
    agent.resume()
    assert agent.reply("resumed observe") == []


def test_close_reaps_a_paused_worker(agent: Agent) -> None:
    agent.pause()
    agent.close()
    assert not psutil.pid_exists(agent.process.pid) or agent.process.returncode is not None


def test_a_worker_that_cannot_start_says_why(scratch: Path) -> None:
    with pytest.raises(AgentError, match=r"the worker process ended; its stderr ends: .*No module"):
        Agent("no_such_module:Nope", "x", scratch / "clock", False, 0.0, "w9", scratch / "w9.log")


def test_private_loop_bounds_every_call() -> None:
    loop = PrivateLoop(timeout=0.2)
    try:
        with pytest.raises(LoopTimeout, match=r"a stuck call did not finish within 0\.2 s"):
            loop.run(asyncio.sleep(5), "a stuck call")
    finally:
        loop.close()


def test_a_location_without_prefix_says_how_to_make_one() -> None:
    with pytest.raises(AdapterError, match="has no '#prefix'; make one with the library's create"):
        split_location("redis://127.0.0.1:6379/0")
