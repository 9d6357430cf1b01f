"""queue.linearizable: histories of concurrent processes are linearizable (generic model).

Issue 11: "histories of concurrent processes are linearizable against the generic
model". Racer processes run mixed claims, acks and nacks released together from a
gate, the harness enqueues, moves the clock, recovers and reads the store between
steps (``crash_harness.queue_races.linear_history``), and
``models.linearizability.check`` searches for an order that respects real time and
that ``models.queue_model`` explains (``models._queue_spec.QueueSpec``). A property
the library does not promise is judged by its own test, not counted again here.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from leasecheck.adapters.protocol import GENERIC_PROPERTIES, QueueLibrary
from leasecheck.crash_harness.queue_races import linear_history
from leasecheck.models._queue_spec import QueueSpec
from leasecheck.models.evidence import attach
from leasecheck.models.history_evidence import history_evidence
from leasecheck.models.linearizability import check
from leasecheck.models.queue_model import QueueState
from leasecheck.profiles import Profile

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
        capabilities.ack_deletes, unpromised - {"queue.linearizable"}, capabilities.real_time
    )
    operations = 0
    with judged("queue.linearizable"):
        for number in range(histories):
            directory = scratch / f"history-{number}"
            directory.mkdir()
            seed = lc_seed * 1000 + number
            history = linear_history(
                library, directory, lc_profile.race_processes, lc_profile.queue_rounds, seed,
                queue_server,
            )  # fmt: skip
            operations += len(history)
            verdict = check(history, spec, QueueState())
            if not verdict.linearizable:
                said = f"queue.linearizable violated by {library.name} (history {number}, "
                said += f"seed {seed})"
                evidence = history_evidence(verdict, said)
                raise attach(AssertionError(f"{said}:\n{verdict.report()}"), evidence)
    checked(f"{histories} histories, {operations} operations")
