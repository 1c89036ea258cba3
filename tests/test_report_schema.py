"""The published report schema (parinfo/diagnostics/report.schema.json) is generated from the report's
records, real reports follow it, and it refuses what a strict reading refuses; the generator says each
declaration (types, bounds, field marks, the hooks' keys) in JSON Schema."""
from __future__ import annotations

import enum
import json
import subprocess
import sys
import time
from dataclasses import field
from typing import Annotated, Literal

import jsonschema
import pytest
from conftest import REPO, clean_env, run_cli

from parinfo.diagnostics.model import Report
from parinfo.diagnostics.report_schema import build_schema, schema_text
from parinfo.errors import RecordError
from parinfo.records.convert import (
    ALONE,
    EMPTY_IS_NONE,
    FLATTEN,
    OMIT_NONE,
    above,
    among,
    at_most,
    between,
    doc,
    dump,
    key,
    load,
    matching,
)
from parinfo.records.record import record
from parinfo.records.schema import record_schema

SCHEMA_PATH = REPO / "parinfo" / "diagnostics" / "report.schema.json"
VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))


def test_the_published_schema_is_what_the_records_give():
    assert SCHEMA_PATH.read_text() == schema_text(), (
        "regenerate: python -m parinfo.diagnostics.report_schema > parinfo/diagnostics/report.schema.json")
    jsonschema.Draft202012Validator.check_schema(build_schema())


def _errors(payload: dict) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in VALIDATOR.iter_errors(payload)]


def test_show_json_of_this_process_and_of_a_child_read_from_outside_follow_the_schema():
    mine = run_cli("show", "--json")
    assert mine.returncode == 0, mine.stderr
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        theirs = run_cli("show", "--json", "--pid", str(child.pid))
    finally:
        child.kill()
        child.wait()
    assert theirs.returncode == 0, theirs.stderr
    for out in (mine, theirs):
        payload = json.loads(out.stdout)
        assert _errors(payload) == []
        assert Report.from_dict(payload).to_dict() == payload  # and a strict reading takes it whole
    assert json.loads(theirs.stdout)["process"]["inspected_from"]


def test_an_attached_report_follows_the_schema(py314_python: str):
    child = subprocess.Popen([py314_python, "-c", "import time\nwhile True: time.sleep(0.01)"])
    try:
        time.sleep(0.5)
        out = subprocess.run([py314_python, "-m", "parinfo", "show", "--json", "--pid", str(child.pid), "--attach",
                              "--timeout", "8"], capture_output=True, text=True, env=clean_env(PYTHONPATH=str(REPO)),
                             timeout=60)
    finally:
        child.kill()
        child.wait()
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert payload["process"]["attached"] and _errors(payload) == []
    assert Report.from_dict(payload).to_dict() == payload


@pytest.mark.parametrize("payload", [
    {"machine": {"usable_cpu": 2}},
    {"machine": {"usable_cpus": 0}},
    {"machine": {"affinity": [0, -1]}},
    {"machine": {"quota": 0}},
    {"machine": {"quota_rounding": "up"}},
    {"findings": [{"id": "Not An Id", "severity": "info", "message": "", "why": "", "fix": ""}]},
    {"findings": [{"id": "x", "severity": "fatal", "message": "", "why": "", "fix": ""}]},
    {"settings": [{"library": "a", "count": 1, "source": {"kind": "variable", "detial": "X=1"},
                   "precedence": []}]},
    {"live": {"stack_budget": {"unknown": "gone", "limits": []}}},
])
def test_what_a_strict_reading_refuses_the_schema_refuses(payload):
    full = Report.from_dict({"machine": {"usable_cpus": 1, "affinity": [0]}}).to_dict()
    for section, value in payload.items():
        if isinstance(value, dict) and isinstance(full[section], dict) and full[section]:
            full[section] = {**full[section], **value}
        else:
            full[section] = value
    if "live" in payload:  # a live section needs its other parts
        full["live"] = {"throttling": {"version": None, "levels": [], "worst": None, "unknown": None, "notes": []},
                        **payload["live"]}
    with pytest.raises(RecordError):
        Report.from_dict(full)
    assert _errors(full)


# -- the generator, declaration by declaration ------------------------------------------------------

class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@record(frozen=True)
class Inner:
    n: Annotated[int, between(1, 8)]
    ratio: Annotated[float, above(0)] | None = None


