"""The pytest side of ``leasecheck check``: one JSON line per property start and end.

Loaded with ``-p leasecheck._events`` when ``LEASECHECK_EVENTS`` names a file. The
CLI tails that file to print progress while pytest runs and to name the property
that was running if the test process dies or hangs. Under pytest-xdist these hooks
run in the controller, so there is one writer.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

from leasecheck.counterexample import Counterexample
from leasecheck.plugin import property_name
from leasecheck.selection import PROPERTY_OPTION

EVENTS_ENV = "LEASECHECK_EVENTS"
FAILURE_KEY = "leasecheck:failure"
"""The ``user_properties`` key of a failure's structured counterexample."""
FIRST_OPTION = "--leasecheck-first"


_writer = {"enabled": False}


def _write(event: dict[str, Any]) -> None:
    path = os.environ.get(EVENTS_ENV)
    if not path or not _writer["enabled"]:
        return
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(json.dumps(event) + "\n")
        stream.flush()


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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    first = config.getoption(FIRST_OPTION)
    if first:
        items.sort(key=lambda item: property_name(item) != first)
    wanted = config.getoption(PROPERTY_OPTION)
    if wanted:
        dropped = [item for item in items if property_name(item) not in wanted]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if item not in dropped]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach the failure as data, built from the exception in the process that raised it."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
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


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _write({"event": "start", "nodeid": nodeid, "at": time.time()})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" and report.outcome == "passed":
        return
    if report.when == "teardown" and report.outcome == "passed":
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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _write({"event": "finished", "exitstatus": int(exitstatus)})
