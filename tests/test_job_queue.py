"""The bundled ``JobQueue`` (queue_impl/job_queue.py) against the rules of job-queue.md.

Each test names the rule it checks. The last section pins the bundled target's own
readings of the points the spec leaves open; properties must accept any reading,
these unit tests only keep the bundled one stable.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from leasecheck.queue_impl.job_queue import JobQueue
from leasecheck.queue_impl.jobs import IllegalStateError, JobStatus, Lease, RetryPolicy


class FakeTime:
    """A TimeSource whose ``now`` the test sets."""

    def __init__(self, now: int = 0) -> None:
        self.now = now

    def now_millis(self) -> int:
        return self.now


def make(max_attempts: int = 3, base: int = 100, cap: int = 1000) -> tuple[JobQueue, FakeTime]:
    time = FakeTime()
    return JobQueue(time, RetryPolicy(max_attempts, base, cap)), time


def lease(queue: JobQueue, worker: str = "w1", millis: int = 1000) -> Lease:
    leased = queue.poll(worker, millis)
    assert leased is not None, "expected a ready job"
    return leased


# --- submit -------------------------------------------------------------------------------


def test_submit_numbers_jobs_j1_j2_and_starts_pending() -> None:
    queue, _ = make()
    assert [queue.submit("email", "x", 0, 0) for _ in range(3)] == ["J1", "J2", "J3"]
    view = queue.view("J2")
    assert (view.id, view.type, view.priority, view.status) == ("J2", "email", 0, JobStatus.PENDING)
    assert (view.attempts, view.next_run_at, view.last_error) == (0, 0, None)


@pytest.mark.parametrize("blank", [None, "", " ", "\t\n "])
def test_submit_rejects_blank_type_and_creates_nothing(blank: str | None) -> None:
    queue, _ = make()
    with pytest.raises(ValueError, match="submit needs a non-blank job type"):
        queue.submit(blank, "p", 0, 0)
    assert queue.submit("ok", "p", 0, 0) == "J1"


def test_submit_stores_payload_none_as_empty_string() -> None:
    queue, _ = make()
    queue.submit("email", None, 0, 0)
    assert lease(queue).payload == ""


def test_next_run_at_is_the_submitted_run_at() -> None:
    queue, _ = make()
    queue.submit("email", "", 0, 1234)
    assert queue.view("J1").next_run_at == 1234


# --- poll: readiness, best job, lease -----------------------------------------------------


def test_poll_returns_none_when_nothing_is_ready() -> None:
    queue, time = make()
    assert queue.poll("w1", 10) is None
    queue.submit("email", "", 0, 500)
    time.now = 499
    assert queue.poll("w1", 10) is None
    assert queue.view("J1").status is JobStatus.PENDING


def test_poll_takes_a_job_exactly_at_its_run_at() -> None:
    queue, time = make()
    queue.submit("email", "", 0, 500)
    time.now = 500
    assert lease(queue).job_id == "J1"


def test_poll_leases_running_with_attempt_and_lease_until() -> None:
    queue, time = make()
    queue.submit("resize", "img.png", 7, 0)
    time.now = 40
    leased = lease(queue, "w1", 250)
    assert (leased.job_id, leased.type, leased.payload) == ("J1", "resize", "img.png")
    assert (leased.attempt, leased.lease_until) == (1, 290)
    view = queue.view("J1")
    assert (view.status, view.attempts) == (JobStatus.RUNNING, 1)


def test_best_job_highest_priority_first() -> None:
    queue, _ = make()
    for priority in (1, 5, -3, 5, 2):
        queue.submit("t", "", priority, 0)
    order = [lease(queue).job_id for _ in range(5)]
    assert order == ["J2", "J4", "J5", "J1", "J3"]


def test_best_job_then_earliest_run_at() -> None:
    queue, time = make()
    for run_at in (30, 10, 20):
        queue.submit("t", "", 1, run_at)
    time.now = 30
    assert [lease(queue).job_id for _ in range(3)] == ["J2", "J3", "J1"]


def test_best_job_then_submission_order() -> None:
    queue, _ = make()
    for _ in range(4):
        queue.submit("t", "", 2, 0)
    assert [lease(queue).job_id for _ in range(4)] == ["J1", "J2", "J3", "J4"]


def test_best_job_only_among_ready_jobs() -> None:
    queue, time = make()
    queue.submit("t", "", 9, 100)  # best, but not ready yet
    queue.submit("t", "", 0, 0)
    assert lease(queue).job_id == "J2"
    time.now = 100
    assert lease(queue).job_id == "J1"


@pytest.mark.parametrize(
    ("worker", "millis", "message"),
    [
        (None, 10, "non-blank worker id"),
        ("", 10, "non-blank worker id"),
        ("  ", 10, "non-blank worker id"),
        ("w1", 0, "lease_millis > 0 but got lease_millis=0"),
        ("w1", -5, "lease_millis > 0 but got lease_millis=-5"),
    ],
)
def test_poll_rejects_blank_worker_and_non_positive_lease(
    worker: str | None, millis: int, message: str
) -> None:
    queue, _ = make()
    queue.submit("t", "", 0, 0)
    with pytest.raises(ValueError, match=message):
        queue.poll(worker, millis)
    assert queue.view("J1").status is JobStatus.PENDING


# --- tokens, complete, fail ---------------------------------------------------------------


def test_every_poll_makes_a_new_token() -> None:
    queue, time = make(max_attempts=10, base=1, cap=1)
    for _ in range(5):
        queue.submit("t", "", 0, 0)
    tokens = [lease(queue, millis=10).token for _ in range(5)]
    time.now = 11  # every lease has expired; the jobs are ready again at 11
    tokens += [lease(queue, millis=10).token for _ in range(5)]
    assert len(set(map(repr, tokens))) == 10


def test_complete_with_current_token_succeeds_once() -> None:
    queue, _ = make()
    queue.submit("t", "", 0, 0)
    leased = lease(queue)
    queue.complete("J1", leased.token)
    assert queue.view("J1").status is JobStatus.SUCCEEDED
    with pytest.raises(IllegalStateError, match="the job is SUCCEEDED, not RUNNING"):
        queue.complete("J1", leased.token)
    with pytest.raises(IllegalStateError):
        queue.fail("J1", leased.token, "late")
    assert queue.view("J1").status is JobStatus.SUCCEEDED


@pytest.mark.parametrize("state", ["PENDING", "CANCELLED", "DEAD"])
def test_complete_and_fail_refused_when_not_running(state: str) -> None:
    queue, _ = make(max_attempts=1)
    queue.submit("t", "", 0, 0)
    token: object = "made-up"
    if state == "CANCELLED":
        queue.cancel("J1")
    if state == "DEAD":
        token = lease(queue).token
        queue.fail("J1", token, "boom")
    refused = f"the job is {state}, not RUNNING"
    with pytest.raises(IllegalStateError, match=refused):
        queue.complete("J1", token)
    with pytest.raises(IllegalStateError, match=refused):
        queue.fail("J1", token, "x")
    assert queue.view("J1").status.name == state


def test_made_up_and_foreign_tokens_are_refused_while_running() -> None:
    queue, _ = make()
    queue.submit("t", "", 0, 0)
    queue.submit("t", "", 0, 0)
    first, second = lease(queue), lease(queue)
    assert first.token != second.token
    for token in (second.token, "1", None, object()):
        with pytest.raises(IllegalStateError, match="not the token of the job's current lease"):
            queue.complete("J1", token)
        with pytest.raises(IllegalStateError):
            queue.fail("J1", token, "zombie")
    assert queue.view("J1").status is JobStatus.RUNNING
    queue.complete("J1", first.token)
    assert queue.view("J1").status is JobStatus.SUCCEEDED


def test_stale_token_of_an_expired_lease_cannot_touch_the_new_lease() -> None:
    queue, time = make(base=10, cap=10)
    queue.submit("t", "", 0, 0)
    zombie = lease(queue, "w1", 100)
    time.now = 110  # expired at 100, ready again at 100 + 10
    fresh = lease(queue, "w2", 100)
    assert fresh.job_id == "J1" and fresh.attempt == 2 and fresh.token != zombie.token
    with pytest.raises(IllegalStateError, match=f"token {zombie.token!r} was refused"):
        queue.complete("J1", zombie.token)
    with pytest.raises(IllegalStateError):
        queue.fail("J1", zombie.token, "zombie")
    assert queue.view("J1").status is JobStatus.RUNNING
    queue.complete("J1", fresh.token)
    assert queue.view("J1").status is JobStatus.SUCCEEDED


def test_fail_records_error_and_retries_after_backoff_from_now() -> None:
    queue, time = make(base=100)
    queue.submit("t", "", 0, 0)
    leased = lease(queue)
    time.now = 30
    queue.fail("J1", leased.token, "smtp down")
    view = queue.view("J1")
    assert (view.status, view.attempts, view.last_error) == (JobStatus.PENDING, 1, "smtp down")
    assert view.next_run_at == 130
    time.now = 129
    assert queue.poll("w1", 10) is None
    time.now = 130
    assert lease(queue).attempt == 2


def test_fail_with_error_none_records_failed() -> None:
    queue, _ = make()
    queue.submit("t", "", 0, 0)
    queue.fail("J1", lease(queue).token, None)
    assert queue.view("J1").last_error == "failed"


def test_backoff_doubles_per_attempt_and_is_capped() -> None:
    queue, time = make(max_attempts=6, base=100, cap=350)
    queue.submit("t", "", 0, 0)
    delays = []
    for _ in range(5):
        leased = lease(queue)
        queue.fail("J1", leased.token, "x")
        delays.append(queue.view("J1").next_run_at - time.now)
        time.now = queue.view("J1").next_run_at
    assert delays == [100, 200, 350, 350, 350]


def test_last_allowed_attempt_failing_makes_the_job_dead() -> None:
    queue, time = make(max_attempts=2, base=10)
    queue.submit("t", "", 0, 0)
    queue.fail("J1", lease(queue).token, "first")
    time.now = 10
    queue.fail("J1", lease(queue).token, "second")
    view = queue.view("J1")
    assert (view.status, view.attempts, view.last_error) == (JobStatus.DEAD, 2, "second")
    assert queue.dead_letters() == [view]
    time.now = 10**9
    assert queue.poll("w1", 10) is None


# --- expiry -------------------------------------------------------------------------------


def test_lease_is_valid_until_just_before_lease_until() -> None:
    queue, time = make()
    queue.submit("t", "", 0, 0)
    leased = lease(queue, "w1", 100)
    time.now = 99
    queue.complete("J1", leased.token)
    assert queue.view("J1").status is JobStatus.SUCCEEDED


def test_lease_expires_exactly_at_lease_until() -> None:
    queue, time = make(base=50)
    queue.submit("t", "", 0, 0)
    leased = lease(queue, "w1", 100)
    time.now = 100
    with pytest.raises(IllegalStateError, match="the job is PENDING, not RUNNING"):
        queue.complete("J1", leased.token)
    view = queue.view("J1")
    assert (view.status, view.attempts, view.last_error) == (JobStatus.PENDING, 1, "lease expired")
    assert view.next_run_at == 150


def test_expiry_backoff_counts_from_lease_until_not_from_now() -> None:
    queue, time = make(base=100, cap=1000)
    queue.submit("t", "", 0, 0)
    lease(queue, "w1", 100)
    time.now = 170  # processed late: the failure still happened at 100
    assert queue.poll("w2", 10) is None
    assert queue.view("J1").next_run_at == 200


def test_expiry_that_exhausts_attempts_makes_the_job_dead() -> None:
    queue, time = make(max_attempts=1)
    queue.submit("t", "", 0, 0)
    lease(queue, "w1", 100)
    time.now = 100
    assert queue.poll("w1", 10) is None
    view = queue.view("J1")
    assert (view.status, view.last_error) == (JobStatus.DEAD, "lease expired")
    assert [v.id for v in queue.dead_letters()] == ["J1"]


def test_poll_processes_expiry_first_and_may_lease_the_job_again() -> None:
    queue, time = make(base=100)
    queue.submit("t", "", 0, 0)
    first = lease(queue, "w1", 100)
    time.now = 200  # expired at 100, ready again at 200
    again = lease(queue, "w2", 100)
    assert (again.job_id, again.attempt, again.lease_until) == ("J1", 2, 300)
    assert again.token != first.token


@pytest.mark.parametrize("method", ["complete", "fail"])
def test_complete_and_fail_process_every_expired_lease_first(method: str) -> None:
    queue, time = make(base=100)
    queue.submit("t", "", 0, 0)
    queue.submit("t", "", 0, 0)
    lease(queue, "w1", 100)
    other = lease(queue, "w2", 1000)
    time.now = 100
    if method == "complete":
        queue.complete("J2", other.token)
    else:
        queue.fail("J2", other.token, "x")
    view = queue.view("J1")
    assert (view.status, view.last_error, view.next_run_at) == (
        JobStatus.PENDING,
        "lease expired",
        200,
    )


def test_view_dead_letters_retry_dead_and_cancel_do_not_process_expiry() -> None:
    queue, time = make(max_attempts=1)
    for _ in range(3):
        queue.submit("t", "", 0, 0)
    queue.fail("J1", lease(queue).token, "dead")  # J1 DEAD
    lease(queue, "w1", 100)  # J2 RUNNING until 100
    queue.submit("t", "", 0, 10**6)  # J4 PENDING, not ready
    time.now = 500
    assert [v.id for v in queue.dead_letters()] == ["J1"]
    queue.retry_dead("J1")
    queue.cancel("J4")
    with pytest.raises(IllegalStateError, match="needs a DEAD job but it is RUNNING"):
        queue.retry_dead("J2")
    with pytest.raises(IllegalStateError):
        queue.cancel("J2")
    view = queue.view("J2")
    assert (view.status, view.last_error) == (JobStatus.RUNNING, None)
    assert queue.poll("w2", 10) is not None  # poll processes it: J2 dies, J1 or J3 leased
    assert queue.view("J2").status is JobStatus.DEAD


# --- dead letters, retry_dead, cancel -----------------------------------------------------


def test_dead_letters_are_in_submission_order_not_death_order() -> None:
    queue, _ = make(max_attempts=1)
    for _ in range(4):
        queue.submit("t", "", 0, 0)
    leases = {leased.job_id: leased for leased in (lease(queue) for _ in range(4))}
    for job_id in ("J4", "J1", "J3"):
        queue.fail(job_id, leases[job_id].token, "broke")
    queue.complete("J2", leases["J2"].token)
    dead = queue.dead_letters()
    assert [v.id for v in dead] == ["J1", "J3", "J4"]
    assert all(v.status is JobStatus.DEAD for v in dead)


def test_retry_dead_resets_attempts_and_makes_the_job_ready_now() -> None:
    queue, time = make(max_attempts=2, base=100, cap=1000)
    queue.submit("t", "", 0, 0)
    queue.fail("J1", lease(queue).token, "a")
    time.now = 100
    queue.fail("J1", lease(queue).token, "b")
    time.now = 5000
    queue.retry_dead("J1")
    view = queue.view("J1")
    assert (view.status, view.attempts, view.next_run_at) == (JobStatus.PENDING, 0, 5000)
    assert queue.dead_letters() == []
    again = lease(queue)
    assert again.attempt == 1
    queue.fail("J1", again.token, "c")
    assert queue.view("J1").next_run_at == 5100  # backoff restarts at base


@pytest.mark.parametrize("state", ["PENDING", "RUNNING", "SUCCEEDED", "CANCELLED"])
def test_retry_dead_only_from_dead(state: str) -> None:
    queue, _ = make()
    queue.submit("t", "", 0, 0)
    if state == "RUNNING":
        lease(queue)
    if state == "SUCCEEDED":
        queue.complete("J1", lease(queue).token)
    if state == "CANCELLED":
        queue.cancel("J1")
    before = queue.view("J1")
    with pytest.raises(IllegalStateError, match=f"needs a DEAD job but it is {state}"):
        queue.retry_dead("J1")
    assert queue.view("J1") == before


def test_cancel_pending_job_is_never_leased() -> None:
    queue, time = make()
    queue.submit("t", "", 0, 100)
    queue.cancel("J1")
    assert queue.view("J1").status is JobStatus.CANCELLED
    time.now = 100
    assert queue.poll("w1", 10) is None


def test_cancel_a_job_waiting_for_its_retry() -> None:
    queue, _ = make()
    queue.submit("t", "", 0, 0)
    queue.fail("J1", lease(queue).token, "x")
    queue.cancel("J1")
    assert queue.view("J1").status is JobStatus.CANCELLED


@pytest.mark.parametrize("state", ["RUNNING", "SUCCEEDED", "DEAD", "CANCELLED"])
def test_cancel_only_from_pending(state: str) -> None:
    queue, _ = make(max_attempts=1)
    queue.submit("t", "", 0, 0)
    if state == "RUNNING":
        lease(queue)
    if state == "SUCCEEDED":
        queue.complete("J1", lease(queue).token)
    if state == "DEAD":
        queue.fail("J1", lease(queue).token, "x")
    if state == "CANCELLED":
        queue.cancel("J1")
    before = queue.view("J1")
    with pytest.raises(IllegalStateError, match=f"needs a PENDING job but it is {state}"):
        queue.cancel("J1")
    assert queue.view("J1") == before


@pytest.mark.parametrize("method", ["complete", "fail", "view", "retry_dead", "cancel"])
@pytest.mark.parametrize("job_id", ["J2", "J0", "j1", "", None, 1])
def test_unknown_id_is_a_key_error(method: str, job_id: object) -> None:
    queue, _ = make()
    queue.submit("t", "", 0, 0)
    args: dict[str, tuple[object, ...]] = {
        "complete": (job_id, 1),
        "fail": (job_id, 1, "x"),
        "view": (job_id,),
        "retry_dead": (job_id,),
        "cancel": (job_id,),
    }
    with pytest.raises(KeyError, match=f"no job with id {job_id!r}"):
        getattr(queue, method)(*args[method])
    assert queue.view("J1").status is JobStatus.PENDING


# --- threads ------------------------------------------------------------------------------


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    """Switch threads every microsecond so that a missing lock shows up as a double lease."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("frequent_thread_switches")
def test_many_threads_never_lease_a_job_twice() -> None:
    queue, _ = make()
    jobs = 200
    for i in range(jobs):
        queue.submit("t", str(i), i % 5, 0)
    leased: list[Lease] = []
    leased_lock = threading.Lock()
    start = threading.Barrier(8)

    errors: list[Exception] = []

    def work(worker: str) -> None:
        start.wait(timeout=10)
        try:
            while (got := queue.poll(worker, 10_000)) is not None:
                with leased_lock:
                    leased.append(got)
                queue.complete(got.job_id, got.token)
        except Exception as error:  # reported below, with the double leases it explains
            errors.append(error)

    threads = [threading.Thread(target=work, args=(f"w{n}",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "worker threads did not finish within 30 s"
    counts = Counter(got.job_id for got in leased)
    twice = sorted(job_id for job_id, n in counts.items() if n > 1)
    assert not twice, f"jobs leased to two workers: {twice}; errors in workers: {errors[:3]}"
    assert not errors, f"workers failed: {errors[:3]}"
    assert len(counts) == jobs
    assert len({repr(got.token) for got in leased}) == jobs
    assert all(queue.view(f"J{i}").status is JobStatus.SUCCEEDED for i in range(1, jobs + 1))


# --- the bundled target's readings of open points (job-queue.md "Left open") --------------


def test_bundled_tokens_count_up_per_queue() -> None:
    queue, _ = make()
    for _ in range(3):
        queue.submit("t", "", 0, 0)
    assert [lease(queue).token for _ in range(3)] == [1, 2, 3]
    other, _ = make()
    other.submit("t", "", 0, 0)
    assert lease(other).token == 1


@pytest.mark.parametrize("lookalike", [True, 1.0])
def test_bundled_refuses_a_value_that_only_compares_equal_to_the_token(lookalike: object) -> None:
    queue, _ = make()
    queue.submit("t", "", 0, 0)
    assert lease(queue).token == 1
    with pytest.raises(IllegalStateError, match="not the token of the job's current lease"):
        queue.complete("J1", lookalike)
    assert queue.view("J1").status is JobStatus.RUNNING


def test_bundled_retry_dead_keeps_last_error() -> None:
    queue, _ = make(max_attempts=1)
    queue.submit("t", "", 0, 0)
    queue.fail("J1", lease(queue).token, "boom")
    queue.retry_dead("J1")
    assert queue.view("J1").last_error == "boom"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1, "", 0, 0), "type must be a str or None but got type=1"),
        (("t", b"x", 0, 0), "payload must be a str or None but got payload=b'x'"),
        (("t", "", True, 0), "priority must be an int \\(not bool\\) but got priority=True"),
        (
            ("t", "", 0, 1.5),
            "run_at_millis must be an int .* but got run_at_millis=1.5",
        ),
    ],
)
def test_bundled_submit_rejects_wrong_types(args: tuple[object, ...], message: str) -> None:
    queue, _ = make()
    with pytest.raises(ValueError, match=message):
        queue.submit(*args)


@pytest.mark.parametrize(("worker", "millis"), [(7, 10), ("w1", 10.0), ("w1", True), ("w1", "10")])
def test_bundled_poll_rejects_wrong_types(worker: object, millis: object) -> None:
    queue, _ = make()
    queue.submit("t", "", 0, 0)
    with pytest.raises(ValueError, match="must be"):
        queue.poll(worker, millis)


def test_bundled_fail_rejects_a_non_str_error() -> None:
    queue, _ = make()
    queue.submit("t", "", 0, 0)
    leased = lease(queue)
    with pytest.raises(ValueError, match="error must be a str or None but got error=42"):
        queue.fail("J1", leased.token, 42)
    assert queue.view("J1").status is JobStatus.RUNNING


def test_bundled_rejected_arguments_do_not_process_expiry() -> None:
    queue, time = make()
    queue.submit("t", "", 0, 0)
    leased = lease(queue, "w1", 100)
    time.now = 100
    with pytest.raises(ValueError):
        queue.poll("", 10)
    with pytest.raises(KeyError):
        queue.complete("J9", leased.token)
    with pytest.raises(ValueError):
        queue.fail("J1", leased.token, 3)
    assert queue.view("J1").status is JobStatus.RUNNING
