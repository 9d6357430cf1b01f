"""The pytest side of ``leasecheck check``: one JSON line per property start and end.

Loaded with ``-p leasecheck._events`` when ``LEASECHECK_EVENTS`` names a file. The
CLI tails that file to print progress while pytest runs and to name the property
that was running if the test process dies or hangs. Under pytest-xdist the report
hooks run in the controller, so there is one writer of those; the processes that
collect (the workers) each write the ``collected`` event, so that a property that
never runs still has a row.

While a test body runs, ``LEASECHECK_NODEID`` names it in the environment, so the
runner can tell which property started a process left running (``_processes``).
With ``LEASECHECK_STACKS`` naming a directory, SIGUSR1 makes a test process write its
threads' stacks there as JSON: the runner asks for them before it kills a hung run,
to name the operation that was running. A process that runs tests also watches for a
call into the target that blocks for good, and says so at once (``_blocked``).

The test processes also tune Python's cyclic garbage collector (``GC_THRESHOLDS``): the
Hypothesis machines keep a large heap alive, so every full collection walks all of it.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import signal
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Final

import pytest

from leasecheck import _blocked, _schedule
from leasecheck._blame import HARNESS_CHANGE, harness_problem
from leasecheck._preflight import MORE_SPACE, resource_problem
from leasecheck._processes import NODEID_ENV
from leasecheck._wire import (
    CPU_KEY,
    CRASHED_KEY,
    EVENTS_ENV,
    FAILURE_KEY,
    HARNESS_KEY,
    RESOURCE_KEY,
    STACKS_ENV,
)
from leasecheck.counterexample import Counterexample
from leasecheck.plugin import property_name
from leasecheck.selection import PROPERTY_OPTION

FIRST_OPTION = "--leasecheck-first"


GC_THRESHOLDS: Final = (700, 10, 1000)
"""The collector's thresholds in a check's test processes: Python's own for the young
generations (700, 10), but a full collection only after 1000 middle ones instead of 10.
The agreement machines keep a large heap alive (Hypothesis' tree of the choices it has
made: hundreds of thousands of objects), and every full collection walks all of it. In
jobs.agreement alone (2-core AMD EPYC, 2026-12-06) 13 full collections took 1.3 s of
16 s and freed 116k objects; with these thresholds 2 take 0.03 s, and the process peaks
at 232 MB instead of 201 MB. A check's processes live for one run (``_check_process``).
The collector decides nothing a property sees (no check relies on when a finalizer
runs): the same programs run, so verdicts and kill tables are unchanged."""


_writer = {"enabled": False}
_current: dict[str, str] = {}


def _write(event: dict[str, Any], *, every_process: bool = False) -> None:
    path = os.environ.get(EVENTS_ENV)
    if not path or not (_writer["enabled"] or every_process):
        return
    # One write of one line in append mode: lines of several workers never interleave.
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(json.dumps(event) + "\n")
        stream.flush()


def _dump_stacks(signum: int, frame: FrameType | None) -> None:
    """The stacks of every thread of this process, as data, for the runner."""
    directory = os.environ.get(STACKS_ENV)
    if not directory:
        return
    threads = [
        [[f.filename, f.lineno, f.name] for f in traceback.extract_stack(top)]
        for top in _blocked.current_frames().values()
    ]
    record = {"pid": os.getpid(), "nodeid": _current.get("nodeid"), "threads": threads}
    path = Path(directory) / f"{os.getpid()}.json"
    path.with_suffix(".tmp").write_text(json.dumps(record))
    path.with_suffix(".tmp").replace(path)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("leasecheck")
    group.addoption(
        FIRST_OPTION, metavar="NAME", default=None, help="run property NAME before the others"
    )
    group.addoption(
        PROPERTY_OPTION, metavar="NAME", action="append", default=None,
        help="run only property NAME (repeatable; `leasecheck check --property`)",
    )  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    # xdist workers forward their reports to the controller; only the controller writes.
    _writer["enabled"] = not hasattr(config, "workerinput")
    if _check_process():
        gc.set_threshold(*GC_THRESHOLDS)
    if os.environ.get(STACKS_ENV):
        signal.signal(signal.SIGUSR1, _dump_stacks)
    if _check_process() and (hasattr(config, "workerinput") or _not_distributed(config)):
        # A process that runs tests: watch its calls into the target (``_blocked``).
        _blocked.start(lambda: _current.get("nodeid"), _write_from_any_process)


def _write_from_any_process(event: dict[str, Any]) -> None:
    _write(event, every_process=True)


def _not_distributed(config: pytest.Config) -> bool:
    return getattr(config.option, "dist", "no") == "no"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Every xdist worker sorts alike (the controller checks that their collections agree).
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    _schedule.order(items, property_name, workers)
    first = config.getoption(FIRST_OPTION)
    if first:
        items.sort(key=lambda item: property_name(item) != first)
    wanted = config.getoption(PROPERTY_OPTION)
    if wanted:
        dropped = [item for item in items if property_name(item) not in wanted]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if item not in dropped]
    names = {item.nodeid: property_name(item) or item.nodeid for item in items}
    _write({"event": "collected", "items": names}, every_process=True)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Longest properties first, one test per worker at a time (``_schedule``)."""
    if config.getvalue("dist") == "load":
        return _schedule.LongestFirst(config, log)
    return None


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: the cores plus workers for the properties that wait (``_schedule``)."""
    return _schedule.auto_workers()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    _current["nodeid"] = item.nodeid
    yield
    _current.pop("nodeid", None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Every process the test body starts inherits its node id; the body's CPU is recorded."""
    os.environ[NODEID_ENV] = item.nodeid
    started = _cpu_seconds()
    try:
        yield
    finally:
        os.environ.pop(NODEID_ENV, None)
        item.user_properties.append((CPU_KEY, round(_cpu_seconds() - started, 3)))


