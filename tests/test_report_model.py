"""The typed report: ``--json`` is made from the typed sections, and a payload comes back through one
parse path (Report.from_dict): strict for a payload this parinfo made, never failing on a missing or odd
field for one from elsewhere (``strict=False``)."""
from __future__ import annotations

import copy
import json
import subprocess
import sys

import jsonschema
import pytest
from conftest import HAVE_NUMPY, HAVE_TORCH, REPO, clean_env, run_json
from hypothesis import HealthCheck, given, settings, strategies as st

from parinfo.cli.render_text import render_lines
from parinfo.diagnostics.fleet_rows import WorkerRow
from parinfo.diagnostics.model import Report
from parinfo.diagnostics.process_rules import diagnose
from parinfo.diagnostics.torch_block import torch_block
from parinfo.errors import RecordError, UsageError
from parinfo.fleet.report import Cluster, FleetReport
from parinfo.records.convert import dump, load

SCHEMA = json.loads((REPO / "parinfo" / "diagnostics" / "report.schema.json").read_text())
SECTIONS = ("process", "probes", "machine", "cpu", "runtime", "backend", "pools", "frameworks", "settings",
            "environment", "threads", "teams", "outer", "findings", "live", "memory")

PAYLOADS = """
import json, subprocess, sys, time
{imports}import parinfo
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
try:
    time.sleep(0.2)
    inside = parinfo.inspect(imports=[], outer_threads=2)
    outside = parinfo.inspect(pid=child.pid)
finally:
    child.kill()
print(json.dumps({{"inside": inside.to_dict(), "outside": outside.to_dict(),
                  "ids": [[f.id for f in r.findings] for r in (inside, outside)]}}, default=str))
"""


def _payloads(imports: str = "", env: dict | None = None) -> dict:
    return run_json(PAYLOADS.format(imports=imports), env=env or clean_env(OMP_NUM_THREADS="abc"), timeout=120)


def _same_after_parsing(payload: dict) -> None:
    jsonschema.validate(payload, SCHEMA)  # this process's report and one read from outside
    again = Report.from_dict(payload).to_dict()
    for section in ("schema_version", "parinfo_version", *SECTIONS):
        assert again[section] == payload[section], section
    assert again == payload


@pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")
def test_a_payload_parses_back_to_itself_and_the_rules_say_the_same():
    out = _payloads("import numpy\n")
    for key, ids in zip(("inside", "outside"), out["ids"], strict=True):
        _same_after_parsing(out[key])
        assert [f.id for f in diagnose(Report.from_dict(out[key]))] == ids
    assert "invalid-variable" in out["ids"][0]  # the rules saw the environment rows
    assert out["outside"]["process"]["inspected_from"] and out["outside"]["live"]["tree"]["processes"] == 1


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_a_payload_with_torch_parses_back_to_itself():
    out = _payloads("import torch\n", env=clean_env())
    _same_after_parsing(out["inside"])
    torch = Report.from_dict(out["inside"]).frameworks.torch
    assert torch is not None and torch.intra_op == out["inside"]["frameworks"]["torch"]["intra_op"]


def test_the_payload_keeps_its_sections_and_the_version_that_made_it():
    report = Report.from_dict({"parinfo_version": "9.9", "machine": {"usable_cpus": 3}})
    data = report.to_dict()
    assert data["parinfo_version"] == "9.9" and data["schema_version"] == 2
    assert list(data) == ["schema_version", "parinfo_version", *SECTIONS]
    assert data["outer"] == {} and data["live"] == {} and data["memory"] == {} and data["teams"] == {}
    assert data["frameworks"] == {"torch": None}
    assert report.machine.usable_cpus == 3


