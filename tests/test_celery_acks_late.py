"""Celery's ``acks_late`` on the Redis broker, with real ``celery worker`` processes.

Celery's docs (Tasks, ``acks_late``): the message is acknowledged *after* the task
runs, so a worker that dies mid-task leaves it to be delivered again; on Redis,
"again" is when the transport's visibility timeout has passed (kombu's
``QoS.restore_visible``, run by every worker's event loop). Three scenarios, each with
real worker processes (``--pool solo``) on a real Redis started for the module, every
run of the task recorded by the task itself in a JSON-lines file:

- a worker SIGKILLed mid-task: the task runs again on the other worker, once;
- a worker frozen (SIGSTOP) past the visibility timeout and woken while the rerun runs:
  both runs finish and store a result under the one task id; the first ``SUCCESS``
  stays (Celery ignores a later store over a ``SUCCESS``);
- a worker frozen (SIGSTOP) past the visibility timeout: the task runs again on the other
  worker; the frozen one, woken, finishes its run, stores its result and acks, and that
  late ack names the same delivery tag as the second delivery (``kombu-redis``'s
  ``queue.stale-ack`` finding), so the second delivery's unacked entry is gone: when the
  second worker then dies mid-task, nothing redelivers the task. Both outcomes are
  asserted as observed; ``docs/findings.md`` reports them.

Timing: the visibility timeout is 2 s and every worker restores every second
(``unacked_restore_interval=1``, ``unacked_restore_throttle=1``); each step waits
(bounded) for the event it needs, read from the runs file, never for silence, except
the last step of the second scenario, which must show that *no* run happens: it waits
three visibility timeouts plus three restore intervals (8 s) for one that never comes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from leasecheck.adapters import servers

VISIBILITY_TIMEOUT = 2
TASK_SECONDS = 4.0
START_BOUND = 60.0
"""Seconds a worker may take to start and take the task on a loaded machine."""

APP = textwrap.dedent(
    """
    import json, os, time
    from celery import Celery

    app = Celery("lc_celery", broker=os.environ["LC_BROKER"], backend=os.environ["LC_BROKER"])
    app.conf.update(
        broker_transport_options={
            "visibility_timeout": %(vt)d,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        },
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
    )

    def _record(event, task):
        line = {"event": event, "worker": os.environ["LC_WORKER"], "pid": os.getpid(),
                "redelivered": bool(task.request.delivery_info.get("redelivered"))}
        with open(os.environ["LC_RUNS"], "a") as runs:
            runs.write(json.dumps(line) + "\\n")

    from celery.signals import task_success

    @task_success.connect
    def _stored(sender=None, **kwargs):  # sent after the backend's store of the result
        _record("stored", sender)

    @app.task(bind=True, acks_late=True)
    def slow(self, seconds):
        _record("start", self)
        time.sleep(seconds)
        _record("end", self)
        return os.environ["LC_WORKER"]
    """
) % {"vt": VISIBILITY_TIMEOUT}


class Celery:
    """The app module in a temp directory, its workers, and the runs they record."""

    def __init__(self, directory: Path, broker: str) -> None:
        self.directory, self.broker = directory, broker
        (directory / "lc_celery.py").write_text(APP)
        self.runs = directory / "runs.jsonl"
        self.workers: dict[str, subprocess.Popen[bytes]] = {}

    def env(self, worker: str) -> dict[str, str]:
        return {
            **os.environ, "LC_BROKER": self.broker, "LC_RUNS": str(self.runs),
            "LC_WORKER": worker, "PYTHONPATH": str(self.directory),
        }  # fmt: skip

    def start(self, worker: str) -> None:
        log = (self.directory / f"{worker}.log").open("ab")
        self.workers[worker] = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "lc_celery", "worker", "--pool", "solo",
             "--without-heartbeat", "--without-mingle", "--without-gossip",
             "-n", f"{worker}@leasecheck", "--loglevel", "INFO"],
            cwd=self.directory, env=self.env(worker), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, preexec_fn=servers.die_with_parent,
        )  # fmt: skip
        log.close()

    def send(self) -> str:
        code = f"import lc_celery; print(lc_celery.slow.delay({TASK_SECONDS!r}).id)"
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=self.directory, env=self.env("client"),
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return done.stdout.strip()

    def result(self, task_id: str) -> dict[str, object]:
        code = (
            f"import json, lc_celery; r = lc_celery.app.AsyncResult({task_id!r}); "
            "print(json.dumps({'state': r.state, 'result': r.result}))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=self.directory, env=self.env("client"),
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        found: dict[str, object] = json.loads(done.stdout)
        return found

    def events(self) -> list[dict[str, object]]:
        if not self.runs.exists():
            return []
        return [json.loads(line) for line in self.runs.read_text().splitlines() if line]

    def wait_for(self, what: str, test: Callable[[list[dict[str, object]]], bool],
                 bound: float = START_BOUND) -> list[dict[str, object]]:  # fmt: skip
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            events = self.events()
            if test(events):
                return events
            time.sleep(0.05)
        raise AssertionError(f"waited {bound:.0f} s for {what}; runs so far: {self.events()}")

    def signal(self, worker: str, number: signal.Signals) -> None:
        self.workers[worker].send_signal(number)

    def stop_all(self) -> None:
        for process in self.workers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.kill()
            process.wait(timeout=10)


def _started(worker: str) -> Callable[[list[dict[str, object]]], bool]:
    return lambda events: any(e["event"] == "start" and e["worker"] == worker for e in events)


def _stored(worker: str) -> Callable[[list[dict[str, object]]], bool]:
    return lambda events: any(e["event"] == "stored" and e["worker"] == worker for e in events)


def _ended(worker: str) -> Callable[[list[dict[str, object]]], bool]:
    return lambda events: any(e["event"] == "end" and e["worker"] == worker for e in events)


@pytest.fixture
def celery(redis_url: str) -> Iterator[Celery]:
    with tempfile.TemporaryDirectory(prefix="leasecheck-celery-") as directory:
        app = Celery(Path(directory), redis_url)  # the module's own server: flushed per test
        subprocess.run(
            [sys.executable, "-c", "import redis, sys; redis.Redis.from_url(sys.argv[1]).flushdb()",
             app.broker], check=True, timeout=30,
        )  # fmt: skip
        try:
            yield app
        finally:
            app.stop_all()


def test_a_killed_workers_task_runs_again_once(celery: Celery) -> None:
    celery.start("w1")
    task = celery.send()
    celery.wait_for("w1 to start the task", _started("w1"))
    celery.signal("w1", signal.SIGKILL)
    celery.start("w2")
    events = celery.wait_for("w2 to finish the task", _ended("w2"))
    starts = [e for e in events if e["event"] == "start"]
    assert [(e["worker"], e["redelivered"]) for e in starts] == [("w1", False), ("w2", True)]
    deadline = time.monotonic() + 30
    while celery.result(task)["state"] != "SUCCESS" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert celery.result(task) == {"state": "SUCCESS", "result": "w2"}


def test_a_frozen_workers_late_ack_loses_the_second_run(celery: Celery) -> None:
    celery.start("w1")
    task = celery.send()
    celery.wait_for("w1 to start the task", _started("w1"))
    celery.signal("w1", signal.SIGSTOP)  # frozen mid-task, past the visibility timeout
    celery.start("w2")
    celery.wait_for("w2 to start the task again", _started("w2"))
    celery.signal("w1", signal.SIGCONT)  # its sleep is over: it ends, stores, acks
    events = celery.wait_for("w1 to end its run", _ended("w1"))
    assert not _ended("w2")(events), "w2 finished before w1 woke: the scenario did not race"
    assert celery.result(task) == {"state": "SUCCESS", "result": "w1"}
    celery.signal("w2", signal.SIGKILL)  # the second run dies mid-task
    time.sleep(3 * VISIBILITY_TIMEOUT + 3 * 1.0)  # three timeouts and restores: no redelivery
    starts = [(e["worker"], e["redelivered"]) for e in celery.events() if e["event"] == "start"]
    assert starts == [("w1", False), ("w2", True)], starts
    assert celery.result(task) == {"state": "SUCCESS", "result": "w1"}


def test_a_frozen_workers_run_and_the_rerun_both_store_a_result(celery: Celery) -> None:
    """Both runs of the task finish and each stores its result under the one task id, but
    the first ``SUCCESS`` stays: Celery's key-value backends ignore any later store once a
    task reads ``SUCCESS`` (``celery/backends/base.py``, ``_store_result``: "if the status
    is a success then we ignore any following update"). The redelivery's run happened
    and its result is dropped; the task's result is the frozen run's."""
    celery.start("w1")
    task = celery.send()
    celery.wait_for("w1 to start the task", _started("w1"))
    celery.signal("w1", signal.SIGSTOP)
    celery.start("w2")
    celery.wait_for("w2 to start the task again", _started("w2"))
    celery.signal("w1", signal.SIGCONT)
    events = celery.wait_for("w1 to end its run", _ended("w1"))
    assert not _ended("w2")(events), "w2 finished before w1 woke: the scenario did not race"
    assert celery.result(task) == {"state": "SUCCESS", "result": "w1"}
    events = celery.wait_for("w2 to store its result", _stored("w2"))
    ends = [e["worker"] for e in events if e["event"] == "end"]
    assert ends == ["w1", "w2"], ends
    assert celery.result(task) == {"state": "SUCCESS", "result": "w1"}, "the later run overwrote"
