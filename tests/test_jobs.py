"""The given types of job-queue.md (``queue_impl/jobs.py``): validation, immutability, backoff."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import typing

import pytest

from leasecheck.queue_impl.jobs import (
    IllegalStateError,
    JobStatus,
    JobView,
    Lease,
    RetryPolicy,
    TimeSource,
)


def test_job_status_has_exactly_the_five_states() -> None:
    assert issubclass(JobStatus, enum.Enum)
    assert [s.name for s in JobStatus] == ["PENDING", "RUNNING", "SUCCEEDED", "DEAD", "CANCELLED"]


def test_illegal_state_error_is_a_runtime_error() -> None:
    assert issubclass(IllegalStateError, RuntimeError)


def test_retry_policy_accepts_the_smallest_valid_values() -> None:
    policy = RetryPolicy(1, 1, 1)
    assert (policy.max_attempts, policy.base_backoff_millis, policy.max_backoff_millis) == (1, 1, 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 1, 1), "RetryPolicy needs max_attempts >= 1 but got max_attempts=0"),
        ((1, 0, 1), "RetryPolicy needs base_backoff_millis >= 1 but got base_backoff_millis=0"),
        ((1, 10, 9), "RetryPolicy needs max_backoff_millis >= 10 but got max_backoff_millis=9"),
        ((True, 1, 1), "RetryPolicy expected an int for max_attempts but got max_attempts=True"),
        ((1, True, 1), "expected an int for base_backoff_millis but got base_backoff_millis=True"),
        ((1, 1, True), "expected an int for max_backoff_millis but got max_backoff_millis=True"),
        ((1.0, 1, 1), "expected an int for max_attempts but got max_attempts=1.0"),
        (("3", 1, 1), "expected an int for max_attempts but got max_attempts='3'"),
        ((3, 1, None), "expected an int for max_backoff_millis but got max_backoff_millis=None"),
    ],
)
def test_retry_policy_rejects_bad_values(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(*args)  # type: ignore[arg-type]


def test_retry_policy_max_backoff_may_equal_base() -> None:
    assert RetryPolicy(3, 500, 500).max_backoff_millis == 500


@pytest.mark.parametrize(
    "value",
    [
        RetryPolicy(3, 1, 2),
        Lease("J1", 1, "email", "", 1, 100),
        JobView("J1", "email", 0, JobStatus.PENDING, 0, 0, None),
    ],
)
def test_given_records_are_frozen(value: object) -> None:
    field = dataclasses.fields(value)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, field, 99)


def test_records_compare_by_value() -> None:
    view = JobView("J1", "email", 0, JobStatus.DEAD, 3, 10, "boom")
    assert view == JobView("J1", "email", 0, JobStatus.DEAD, 3, 10, "boom")
    assert Lease("J1", 7, "t", "p", 1, 5) == Lease("J1", 7, "t", "p", 1, 5)


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, 1000), (2, 2000), (3, 4000), (4, 8000), (5, 10000), (60, 10000)],
)
def test_backoff_after_doubles_from_base_and_caps(attempt: int, expected: int) -> None:
    assert RetryPolicy(99, 1000, 10000).backoff_after(attempt) == expected


@pytest.mark.parametrize("attempt", [0, -1, True, 1.0])
def test_backoff_after_rejects_attempts_below_one(attempt: object) -> None:
    with pytest.raises(ValueError, match="backoff_after needs an int attempt >= 1"):
        RetryPolicy(3, 1000, 10000).backoff_after(attempt)  # type: ignore[arg-type]


def test_time_source_is_a_protocol_with_only_now_millis() -> None:
    """job-queue.md: "TimeSource — a typing.Protocol with now_millis() -> int", at run time."""
    assert typing.Protocol in TimeSource.__mro__, "TimeSource must be a typing.Protocol"
    assert [name for name in vars(TimeSource) if not name.startswith("_")] == ["now_millis"]
    assert list(inspect.signature(TimeSource.now_millis).parameters) == ["self"]
    assert typing.get_type_hints(TimeSource.now_millis) == {"return": int}
