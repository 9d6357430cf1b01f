"""The JobQueue scenarios of jobs.interleavings: a seeded queue, then 2-3 threads.

A ``Scenario`` is a few opening calls run alone (they seed the queue: jobs submitted,
one RUNNING under a lease, one DEAD) and then 2-3 threads of 1-3 calls each, written
as the contract's records (``models.job_ops.JobOp``; ``Held()`` is the
latest lease the thread holds, from the opening or its own poll). Each scenario is
one race shape, named after the spec sentence it is about. ``PLANS`` gives each
profile its scenarios and the preemption bound of each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from leasecheck.models.job_ops import Held, JobOp

__all__ = [
    "CI_SCENARIOS",
    "DEEP_SCENARIOS",
    "EXCLUSIVE",
    "NOW",
    "PLANS",
    "Plan",
    "Scenario",
    "call",
]

NOW = 100
"""The instant every thread's call reads (the opening calls read earlier instants)."""


def call(name: str, now: int = 0, **args: Any) -> JobOp:
    """One call: an operation name and its arguments (``now`` is the instant it reads)."""
    return JobOp.of(name, now=now, **args)


def _submit(priority: int = 0, now: int = 0, type: str = "email") -> JobOp:
    return call("submit", type=type, payload="p", priority=priority, run_at_millis=0, now=now)


def _poll(worker: str, now: int = NOW, lease: int = 1000) -> JobOp:
    return call("poll", worker_id=worker, lease_millis=lease, now=now)


def _complete(now: int = NOW) -> JobOp:
    return call("complete", job_id=Held(), token=Held(), now=now)


def _fail(now: int = NOW, error: str | None = "boom") -> JobOp:
    return call("fail", job_id=Held(), token=Held(), now=now, error=error)


def _on(name: str, job_id: str = "J1", now: int = NOW) -> JobOp:
    return call(name, job_id=job_id, now=now)


@dataclass(frozen=True)
class Scenario:
    """Opening calls run alone, then ``threads`` (T1, T2, ...) at once."""

    name: str
    why: str
    """The spec sentence the race is about."""
    prefix: tuple[JobOp, ...]
    threads: tuple[tuple[JobOp, ...], ...]

    def describe(self) -> list[str]:
        lines = [f"scenario {self.name!r} ({self.why})"]
        lines += [
            f"  opening, run alone: {i}. {c.describe()}" for i, c in enumerate(self.prefix, 1)
        ]
        for number, calls in enumerate(self.threads, 1):
            lines.append(f"  T{number}: " + "; then ".join(c.describe() for c in calls))
        return lines

    def record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "why": self.why,
            "prefix": [_command_record(c) for c in self.prefix],
            "threads": [[_command_record(c) for c in calls] for calls in self.threads],
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Scenario:
        return cls(
            record["name"],
            record["why"],
            tuple(_command_of(c) for c in record["prefix"]),
            tuple(tuple(_command_of(c) for c in calls) for calls in record["threads"]),
        )


def _command_record(command: JobOp) -> dict[str, Any]:
    return command.to_json()


def _command_of(record: dict[str, Any]) -> JobOp:
    """A call from its record; also reads the older ``{"name", "args"}`` form, in which
    ``now`` was an argument, ``run_at`` named ``run_at_millis`` and a held lease was
    ``{"held": back}`` for the token alone."""
    if "kind" in record:
        return JobOp.from_json(record)
    args: dict[str, Any] = {
        k: Held(v["held"]) if isinstance(v, dict) and set(v) == {"held"} else v
        for k, v in record["args"].items()
    }
    if "run_at" in args:
        args["run_at_millis"] = args.pop("run_at")
    if isinstance(args.get("token"), Held):
        args = {"job_id": args["token"], **args}
    now = args.pop("now", 0)
    return JobOp.of(record["name"], now=now, **args)


_LEASED = (_submit(), _poll("w1", now=0))
_EXPIRING = (_submit(), _poll("w1", now=0, lease=50))
_DEAD = (_submit(), _poll("w1", now=0), _fail(now=1), _poll("w1", now=20), _fail(now=21))
EXCLUSIVE = "a job is never leased to two workers at the same time"
_TOKEN = "complete and fail work only with the token of the job's current lease"

