"""The report: every family's planted failure drawn from the evidence its harness recorded,
the picture's geometry (a time axis, no label over another, the failing step in view),
the page's words, and the page checked in a real headless Chromium (the DOM it shows and a
screenshot), where each bug's visible shape is asserted.

The samples in ``tests/data/report/`` are real failures as the test process records them
(the property and ``Counterexample.record()``, with its evidence), each from ``leasecheck
check`` on the public mutant of the file's name (``python tests/data/report/regenerate.py``
remakes them); ``queue-<bug>.json`` from ``leasecheck check --adapter planted:<bug>``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zlib
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import psutil
import pytest

from leasecheck.cli import main
from leasecheck.counterexample import Counterexample
from leasecheck.models.evidence import Evidence, Lease, Recorder
from leasecheck.models.lease_ops import LeaseOp
from leasecheck.models.operations import record_from_json
from leasecheck.mutants import by_name, materialize
from leasecheck.report import draw, write_report
from leasecheck.report.picture import CHAR, escape
from leasecheck.runner import PropertyResult

DATA = Path(__file__).parent / "data" / "report"
CHROMIUM_INSTALL = "apt-get install -y chromium"
SVG = "{http://www.w3.org/2000/svg}"
SAMPLES = sorted(path.stem for path in DATA.glob("*.json"))


def _sample(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    return data


def sample(name: str, verdict: str = "VIOLATED") -> PropertyResult:
    data = _sample(name)
    failure = Counterexample.from_record(data["record"])
    return PropertyResult(data["property"], verdict, failures=[failure], runs=["1 run"])


def evidence_of(name: str) -> Evidence:
    example = sample(name).counterexample
    assert example is not None and example.evidence is not None, f"{name} has no evidence"
    return example.evidence


def picture(name: str) -> ET.Element:
    return ET.fromstring(draw(evidence_of(name)))


def having(svg: ET.Element, kind: str, **attributes: str) -> list[ET.Element]:
    """Every element of ``data-kind=kind`` whose attributes include ``attributes``."""
    return [
        e
        for e in svg.iter()
        if e.get("data-kind") == kind
        and all(e.get(f"data-{k}") == v for k, v in attributes.items())
    ]


def bar_span(lease: ET.Element) -> tuple[float, float]:
    return float(lease.get("data-x1") or 0), float(lease.get("data-x2") or 0)


# --- every family's failure carries evidence and draws --------------------------------------


def test_every_property_family_has_a_sample_with_evidence() -> None:
    from leasecheck.mutants import CATALOGUE

    families = {m.caught_by for m in CATALOGUE}
    covered = {_sample(name)["property"] for name in SAMPLES}
    assert families <= covered, f"no report sample for {sorted(families - covered)}"
    missing = [name for name in SAMPLES if not _sample(name)["record"].get("evidence")]
    assert not missing, f"samples without evidence (regenerate them): {missing}"


@pytest.mark.parametrize("name", SAMPLES)
def test_each_sample_draws_its_parting_step_on_a_lane(name: str) -> None:
    evidence = evidence_of(name)
    svg = picture(name)
    lanes = [g.get("data-lane") for g in svg.iter() if g.get("class") == "lc-lane"]
    (parted,) = having(svg, "parted")
    assert parted.get("data-lane") in lanes
    step = evidence.step(evidence.parted)
    if step is not None:
        assert parted.get("data-step") == str(step.index)
        assert having(svg, "step", step=str(step.index)), "the parting step is drawn"


def _label_boxes(svg: ET.Element) -> list[tuple[float, float, float, float, str]]:
    """(x1, y1, x2, y2, text) of every text element (11px monospace: CHAR per character)."""
    boxes = []
    for text in svg.iter(f"{SVG}text"):
        content = "".join(text.itertext())
        if not content or text.get("x") is None:
            continue
        x, y = float(text.get("x") or 0), float(text.get("y") or 0)
        width = len(content) * (7.6 if "lc-lane-name" in (text.get("class") or "") else CHAR)
        boxes.append((x, y - 10, x + width - 1, y + 2, content))
    return boxes


@pytest.mark.parametrize("name", SAMPLES)
def test_no_label_overlaps_another(name: str) -> None:
    boxes = _label_boxes(picture(name))
    for i, (ax1, ay1, ax2, ay2, a) in enumerate(boxes):
        for bx1, by1, bx2, by2, b in boxes[i + 1 :]:
            apart = ax2 <= bx1 or bx2 <= ax1 or ay2 <= by1 or by2 <= ay1
            assert apart, f"{name}: label {a!r} overlaps {b!r}"


@pytest.mark.parametrize("name", SAMPLES)
def test_the_legend_shows_exactly_the_glyphs_drawn(name: str) -> None:
    svg = picture(name)
    legend = {g.get("data-glyph") for g in svg.iter() if g.get("data-kind") == "legend"}
    drawn = set()
    for element in svg.iter():
        if element.get("data-kind") in ("step", "event"):
            for shape in element:
                for css in (shape.get("class") or "").split():
                    if css.startswith("lc-glyph-"):
                        drawn.add(css.removeprefix("lc-glyph-"))
    assert drawn == legend


def test_the_axis_is_time_with_labelled_ticks() -> None:
    svg = picture("lease-not-capped-at-deadline")
    ticks = {g.get("data-at"): g for g in svg.iter() if g.get("class") == "lc-axis-tick"}
    assert {"0", "100", "1000"} <= set(ticks)
    x = {at: float(g[0].get("x1") or 0) for at, g in ticks.items()}
    assert x["0"] < x["100"] < x["1000"]
    assert (x["1000"] - x["100"]) > 5 * (x["100"] - x["0"]), "to scale: 900 ms vs 100 ms"


# --- the shape of each bug ------------------------------------------------------------------


def test_a_lease_past_the_deadline_is_drawn_past_the_drawn_deadline() -> None:
    """lease.agreement on lease-not-capped-at-deadline: the lease the target stored runs
    past job a's deadline; the model's, drawn beside it, ends there."""
    svg = picture("lease-not-capped-at-deadline")
    (deadline,) = having(svg, "deadline", job="a")
    at = float(deadline.get("data-x") or 0)
    (target,) = having(svg, "lease", job="a", side="target")
    (model,) = having(svg, "lease", job="a", side="model")
    assert bar_span(target)[1] > at + 100, "the target's lease crosses the deadline"
    assert abs(bar_span(model)[1] - at) < 1, "the model's lease ends at the deadline"
    assert target.get("data-lane") == model.get("data-lane") == "w1"


def test_two_winners_are_two_overlapping_leases_in_two_lanes() -> None:
    """lease.single-winner on claim-selects-outside-lock: A and B both hold job j0."""
    svg = picture("claim-selects-outside-lock")
    target = having(svg, "lease", side="target") + having(svg, "lease", side="both")
    by_lane = {lease.get("data-lane"): lease for lease in target}
    assert {"A", "B"} <= set(by_lane)
    a, b = bar_span(by_lane["A"]), bar_span(by_lane["B"])
    assert by_lane["A"].get("data-job") == by_lane["B"].get("data-job")
    assert max(a[0], b[0]) < min(a[1], b[1]), "the two bars overlap in time"
    (shade,) = having(svg, "overlap")
    assert set((shade.get("data-lanes") or "").split()) == {"A", "B"}


@pytest.mark.parametrize(
    ("name", "lane", "stale", "live"),
    [("stale-finish-accepted", "w1", "2", "1"), ("queue-ack-ignores-lease", "w0", "0", "1")],
)
def test_a_stale_tickets_token_stands_beside_the_live_one(
    name: str, lane: str, stale: str, live: str
) -> None:
    """A fencing bug: the step that handed in the stale token is on the lane where the
    lease of the current token is drawn, and it is the step where they part."""
    svg = picture(name)
    (parted,) = having(svg, "parted")
    step = having(svg, "step", step=parted.get("data-step") or "")[0]
    assert (step.get("data-lane"), step.get("data-token")) == (lane, stale)
    bars = having(svg, "lease", lane=lane, token=live)
    assert bars and all(bar.get("data-job") == step.get("data-job") for bar in bars)


def test_a_non_linearizable_history_is_drawn_per_process_in_wall_time() -> None:
    svg = picture("claim-select-before-begin")
    assert svg.get("data-unit") == "wall ms"
    spans = [e for e in svg.iter() if e.get("data-kind") == "op"]
    lanes = {span.get("data-lane") for span in spans}
    assert {"P1", "P2"} <= lanes
    (parted,) = having(svg, "parted")
    assert parted.get("data-lane") in {"P1", "P2"}


@pytest.mark.parametrize("name", ["claim-select-before-begin", "jobs-poll-two-critical-sections"])
def test_each_claim_of_a_non_linearizable_history_is_a_lease_in_its_lane(name: str) -> None:
    """Two claims (polls) that both took the one job: each lane holds the target's lease
    of it with the token its call returned, the two overlap, and the model, which leases
    the job once, draws one lease of it."""
    svg = picture(name)
    claims = [e for e in having(svg, "step") if e.get("data-step-kind") in ("claim", "poll")]
    assert len(claims) == 2, claims
    for claim in claims:
        bars = [b for b in having(svg, "lease", lane=claim.get("data-lane") or "")
                if b.get("data-side") in ("target", "both")]  # fmt: skip
        assert [(b.get("data-job"), b.get("data-token")) for b in bars] == [
            (claim.get("data-job"), claim.get("data-token"))
        ], bars
    assert having(svg, "overlap", side="target")
    model = [b for b in having(svg, "lease") if b.get("data-side") in ("model", "both")]
    assert len(model) == 1, model


def test_a_lease_the_library_cut_short_ends_before_the_models_and_the_redelivery() -> None:
    """A generic queue's non-linearizable history (a planted library that truncates its
    leases to whole minutes): the library's lease of the job delivered twice ends before
    the second claim begins, while the model's lease of it still covers that claim."""
    svg = picture("queue-lease-truncated-to-minutes")
    leases = having(svg, "lease")
    tokens: dict[str | None, set[str | None]] = {}
    for bar in leases:
        tokens.setdefault(bar.get("data-job"), set()).add(bar.get("data-token"))
    (twice,) = [job for job, seen in tokens.items() if len(seen) > 1]
    bars = [bar for bar in leases if bar.get("data-job") == twice]
    first = min(bar_span(bar)[0] for bar in bars)
    redelivered = max(bar_span(bar)[0] for bar in bars)
    (target,) = [b for b in bars if b.get("data-side") == "target" and bar_span(b)[0] == first]
    (model,) = [b for b in bars if b.get("data-side") == "model" and bar_span(b)[0] == first]
    assert target.get("data-lane") == model.get("data-lane")
    assert bar_span(target)[1] <= redelivered < bar_span(model)[1]


