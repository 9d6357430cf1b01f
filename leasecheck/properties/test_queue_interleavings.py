"""queue.interleavings: every schedule of a real library's SQL statements and verbs.

Issue 27: a recovery sweep racing an ack, a nack or an extend; a claim racing a sweep;
a store opened (fresh or reopened) while another process holds a live claim; two claims
racing. Each scenario (``crash_harness._queue_scenarios``) runs as real forked processes
on one copy of a seeded store, stepped one SQL statement (the library's own connection,
traced) or adapter verb at a time by the lease worker's scheduler
(``crash_harness.interleavings``): every schedule of two processes, and in deep of three
with at most 2 preemptions, cheapest first. Each history is judged by the generic model
(``models._queue_spec.QueueSpec``); a schedule that breaks a generic property is judged by
the library's promise of that property, so ``--strict`` applies. The same target and
seed always explore the same schedules: the verdict does not depend on the OS. A library
on a server is scheduled at every command it sends (each process's wire proxy,
``crash_harness._wire_proxy``, holds it until released) and at its verbs, within a
smaller bound and a cap of schedules a scenario (``SERVER_BOUNDS``): every schedule
copies or re-seeds a store on the server.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import NoReturn

import pytest

from leasecheck._blame import HarnessFailure, child_harness_problem
from leasecheck.adapters import servers
from leasecheck.adapters.protocol import QueueLibrary
from leasecheck.crash_harness._queue_scenarios import (
    BOUNDS,
    SERVER_BOUNDS,
    VERB_BOUNDS,
    queue_scenario,
)
from leasecheck.crash_harness._wire_proxy import dialect_of
from leasecheck.crash_harness.interleavings import STEP_NS, Run
from leasecheck.crash_harness.queue_interleavings import (
    LIVE_MS,
    Finding,
    QueueExploration,
    explore_queue,
)
from leasecheck.models.evidence import attach
from leasecheck.models.history_evidence import queue_schedule_evidence
from leasecheck.plugin import Checked, NotChecked
from leasecheck.profiles import Profile


def _failure(library: QueueLibrary, done: QueueExploration, finding: Finding) -> AssertionError:
    """The finding's message, with its history as evidence (one lane per process, each
    call a bar over the scheduling steps it spanned, each claim's lease on its claimer's
    lane as the library reported it and as the model expects it)."""
    scenario = done.exploration.scenario
    finding.run.problem = finding.text
    error = AssertionError(
        f"{finding.prop} broken by {library.name} in a schedule of {scenario.processes} "
        f"processes (queue.interleavings, after {done.exploration.explored} schedules):\n"
        + finding.run.describe(
            scenario, "leasecheck.crash_harness.queue_interleavings.replay_queue"
        )
    )
    summary = f"{finding.prop} broken by {library.name} ({scenario.name})"
    evidence = queue_schedule_evidence(finding.history, summary, STEP_NS, finding.origin)
    return attach(error, evidence)


def _failed_outside(library: QueueLibrary, done: QueueExploration, run: Run) -> NoReturn:
    """A process raised outside every operation (opening, closing, between calls): the
    exploration stopped there, so it is never a pass. Raised in leasecheck's own code
    (``_blame``): leasecheck could not do its job (exit 2); else the library did it."""
    scenario = done.exploration.scenario
    for info in run.errors:
        if (own := child_harness_problem(info)) is not None:
            raise HarnessFailure(f"{own}, in a process of scenario {scenario.name!r}")
    raise AssertionError(
        f"{library.name} raised outside any operation in a schedule of scenario "
        f"{scenario.name!r} (queue.interleavings): {run.problem}\n"
        + run.describe(scenario, "leasecheck.crash_harness.queue_interleavings.replay_queue")
    )


@pytest.mark.leasecheck("queue.interleavings")
def test_queue_interleavings(
    multiprocess_library: QueueLibrary,
    queue_server: str | None,
    judged: Callable[[str], AbstractContextManager[None]],
    scratch: Path,
    lc_profile: Profile,
    no_leaked_children: None,
    checked: Checked,
    not_checked: NotChecked,
) -> None:
    library = multiprocess_library
    with contextlib.ExitStack() as stack:
        if (fixed := library.capabilities.server_lease) is not None and fixed * 1000 < LIVE_MS:
            # RabbitMQ (docs/findings.md, "queue.interleavings on RabbitMQ"): the broker's
            # one lease (consumer_timeout) would run out inside the exploration, so the
            # scenarios get a broker of their own whose consumer_timeout outlasts the
            # scenario's leases (LIVE_MS): the leases the model knows are the ones that
            # end. Each process ends at the last barrier (its deliveries go back when its
            # connection closes), and the histories have no read after each schedule.
            queue_server = stack.enter_context(
                servers.start(library.capabilities.server, durable=False,  # type: ignore[arg-type]
                              lease_ms=4 * LIVE_MS, tick_ms=1_000)
            ).url  # fmt: skip
        _explore_all(library, queue_server, judged, scratch, lc_profile, checked, not_checked)


def _explore_all(
    library: QueueLibrary, queue_server: str | None,
    judged: Callable[[str], AbstractContextManager[None]], scratch: Path, lc_profile: Profile,
    checked: Checked, not_checked: NotChecked,
) -> None:  # fmt: skip
    done: list[QueueExploration] = []
    scope = lc_profile.explore_scope
    dialect = dialect_of(library.capabilities.server) if queue_server is not None else None
    wired = dialect is not None
    if dialect is not None:  # its wire proxy holds each command: the commands are the points
        plan = list(SERVER_BOUNDS[dialect][scope])
    elif queue_server is None:  # a SQLite library's statements are the points
        plan = [(name, bound, None) for name, bound in BOUNDS[scope]]
    else:
        # A server whose wire leasecheck does not speak (beanstalkd, NATS, RabbitMQ) is
        # scheduled at its verbs only, where a claim belongs to the client that made it.
        plan = [(name, bound, None) for name, bound in VERB_BOUNDS[scope]]
    caps = {name: cap for name, _bound, cap in plan if cap is not None}
    for name, bound, cap in plan:
        scenario = queue_scenario(name)
        if not scenario.runs_on(library.capabilities):
            continue
        found = explore_queue(library, scenario, scratch, bound, cap or 2_000, queue_server)
        if found.violated is None and found.exploration.failure is not None:
            _failed_outside(library, found, found.exploration.failure)
        if found.violated is not None:
            with judged(found.violated.prop):
                raise _failure(library, found, found.violated)
        done.append(found)
    for found in done:
        if found.unpromised is not None:
            with judged(found.unpromised.prop):
                raise _failure(library, found, found.unpromised)
    explored = sum(d.exploration.explored for d in done)
    unread = any(d.unobserved for d in done)
    if not explored:
        not_checked("0 schedules explored", "use the ci or deep profile")
    sizes = sorted({d.exploration.scenario.processes for d in done})
    used = sorted({d.exploration.bound for d in done if d.exploration.bound is not None})
    most = max(d.exploration.points for d in done)
    procs = "-".join(str(n) for n in sorted({sizes[0], sizes[-1]}))
    bound_text = f"<= {used[-1]} preemptions" if used else "every schedule"
    if caps:
        bound_text += f", <= {max(caps.values())} schedules a scenario"
    points = (
        "statements and verbs" if queue_server is None
        else "wire commands and verbs" if wired else "verbs"
    )  # fmt: skip
    checked(
        f"{len(done)} scenarios, {procs} processes ({bound_text}), <= {most} {points}; "
        f"{explored} schedules"
        + ("; no read of the store after each (observe unsupported)" if unread else ""),
        scenarios=len(done), schedules=explored, statements=most,
        preemptions={d.exploration.scenario.name: d.exploration.bound for d in done},
        caps=caps, final_read=not unread,
    )  # fmt: skip
