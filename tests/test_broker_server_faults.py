"""The server faults on the brokers (issue 26): each gets a verdict, or "not checked".

nats-jetstream after a SIGKILL and restart of nats-server on its store: the fault after
the restart must run on the restarted server (it once read "run error": the runner
killed the restarted server as the crash test's leftover, so the next faults' workers
found nothing listening). And a run the harness cannot carry through (a worker that
cannot start) reads "not checked", exit 2, never VIOLATED.
"""

from __future__ import annotations

from pathlib import Path

from leasecheck.runner import HOLDS, NOT_CHECKED, NOT_PROMISED, CheckOptions, run_check

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