def test_a_kill_is_drawn_where_it_happened() -> None:
    svg = picture("finish-two-transactions")
    (kill,) = [e for e in having(svg, "event") if e.get("data-event") == "kill"]
    (parted,) = having(svg, "parted")
    assert kill.get("data-step") == parted.get("data-step") == "1"
    target = having(svg, "lease", side="target")
    model = having(svg, "lease", side="model")
    assert target and model, "the stored lease and the model's rolled-back one differ"
    assert bar_span(target[0])[1] < bar_span(model[0])[1]


def test_a_long_history_folds_its_middle_and_keeps_the_failing_step_in_view() -> None:
    record = Recorder()
    for number in range(60):
        record.step("w1" if number % 2 else "w2", f"claim {number}", "claim", number * 10.0)
    record.lease(Lease("target", "a", 7, "w1", 590.0, 900.0, 60))
    evidence = record.evidence("the last claim broke it")
    svg = ET.fromstring(draw(evidence))
    width = float(svg.get("width") or 0)
    (parted,) = having(svg, "parted")
    assert parted.get("data-step") == "60"
    line = next(e for e in parted if e.tag == f"{SVG}line")
    assert float(line.get("x1") or 0) < 1200 and width < 1400, "in view without scrolling"
    assert sum(int(f.get("data-hidden") or 0) for f in having(svg, "fold")) > 30
    assert len(having(svg, "step")) < 15


