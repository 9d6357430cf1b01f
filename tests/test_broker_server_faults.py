"""The server faults on the brokers (issue 26): each gets a verdict, or "not checked".

nats-jetstream after a SIGKILL and restart of nats-server on its store: the fault after
the restart must run on the restarted server (it once read "run error": the runner
killed the restarted server as the crash test's leftover, so the next faults' workers
found nothing listening). And a run the harness cannot carry through (a worker that
cannot start) reads "not checked", exit 2, never VIOLATED.

``queue.server-pause`` (the server SIGSTOPped while a worker acks, past the lease) is
seen to fail on planted kombu-redis adapters: an ack that says True and acknowledges
nothing (``queue.ack-final``: the job comes back), an ack that acknowledges and says
False (``queue.no-loss``: the job is gone though nobody finished it); and to hold on
kombu-redis itself.
"""

from __future__ import annotations

from pathlib import Path

from leasecheck.runner import (
    HOLDS,
    NOT_CHECKED,
    NOT_PROMISED,
    VIOLATED,
    CheckOptions,
    run_check,
)

FAULTS = ("queue.server-crash", "queue.zombie-pause", "queue.clock-skew")

UNREACHABLE = '''
import sys

from leasecheck.adapters.kombu_redis import KombuRedis


class Unreachable(KombuRedis):
    """kombu-redis whose worker processes cannot start (a harness failure, planted)."""

    def connect(self, location, clock):
        if sys.argv[0].endswith("_server_agent.py"):
            raise SystemExit("planted: this worker process cannot reach its server")
        return super().connect(location, clock)
'''


LYING_ACK = '''
from leasecheck.adapters.kombu_redis import KombuRedis


class LyingAck(KombuRedis):
    """kombu-redis whose ack says True and acknowledges nothing (planted)."""

    name = "kombu-redis-lying-ack"

    def connect(self, location, clock):
        queue = super().connect(location, clock)
        queue.ack = lambda claim: True
        return queue
'''

SILENT_ACK = '''
from leasecheck.adapters.kombu_redis import KombuRedis


class SilentAck(KombuRedis):
    """kombu-redis whose ack acknowledges and then says False (planted)."""

    name = "kombu-redis-silent-ack"

    def connect(self, location, clock):
        queue = super().connect(location, clock)
        ack = queue.ack
        queue.ack = lambda claim: ack(claim) and False
        return queue
'''


def _faults(adapter: str, *faults: str) -> tuple[dict[str, str], int, str]:
    """Verdicts, exit code, and the log with every row's details."""
    options = CheckOptions(
        adapter=adapter, profile="ci", seed=0, workers="0", servers=True, properties=faults,
    )  # fmt: skip
    result = run_check(options)
    verdicts = {name: row.verdict for name, row in result.properties.items()}
    details = [line for row in result.properties.values() for line in row.details]
    return verdicts, result.exit_code, "\n".join([result.log, *details])


def test_nats_faults_run_on_the_restarted_server() -> None:
    """server-crash restarts nats-server; the two faults after it run on that server."""
    verdicts, code, log = _faults("nats-jetstream", *FAULTS)
    expected = {
        "queue.server-crash": NOT_PROMISED,  # acks lost in the crash (sync_interval)
        "queue.zombie-pause": NOT_PROMISED,  # the late ack of delivery 1 acks delivery 2
        "queue.clock-skew": HOLDS,  # AckWait is the server's
    }
    assert (verdicts, code) == (expected, 0), log[-3000:]


def test_a_worker_that_cannot_start_is_not_checked_never_violated(tmp_path: Path) -> None:
    adapter = tmp_path / "unreachable.py"
    adapter.write_text(UNREACHABLE)
    verdicts, code, log = _faults(str(adapter), "queue.zombie-pause")
    assert (verdicts, code) == ({"queue.zombie-pause": NOT_CHECKED}, 2), log[-3000:]
    assert "the worker process ended" in log and "planted" in log, log[-3000:]


def test_a_paused_server_holds_on_kombu_redis_and_fails_on_lying_acks(tmp_path: Path) -> None:
    pause = "queue.server-pause"
    verdicts, code, log = _faults("kombu-redis", pause)
    assert (verdicts, code) == ({pause: HOLDS}, 0), log[-3000:]
    lying, silent = tmp_path / "lying_ack.py", tmp_path / "silent_ack.py"
    lying.write_text(LYING_ACK)
    silent.write_text(SILENT_ACK)
    verdicts, code, log = _faults(str(lying), pause)
    assert (verdicts, code) == ({pause: VIOLATED}, 1), log[-3000:]
    assert "acknowledged jobs ['a']" in log, log[-3000:]
    verdicts, code, log = _faults(str(silent), pause)
    assert (verdicts, code) == ({pause: VIOLATED}, 1), log[-3000:]
    assert "enqueued jobs ['a']" in log, log[-3000:]
