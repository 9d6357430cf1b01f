"""queue.linearizable: histories of concurrent processes are linearizable (generic model).

Issue 11: "histories of concurrent processes are linearizable against the generic
model". Racer processes run mixed claims, acks and nacks released together from a
gate, the harness enqueues, moves the clock, recovers and reads the store between
steps (``crash_harness.queue_races.linear_history``), and
``models.linearizability.check`` searches for an order that respects real time and
that ``models.queue_model`` explains (``models._queue_spec.QueueSpec``). A property
the library does not promise is judged by its own test, not counted again here.

Where the library's own verbs run its recovery sweep (rq's dequeue runs its maintenance),
an ack, nack or extend that ran beside such a sweep, on a lease that had run out, races
it in an order the OS picks: its outcome is set aside as unknown, counted in the row
(``_sweep_race``; the race is ``queue.interleavings``' ``sweep-ack`` schedule), so the
verdict does not depend on that luck.

Where the library claims with ``FOR UPDATE SKIP LOCKED`` (``Capabilities.skips_locked``),
a claim that answered None beside other calls may have passed over the rows they held
locked, as the library documents; the model lets those jobs stay ready
(``QueueSpec.beside``) instead of calling the None a lost claim.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from leasecheck.adapters.protocol import GENERIC_PROPERTIES, QueueLibrary, SharedClock
from leasecheck.crash_harness.queue_races import linear_run, shrink_script
from leasecheck.models._history import Operation
from leasecheck.models._queue_spec import QueueSpec
from leasecheck.models.evidence import attach, evidence_of, shrunk_evidence
from leasecheck.models.history_evidence import history_evidence
from leasecheck.models.linearizability import check
from leasecheck.models.queue_model import QueueState
from leasecheck.models.shrinking import Shrunk
from leasecheck.profiles import Profile
from leasecheck.properties._sweep_race import logged_sweeps, read_sweeps, set_aside

HISTORY_EVERY = 20
"""One history of ``queue_rounds`` rounds per this many ``parallel_histories``."""


@pytest.mark.leasecheck("queue.linearizable")
def test_queue_linearizable(
    multiprocess_library: QueueLibrary,
    queue_server: str | None,
    judged: Callable[[str], AbstractContextManager[None]],
    scratch: Path,
    lc_profile: Profile,
    lc_seed: int,
    no_leaked_children: None,
    checked: Callable[[str], None],
) -> None:
    histories = max(1, lc_profile.parallel_histories // HISTORY_EVERY)
    library = multiprocess_library
    unpromised = frozenset(p for p in GENERIC_PROPERTIES if not library.promises.of(p).promised)
    capabilities = library.capabilities
    spec = QueueSpec(
        capabilities.ack_deletes,
        unpromised - {"queue.linearizable"},
        capabilities.real_time,
        capabilities.skips_locked,
    )
    operations, aside = 0, 0
    sweeps = logged_sweeps(library, scratch / "sweeps.jsonl")
    with judged("queue.linearizable"), sweeps as log:
        for number in range(histories):
            directory = scratch / f"history-{number}"
            directory.mkdir()
            seed = lc_seed * 1000 + number
            processes = lc_profile.race_processes
            history, script = linear_run(
                library, directory, processes, lc_profile.queue_rounds, seed, queue_server
            )
            operations += len(history)
            said = f"queue.linearizable violated by {library.name} (history {number}, "
            said += f"seed {seed})"

            def judge(history: list[Operation], said: str = said) -> AssertionError | None:
                kept = set_aside(history, read_sweeps(log), capabilities.real_time)[0]
                verdict = check(kept, spec.beside(kept), QueueState())
                if verdict.linearizable:
                    return None
                error = AssertionError(f"{said}:\n{verdict.report()}")
                origin = None if capabilities.real_time else SharedClock.START
                return attach(error, history_evidence(verdict, said, QueueState(), origin=origin))

            aside += set_aside(history, read_sweeps(log), capabilities.real_time)[1]
            failed = judge(history)
            if failed is not None:
                shrunk = shrink_script(
                    library, directory, processes, script, judge, failed, queue_server
                )
                raise failed if shrunk is None else _shorter(shrunk[1], shrunk[2], len(history))
    text = f"{histories} histories, {operations} operations"
    if aside:
        text += (
            f"; {aside} acks/nacks/extends set aside (outcome unknown): they ran beside "
            f"{library.name}'s own sweep inside another process's claim, on a lease that "
            f"had run out (that race: queue.interleavings' sweep-ack)"
        )
    checked(text)


def _shorter(error: AssertionError, shrunk: Shrunk[Any, Any], before: int) -> AssertionError:
    """The shrunk history's failure, saying what it was shrunk from."""
    text = (
        f"{error}\n{shrunk.sentence()} (the first history had {before} operations; the racers "
        f"ran the remaining calls again on a fresh store, interleaved by the OS)"
    )
    found = evidence_of(error)
    shorter = AssertionError(text)
    return (
        attach(shorter, shrunk_evidence(found, shrunk.before, shrunk.after)) if found else shorter
    )