def test_the_evidence_round_trips_through_the_counterexample_record() -> None:
    evidence = evidence_of("claim-selects-outside-lock")
    record = Counterexample(None, (), ("AssertionError: x",), 0, evidence=evidence).record()
    back = Counterexample.from_record(json.loads(json.dumps(record)))
    assert back.evidence == evidence


# --- words come from records, not from messages ---------------------------------------

RECORDED = {
    "lease.crash-points", "lease.model-check", "lease.linearizable", "lease.interleavings",
    "lease.single-winner", "lease.races", "lease.power-loss", "jobs.linearizable",
    "jobs.interleavings", "jobs.threads", "queue.linearizable",
}  # fmt: skip
"""Properties whose harness keeps every step's operation record (``Step.call``)."""


def _reworded(evidence: Evidence) -> Evidence:
    """``evidence`` as a harness whose messages say everything differently would record it:
    another summary (a message's first line) and another line for every step it kept the
    operation record of (the record itself is the same call)."""
    steps = tuple(
        replace(step, operation=f"in other words: {step.operation[::-1]}") if step.call else step
        for step in evidence.steps
    )
    return replace(evidence, summary=f"Put differently: {evidence.summary[::-1]}", steps=steps)


@pytest.mark.parametrize("name", SAMPLES)
def test_rewording_the_message_leaves_the_picture_unchanged(name: str) -> None:
    evidence = evidence_of(name)
    assert draw(_reworded(evidence)) == draw(evidence)


