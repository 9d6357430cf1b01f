"""The report: program lines read as data, timelines built from each property family's
printed counterexample, SVG and HTML written safely, and the page checked in a real
headless Chromium (the DOM it shows and a screenshot), on a planted bug.

The samples in ``tests/data/report/`` are real failures as the test process records them
(the property and ``Counterexample.record()``), each from ``leasecheck check`` on the
public mutant of the file's name (``python tests/data/report/regenerate.py`` remakes them);
``queue-<bug>.json`` from ``leasecheck check --adapter planted:<bug>``, with that adapter,
on which a queue program is replayed.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import psutil
import pytest

from leasecheck.cli import main
from leasecheck.counterexample import Counterexample
from leasecheck.mutants import by_name, materialize
from leasecheck.report import build_timeline, render_svg, trace_from_result, write_report
from leasecheck.report.program import ProgramError, Variable, parse_line
from leasecheck.report.timeline import Timeline
from leasecheck.report.trace import Trace
from leasecheck.runner import PropertyResult
from stateful_tests import _lease_values

DATA = Path(__file__).parent / "data" / "report"
VALUES = {"When": _lease_values.When, "Shift": _lease_values.Shift}
CHROMIUM_INSTALL = "apt-get install -y chromium"


def _sample(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    return data


def sample(name: str) -> PropertyResult:
    data = _sample(name)
    failure = Counterexample.from_record(data["record"])
    return PropertyResult(
        data["property"], "VIOLATED", failures=[failure], runs=["1 run"], seconds=1.0
    )


def trace_of(name: str, adapter: str | None = None) -> Trace:
    """The sample's trace; a queue sample keeps the ``--adapter`` its run checked."""
    return trace_from_result(sample(name), adapter=adapter or _sample(name).get("adapter"))


def timeline_of(name: str) -> Timeline:
    timeline = build_timeline(trace_of(name))
    assert timeline is not None
    return timeline


# --- program lines are parsed, never evaluated ------------------------------------------


def test_a_program_line_becomes_a_call_with_rebuilt_values() -> None:
    line = "(tickets_0,) = state.claim(bad=None, lease_ms=10, now=When('now'), owner='w1')"
    call = parse_line(line, VALUES)
    assert (call.method, call.targets, call.unpack) == ("claim", ("tickets_0",), True)
    assert call.arguments == {
        "bad": None,
        "lease_ms": 10,
        "now": VALUES["When"]("now"),
        "owner": "w1",
    }
    finish = parse_line("state.finish(change=Shift('token', -1), ticket=tickets_0)", VALUES)
    assert finish.arguments["ticket"] == Variable("tickets_0")
    assert finish.arguments["change"] == VALUES["Shift"]("token", -1)


@pytest.mark.parametrize(
    "line",
    [
        "state.claim(owner=__import__('os').system('true'))",
        "state.claim(owner=open('x'))",
        "os.system('true')",
        "state.claim('w1')",
        "state.claim(owner='w1'); state.finish()",
        "x.y = state.claim()",
    ],
)
def test_anything_but_a_plain_program_line_is_refused(line: str) -> None:
    with pytest.raises(ProgramError, match="program line"):
        parse_line(line, VALUES)


# --- each family's printed counterexample has the right shape ------------------------------

FAMILIES = {
    "stale-finish-accepted": "program",
    "lease-not-capped-at-deadline": "program",
    "jobs-stale-token-accepted": "program",
    "claim-select-before-begin": "history",
    "jobs-poll-two-critical-sections": "history",
    "finish-two-transactions": "scenario",
    "open-queue-recreates-tables": "scenario",
    "claim-selects-outside-lock": "scenario",
    "finish-ignores-marker": "scenario",
    "run-once-sends-twice": "scenario",
    "deferred-begin": "scenario",
    "quarantine-deadline-strict": "scenario",
    "jobs-ready-boundary": "scenario",
    "jobs-unlocked-poll": "scenario",
    "synchronous-off": "scenario",
    "redrive-checks-dead-before-begin": "scenario",
    "queue-ack-ignores-lease": "program",
    "queue-recover-deletes-expired": "program",
    "queue-lease-truncated-to-minutes": "history",
}


