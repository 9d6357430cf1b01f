"""Evidence travels as data in ``leasecheck check --json``: the failing property's record
carries the structured evidence its harness recorded (actors, steps, leases, deadlines,
the step where target and model part), and the picture is drawn from that JSON alone,
with no re-run and no reading of message prose (issue 24, item 2).

Each case runs the real command on a public catalogue mutant (ci profile, seed 0, one
property), reads the ``--json`` document back, rebuilds the counterexample from it and
draws it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from leasecheck.cli import main
from leasecheck.counterexample import Counterexample
from leasecheck.mutants import by_name, materialize
from leasecheck.report import draw

CASES = [
    # (mutant, its property, the option naming the target)
    ("claim-selects-outside-lock", "lease.single-winner", "--impl"),
    ("lease-not-capped-at-deadline", "lease.agreement", "--impl"),
    ("jobs-stale-token-accepted", "jobs.agreement", "--jobs-impl"),
]


def _document(tmp_path: Path, mutant: str, prop: str, option: str) -> dict[str, Any]:
    (tmp_path / "target").mkdir()
    target = materialize(by_name(mutant), tmp_path / "target")
    out = tmp_path / "run.json"
    args = [option, str(target), "--profile", "ci", "--seed", "0", "--property", prop]
    assert main(["check", *args, "-n", "0", "--json", str(out)]) == 1
    document: dict[str, Any] = json.loads(out.read_text())
    return document


@pytest.mark.parametrize(("mutant", "prop", "option"), CASES, ids=[c[1] for c in CASES])
def test_the_json_record_carries_the_evidence_and_the_picture_is_drawn_from_it(
    tmp_path: Path, mutant: str, prop: str, option: str
) -> None:
    document = _document(tmp_path, mutant, prop, option)
    (record,) = [r for r in document["properties"] if r["property"] == prop]
    assert record["verdict"] == "VIOLATED"
    evidence = record["counterexample"]["evidence"]
    assert isinstance(evidence, dict), f"{prop}'s --json record has no evidence"
    assert evidence["summary"] and evidence["actors"] and evidence["steps"]
    indices = [step["index"] for step in evidence["steps"]]
    assert evidence["parted"] is None or evidence["parted"] in indices
    for lease in evidence["leases"]:
        assert {"side", "job", "token", "holder", "start", "until"} <= lease.keys()
        assert lease["until"] >= lease["start"]
    if prop == "lease.single-winner":  # two holders of one job, both recorded as data
        jobs = [(lease["job"], lease["holder"]) for lease in evidence["leases"]]
        assert any(len({h for j, h in jobs if j == job}) >= 2 for job, _ in jobs), jobs
    if prop == "lease.agreement":  # a lease past the deadline needs the deadline drawn
        assert evidence["deadlines"], "the deadline bug's evidence names no deadline"

    # From the JSON alone (a fresh process could do the same): the counterexample and its
    # picture: a bar for every lease the target recorded (the model's only where it
    # differs), each carrying its token.
    example = Counterexample.from_record(json.loads(json.dumps(record["counterexample"])))
    assert example.evidence is not None
    assert example.evidence.to_json() == evidence
    svg = draw(example.evidence, standalone=True)
    targets = [lease for lease in evidence["leases"] if lease["side"] == "target"]
    assert len(targets) <= svg.count('data-kind="lease"') <= len(evidence["leases"])
    for lease in targets:
        assert f'data-token="{lease["token"]}"' in svg, lease
    assert svg.count('data-kind="step"') >= 1
