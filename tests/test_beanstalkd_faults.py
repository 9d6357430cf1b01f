"""The server faults on beanstalkd, as scenarios on real servers and real processes.

``leasecheck check --servers`` runs its faults on the harness's own server, which it
kills and restarts; the beanstalkd adapter runs a server of its own per store (each on
its store's clock, ``adapters/beanstalkd.py``), so the two faults that make sense for
beanstalkd are fixed scenarios here, each judged by the protocol's own sentences:

- kill -9 and restart on the same binlog (``-b DIR -f 0``): "The delete command removes
  a job from the server entirely", and a reservation is the connection's, so after the
  restart a deleted job stays deleted, a reserved one is ready again, a ready one ready;
- the SIGSTOP zombie: a worker process reserves a job and is frozen past its TTR; another
  connection reserves it; the worker wakes and deletes: "NOT_FOUND ... if the job does
  not exist or is not either reserved by the client, ready, or buried" (the delete is
  refused and the job stays the new holder's).

QueueClock skew does not apply: the TTR runs on the server's clock alone, never a client's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import greenstalk  # pip install 'leasecheck[brokers]': a missing one fails, never skips
import pytest

from leasecheck.adapters import servers
from leasecheck.adapters.beanstalkd import TTR, Beanstalkd, server_stamp
from leasecheck.adapters.protocol import SharedClock

TUBE = "leasecheck"


@pytest.fixture
def scratch_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="leasecheck-beanstalkd-fault-") as directory:
        yield Path(directory)


def _state(client: Any, job: int) -> str:
    try:
        return str(client.stats_job(job)["state"])
    except greenstalk.NotFoundError:
        return "gone"


def test_kill_and_restart_on_the_binlog(scratch_dir: Path) -> None:
    clock = scratch_dir / "faketime"
    clock.write_text(server_stamp(0))
    try:
        server = servers.beanstalkd_server(scratch_dir, durable=True, clock_file=clock)
    except servers.ServerMissing as missing:  # pragma: no cover - CI installs them
        pytest.fail(str(missing), pytrace=False)
    try:
        a = greenstalk.Client(("127.0.0.1", server.port), use=TUBE, watch=TUBE)
        acked, held, waiting = (a.put(f"j{i}", ttr=TTR) for i in range(3))
        a.delete(a.reserve(timeout=0))
        assert a.reserve(timeout=0).id == held
        server.kill()  # SIGKILL: no shutdown, the binlog as the last fsync left it
        a.close()
        server.restart()
        b = greenstalk.Client(("127.0.0.1", server.port), use=TUBE, watch=TUBE)
        try:
            states = {job: _state(b, job) for job in (acked, held, waiting)}
            assert states == {acked: "gone", held: "ready", waiting: "ready"}, states
            again = [b.reserve(timeout=0).id for _ in range(2)]
            assert sorted(again) == [held, waiting], "a deleted job came back, or one was lost"
        finally:
            b.close()
    finally:
        server.stop()


_WORKER = """
import json, sys
from pathlib import Path
from leasecheck.adapters.beanstalkd import Beanstalkd
from leasecheck.adapters.protocol import SharedClock
library = Beanstalkd()
clock = SharedClock.of(Path(sys.argv[2]), library.capabilities)
queue = library.connect(sys.argv[1], clock)
claim = queue.claim("zombie", float(sys.argv[3]))
print(json.dumps({"job": claim.job if claim else None}), flush=True)
sys.stdin.readline()  # frozen here (SIGSTOP) past the lease, then woken
print(json.dumps({"acked": queue.ack(claim)}), flush=True)
queue.close()
clock.close()
"""


def test_a_frozen_worker_s_late_delete_is_refused(scratch_dir: Path) -> None:
    library, lease = Beanstalkd(), 0.35
    location = library.create(scratch_dir, None)
    clock = SharedClock.of(scratch_dir / "clock", library.capabilities)
    queue = library.connect(location, clock)
    worker: subprocess.Popen[str] | None = None
    try:
        queue.enqueue("j0", "payload")
        worker = subprocess.Popen(
            [sys.executable, "-c", _WORKER, location, str(scratch_dir / "clock"), str(lease)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert worker.stdin is not None and worker.stdout is not None
        assert json.loads(worker.stdout.readline()) == {"job": "j0"}
        os.kill(worker.pid, signal.SIGSTOP)  # a GC pause longer than the lease
        clock.advance(lease + 0.05)
        taken = queue.claim("w2", lease)
        assert taken is not None and taken.job == "j0", "the frozen worker's job never came back"
        os.kill(worker.pid, signal.SIGCONT)
        worker.stdin.write("\n")
        worker.stdin.flush()
        assert json.loads(worker.stdout.readline()) == {"acked": False}, "the zombie's delete"
        assert worker.wait(timeout=30) == 0
        assert {view.job: view.state for view in queue.observe()} == {"j0": "leased"}
        assert queue.ack(taken)
    finally:
        if worker is not None:
            if worker.poll() is None:
                worker.kill()
                worker.wait(timeout=10)
            for pipe in (worker.stdin, worker.stdout):
                if pipe is not None:
                    pipe.close()
        queue.close()
        clock.close()
        library.destroy(location)
