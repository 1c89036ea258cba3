"""A count's source is a record: rules and precedence follow its kind, never its words."""
from __future__ import annotations

import json

import pytest

import parinfo
from parinfo.diagnostics.model import Report
from parinfo.records.convert import dump, load
from parinfo.records.source import EXPLICIT_CALL, Kind, Source, SourceKind, parinfo_default, profile, variable
from parinfo.runtime.settings import RuntimeSettings
from parinfo.runtime.snapshot import Push


def test_the_record_round_trips_and_reads_older_words():
    s = Source(Kind.VARIABLE, "OMP_NUM_THREADS=4", "env OMP_NUM_THREADS=4", when=12.5)
    assert str(s) == "env OMP_NUM_THREADS=4"
    assert s.to_json() == {"kind": "variable", "detail": "OMP_NUM_THREADS=4", "text": "env OMP_NUM_THREADS=4",
                           "when": 12.5}
    assert Source.from_json(json.loads(json.dumps(s.to_json()))) == s
    old = Source.from_json("env OMP_NUM_THREADS=4")  # a version 1 report held the words alone
    assert old is not None and old.kind is Kind.OTHER and old.text == "env OMP_NUM_THREADS=4" and not old.chosen
    for junk in (None, 3, [], {}, {"kind": 5}, ""):
        assert Source.from_json(junk) is None
    odd = Source.from_json({"kind": "from the future", "detail": "x", "text": "y"})
    assert odd is not None and odd.kind is Kind.OTHER and odd.text == "y"
    assert Source(Kind.NONE).text == "none" and Source(Kind.FILE, "/x").text == "file: /x"
    assert parinfo.Source is Source and parinfo.SourceKind is SourceKind is Kind
    assert dump({"a": (s,), "k": Kind.FILE}) == {"a": [s.to_json()], "k": "file"}


def test_kinds_say_who_chose():
    chosen = {k for k in Kind if k.chosen}
    assert chosen == {Kind.EXPLICIT, Kind.PROFILE, Kind.VARIABLE, Kind.RUN_TIME, Kind.ARGUMENT}
    assert {k for k in Kind if k.default} == {Kind.LIBRARY_DEFAULT, Kind.PARINFO_DEFAULT, Kind.FOLLOWED}
    assert len({k.value for k in Kind}) == len(Kind)


def test_an_explicit_call_outranks_a_profile_whatever_either_says():
    settings = RuntimeSettings()
    assert settings.set_intra(3, Source(Kind.EXPLICIT, "", "reworded"))
    # a profile whose words are those of an explicit call is still a profile: it does not take over
    assert not settings.set_intra(1, Source(Kind.PROFILE, "p", EXPLICIT_CALL.text))
    assert settings.intra() == (3, Source(Kind.EXPLICIT, "", "reworded"))
    settings = RuntimeSettings()
    assert settings.set_intra(2, profile("p")) and settings.set_intra(4, EXPLICIT_CALL)
    assert settings.intra()[0] == 4


def test_only_a_default_follows_the_machine_whatever_it_says():
    settings = RuntimeSettings()
    followed = settings._followed((2, parinfo_default("reworded rule"), None), 1, 0.0)
    assert followed[0] == 1 and followed[1].kind is Kind.FOLLOWED and followed[1].when == 0.0
    assert followed[1].text.startswith("default: reworded rule, re-read at ")
    chosen = (2, variable("X", text="default: usable CPUs"), None)  # a variable worded like a default
    assert settings._followed(chosen, 1, 0.0) is chosen


def pushed_counts(data):
    return load(Push, data, strict=True).by_file()


def test_who_pushed_a_count_is_read_from_the_kind():
    pools = [{"filepath": "/lib/libopenblas.so", "num_threads": 1}]
    as_profile = pushed_counts({"count": 1, "pools": pools,
                                "source": Source(Kind.PROFILE, "p", "explicit call").to_json()})
    assert as_profile["/lib/libopenblas.so"][1].kind is Kind.PROFILE
    as_call = pushed_counts({"count": 1, "pools": pools, "source": Source(Kind.EXPLICIT, "", "profile p").to_json()})
    assert as_call["/lib/libopenblas.so"] == (1, Source(Kind.EXPLICIT, "parinfo.set_num_threads(1)",
                                                        "set at run time by parinfo.set_num_threads(1)"))
    followed = Source(Kind.FOLLOWED, "usable CPUs", "profile p", 5.0)
    got = pushed_counts({"count": 1, "pools": pools, "source": followed.to_json()})
    assert got["/lib/libopenblas.so"][1] == followed
    older = pushed_counts({"count": 1, "pools": pools, "source": "profile p"})["/lib/libopenblas.so"][1]
    assert older == Source(Kind.RUN_TIME, "parinfo's runtime", "set at run time by parinfo's runtime (profile p)")


@pytest.mark.parametrize("kind, kept", [(Kind.VARIABLE, True), (Kind.OTHER, False), (Kind.LIBRARY_DEFAULT, False)])
def test_a_followed_change_says_a_count_was_kept_only_when_someone_chose_it(kind, kept):
    from test_diagnostics_rules import base, diagnose

    s = base(1, quota=1.0, affinity=[0, 1], logical_cpus=2)
    s["settings"] = [{"library": "openblas", "count": 2, "variable": "OPENBLAS_NUM_THREADS",
                      "source": {"kind": kind.value, "detail": "OPENBLAS_NUM_THREADS=2",
                                 "text": "env OPENBLAS_NUM_THREADS=2"}}]
    s["runtime"]["follow"] = {"enabled": True, "changes": [{"at": "12:34:56", "usable_cpus": [2, 1]}]}
    (finding,) = [f for f in diagnose(s) if f.id == "count-above-quota"]
    assert ("kept when the usable CPUs changed" in finding.message) is kept


def test_every_source_of_a_report_is_a_record_and_every_json_source_an_object():
    report = parinfo.inspect()
    payload = report.to_dict()
    found = []

    def walk(value, path):
        if isinstance(value, dict):
            for key, inner in value.items():
                if "source" in key and inner is not None:
                    found.append((f"{path}.{key}", inner))
                walk(inner, f"{path}.{key}")
        elif isinstance(value, list):
            for i, inner in enumerate(value):
                walk(inner, f"{path}[{i}]")

    walk(payload, "")
    assert found
    for where, value in found:
        assert isinstance(value, dict) and set(value) >= {"kind", "detail", "text"}, where
        assert Source.from_json(value) is not None and Source.from_json(value).kind is not Kind.OTHER, where
    again = Report.from_dict(json.loads(json.dumps(payload)))
    assert [s.source for s in again.settings] == [s.source for s in report.settings]
    assert all(isinstance(s.source, Source) for s in report.settings)


def test_no_field_named_source_holds_words():
    """A record's field or an object's attribute named *source* holds a Source, never a str."""
    import ast
    from pathlib import Path

    root = Path(parinfo.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, (ast.Name, ast.Attribute)):
                name = node.target.id if isinstance(node.target, ast.Name) else node.target.attr
                shown = ast.unparse(node.annotation)
                if "source" in name and "Source" not in shown:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {name}: {shown}")
            words = isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            if words and isinstance(node.value.value, str):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and "source" in target.attr:
                        found.append(f"{path.relative_to(root)}:{node.lineno} {target.attr} = {node.value.value!r}")
    assert found == []