@pytest.mark.parametrize("name", [n for n in SAMPLES if _sample(n)["property"] in RECORDED])
def test_a_steps_words_are_its_records_own(name: str) -> None:
    """Each step of these families carries its record, and the picture names the step by
    the record's ``describe()`` and draws the record's kind."""
    evidence = evidence_of(name)
    svg = picture(name)
    for step in evidence.steps:
        assert step.call is not None, f"{name}: step {step.index} has no operation record"
        record = record_from_json(step.call)
        assert record is not None, step.call
        for g in having(svg, "step", step=str(step.index)):
            title = "".join(g.find(f"{SVG}title").itertext())  # type: ignore[union-attr]
            assert record.describe() in title and g.get("data-step-kind") == record.kind


def test_a_record_with_a_reworded_line_is_drawn_by_the_record() -> None:
    """The harness's own line of a step loses to its record: a picture of one claim whose
    line says something else names the claim as ``LeaseOp.describe`` does."""
    claim = LeaseOp.of("claim", "w1", 5, 40)
    record = Recorder()
    record.step("w1", "a sentence about the claim", "other", 5.0, call=claim.to_json())
    svg = draw(record.evidence("the claim went wrong"))
    assert escape(claim.describe()) in svg and "a sentence about the claim" not in svg
    assert "the claim went wrong" not in svg
    (step,) = having(ET.fromstring(svg), "step")
    assert step.get("data-step-kind") == "claim"


# --- HTML -------------------------------------------------------------------------------


def test_the_pages_verdicts_are_the_consoles_words(tmp_path: Path) -> None:
    results = [
        sample("stale-finish-accepted"),
        sample("synchronous-off", verdict="not promised"),
        PropertyResult("lease.crash-points", "holds"),
    ]
    page = write_report(tmp_path, results).read_text()
    overall = page.split('<p class="lc-overall">', 1)[1].split("</p>", 1)[0]
    assert overall == "VIOLATED: lease.agreement; not promised: lease.power-loss"
    assert "<h2>not promised: lease.power-loss</h2>" in page
    assert "violated: lease.power-loss" not in page.lower()


def test_the_report_draws_every_sample(tmp_path: Path) -> None:
    page = write_report(tmp_path, [sample(name) for name in SAMPLES]).read_text()
    assert page.count('class="lc-timeline lc-pic"') == len(SAMPLES)
    assert "No picture" not in page


