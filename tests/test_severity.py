"""Severity: one declaration of the severity names and their order, whose members are the words the
JSON, text and metrics have always carried."""
from __future__ import annotations

import json

import pytest

from parinfo.diagnostics.findings import WORST_FIRST, Finding, Severity, at_least, sort_findings
from parinfo.diagnostics.sections import findings_by_severity
from parinfo.records.convert import dump, load


def _finding(fid: str, severity: Severity) -> Finding:
    return Finding(fid, severity, "message", "why", "fix")


def test_members_are_their_words():
    assert [s.value for s in Severity] == ["info", "warning", "error"]
    assert Severity.WARNING == "warning" and f"{Severity.ERROR}" == str(Severity.ERROR) == "error"
    assert {"warning": 1}[Severity.WARNING] == 1
    assert f"{Severity.INFO:>7}|" == "   info|"


def test_order_is_declared_not_alphabetical():
    assert Severity.INFO < Severity.WARNING < Severity.ERROR
    assert Severity.ERROR >= "warning" and not Severity.INFO >= "warning"
    assert WORST_FIRST == (Severity.ERROR, Severity.WARNING, Severity.INFO)
    assert [s.rank for s in Severity] == [0, 1, 2]
    with pytest.raises(TypeError):
        _ = Severity.INFO < "fatal"


def test_parse_names_only_severities():
    assert Severity.parse("error") is Severity.ERROR
    assert Severity.parse("fatal") is None and Severity.parse(None) is None


def test_json_keeps_the_words():
    f = _finding("x", Severity.WARNING)
    assert json.loads(json.dumps(dump(f))) == {"id": "x", "severity": "warning", "message": "message",
                                               "why": "why", "fix": "fix"}
    assert type(dump(f)["severity"]) is str
    assert load(Finding, dump(f), strict=True) == f
    odd = [{**dump(f), "severity": "fatal"}, dump(f)]
    assert load(list[Finding], odd, strict=False) == [f]  # one it cannot say in full


def test_one_order_for_sorting_filtering_and_grouping():
    found = [_finding("a", Severity.INFO), _finding("b", Severity.ERROR), _finding("c", Severity.WARNING),
             _finding("d", Severity.INFO)]
    assert [f.id for f in sort_findings(found)] == ["b", "c", "a", "d"]
    assert [f.id for f in at_least(found, "warning")] == ["b", "c"]
    assert [f.id for f in at_least(found, Severity.ERROR)] == ["b"]
    assert [(s, [f.id for f in group]) for s, group in findings_by_severity(found)] == [
        (Severity.ERROR, ["b"]), (Severity.WARNING, ["c"]), (Severity.INFO, ["a", "d"])]