def test_every_property_family_has_a_sample() -> None:
    from leasecheck.mutants import CATALOGUE

    families = {m.caught_by for m in CATALOGUE}
    covered = {_sample(name)["property"] for name in FAMILIES}
    assert families <= covered, f"no report sample for {sorted(families - covered)}"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_sample_reads_as_its_shape_and_draws(name: str) -> None:
    trace = trace_of(name)
    shape = {"program": bool(trace.program), "history": bool(trace.history)}
    shape["scenario"] = bool(trace.scenario)
    assert [k for k, v in shape.items() if v] == [FAMILIES[name]]
    timeline = build_timeline(trace)
    assert timeline is not None and timeline.disagreement is not None
    assert timeline.disagreement.lane in timeline.lanes
    svg = ET.fromstring(render_svg(timeline))
    lanes = [g.get("data-lane") for g in svg.iter() if g.get("class") == "lc-lane"]
    assert lanes == list(timeline.lanes)
    assert sum(1 for g in svg.iter() if g.get("class") == "lc-disagreement") == 1


def test_a_stale_finish_is_drawn_as_the_lease_and_the_refused_step() -> None:
    timeline = timeline_of("stale-finish-accepted")
    assert timeline.lanes == ("queue", "w1")
    (lease,) = timeline.intervals
    assert (lease.lane, lease.start, lease.label) == ("w1", 2, "a · token 1 · until t=100")
    assert lease.open_end  # still live when the program stopped
    refused = [m for m in timeline.marks if m.kind == "refused"]
    assert [(m.lane, m.step, m.label) for m in refused] == [("w1", 4, "finish refused")]
    assert timeline.disagreement is not None
    assert (timeline.disagreement.lane, timeline.disagreement.step) == ("w1", 4)
    assert "returned 'done' on the target but returned False" in timeline.disagreement.text


def test_a_deadline_capped_lease_ends_at_the_deadline_in_the_model() -> None:
    (lease,) = timeline_of("lease-not-capped-at-deadline").intervals
    assert lease.label == "a · token 1 · until t=100"


def test_a_non_linearizable_history_is_drawn_per_process_in_real_time() -> None:
    timeline = timeline_of("claim-select-before-begin")
    assert (timeline.axis, timeline.lanes) == ("ms", ("prefix", "P1", "P2"))
    spans = {(i.lane, i.kind): (i.start, i.end) for i in timeline.intervals}
    assert spans[("P1", "op")] == (6.874, 8.666)
    assert spans[("P2", "op-conflict")] == (6.888, 11.921)
    assert timeline.disagreement is not None and timeline.disagreement.lane == "P2"
    assert "here the model returns None" in timeline.disagreement.text


def test_a_kill_scenario_marks_the_sigkill_and_the_failed_check() -> None:
    timeline = timeline_of("finish-two-transactions")
    kills = [m for m in timeline.marks if m.kind == "kill"]
    assert [m.step for m in kills] == [4]
    assert timeline.ticks[-1].label == "check"
    race = timeline_of("claim-selects-outside-lock")
    assert {"A", "B"} <= set(race.lanes)
    assert race.disagreement is not None and race.disagreement.lane == "B"  # the second winner


def test_the_model_checkers_named_step_is_the_marked_one() -> None:
    timeline = timeline_of("quarantine-deadline-strict")
    assert timeline.disagreement is not None
    assert (timeline.disagreement.step, timeline.disagreement.lane) == (5, "d1")
    assert [m.label for m in timeline.marks if m.kind == "clock"] == ["t=101", "t=103", "t=104"]


# --- HTML -------------------------------------------------------------------------------


def test_a_stale_queue_ack_is_drawn_on_its_jobs_lane_next_to_the_new_lease() -> None:
    """queue.stale-ack on planted:ack-ignores-lease, replayed on that adapter: c0's lease
    on j0 expires, c2 claims j0, and c0's ack is taken: the red line is at that ack."""
    timeline = timeline_of("queue-ack-ignores-lease")
    assert "replayed on planted:ack-ignores-lease" in timeline.title
    assert timeline.lanes[:3] == ("clock", "queue", "j0")
    bars = {i.label.split(" · ")[0]: i for i in timeline.intervals if i.lane == "j0"}
    assert bars["c0"].kind == "expired" and bars["c2"].kind == "lease" and bars["c2"].open_end
    ack = next(m for m in timeline.marks if m.label.startswith("ack c0"))
    assert (ack.lane, ack.kind) == ("j0", "commit")
    assert timeline.disagreement is not None
    assert (timeline.disagreement.lane, timeline.disagreement.at) == ("j0", ack.at)
    assert "an ack from a stale claim completed it" in timeline.disagreement.text