def test_text_from_a_run_is_escaped(tmp_path: Path) -> None:
    evil = PropertyResult(
        "lease.<b>x</b>", "VIOLATED", details=["E       AssertionError: <script>alert(1)</script>"]
    )
    page = write_report(tmp_path, [evil, PropertyResult("lease.ok", "holds")]).read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>x</b>" not in page
    assert "No picture: lease.&lt;b&gt;x&lt;/b&gt; recorded no evidence" in page


def test_report_must_be_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "file"
    afile.write_text("")
    assert main(["check", "--report", str(afile)]) == 2
    assert "--report" in capsys.readouterr().err


def test_a_drawing_failure_still_writes_the_page_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(evidence: Evidence, *, standalone: bool = False) -> str:
        raise RuntimeError("a drawing bug")

    monkeypatch.setattr("leasecheck.report.html.draw", broken)
    page = write_report(tmp_path, [sample("stale-finish-accepted")]).read_text()
    assert "No picture: drawing this counterexample failed (RuntimeError: a drawing bug)" in page
    assert "returned &#x27;done&#x27; on the target" in page  # the text is all there


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
    """Every element's tag and attributes, and every text node, from the dumped DOM; each
    element also knows the property section it is in."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.section: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "section":
            self.section = found.get("data-property")
        found["section"] = self.section
        self.elements.append((tag, found))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def having(self, css: str) -> list[dict[str, str | None]]:
        return [a for _, a in self.elements if css in (a.get("class") or "").split()]

    def kind(self, section: str, kind: str, **attributes: str) -> list[dict[str, str | None]]:
        """Elements of ``data-kind=kind`` in ``section`` with these ``data-*`` values."""
        return [
            a
            for _, a in self.elements
            if a.get("section") == section
            and a.get("data-kind") == kind
            and all(a.get(f"data-{k}") == v for k, v in attributes.items())
        ]


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


def _span(element: dict[str, str | None]) -> tuple[float, float]:
    return float(element.get("data-x1") or 0), float(element.get("data-x2") or 0)


@pytest.fixture(scope="module")
def samples_dom(tmp_path_factory: pytest.TempPathFactory) -> _Elements:
    """The report of every planted sample, as headless Chromium shows it; each section is
    named after its sample (two samples may fail one property)."""
    directory = tmp_path_factory.mktemp("samples")
    results = [sample(name) for name in SAMPLES]
    for name, result in zip(SAMPLES, results, strict=True):
        result.name = name
    page = write_report(directory, results)
    dom = browse(page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    elements = _Elements()
    elements.feed(dom.stdout)
    return elements


def test_in_the_browser_two_winners_overlap_in_two_lanes(samples_dom: _Elements) -> None:
    section = "claim-selects-outside-lock"
    bars = [b for b in samples_dom.kind(section, "lease") if b.get("data-side") != "model"]
    lanes = {b.get("data-lane"): b for b in bars}
    assert {"A", "B"} <= set(lanes), lanes
    a, b = _span(lanes["A"]), _span(lanes["B"])
    assert lanes["A"].get("data-job") == lanes["B"].get("data-job")
    assert max(a[0], b[0]) < min(a[1], b[1])
    assert samples_dom.kind(section, "overlap")


def test_in_the_browser_a_deadline_bug_crosses_the_drawn_deadline(
    samples_dom: _Elements,
) -> None:
    section = "lease-not-capped-at-deadline"
    deadlines = {d.get("data-job"): float(d.get("data-x") or 0)
                 for d in samples_dom.kind(section, "deadline")}  # fmt: skip
    crossing = [
        bar
        for bar in samples_dom.kind(section, "lease", side="target")
        if _span(bar)[1] > deadlines.get(bar.get("data-job"), float("inf")) + 1
    ]
    assert crossing, "no target lease bar runs past its job's deadline"


def test_in_the_browser_a_stale_token_stands_beside_the_current_one(
    samples_dom: _Elements,
) -> None:
    """The parting step hands in a token that is not the live lease's, and that lease is
    drawn with its own token: on the same lane for a stale ticket of the same worker, on
    the lane above for a made-up one (``jobs-stale-token-accepted``)."""
    for section, same_lane in (
        ("stale-finish-accepted", True),
        ("queue-ack-ignores-lease", True),
        ("jobs-stale-token-accepted", False),
    ):
        (parted,) = samples_dom.kind(section, "parted")
        (step,) = samples_dom.kind(section, "step", step=parted.get("data-step") or "")
        token, job = step.get("data-token"), step.get("data-job")
        assert token is not None, f"{section}: the parting step names no token"
        current = [
            bar
            for bar in samples_dom.kind(section, "lease", job=job or "")
            if bar.get("data-token") != token
            and (not same_lane or bar.get("data-lane") == step.get("data-lane"))
        ]
        assert current, f"{section}: no lease of job {job} with a token other than {token}"


def test_in_the_browser_an_ack_lands_inside_the_sweep_that_undoes_it(
    samples_dom: _Elements,
) -> None:
    """queue.interleavings on litequeue (a real finding, no mutant): the sweep's span in
    one lane holds the ack's span in another lane, and the picture parts at the read
    after them, where the acknowledged job reads ready again."""
    section = "lib-litequeue-sweep-ack"
    steps = {s.get("data-step-kind"): s for s in samples_dom.kind(section, "step")}
    sweep, ack = steps["recover"], steps["ack"]
    assert sweep.get("data-lane") != ack.get("data-lane")

    def op(step: dict[str, str | None]) -> tuple[float, float]:
        (rect,) = samples_dom.kind(section, "op", step=step.get("data-step") or "")
        x = float(rect.get("x") or 0)
        return x, x + float(rect.get("width") or 0)

    (s1, s2), (a1, a2) = op(sweep), op(ack)
    assert s1 < a1 and a2 < s2, f"the ack {a1}-{a2} is not inside the sweep {s1}-{s2}"
    (parted,) = samples_dom.kind(section, "parted")
    assert parted.get("data-step") == steps["observe"].get("data-step")


def test_in_the_browser_each_claim_of_the_sweep_ack_history_is_a_lease_in_its_lane(
    samples_dom: _Elements,
) -> None:
    """queue.interleavings on litequeue: every claim the history made is a lease bar in its
    claimer's lane (the seeded claim 'ca' is the harness's, lane H), of the job it got,
    starting at the claim; target and model agree on it, so it is one bar."""
    section = "lib-litequeue-sweep-ack"
    claims = samples_dom.kind(section, "step", **{"step-kind": "claim"})
    bars = samples_dom.kind(section, "lease")
    assert claims and bars, f"{section}: claims {claims}, lease bars {bars}"
    for claim in claims:
        mine = [b for b in bars if b.get("data-lane") == claim.get("data-lane")]
        assert [(b.get("data-job"), b.get("data-side")) for b in mine] == [("a", "both")], mine
        assert float(mine[0].get("data-x1") or 0) == float(claim.get("data-x") or 0)
    assert {b.get("data-lane") for b in bars} == {c.get("data-lane") for c in claims}


def test_in_the_browser_each_claim_of_an_interleaving_is_a_lease_with_its_token(
    samples_dom: _Elements,
) -> None:
    """lease.interleavings (two claims that both take j1) and jobs.interleavings (two polls
    that both lease J1): each claim's or poll's lane holds a lease bar of the job and token
    it got, starting at the call; the target's two leases of the job overlap, shaded; the
    model leases the job once (a bar of its own where it differs from the target's)."""
    for section, call, job in (
        ("claim-select-then-update-by-id", "claim", "j1"),
        ("jobs-poll-picks-outside-lock", "poll", "J1"),
    ):
        claims = samples_dom.kind(section, "step", **{"step-kind": call})
        bars = samples_dom.kind(section, "lease")
        assert len(claims) == 2 and bars, f"{section}: claims {claims}, lease bars {bars}"
        for claim in claims:
            mine = [b for b in bars if b.get("data-lane") == claim.get("data-lane")
                    and b.get("data-side") in ("target", "both")]  # fmt: skip
            assert [(b.get("data-job"), b.get("data-token")) for b in mine] == [
                (job, claim.get("data-token"))
            ], f"{section}: {mine}"
            assert float(mine[0].get("data-x1") or 0) == float(claim.get("data-x") or 0)
        targets = [b for b in bars if b.get("data-side") in ("target", "both")]
        first, second = (_span(b) for b in targets)
        assert max(first[0], second[0]) < min(first[1], second[1]), targets
        assert samples_dom.kind(section, "overlap", job=job, side="target")
        model = [b for b in bars if b.get("data-side") in ("model", "both")]
        assert [b.get("data-job") for b in model].count(job) == 1, f"{section}: {model}"


def test_in_the_browser_every_failure_has_its_picture_and_the_consoles_verdict(
    samples_dom: _Elements,
) -> None:
    sections = [a for a in samples_dom.having("lc-property")]
    assert sections and all(a.get("data-verdict") == "VIOLATED" for a in sections)
    pictures = {a.get("section") for a in samples_dom.having("lc-timeline")}
    assert pictures == {a.get("data-property") for a in sections}
    overall = next(a for a in samples_dom.having("lc-overall"))
    assert overall is not None
    assert any(text.startswith("VIOLATED: ") for text in samples_dom.text)


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
    # lease.configuration fails too (its send moves the token, and finish must then refuse)
    assert "lease.agreement" in sections and set(sections) <= {"lease.agreement", *rows}
    lanes = [
        a.get("data-lane") for a in page.having("lc-lane") if a.get("section") == "lease.agreement"
    ]
    (parted,) = page.kind("lease.agreement", "parted")
    assert parted.get("data-lane") in lanes
    step = page.kind("lease.agreement", "step", step=parted.get("data-step") or "")
    assert step and step[0].get("data-step-kind") in ("finish", "run_once", "run_file")
    assert page.kind("lease.agreement", "lease"), "the stale finish's job has its lease drawn"
    assert any("on the target but" in text for text in page.text)
    verdicts = {a.get("data-property"): a.get("data-verdict") for a in page.having("lc-property")}
    assert verdicts["lease.agreement"] == "VIOLATED"
    assert all(v in ("VIOLATED", "not promised") for v in verdicts.values())


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


def _unnumbered(text: str) -> str:
    """``text`` with every number masked: wall-clock times differ from run to run."""
    return re.sub(r"\d+(\.\d+)?", "#", text)


def _skeleton(svg: ET.Element) -> list[tuple[str, ...]]:
    """What a picture shows, without where: each drawn element's kind, lane, job, token,
    side and glyph, and every text, numbers masked."""
    keys = ("kind", "lane", "job", "token", "side", "step-kind", "event", "glyph")
    shown = [
        tuple(e.get(f"data-{k}") or "" for k in keys) for e in svg.iter() if e.get("data-kind")
    ]
    texts = [_unnumbered("".join(t.itertext())) for t in svg.iter(f"{SVG}text")]
    return sorted(shown) + [(text,) for text in texts]


def test_the_teaching_command_regenerates_the_page(tmp_path: Path) -> None:
    """The command writes every invariant's picture, and the committed page says what it
    writes today: its header and each section's words (rule, planted bug, caught by,
    lesson), numbers masked. The counterexamples themselves are left out: a race found in
    real time, and a shrink on a loaded machine, may end at another example run to run."""
    from leasecheck.report.teach import COMMAND, INVARIANTS, main

    assert main([str(tmp_path)]) == 0
    written = sorted(p.name for p in (tmp_path / "img").iterdir())
    assert written == sorted(f"{i.slug}.svg" for i in INVARIANTS)
    page = (tmp_path / "invariants.md").read_text()
    assert "/dev/shm" not in page and "leasecheck-teach-" not in page  # no scratch paths
    docs = Path(__file__).parent.parent / "docs"
    stale = f"docs/ is stale: run `{COMMAND}` and commit what it writes"
    committed = (docs / "invariants.md").read_text()
    assert _prose(_unnumbered(page)) == _prose(_unnumbered(committed)), stale
    for invariant in INVARIANTS:  # and each committed picture is one the command draws
        svg = ET.parse(docs / "img" / f"{invariant.slug}.svg").getroot()
        assert _skeleton(svg), f"{invariant.slug}: {stale}"


def _prose(section: str) -> str:
    """A section without its fenced blocks."""
    return "".join(section.split("```")[::2])
