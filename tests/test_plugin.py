"""The pytest plugin: options, markers and contract selection, tested with pytester; and
its manners as a guest in a project that has its own Hypothesis tests and plugins."""

from __future__ import annotations

import json
from pathlib import Path

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
            "*--leasecheck-impl=PATH",
            "*lease worker target file to check*",
            "*--leasecheck-jobs-impl=PATH",
            "*file defining JobQueue*",
            "*--leasecheck-profile={ci,deep,quick}*",
        ]
    )


def test_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.leasecheck(name): a leasecheck property*"])


def test_no_target_option_runs_both_contracts(properties: pytest.Pytester) -> None:
    properties.runpytest_subprocess("-p", "no:randomly").assert_outcomes(passed=2)


def test_impl_alone_runs_only_lease_worker_properties(properties: pytest.Pytester) -> None:
    from leasecheck.targets import BUNDLED_WORKER

    result = properties.runpytest_subprocess("--leasecheck-impl", str(BUNDLED_WORKER))
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.no_fnmatch_line("*test_jobs PASSED*")


def test_jobs_impl_alone_runs_only_job_queue_properties(properties: pytest.Pytester) -> None:
    from leasecheck.targets import BUNDLED_JOBS

    properties.runpytest_subprocess("--leasecheck-jobs-impl", str(BUNDLED_JOBS)).assert_outcomes(
        passed=1, deselected=1
    )


def test_a_target_that_cannot_load_stops_the_run_with_status_2(
    properties: pytest.Pytester,
) -> None:
    broken = properties.makepyfile(worker="def claim(:\n")
    result = properties.runpytest_subprocess("--leasecheck-impl", str(broken))
    assert result.ret == 2
    result.stdout.fnmatch_lines(["*worker.py* failed to import: SyntaxError*"])


def test_unknown_profile_is_refused(properties: pytest.Pytester) -> None:
    result = properties.runpytest_subprocess("--leasecheck-profile", "fast")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*argument --leasecheck-profile: invalid choice: 'fast'*"])


# --- a guest in someone else's project ----------------------------------------------

OWN_TESTS = """
import json
from hypothesis import core, given, settings, strategies as st
from hypothesis.internal.conjecture import engine, providers
import pytest

@given(st.integers())
def test_own_hypothesis_test(n):
    current = settings()
    seen = {
        "profile": settings._current_profile,
        "settings": repr(current),
        "database": type(current.database).__name__,
        "force_seed": core.global_force_seed,
        "shrink_seconds": engine.MAX_SHRINKING_SECONDS,
        "constants_hook": getattr(providers, "_get_local_constants", print).__module__,
    }
    with open("seen.json", "w") as out:  # pytester runs in the project's directory
        json.dump(seen, out)

@pytest.mark.servers
def test_own_servers_marker():
    pass
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A user's project: its own Hypothesis test and its own ``servers`` marker."""
    pytester.makepyfile(test_own=OWN_TESTS)
    pytester.makeini("[pytest]\nmarkers =\n    servers: the project's own marker\n")
    return pytester


def _seen(project: pytest.Pytester, *args: str) -> dict[str, object]:
    path = project.path / "seen.json"
    path.unlink(missing_ok=True)
    result = project.runpytest_subprocess("-p", "no:randomly", *args)
    result.assert_outcomes(passed=2)
    seen: dict[str, object] = json.loads(path.read_text())
    return seen


def test_a_project_with_its_own_hypothesis_tests_is_left_as_it_was(
    project: pytest.Pytester,
) -> None:
    """Installed, the plugin changes nothing in a session that neither collects
    leasecheck's properties nor passes one of its options: the project's Hypothesis
    settings, seed and shrink bound are exactly those of a session without it, its
    ``servers`` test still runs, and pytest-profiling's own ``--profile`` works."""
    without = _seen(project, "-p", "no:leasecheck")
    assert _seen(project) == without
    # Hypothesis' own choice: its "ci" profile where $CI is set (as in CI), else "default".
    assert without["profile"] in ("default", "ci") and without["force_seed"] is None
    assert _seen(project, "--profile") == without  # pytest-profiling's option: no clash
    assert list((project.path / "prof").glob("*.prof")), "pytest-profiling did not profile"


def test_a_leasecheck_option_activates_the_plugin(project: pytest.Pytester) -> None:
    seen = _seen(project, "--leasecheck-seed", "3", "--leasecheck-profile", "quick")
    assert seen["profile"] == "leasecheck" and seen["force_seed"] == 3
    assert seen["shrink_seconds"] == 15  # the quick profile's bound
    assert seen["constants_hook"] == "leasecheck.constants_pool"  # draws from one pool
    # Seed 0 alone activates it too (0 is falsy, but it is an option given).
    assert _seen(project, "--leasecheck-seed", "0")["force_seed"] == 0