def test_a_lost_queue_job_is_drawn_with_the_teardowns_drain() -> None:
    """queue.no-loss on planted:recover-deletes-expired: the teardown expires the lease and
    recovers (drain columns), and the store no longer holds j0."""
    timeline = timeline_of("queue-recover-deletes-expired")
    drained = [tick for tick in timeline.ticks if "drain" in tick.note]
    assert [m.label for m in timeline.marks if m.at in {t.at for t in drained}] == [
        "+1150 ms",
        "recover → 1",
    ]
    assert timeline.disagreement is not None and timeline.disagreement.lane == "j0"
    assert timeline.disagreement.at == drained[-1].at
    assert "the job was lost" in timeline.disagreement.text


def test_a_queue_replay_that_does_not_fail_says_so() -> None:
    """The same program on the lease-worker adapter (which keeps the lease) draws, and the
    caption says the replay did not fail where the run did."""
    timeline = build_timeline(trace_of("queue-ack-ignores-lease", adapter="lease-worker"))
    assert timeline is not None
    assert "did not fail where the run did" in timeline.caption
    assert any(m.label == "ack c0 refused" for m in timeline.marks)


def test_the_report_draws_a_queue_failure(tmp_path: Path) -> None:
    results = [sample("queue-ack-ignores-lease")]
    page = write_report(tmp_path, results, adapter="planted:ack-ignores-lease").read_text()
    section = page.split('data-property="queue.stale-ack"', 2)[2].split("</section>")[0]
    svg = ET.fromstring(section[section.index("<svg") : section.index("</svg>") + 6])
    lanes = [g.get("data-lane") for g in svg.iter() if g.get("class") == "lc-lane"]
    assert "j0" in lanes
    marked = [g for g in svg.iter() if g.get("class") == "lc-disagreement"]
    assert len(marked) == 1 and marked[0].get("data-lane") == "j0"


def test_a_queue_exclusive_failure_draws_the_two_claims(tmp_path: Path) -> None:
    message = (
        "AssertionError: queue.exclusive violated by planted:claim-picks-outside-lock: P2#5 "
        "claimed job 'r0j0' at t=0 ms while P1#4's lease on it was live until t=10050 ms "
        "(both claims are real processes racing: two live leases on one job):",
        "  1. at t=0 ms P1 claimed job 'r0j0' as P1#4, leased until t=10050 ms",
        "  2. at t=0 ms P2 claimed job 'r0j0' as P2#5, while that lease was live",
    )
    failure = Counterexample(None, (), message)
    result = PropertyResult("queue.exclusive", "VIOLATED", failures=[failure], runs=["1 run"])
    page = write_report(tmp_path, [result]).read_text()
    section = page.split('data-property="queue.exclusive"', 2)[2].split("</section>")[0]
    svg = ET.fromstring(section[section.index("<svg") : section.index("</svg>") + 6])
    lanes = [g.get("data-lane") for g in svg.iter() if g.get("class") == "lc-lane"]
    assert {"P1", "P2"} <= set(lanes), lanes


def test_text_from_a_run_is_escaped(tmp_path: Path) -> None:
    evil = PropertyResult(
        "lease.<b>x</b>", "VIOLATED", details=["E       AssertionError: <script>alert(1)</script>"]
    )
    page = write_report(tmp_path, [evil, PropertyResult("lease.ok", "holds")]).read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>x</b>" not in page
    assert "No picture" in page  # nothing to draw, and the page says so


def test_a_trace_without_counterexample_has_no_picture() -> None:
    assert build_timeline(Trace("lease.races", "HUNG", ("did not finish",))) is None


def test_report_must_be_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "file"
    afile.write_text("")
    assert main(["check", "--report", str(afile)]) == 2
    assert "--report" in capsys.readouterr().err


# --- the page in a real browser -------------------------------------------------------------


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(f"the browser test needs Chromium; install it with: {CHROMIUM_INSTALL}")
    return found