def test_usable_cpus_missing_are_worked_out_again_and_said_so():
    m = Report.from_dict({"machine": {"affinity": [0, 1, 2, 3], "quota": 2.5}}).machine
    assert m.usable_cpus == 2 and any("worked out again" in n for n in m.notes)
    m = Report.from_dict({"machine": {"usable_cpu_list": [4, 5]}}).machine
    assert m.usable_cpus == 2 and m.usable_cpu_list == (4, 5) and "affinity" in m.unknown


# -- strict: a payload this parinfo made, or a test's -------------------------------------------------

@pytest.mark.parametrize(("payload", "error"), [
    ({"machine": {"usable_cpu": 2}}, "machine.usable_cpu: unknown key (did you mean usable_cpus?)"),
    ({"machine": {"usable_cpus": "2"}}, "machine.usable_cpus: expected int, not str"),
    ({"machine": {"affinity": [0, "1"]}}, "machine.affinity[1]: expected int, not str"),  # as given, not as fixed
    ({"pools": [{"library": "a"}, {"library": "b", "num_threads": "2"}]},
     "pools[1].num_threads: expected int or null, not str"),
    ({"settings": [{"library": "a", "source": {"kind": "variable", "detial": "X=1"}}]},
     "settings[0].source.detial: unknown key (did you mean detail?)"),
    ({"findings": [{"id": "x", "severity": "fatal"}]}, "findings[0].severity: 'fatal' is not one of"),
    ({"live": {"throttling": {"version": "v2", "levels": [{"cgroup": "/"}]}}},
     "live.throttling.levels[0].quota: missing (the record needs it)"),
    ({"schema_version": 2, "proces": {}}, "proces: unknown key (did you mean process?)"),
])
def test_a_trusted_payload_that_does_not_fit_is_an_error_naming_its_path(payload, error):
    with pytest.raises(RecordError) as caught:
        Report.from_dict(payload)
    assert str(caught.value).startswith(error)


def test_a_hostile_payload_is_read_as_before_an_odd_value_unknown():
    report = Report.from_dict({"machine": {"usable_cpu": 2, "affinity": [0]}}, strict=False)
    assert report.machine.usable_cpus == 1  # the misspelled key is not read: worked out from the affinity
    odd = Report.from_dict({"pools": [{"library": "b", "num_threads": "2"}]}, strict=False)
    assert odd.pools[0].num_threads is None


def test_this_processs_report_and_one_read_from_outside_come_back_the_same():
    import parinfo

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for report in (parinfo.inspect(imports=[]), parinfo.inspect(pid=child.pid)):
            payload = json.loads(json.dumps(report.to_dict()))
            assert Report.from_dict(payload).to_dict() == payload
    finally:
        child.kill()
        child.wait()


def test_the_payload_of_an_older_parinfo_reads_strictly_and_a_version_1_key_is_named():
    """A version 2 payload without the keys added within version 2 reads strictly; a version 1 row's
    ``kind`` (never read: its source says it) is an error strictly, let go leniently."""
    import parinfo

    payload = json.loads(json.dumps(parinfo.inspect(imports=[]).to_dict()))
    old = copy.deepcopy(payload)
    del old["memory"], old["machine"]["numa_node_ids"], old["backend"]["python"]
    old["runtime"].pop("follow", None)
    report = Report.from_dict(old)
    assert report.memory is None and report.machine.usable_cpus == payload["machine"]["usable_cpus"]
    assert report.settings == Report.from_dict(payload).settings
    old["schema_version"] = 1
    for row in old["settings"]:
        row["kind"], row["source"] = "env", row["source"]["text"]  # version 1: the source's words alone
    old["machine"]["quota_source"] = old["machine"]["quota_source"]["text"]
    with pytest.raises(RecordError, match=r"settings\[0\]\.kind: obsolete key"):
        Report.from_dict(old)
    report = Report.from_dict(old, strict=False)
    assert [r.source.text for r in report.settings] == [r["source"]["text"] for r in payload["settings"]]