@record
class Limits3:
    a: int | None
    b: int | None


@record
class Pair:
    x: int
    y: str

    _json_array = True


@record
class Outer:
    name: Annotated[str, at_most(5), matching("^[a-z]+$")]
    mode: Annotated[str, among("on", "off")] | None
    colour: Colour
    kind: Literal["a", "b"]
    inner: Inner | None
    items: Annotated[list[Inner], at_most(3)] = field(default_factory=list)
    table: dict[Annotated[str, at_most(4)], int] = field(default_factory=dict)
    pair: Pair | None = None
    flat: Limits3 = field(default_factory=lambda: Limits3(None, None), metadata=FLATTEN)
    renamed: int = field(default=0, metadata={**key("other"), **doc("said under another key")})
    maybe: int | None = field(default=None, metadata=OMIT_NONE)
    section: Inner | None = field(default=None, metadata=EMPTY_IS_NONE)

    _json_extra = (("total", int),)

    def _json_out(self, data: dict) -> dict:
        return {**data, "total": len(self.items)}


def test_the_generator_says_each_declaration():
    s = record_schema(Outer)
    props, defs = s["properties"], s["$defs"]
    assert props["name"] == {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"}
    assert props["mode"] == {"type": ["string", "null"], "enum": ["on", "off", None]}
    assert props["colour"] == {"enum": ["red", "blue"]}
    assert props["kind"] == {"enum": ["a", "b"]}
    assert props["inner"] == {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}]}
    assert props["items"] == {"type": "array", "items": {"$ref": "#/$defs/Inner"}, "maxItems": 3}
    assert props["table"] == {"type": "object", "propertyNames": {"type": "string", "maxLength": 4},
                              "additionalProperties": {"type": "integer"}}
    assert defs["Pair"]["prefixItems"] == [{"type": "integer"}, {"type": "string"}]
    assert "a" in props and "b" in props and "flat" not in props  # flattened
    assert props["other"] == {"type": "integer", "description": "said under another key"}
    assert props["section"]["anyOf"][-1] == {"type": "object", "maxProperties": 0}
    assert props["total"] == {"type": "integer"}
    assert "maybe" not in s["required"] and "total" in s["required"] and "other" in s["required"]
    assert defs["Inner"]["properties"]["n"] == {"type": "integer", "minimum": 1, "maximum": 8}
    assert defs["Inner"]["properties"]["ratio"] == {"type": ["number", "null"], "exclusiveMinimum": 0}
    assert s["additionalProperties"] is False


def test_what_the_generator_says_a_record_writes_and_a_strict_reading_takes():
    validator = jsonschema.Draft202012Validator(record_schema(Outer))
    value = Outer("abc", "on", Colour.RED, "a", Inner(2), [Inner(1, 0.5)], {"k": 1}, Pair(1, "p"))
    data = dump(value)
    assert list(validator.iter_errors(data)) == []
    assert load(Outer, data, strict=True) == value
    for odd in ({"name": "ABC"}, {"mode": "maybe"}, {"inner": {"n": 9}}, {"inner": {"n": 1, "ratio": 0}},
                {"naem": "x"}):
        bad = {**data, **odd}
        assert list(validator.iter_errors(bad)), odd
        with pytest.raises(RecordError):
            load(Outer, bad, strict=True)
    assert load(Outer, {**data, "section": {}}, strict=True).section is None


@record
class Maybe:
    count: int = 0
    unknown: str | None = field(default=None, metadata=ALONE)


def test_a_record_that_says_only_why_has_two_shapes():
    validator = jsonschema.Draft202012Validator(record_schema(Maybe))
    assert dump(Maybe(3)) == {"count": 3} and dump(Maybe(3, "gone")) == {"unknown": "gone"}
    assert not list(validator.iter_errors({"count": 3})) and not list(validator.iter_errors({"unknown": "gone"}))
    assert list(validator.iter_errors({"count": 3, "unknown": "gone"}))
    assert load(Maybe, {"unknown": "gone"}, strict=True) == Maybe(0, "gone")


def test_a_lenient_reading_refuses_out_of_bounds_words_without_raising():
    odd = load(Outer, {"name": "ABC", "mode": "maybe", "colour": "red", "kind": "a", "inner": {"n": 1, "ratio": -1}},
               strict=False)
    assert odd.name == "" and odd.mode is None and odd.inner == Inner(1, None)