def browse(page: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on ``page`` with a fresh profile, no network services, bounded."""
    with tempfile.TemporaryDirectory(prefix="report-chromium-") as profile:
        done = subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--hide-scrollbars", f"--user-data-dir={profile}", *options,
             page.as_uri()],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        left = browser_processes(profile, wait=10.0)
    assert not left, f"Chromium left processes behind: {left}"
    return done


def browser_processes(profile: str, wait: float) -> list[str]:
    """Processes still running with ``profile`` on their command line after ``wait`` s."""
    deadline = time.monotonic() + wait
    while True:
        found = []
        for process in psutil.process_iter(["pid", "cmdline"]):
            if any(profile in part for part in process.info["cmdline"] or ()):
                found.append(f"{process.info['pid']}: {' '.join(process.info['cmdline'])[:120]}")
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


class _Elements(HTMLParser):
    """Every element's tag and attributes, and every text node, from the dumped DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def having(self, css: str) -> list[dict[str, str | None]]:
        return [a for _, a in self.elements if css in (a.get("class") or "").split()]


def png_rows(png: bytes) -> tuple[int, int, bytes]:
    """Width, height and the decompressed image data of a PNG (no imaging library)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", png[16:24])
    data, offset = b"", 8
    while offset < len(png):
        (length,) = struct.unpack(">I", png[offset : offset + 4])
        if png[offset + 4 : offset + 8] == b"IDAT":
            data += png[offset + 8 : offset + 8 + length]
        offset += 12 + length
    return width, height, zlib.decompress(data)


@pytest.fixture(scope="module")
def planted_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``leasecheck check --report`` on the public mutant stale-finish-accepted."""
    directory = tmp_path_factory.mktemp("planted")
    target = materialize(by_name("stale-finish-accepted"), directory)
    report = directory / "report"
    done = subprocess.run(
        [sys.executable, "-m", "leasecheck", "check", "--impl", str(target), "--profile",
         "quick", "-n", "0", "--report", str(report)],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        env={**os.environ, "LEASECHECK_EXAMPLES": str(directory / "examples")},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"report: {report / 'index.html'}" in done.stdout
    return report / "index.html"


def test_the_report_of_a_planted_bug_shows_lanes_and_the_marked_step(planted_report: Path) -> None:
    dom = browse(planted_report, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    page = _Elements()
    page.feed(dom.stdout)
    rows = {a.get("data-property") for tag, a in page.elements if tag == "tr"}
    assert {"lease.agreement", "lease.crash-points", "lease.single-winner"} <= rows
    sections = [a.get("data-property") for a in page.having("lc-property")]
    # lease.power-loss is there too: "not promised" by the spec's own journal setting.
    assert sections[0] == "lease.agreement" and set(sections) <= {"lease.agreement", *rows}
    lanes = [a.get("data-lane") for a in page.having("lc-lane")]
    assert lanes[:1] == ["queue"] and "w1" in lanes
    leases = [a for a in page.having("lc-interval") if a.get("data-kind") == "lease"]
    assert any((a.get("data-label") or "").startswith("a · token 1") for a in leases)
    refused = [a for a in page.having("lc-mark") if a.get("data-kind") == "refused"]
    assert refused
    where = (refused[-1].get("data-lane"), refused[-1].get("data-step"))
    marked = [a for a in page.having("lc-disagreement")]
    assert [(a.get("data-lane"), a.get("data-step")) for a in marked].count(where) == 1
    assert any("on the target but" in text for text in page.text)


def test_the_report_renders_to_a_picture(planted_report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    done = browse(planted_report, f"--screenshot={shot}", "--window-size=1280,1400")
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    width, height, pixels = png_rows(shot.read_bytes())
    assert (width, height) == (1280, 1400)
    assert shot.stat().st_size > 20_000
    assert len(set(pixels)) > 40, "the screenshot is (nearly) one colour: nothing was drawn"


# --- the teaching page is generated, and what is committed is what the command writes ------


def test_the_committed_teaching_page_has_every_invariant_and_its_picture() -> None:
    from leasecheck.report.teach import COMMAND, INVARIANTS

    docs = Path(__file__).parent.parent / "docs"
    page = (docs / "invariants.md").read_text()
    assert COMMAND in page
    for invariant in INVARIANTS:
        assert f"## {invariant.title}" in page and f"`{invariant.mutant}`" in page
        svg = ET.parse(docs / "img" / f"{invariant.slug}.svg").getroot()
        assert sum(1 for g in svg.iter() if g.get("class") == "lc-disagreement") == 1
        assert any(e.tag.endswith("style") for e in svg.iter()), "a standalone SVG needs its CSS"


def test_the_teaching_command_regenerates_the_page(tmp_path: Path) -> None:
    from leasecheck.report.teach import INVARIANTS, main

    assert main([str(tmp_path)]) == 0
    written = sorted(p.name for p in (tmp_path / "img").iterdir())
    assert written == sorted(f"{i.slug}.svg" for i in INVARIANTS)
    page = (tmp_path / "invariants.md").read_text()
    assert "/dev/shm" not in page and "leasecheck-teach-" not in page  # no scratch paths


def test_a_drawing_failure_still_writes_the_page_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(trace: Trace) -> Timeline:
        raise RuntimeError("a drawing bug")

    monkeypatch.setattr("leasecheck.report.html.build_timeline", broken)
    page = write_report(tmp_path, [sample("stale-finish-accepted")]).read_text()
    assert "No picture: drawing this counterexample failed (RuntimeError: a drawing bug)" in page
    assert "returned &#x27;done&#x27; on the target" in page  # the text is all there
