"""docs/findings.md documents every finding the code can raise: one ``## id`` section for each id the
rules emit (the ids the README's table is checked against), none for an id the code lacks, each with
its evidence, its fix and the tests that make it fire, and every test file it names exists."""
from __future__ import annotations

import re

import pytest
from conftest import REPO
from test_readme_examples import _finding_ids

DOC = (REPO / "docs" / "findings.md").read_text()
LABELS = ("**Evidence**", "**Fix**", "**Tested by**")


def _sections() -> dict[str, str]:
    """Each ``## title`` of the document and the text under it, up to the next ``## `` heading."""
    parts = re.split(r"^## (.+)$", DOC, flags=re.M)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def _finding_sections() -> dict[str, str]:
    """The sections whose title is written as an id (lower case, digits and dashes, no space); the
    other sections (where findings appear, severity, the advisories table) start with a capital."""
    return {title: body for title, body in _sections().items() if re.fullmatch(r"[a-z0-9-]+", title)}


def test_every_finding_id_has_a_section_and_no_section_names_another():
    ids = set(_finding_ids())
    documented = set(_finding_sections())
    assert ids - documented == set(), "ids without a section in docs/findings.md"
    assert documented - ids == set(), "sections for ids the code does not raise"


def test_sections_follow_the_readme_table_order():
    table = (REPO / "README.md").read_text().split("### Findings", 1)[1].split("\n\n", 2)[1]
    order = re.findall(r"^\| `([a-z0-9-]+)` \|", table, flags=re.M)
    assert list(_finding_sections()) == order


@pytest.mark.parametrize("fid", sorted(_finding_ids()))
def test_each_section_has_evidence_fix_and_tests(fid):
    body = _finding_sections()[fid]
    assert body.lstrip().startswith("Severity: "), fid
    positions = [body.find(label) for label in LABELS]
    assert all(p >= 0 for p in positions), (fid, dict(zip(LABELS, positions, strict=True)))
    assert positions == sorted(positions), (fid, "labels out of order")
    tested = body.split("**Tested by**", 1)[1]
    assert re.search(r"`tests/test_[\w]+\.py`", tested), (fid, "names no test file")


@pytest.mark.parametrize("fid", sorted(_finding_ids()))
def test_each_section_names_every_severity_the_code_gives_it(fid):
    severity = _finding_sections()[fid].lstrip().split("\n\n", 1)[0]
    for sev in _finding_ids()[fid]:
        for word in sev.split(" or "):
            assert word in severity, (fid, word, severity)


def test_every_test_file_named_exists():
    named = set(re.findall(r"`(tests/[\w/]+\.py)`", DOC))
    assert named, "the document names no test file"
    missing = sorted(path for path in named if not (REPO / path).is_file())
    assert missing == []
