"""Duplicate-send recovery, as at the end of lease-worker.md, with real processes and HTTP.

Per scenario:

1. a queue file holds one pending job (written from the model's ``enqueue``);
2. the receiving server (``queue_impl.receiver``) runs in a forked process of its
   own on 127.0.0.1, an ephemeral port, and reports its URL over the pipe;
3. dispatcher A, another forked process, calls the target's ``run_file`` with the
   HTTP ``send`` of ``make_send``; the receiver commits the effect and, in its
   ``after_commit`` hook, tells the harness and waits: the harness SIGKILLs A right
   there — after the receiver's commit, before A could finish — then lets the
   receiver go on (no sleeps anywhere: every wait is a message);
4. dispatcher B, a third process, runs ``run_file`` with a clock already at A's
   ``lease_until``: it claims the job again and resends;
5. the receiver is stopped and reports its request log and inbox.

Checked: A's claim is stored as the model has it; B's result and the final queue
state are the model's (``done``, token 2, attempts 2); exactly two HTTP requests
arrived, one ``applied`` and one ``duplicate``; one inbox row; the effect applied
once. Nothing claims exactly-once delivery: the receiver deduplicates.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from leasecheck.crash_harness._ops import same
from leasecheck.crash_harness._queue_files import QueueFiles, Scenario, read_stored, side_by_side
from leasecheck.crash_harness.engine import (
    DEFAULT_DEADLINE_S,
    FINAL_KINDS,
    Channel,
    Child,
    ChildResult,
    Engine,
)
from leasecheck.models import lease_model
from leasecheck.models.contracts import Snapshot
from leasecheck.models.evidence import Recorder, attach
from leasecheck.queue_impl.receiver import Receiver, make_send

__all__ = ["DuplicateSendReport", "check_duplicate_send"]

PROPERTY = "lease.duplicate-send"
SEND_TIMEOUT_S = DEFAULT_DEADLINE_S
JITTER = 0.5


@dataclass
class DuplicateSendReport:
    scenarios: int = 0
    requests: int = 0
    effects: int = 0

    def render(self) -> str:
        return (
            f"{self.scenarios} duplicate-send recoveries: {self.requests} HTTP requests, "
            f"{self.effects} effects applied"
        )


def _receiver_body(db_path: Path) -> Callable[[Channel], dict[str, Any]]:
    """Serve until told to stop; after the first committed effect, report and wait."""

    def body(channel: Channel) -> dict[str, Any]:
        resumed = threading.Event()

        def after_commit(event_id: str, qty: int) -> None:
            channel.send("event", ("committed", event_id, qty))
            resumed.wait(DEFAULT_DEADLINE_S)

        receiver = Receiver(db_path, after_commit=after_commit).start()
        try:
            channel.send("event", ("url", receiver.url))
            while (command := channel.receive()) != "stop":
                if command == "resume":
                    resumed.set()
        finally:
            resumed.set()
            receiver.stop()
        return {"stats": receiver.stats(), "log": receiver.request_log()}

    return body


def _clock(times: list[int]) -> Callable[[], int]:
    """An injected clock that returns ``times`` in order (and fails loudly after that)."""
    readings = iter(times)

    def clock() -> int:
        try:
            return next(readings)
        except StopIteration:
            raise AssertionError(f"run_file read the clock more than {len(times)} times") from None

    return clock


def _dispatcher_body(
    module: ModuleType, path: Path, owner: str, times: list[int], url: str, lease: int
) -> Callable[[Channel], Any]:
    def body(channel: Channel) -> Any:
        send = make_send(
            url, SEND_TIMEOUT_S, retryable=module.Retryable, permanent=module.Permanent
        )
        return module.run_file(str(path), owner, _clock(times), send, JITTER, lease)

    return body


def check_duplicate_send(
    module: ModuleType, directory: Path, scenarios: int, seed: int
) -> DuplicateSendReport:
    """Run ``scenarios`` duplicate-send recoveries; raise AssertionError on a violation."""
    rng = random.Random(f"{PROPERTY}:{seed}")
    report = DuplicateSendReport()
    with Engine() as engine:
        files = QueueFiles(engine, module, directory)
        for number in range(1, scenarios + 1):
            scenario = Scenario(PROPERTY, seed)
            inbox = directory / f"inbox-{number}.db"
            inbox.unlink(missing_ok=True)  # a fresh inbox: the first delivery must apply
            record = Recorder()
            try:
                _recovery(engine, files, module, inbox, rng, scenario, report, record)
            except AssertionError as error:
                evidence = record.evidence(str(error).splitlines()[0])
                raise attach(scenario.fail(str(error)), evidence) from error
            inbox.unlink(missing_ok=True)
    return report


def _recovery(
    engine: Engine,
    files: QueueFiles,
    module: ModuleType,
    inbox: Path,
    rng: random.Random,
    scenario: Scenario,
    report: DuplicateSendReport,
    record: Recorder,
) -> None:
    t0, qty, lease = rng.randint(0, 10**6), rng.randint(1, 1000), rng.randint(100, 5000)
    job = f"pay-{rng.randint(0, 9999)}"
    start = lease_model.enqueue(Snapshot(), {"id": job, "qty": qty}, t0, 60000, 3).state
    path = files.fresh(start)
    scenario.add(f"the queue holds job {job!r} qty={qty}, pending since t={t0}")
    receiver = engine.fork("receiver", _receiver_body(inbox))
    url = _expect_event(receiver, "url", "the receiver's URL")[1]
    scenario.add(f"the receiver serves {url} in a process of its own")
    model = lease_model.LeaseModel(start)
    ticket_a = model.claim("A", t0, lease)
    assert isinstance(ticket_a, dict)
    a = engine.fork("dispatcher-A", _dispatcher_body(module, path, "A", [t0, t0 + 1], url, lease))
    scenario.add(f"dispatcher A: run_file(owner='A', clock t={t0}, lease_ms={lease}) sends")
    record.actor("A", "process")
    record.step("A", f"run_file(owner='A', clock t={t0}, lease_ms={lease})", "run_file", t0)
    _kill_after_effect(engine, receiver, a, scenario)
    record.event("kill", "A", t0, "SIGKILL after the receiver committed A's delivery")
    stored = read_stored(path, "after A was SIGKILLed")
    record.rows("target", stored.jobs, t0)
    record.rows("model", model.state.jobs, t0)
    _compare(model.state, stored, "after A's claim")
    later = ticket_a["lease_until"]
    scenario.add(f"dispatcher B: run_file(owner='B', clock t={later}, then {later + 1}) resends")
    b = engine.fork(
        "dispatcher-B", _dispatcher_body(module, path, "B", [later, later + 1], url, lease)
    )
    got = b.outcome("dispatcher B's run_file (claim, resend, finish)")
    wanted = model.run_once("B", _clock([later, later + 1]), lambda event: True, JITTER, lease)
    record.step(
        "B", f"run_file(owner='B', clock t={later}, then {later + 1})", "run_file", later,
        target=got.describe(), model=f"returns {wanted!r}",
    )  # fmt: skip
    final = read_stored(path, "after B's run_file")
    record.rows("target", final.jobs, later + 1)
    record.rows("model", model.state.jobs, later + 1)
    if got.raised or not same(got.value, wanted):
        raise AssertionError(f"B's run_file {got.describe()} but the model returns {wanted!r}")
    _check_final(model.state, final, job)
    seen = _stop(receiver)
    stats = seen["stats"]
    record.step(
        "receiver", "the receiver's inbox", "receive", later + 1, job,
        target=f"{stats['requests']} requests, {stats['inbox']} inbox row(s)",
        model="2 requests, 1 inbox row (the resend is a duplicate)",
    )  # fmt: skip
    _check_receiver(seen, job, qty, report)
    report.scenarios += 1
    files.remove(path)


def _expect_event(child: Child, kind: str, waiting_for: str) -> tuple[Any, ...]:
    message = child.next(waiting_for)
    if message.kind != "event" or message.value[0] != kind:
        raise AssertionError(f"{child.name} sent {message.kind} {message.value!r}, not {kind}")
    value: tuple[Any, ...] = message.value
    return value


def _kill_after_effect(engine: Engine, receiver: Child, a: Child, scenario: Scenario) -> None:
    """Wait until the receiver has committed A's delivery; SIGKILL A there; resume."""
    who, message = engine.wait_any([receiver, a], "the receiver to commit A's delivery")
    if who is a:
        ended = message.value if message.kind in FINAL_KINDS else message
        raise AssertionError(
            f"dispatcher A sent {message.kind} {ended!r} before the receiver committed "
            f"its delivery; run_file should have claimed the job and sent it"
        )
    if message.kind != "event" or message.value[0] != "committed":
        raise AssertionError(f"the receiver sent {message.kind} {message.value!r}")
    scenario.add("the receiver commits the effect and signals; A is SIGKILLed before finishing")
    a.kill()
    receiver.answer("resume")