def _cpu_seconds() -> float:
    """User and system CPU of this process and of the children it has reaped."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach the failure as data, built from the exception in the process that raised it."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if call.excinfo is not None and report.failed:
        problem = resource_problem(call.excinfo.value)
        if problem:
            report.user_properties.append((RESOURCE_KEY, {"what": problem, "change": MORE_SPACE}))
        elif (property_name(item) or "").startswith("queue.") and (
            own := harness_problem(call.excinfo.value)
        ):  # a library's property: its adapter's exceptions and leasecheck's differ
            report.user_properties.append((HARNESS_KEY, {"what": own, "change": HARNESS_CHANGE}))
    if call.when != "call" or call.excinfo is None:
        return
    error: BaseException | None = call.excinfo.value
    if hasattr(report, "wasxfail"):
        # A "not promised" property calls pytest.xfail while handling its counterexample.
        error = error.__context__ if error is not None else None
    elif not report.failed:
        return
    if error is not None:
        example = Counterexample.from_error(error)
        report.user_properties.append((FAILURE_KEY, example.record()))


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched: Any) -> None:
    """pytest-xdist lost the worker running ``crashitem``: say so as data on its report."""
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "?")
    report.user_properties.append((CRASHED_KEY, str(worker)))


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _write({"event": "start", "nodeid": nodeid, "at": time.time()})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" and report.outcome == "passed":
        # A setup or teardown that passed says nothing of the verdict, only how long it
        # took (a server started or stopped, a store dropped): a phase event, not a report.
        _write({"event": "phase", "nodeid": report.nodeid, "when": report.when,
                "duration": report.duration})  # fmt: skip
        return
    _write(
        {
            "event": "report",
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "duration": report.duration,
            "longrepr": report.longreprtext if report.failed or report.skipped else "",
            "user_properties": [list(p) for p in report.user_properties],
            "wasxfail": getattr(report, "wasxfail", None),
            "keywords": sorted(k for k in report.keywords if k.startswith("leasecheck:")),
        }
    )


@pytest.hookimpl(tryfirst=True)
def pytest_itemcollected(item: pytest.Item) -> None:
    name = property_name(item)
    if name:
        # Carry the property name into reports (xdist ships keywords to the controller).
        item.keywords[f"leasecheck:{name}"] = True


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """``pytest.exit`` (a target that cannot load, a server that will not start): its
    reason, as data, so that the CLI says why nothing was checked."""
    if isinstance(excinfo.value, pytest.exit.Exception):
        _write({"event": "exit", "reason": str(excinfo.value.msg)})


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _write({"event": "finish", "nodeid": nodeid, "at": time.time()})


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run is over. Every test and fixture is done, and the objects left stay until
    the process exits, so the collections pytest and the interpreter still run skip them
    (``gc.freeze``): a worker that ran jobs.agreement spent 0.65 s of CPU in pytest's
    last collection alone (2-core AMD EPYC), and the check waits for its last worker."""
    _write({"event": "finished", "exitstatus": int(exitstatus)})
    if _check_process():
        gc.freeze()


def _check_process() -> bool:
    """This is a check's test process (the runner names its events file): it ends with
    its run, so the collector's settings cannot reach anything after it."""
    return bool(os.environ.get(EVENTS_ENV))