def test_a_worker_row_read_strictly_names_its_bad_key_and_the_fleet_reads_workers_leniently():
    row = {"worker": "w", "host": {"key": "h", "hostname": "h"}, "machine": {"usable_cpus": 2},
           "pools": [{"library": "openblas", "num_thread": 2}]}
    with pytest.raises(RecordError) as caught:
        load(WorkerRow, row, strict=True)
    assert str(caught.value) == "pools[0].num_thread: unknown key (did you mean num_threads?)"  # as in the row
    with pytest.raises(RecordError, match=r"variabels: unknown key \(did you mean variables\?\)"):
        load(WorkerRow, {**row, "pools": [], "variabels": []}, strict=True)
    report = FleetReport.from_rows(Cluster("dask"), [row], strict=False)  # what a worker answers is hostile
    assert report.workers[0].report.pools[0].num_threads is None


@pytest.mark.parametrize("payload", [[], "report", 3, None])
def test_a_payload_that_is_not_an_object_is_one_usage_error(payload):
    with pytest.raises(UsageError, match="a report is a JSON object"):
        Report.from_dict(payload)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 10**12) | st.floats(allow_nan=False)
                    | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
ROW_KEYS = st.sampled_from(["library", "count", "source", "name", "value", "num_threads", "user_api", "valid",
                            "capped_to", "refused", "precedence", "ignored_changes", "owner", "duplicate_of",
                            "intra_op", "inter_op", "usable_cpus", "affinity", "quota", "smt", "worst",
                            "stack_budget", "tree", "throttling", "limits", "thread_stack", "runnable", "torch"])
SECTION = st.dictionaries(ROW_KEYS, JSON, max_size=6) | st.lists(st.dictionaries(ROW_KEYS, JSON, max_size=6),
                                                                 max_size=3) | JSON


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(SECTIONS), SECTION, max_size=8))
def test_odd_payloads_never_crash_the_rules_or_the_renderers(payload):
    report = Report.from_dict(payload, strict=False)
    report.findings = diagnose(report)
    json.dumps(report.to_dict())
    render_lines(report)
    torch_block(report)
    assert Report.from_dict(json.loads(json.dumps(report.to_dict()))).to_dict() == report.to_dict()


# -- fleet rows -----------------------------------------------------------------------------------

@pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")
def test_a_worker_row_parses_back_to_itself():
    row = run_json("""
import json, numpy
from parinfo.diagnostics.fleet_rows import ThreadPools
from parinfo.fleet.probe import worker_row
from parinfo.process.pools import PoolRow
pool = PoolRow("openblas", "blas", "openblas", "/x/libopenblas.so", "libopenblas", num_threads=2)
print(json.dumps(worker_row("w", [ThreadPools("t0", [pool])])))
""", env=clean_env(OMP_NUM_THREADS="1"))
    worker = load(WorkerRow, row, strict=True)
    assert dump(worker) == row
    assert worker.report.machine.usable_cpus == row["machine"]["usable_cpus"] and worker.pid == row["pid"]
    assert [(v.name, who) for v, who in worker.variables()] == [(v["name"], v["set_by"]) for v in row["variables"]]


def test_a_row_that_is_not_an_object_is_listed_as_failed():
    good = {"worker": "w", "host": {"key": "h", "hostname": "h"}, "machine": {"usable_cpus": 2}}
    report = FleetReport.from_rows(Cluster("dask"), [good, ["not", "a", "row"]], strict=True)
    assert [w.worker for w in report.workers] == ["w"]
    assert report.cluster.failed == {"row 1": "not a worker row: list"}
    assert "1 worker on 1 host" in report.table()


def test_show_json_is_unchanged_by_parsing_it_in_another_process():
    """The CLI's payload, read back by another interpreter through the parse path, is the same."""
    show = subprocess.run([sys.executable, "-m", "parinfo", "show", "--json", "--import", "none"],
                          capture_output=True, text=True, env=clean_env(), timeout=120)
    assert show.returncode == 0, show.stderr
    _same_after_parsing(json.loads(show.stdout))