def _compare(wanted: Snapshot, stored: Snapshot, when: str) -> None:
    if stored != wanted:
        raise AssertionError(
            f"the stored queue {when} is not the model's\n"
            + side_by_side("model", wanted, "stored", stored)
        )


def _check_final(wanted: Snapshot, stored: Snapshot, job: str) -> None:
    _compare(wanted, stored, "after B recovered the job")
    row = stored.job(job)
    if row is None or (row.status, row.token, row.attempts) != ("done", 2, 2):
        raise AssertionError(f"job {job!r} should end done with token 2 and attempts 2: {row}")


def _stop(receiver: Child) -> dict[str, Any]:
    receiver.answer("stop")
    outcome: ChildResult = receiver.outcome("the receiver to stop and report its inbox")
    if outcome.raised:
        raise AssertionError(f"the receiver process {outcome.describe()}")
    value: dict[str, Any] = outcome.value
    return value


def _check_receiver(seen: dict[str, Any], job: str, qty: int, report: DuplicateSendReport) -> None:
    stats, log = seen["stats"], [tuple(row) for row in seen["log"]]
    report.requests += stats["requests"]
    report.effects += stats["inbox"]
    wanted_log = [(job, qty, "applied"), (job, qty, "duplicate")]
    if log != wanted_log or stats != {"requests": 2, "inbox": 1, "effect_total": qty}:
        raise AssertionError(
            f"the receiver saw {stats['requests']} requests {log} with {stats['inbox']} inbox "
            f"row(s) and effect total {stats['effect_total']}; the recovery must send exactly "
            f"twice ({wanted_log}) with one inbox row and the effect {qty} applied once"
        )
