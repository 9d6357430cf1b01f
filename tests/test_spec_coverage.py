"""The traceability table (``leasecheck.spec_coverage``) and its page, docs/spec-coverage.md.

CI fails here when a clause of either spec has no check, when a clause a target can
break has no mutant in the catalogue caught by one of its properties, when a quote is
not word for word in its spec, or when the page was not regenerated. That each mutant
really is caught is the kill table's job (``test_mutant_catalogue.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leasecheck import spec_coverage
from leasecheck.mutants import CATALOGUE
from leasecheck.spec_coverage import CLAUSES, Clause, squeeze

PROPERTIES = Path(spec_coverage.__file__).parent / "properties"
BY_NAME = {mutant.name: mutant for mutant in CATALOGUE}


def _property_names() -> set[str]:
    pattern = re.compile(r'pytest\.mark\.leasecheck\("([^"]+)"\)')
    return {name for f in PROPERTIES.glob("test_*.py") for name in pattern.findall(f.read_text())}


def test_page_is_up_to_date() -> None:
    assert spec_coverage.PAGE.read_text() == spec_coverage.render(), (
        "docs/spec-coverage.md is stale; run `python -m leasecheck.spec_coverage`"
    )


def test_ids_are_unique() -> None:
    ids = [clause.id for clause in CLAUSES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


@pytest.mark.parametrize("clause", CLAUSES, ids=lambda c: c.id)
def test_quote_is_in_its_spec(clause: Clause) -> None:
    assert squeeze(clause.quote) in squeeze(clause.spec.read_text()), (
        f"{clause.id} quotes {clause.quote!r}, which is not in {clause.spec.name}; quote the "
        f"spec's words exactly (line breaks may differ)"
    )


@pytest.mark.parametrize("clause", CLAUSES, ids=lambda c: c.id)
def test_clause_is_checked(clause: Clause) -> None:
    unknown = set(clause.properties) - _property_names()
    assert clause.properties and not unknown, (
        f"{clause.id} names no property, or unknown ones {sorted(unknown)}; name a property "
        f"marked @pytest.mark.leasecheck in leasecheck/properties"
    )
    for test in clause.tests:
        assert (Path(spec_coverage.ROOT) / test).is_file(), f"{clause.id}: no test file {test}"


@pytest.mark.parametrize("clause", [c for c in CLAUSES if c.needs_mutant], ids=lambda c: c.id)
def test_clause_has_a_killed_mutant(clause: Clause) -> None:
    missing = [name for name in clause.mutants if name not in BY_NAME]
    assert not missing, f"{clause.id} names mutants not in the catalogue: {missing}"
    caught = [n for n in clause.mutants if BY_NAME[n].caught_by in clause.properties]
    assert caught, (
        f"{clause.id} ({clause.quote!r}) has no mutant caught by one of its properties "
        f"{list(clause.properties)}; write one in leasecheck/mutants/spec_bugs.py"
    )


def test_open_readings_name_how_they_are_accepted() -> None:
    for clause in CLAUSES:
        if clause.open_reading:
            assert clause.note and not clause.mutants, clause.id


def test_every_mutant_of_a_contract_is_in_the_table() -> None:
    named = {name for clause in CLAUSES for name in clause.mutants}
    assert not set(BY_NAME) - named, (
        f"mutants no clause names: {sorted(set(BY_NAME) - named)}; add each to the clause "
        f"of leasecheck/spec_coverage.py that it breaks"
    )
