"""queue.ack-final: an acknowledged job is never delivered again and ends done, under SIGKILL.

Issue 11: "an acknowledged job is never delivered again and ends done, even when any
process is SIGKILLed at any instant". Worker processes claim and ack; all are
SIGKILLed at a random instant (seeded); after every lease expires and the library's
recovery runs, no job whose ack returned True may be delivered again, and each must
read done (``crash_harness.queue_crash``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from leasecheck.adapters.protocol import QueueLibrary
from leasecheck.crash_harness.queue_crash import check_ack_final
from leasecheck.plugin import Checked, NotChecked
from leasecheck.profiles import Profile


@pytest.mark.leasecheck("queue.ack-final")
def test_queue_ack_final(
    multiprocess_library: QueueLibrary,
    queue_server: str | None,
    judged: Callable[[str], AbstractContextManager[None]],
    scratch: Path,
    lc_profile: Profile,
    lc_seed: int,
    no_leaked_children: None,
    checked: Checked,
    not_checked: NotChecked,
) -> None:
    with judged("queue.ack-final"):
        report = check_ack_final(
            multiprocess_library, scratch, lc_profile.queue_rounds, lc_seed, queue_server
        )
    print(f"queue.ack-final: {report.render()}")
    if report.acked == 0:
        not_checked(
            f"0 acks in {report.rounds} kill rounds (kill window {report.window_ms:.0f} ms): "
            f"no acknowledged job to judge",
            "raise --profile to deep (more rounds), or make the library's claim and ack "
            "faster than the window (a store on tmpfs, a local server)",
            rounds=report.rounds, acks=0, window_ms=round(report.window_ms, 1),
        )  # fmt: skip
    checked(
        f"{report.kills} kills, {report.acked} acks",
        kills=report.kills, acks=report.acked, window_ms=round(report.window_ms, 1),
    )  # fmt: skip