CI_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("two polls, two ready jobs", EXCLUSIVE, (_submit(0), _submit(1)),
             ((_poll("w1"),), (_poll("w2"),))),
    Scenario("complete and fail one lease", _TOKEN, _LEASED, ((_complete(),), (_fail(),))),
    Scenario("complete one lease twice", _TOKEN, _LEASED, ((_complete(),), (_complete(),))),
    Scenario("view while a poll leases", "all methods are safe to call from many threads",
             (_submit(),), ((_poll("w1"),), (_on("view"),))),
    Scenario("cancel while a poll leases", "cancel: only from PENDING", (_submit(),),
             ((_on("cancel"),), (_poll("w2"),))),
    Scenario("two submits", "ids J1, J2, ...", (_submit(),), ((_submit(1),), (_submit(2),))),
    Scenario("an expired lease: complete and poll", "a lease is valid while now < lease_until",
             _EXPIRING, ((_complete(),), (_poll("w2"),))),
    Scenario("a poll, and a poll after that lease ends", EXCLUSIVE, (_submit(),),
             ((_poll("w1", now=0, lease=50),), (_poll("w2"),))),
    Scenario("retry a dead job twice", "retry_dead: only from DEAD", _DEAD,
             ((_on("retry_dead"),), (_on("retry_dead"),))),
    Scenario("submit while dead letters are listed", "dead_letters: all DEAD jobs", _DEAD,
             ((_submit(1),), (call("dead_letters", now=NOW),))),
    Scenario("retry a dead job while a poll leases", "retry_dead: PENDING, attempts 0",
             _DEAD, ((_on("retry_dead"),), (_poll("w2"),))),
    Scenario("retry a dead job while dead letters are listed", "dead_letters: all DEAD jobs",
             _DEAD, ((_on("retry_dead"),), (call("dead_letters", now=NOW),))),
    Scenario("three polls, two jobs", EXCLUSIVE, (_submit(0), _submit(1)),
             ((_poll("w1"),), (_poll("w2"),), (_poll("w3"),))),
    Scenario("two workers poll and finish", EXCLUSIVE, (_submit(0), _submit(1)),
             ((_poll("w1"), _complete()), (_poll("w2"), _fail()))),
    Scenario("poll, fail, poll again", EXCLUSIVE, (_submit(),),
             ((_poll("w1"), _fail(), _poll("w1")), (_poll("w2"), _complete()))),
    Scenario("cancel, submit and poll", "cancel: only from PENDING", (_submit(),),
             ((_on("cancel"), _submit(1)), (_poll("w2"), _on("view")))),
)  # fmt: skip
"""The ci scenarios: each race shape once; 2 threads (one scenario 3) of 1-3 calls. "A
poll, and a poll after that lease ends" came from a JobQueue written blind that built
its Lease after releasing the lock: the later poll, expiring the lease, changed the job
under the first poll's return. The two races of retry_dead came from two more: one whose
retry_dead took a lock of its own, one whose dead_letters built its views unlocked."""

DEEP_SCENARIOS: tuple[Scenario, ...] = (
    *CI_SCENARIOS,
    Scenario("three workers poll and finish", EXCLUSIVE, (_submit(0), _submit(1)),
             ((_poll("w1"), _complete()), (_poll("w2"), _fail()), (_poll("w3"),))),
)  # fmt: skip

Plan = tuple[tuple[Scenario, int], ...]
"""Scenarios with the preemption bound each is explored to."""


def _plan(scenarios: Sequence[Scenario], preemptions: int) -> Plan:
    return tuple((scenario, preemptions) for scenario in scenarios)


PLANS: dict[str, Plan] = {
    "quick": _plan(CI_SCENARIOS, 1),
    "ci": _plan(CI_SCENARIOS, 2),
    "deep": _plan(DEEP_SCENARIOS, 3),
}
"""Per profile: the scenarios and the preemption bound of each (ci: 13 at 2, about 2 s
on the loaded 2-core machine; deep: 14 at 3, about 15 s)."""