def test_the_check_loads_only_its_own_plugins(tmp_path: Path) -> None:
    """``leasecheck check`` runs pytest with no plugin autoloaded but its own and those it
    names, so a project's plugins (pytest-profiling here) cannot change a verdict."""
    from leasecheck.runner import PLUGINS, CheckOptions, pytest_command

    command = pytest_command(CheckOptions())
    loaded = [command[i + 1] for i, word in enumerate(command) if word == "-p"]
    assert loaded == list(PLUGINS)
    assert "--leasecheck-profile" in command and "--profile" not in command


# --- what a property draws does not depend on what the process imported -------------

DRAWS = """
import json
from hypothesis import given, settings, strategies as st

seen = []

@settings(max_examples=300, derandomize=True, database=None)
@given(st.integers(0, 100_000), st.sampled_from(range(40)), st.text(max_size=3))
def test_draws(n, i, s):
    seen.append([n, i, s])

def test_write():
    with open("draws.json", "w") as out:
        json.dump(seen, out)
"""

NOISY = "WEIRD = (77_777, 4_242, 99_991, 31_337, 'zzq', 'qqz')\n"


def _draws(project: pytest.Pytester, *args: str, noisy: bool) -> list[object]:
    (project.path / "draws.json").unlink(missing_ok=True)
    if noisy:  # a local module with odd literals, imported before the draws start
        project.makeconftest("import noisy  # noqa: F401\n")
    else:
        (project.path / "conftest.py").unlink(missing_ok=True)
    project.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", *args)
    draws: list[object] = json.loads((project.path / "draws.json").read_text())
    return draws


def test_draws_do_not_depend_on_what_else_the_process_imported(
    pytester: pytest.Pytester,
) -> None:
    """Hypothesis (6.131+) mixes the literals of every local module in ``sys.modules``
    into its draws; with leasecheck active the pool is leasecheck's own fixed one
    (``leasecheck.constants_pool``), so importing another local module changes nothing,
    and no ``.hypothesis/constants`` is written into the working directory. Without
    leasecheck the same import moves the draws (the check can fail)."""
    pytester.makepyfile(test_draws=DRAWS, noisy=NOISY)
    quiet = _draws(pytester, "--leasecheck-seed", "0", noisy=False)
    assert _draws(pytester, "--leasecheck-seed", "0", noisy=True) == quiet
    assert not (pytester.path / ".hypothesis" / "constants").exists()
    plain = _draws(pytester, "-p", "no:leasecheck", noisy=False)
    assert _draws(pytester, "-p", "no:leasecheck", noisy=True) != plain


ENTRY_POINT_PLUGIN = """
import os

with open(os.environ["LEASECHECK_TEST_PLUGIN_MARK"], "a") as mark:
    mark.write(f"{os.getpid()}\\n")
"""


@pytest.mark.parametrize("batch", [False, True], ids=["alone", "batch"])
def test_the_check_runs_no_hypothesis_entry_point_plugin(tmp_path: Path, batch: bool) -> None:
    """A package's ``hypothesis`` entry point (trio and HypoFuzz ship one) runs whenever
    Hypothesis is imported; in the check's pytest child it must not: it could register
    randoms, strategies or settings and so change what a property draws. Nor in a
    batch's pool processes, which import Hypothesis before they fork each file's pytest."""
    import os
    import shutil
    import subprocess
    import sys

    from leasecheck.queue_impl import worker

    site = tmp_path / "site"
    (site / "lc_probe_plugin-1.0.dist-info").mkdir(parents=True)
    (site / "lc_probe_plugin.py").write_text(ENTRY_POINT_PLUGIN)
    info = site / "lc_probe_plugin-1.0.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lc-probe-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[hypothesis]\nprobe = lc_probe_plugin\n")
    mark = tmp_path / "loaded.txt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        "LEASECHECK_TEST_PLUGIN_MARK": str(mark),
    }
    env.pop("HYPOTHESIS_NO_PLUGINS", None)
    plain = [sys.executable, "-c", "import hypothesis"]
    subprocess.run(plain, env=env, check=True, timeout=120)
    assert mark.read_text().count("\n") == 1, "the planted entry point did not run at all"
    mark.unlink()
    check = [sys.executable, "-m", "leasecheck", "check", "--profile", "quick", "-n", "1"]
    if batch:  # two copies of the bundled worker, one pool process
        files = [tmp_path / "a.py", tmp_path / "b.py"]
        for file in files:
            shutil.copyfile(str(worker.__file__), file)
        check += ["--impl", *map(str, files), "--property", "lease.edges"]
    else:
        check += ["--property", "jobs.edges"]
    with subprocess.Popen(check, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as cli:  # fmt: skip
        output, _ = cli.communicate(timeout=300)
    assert cli.returncode == 0, output
    # The command's own process imports Hypothesis (and so runs the plugin) in the user's
    # environment, as any import of it does; the pytest child and its workers must not.
    ran = {int(pid) for pid in mark.read_text().split()} if mark.exists() else set()
    assert ran <= {cli.pid}, f"the check's pytest processes ran it: pids {ran - {cli.pid}}"
