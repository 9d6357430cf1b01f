"""jobs.edges' long run of polls (``stateful_tests.job_tokens``): tokens never repeat.

Each case writes a JobQueue file (the bundled one with one edit) and runs the token run
on it: a counter passes; random tokens repeat, at the same poll for the same seed;
tokens from the system's randomness repeat too; unhashable tokens are compared pairwise;
a queue that leaves the run's path or is too slow says so.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from leasecheck.stateful_tests import job_tokens
from leasecheck.stateful_tests.job_tokens import many_polls
from leasecheck.targets.loader import BUNDLED_JOBS, load_jobs_target

COUNTER = "            self._last_token += 1"


def _queue(tmp_path: Path, name: str, *edits: tuple[str, str]) -> type[Any]:
    text = BUNDLED_JOBS.read_text()
    for find, replace in edits:
        assert text.count(find) == 1, find
        text = text.replace(find, replace)
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return load_jobs_target(path)


def _random_bits(tmp_path: Path, bits: int, source: str = "random.getrandbits") -> type[Any]:
    module = source.split(".")[0]
    return _queue(
        tmp_path, f"random_{bits}",
        ("import threading\n", f"import {module}\nimport threading\n"),
        (COUNTER, f"            self._last_token = {source}({bits})"),
    )  # fmt: skip


def test_a_counter_is_unique_over_every_poll() -> None:
    run = many_polls(load_jobs_target(), 5_000, seed=0)
    assert (run.polls, run.stopped_early) == (5_000, False)
    assert run.describe() == "tokens unique over 5,000 polls"


def test_random_tokens_repeat_at_the_same_poll_for_the_same_seed(tmp_path: Path) -> None:
    target = _random_bits(tmp_path, 16)
    messages = []
    for _ in range(2):
        with pytest.raises(AssertionError) as caught:
            many_polls(target, 5_000, seed=3)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert "which poll" in messages[0]
    assert "every successful poll makes a token never issued before" in messages[0]


def test_the_random_module_is_given_back_as_it_was(tmp_path: Path) -> None:
    random.seed(12345)
    expected = random.random()
    random.seed(12345)
    with pytest.raises(AssertionError):
        many_polls(_random_bits(tmp_path, 12), 5_000, seed=0)
    assert random.random() == expected


def test_tokens_from_the_system_randomness_repeat_too(tmp_path: Path) -> None:
    """``secrets`` cannot be seeded: 16 bits repeat within 5,000 polls all the same
    (the chance of none is below e**-190)."""
    with pytest.raises(AssertionError, match="which poll"):
        many_polls(_random_bits(tmp_path, 16, "secrets.randbits"), 5_000, seed=0)


def test_unhashable_tokens_are_compared_pairwise(tmp_path: Path) -> None:
    fresh = _queue(
        tmp_path, "list_tokens",
        (COUNTER, "            self._issued = getattr(self, '_issued', 0) + 1\n"
                  "            self._last_token = [self._issued]"),
        ("        if type(token) is not int:", "        if False:"),
    )  # fmt: skip
    run = many_polls(fresh, 5_000, seed=0)
    assert (run.polls, run.stopped_early) == (job_tokens._UNHASHABLE_POLLS, False)
    assert "(stopped by unhashable tokens)" in run.describe()
    repeating = _queue(
        tmp_path, "list_tokens_repeating",
        (COUNTER, "            self._last_token = [7]"),
        ("        if type(token) is not int:", "        if False:"),
    )  # fmt: skip
    with pytest.raises(AssertionError, match="poll 2 leased job 'J1' with the token \\[7\\], "
                                             "which poll 1 had already issued"):  # fmt: skip
        many_polls(repeating, 5_000, seed=0)


def test_a_queue_off_the_path_is_named(tmp_path: Path) -> None:
    """A retry_dead that leaves the job dead: the next poll finds nothing ready."""
    target = _queue(
        tmp_path, "retry_dead_does_nothing",
        ("            job.status = JobStatus.PENDING\n            job.attempts = 0",
         "            job.attempts = 0"),
    )  # fmt: skip
    with pytest.raises(AssertionError, match="left the contract's path: poll 2 returned None"):
        many_polls(target, 100, seed=0)


def test_a_slow_queue_stops_at_the_cpu_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_tokens, "CPU_PER_POLL", 1e-9)
    run = many_polls(load_jobs_target(), 5_000, seed=0)
    assert run.stopped_early and run.polls == 1_024
    assert run.describe() == "tokens unique over 1,024 of 5,000 polls (stopped by the CPU limit)"
