"""The pytest plugin: options, markers and contract selection, tested with pytester."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

PROPERTIES = """
import pytest

@pytest.mark.leasecheck("lease.example")
def test_lease(worker_target):
    assert hasattr(worker_target, "claim")

@pytest.mark.leasecheck("jobs.example")
def test_jobs(jobs_target):
    assert hasattr(jobs_target, "poll")
"""


@pytest.fixture
def properties(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_props=PROPERTIES)
    return pytester


def test_options_are_in_the_leasecheck_group(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--help")
    result.stdout.fnmatch_lines(
        [
            "leasecheck targets and profiles:",
            "*--impl=PATH*lease worker target file to check*",
            "*--jobs-impl=PATH*file defining JobQueue*",
            "*--profile={ci,deep,quick}*",
        ]
    )


def test_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.leasecheck(name): a leasecheck property*"])


def test_no_target_option_runs_both_contracts(properties: pytest.Pytester) -> None:
    properties.runpytest_subprocess("-p", "no:randomly").assert_outcomes(passed=2)


def test_impl_alone_runs_only_lease_worker_properties(properties: pytest.Pytester) -> None:
    from leasecheck.targets import BUNDLED_WORKER

    result = properties.runpytest_subprocess("--impl", str(BUNDLED_WORKER))
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.no_fnmatch_line("*test_jobs PASSED*")


def test_jobs_impl_alone_runs_only_job_queue_properties(properties: pytest.Pytester) -> None:
    from leasecheck.targets import BUNDLED_JOBS

    properties.runpytest_subprocess("--jobs-impl", str(BUNDLED_JOBS)).assert_outcomes(
        passed=1, deselected=1
    )


def test_a_target_that_cannot_load_stops_the_run_with_status_2(
    properties: pytest.Pytester,
) -> None:
    broken = properties.makepyfile(worker="def claim(:\n")
    result = properties.runpytest_subprocess("--impl", str(broken))
    assert result.ret == 2
    result.stdout.fnmatch_lines(["*worker.py* failed to import: SyntaxError*"])


def test_unknown_profile_is_refused(properties: pytest.Pytester) -> None:
    result = properties.runpytest_subprocess("--profile", "fast")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*argument --profile: invalid choice: 'fast'*"])
