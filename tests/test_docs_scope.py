"""docs/scope.md: one row per measured scope fact of the registry, saying what the facts say, each
row naming the tests that back it."""
from __future__ import annotations

import re
from pathlib import Path

from parinfo.process import libraries as reg
from parinfo.process.library_parts import ScopeFacts

DOC = Path(__file__).resolve().parent.parent / "docs" / "scope.md"
COLUMNS = ("family", "layer", "call", "measured on", "scope", "reaches", "one shared pool", "thread-local API",
           "to limit", "reference", "tests")


def _rows() -> list[dict[str, str]]:
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("| ") and not line.startswith("| family") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            assert len(cells) == len(COLUMNS), line[:80]
            rows.append(dict(zip(COLUMNS, cells, strict=True)))
    return rows


def _reaches(facts: ScopeFacts) -> str:
    if facts.reaches_running:
        return "every thread"
    return "that thread and threads started after it" if facts.reaches_new else "that thread only"


def _facts(row: dict[str, str]) -> list[tuple[str, ScopeFacts]]:
    """(family, facts) the row describes: for each family it names, the facts of its layer and call."""
    layer = "" if row["layer"] == "any" else row["layer"]
    call = row["call"].strip("`")
    found = []
    for name in re.findall(r"`([a-z0-9_]+)`", row["family"]):
        match = [f for f in reg.library(name).scopes if f.layer == layer and f.call == call]
        assert len(match) == 1, f"docs/scope.md names {name} {layer or 'any'} {call}, which its facts do not hold"
        found.append((name, match[0]))
    return found


def test_every_row_says_what_the_registry_facts_say() -> None:
    for row in _rows():
        for name, facts in _facts(row):
            assert row["scope"] == str(facts.scope), (name, row["call"])
            assert row["reaches"] == _reaches(facts), (name, row["call"])
            assert row["one shared pool"] == ("yes" if facts.shared_pool else "no"), (name, row["call"])


def test_every_scope_fact_of_every_family_has_a_row() -> None:
    covered = {(name, facts) for row in _rows() for name, facts in _facts(row)}
    missing = [f"{lib.name} {f.layer or 'any'} {f.call}" for lib in reg.records() for f in lib.scopes
               if (lib.name, f) not in covered]
    assert not missing, f"docs/scope.md has no row for {missing}"


def test_every_row_names_tests_that_exist() -> None:
    root = DOC.parent.parent
    for row in _rows():
        named = re.findall(r"`(tests/test_[a-z0-9_]+\.py)`", row["tests"])
        assert named, f"a row of docs/scope.md names no test: {row['family']} {row['call']}"
        assert all((root / path).is_file() for path in named), named


def test_every_measured_fact_says_on_what() -> None:
    unmeasured = [f"{lib.name} {f.call}" for lib in reg.records() for f in lib.scopes if not f.measured]
    assert not unmeasured, f"scope facts without the versions they were measured on: {unmeasured}"
