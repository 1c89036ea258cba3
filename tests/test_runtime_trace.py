"""profile(): a Chrome trace of forked work that shows the overlap."""
from __future__ import annotations

import json

import pytest
from conftest import run_json

pytestmark = pytest.mark.timeout(60)

SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {"traceEvents": {"type": "array", "items": {
        "type": "object",
        "required": ["name", "ph", "pid", "tid"],
        "properties": {
            "name": {"type": "string"}, "ph": {"enum": ["X", "M"]},
            "pid": {"type": "integer"}, "tid": {"type": "integer"},
            "ts": {"type": "number", "minimum": 0}, "dur": {"type": "number", "minimum": 0},
            "cat": {"type": "string"}, "args": {"type": "object"},
        },
        "if": {"properties": {"ph": {"const": "X"}}},
        "then": {"required": ["ts", "dur", "cat"]},
    }}},
}


def _overlapping_pairs(events):
    pairs = []
    for i, a in enumerate(events):
        for b in events[i + 1:]:
            if a["tid"] != b["tid"] and a["ts"] < b["ts"] + b["dur"] and b["ts"] < a["ts"] + a["dur"]:
                pairs.append((a["name"], b["name"]))
    return pairs


def test_trace_of_a_forked_ensemble_shows_overlapping_tasks_on_distinct_threads(tmp_path):
    path = tmp_path / "parallel.json"
    run_json(
        "import json, time, parinfo.runtime as rt\n"
        "rt.set_num_interop_threads(2); rt.set_num_threads(2)\n"
        "def model(k):\n    time.sleep(0.05)\n    return k\n"
        "def ensemble(x):\n"
        "    fs = [rt.fork(model, k) for k in range(4)]\n"
        "    return sum(rt.wait(f) for f in fs)\n"
        "rt.wait(rt.fork(int))\n"
        "with rt.profile() as prof:\n"
        "    total = ensemble(0)\n"
        "    rt.parallel_for(0, 4, 1, lambda a, b: time.sleep(0.02))\n"
        f"prof.export_chrome_trace({str(path)!r})\n"
        "print(json.dumps(total))")
    doc = json.loads(path.read_text())
    import jsonschema

    jsonschema.validate(doc, SCHEMA)
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    tasks = [e for e in spans if e["cat"] == "task"]
    assert [e["name"] for e in tasks].count("model") == 4
    assert len({e["tid"] for e in tasks}) >= 2
    assert _overlapping_pairs(tasks)
    chunks = [e for e in spans if e["cat"] == "chunk"]
    assert sorted((c["args"]["begin"], c["args"]["end"]) for c in chunks) == [(0, 2), (2, 4)]
    named = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert {e["tid"] for e in spans} <= set(named)
    assert any(n.startswith("parinfo-interop") for n in named.values())


def test_nothing_is_recorded_outside_a_profile():
    import parinfo.runtime as rt

    rt.wait(rt.fork(int))
    with rt.profile() as prof:
        rt.wait(rt.fork(int))
    rt.wait(rt.fork(int))
    rt.parallel_for(0, 10, 1, lambda a, b: None)
    assert [e["name"] for e in prof.events if e["cat"] == "task"] == ["int"]
