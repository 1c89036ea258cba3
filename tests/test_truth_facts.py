"""Facts in the report agree with ground truth read in the same real process (threadpoolctl, torch's
getters, os.cpu_count(), /proc)."""
from __future__ import annotations

import importlib.util
import json
import sys

import pytest
from conftest import HAVE_NUMPY, HAVE_TORCH, clean_env, run_cli, run_json, run_py

from parinfo.diagnostics.model import Report
from parinfo.diagnostics.process_rules import diagnose
from parinfo.process.variables import parse_count, validate

HAVE_SCIPY = importlib.util.find_spec("scipy") is not None


@pytest.mark.parametrize("value", ["٣", "３", "1٣", "٣,2"])
def test_non_ascii_digits_are_not_counts(value):
    with pytest.raises(ValueError):
        parse_count(value, allow_list=True)
    assert validate("OMP_NUM_THREADS", value) is not None


def test_non_ascii_omp_num_threads_is_invalid_in_the_report():
    report = json.loads(run_cli("show", "--json", "-i", "none", env=clean_env(OMP_NUM_THREADS="٣")).stdout)
    row = next(r for r in report["environment"] if r["name"] == "OMP_NUM_THREADS")
    assert row["valid"] is False
    assert "invalid-variable" in {f["id"] for f in report["findings"]}


def test_python_cpu_count_is_read_by_python_only_from_3_13():
    out = run_json("""
import json, os, parinfo
r = parinfo.inspect()
row = next(x for x in r.environment if x.name == "PYTHON_CPU_COUNT")
print(json.dumps({"readers": row.readers, "cpu_count": os.cpu_count(), "summary": row.summary}))
""", env=clean_env(PYTHON_CPU_COUNT="1"))
    python_reads = out["cpu_count"] == 1  # ground truth: did os.cpu_count() follow the variable?
    assert ("python" in out["readers"]) == python_reads
    assert python_reads == (sys.version_info >= (3, 13))
    if not python_reads:
        assert "does not read it" in out["summary"]


def test_inspect_in_process_imports_nothing_and_starts_no_thread():
    out = run_json("""
import json, os, sys
import parinfo
tasks = len(os.listdir("/proc/self/task"))
r = parinfo.inspect()
print(json.dumps({"numpy": "numpy" in sys.modules, "same_tasks": len(os.listdir("/proc/self/task")) == tasks,
                  "probes": r.probes.imported}))
""")
    assert out == {"numpy": False, "same_tasks": True, "probes": []}


@pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")
def test_the_cli_names_its_probe_imports():
    first = run_cli("show").stdout.splitlines()[0]
    assert "imported to probe: numpy" in first


def test_runtime_subpackage_is_an_attribute_without_importing_it():
    out = run_json("import json, parinfo; print(json.dumps(parinfo.runtime.info()['backend']))")
    assert out in ("native", "sequential")


@pytest.mark.skipif(not (HAVE_NUMPY and HAVE_SCIPY), reason="numpy and scipy are needed")
def test_every_copy_is_a_pool_and_rows_name_their_owner():
    out = run_json("""
import json, numpy, scipy.linalg, threadpoolctl, parinfo
r = parinfo.inspect()
print(json.dumps({"truth": sorted(p["filepath"] for p in threadpoolctl.threadpool_info()),
                  "pools": sorted(p.filepath for p in r.pools),
                  "owners": sorted(s.owner for s in r.settings if s.library == "openblas")}))
""")
    assert out["pools"] == out["truth"]
    if len(out["owners"]) > 1:
        assert out["owners"] == ["numpy", "scipy"]
        text = run_cli("show", "-i", "numpy,scipy.linalg").stdout
        assert "openblas [numpy]" in text and "openblas [scipy]" in text


def test_pool_totals_count_every_copy():
    s = {"machine": {"usable_cpus": 2, "affinity": [0, 1]}, "frameworks": {}, "settings": [], "environment": [],
         "pools": [{"library": "openblas", "owner": "numpy", "num_threads": 2, "user_api": "blas"},
                   {"library": "openblas", "owner": "scipy", "num_threads": 2, "user_api": "blas",
                    "duplicate_of": "/a"},
                   {"library": "libgomp", "owner": "scikit-learn", "num_threads": 2, "user_api": "openmp"}]}
    found = next(f for f in diagnose(Report.from_dict(s)) if f.id == "oversubscribed-pools")
    assert found.message.startswith("3 pools may run 6 threads at once")
    assert "openblas [scipy]=2" in found.message


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_torch_set_num_threads_is_a_run_time_setting_of_its_openmp():
    out = run_json("""
import json, torch, threadpoolctl, parinfo
torch.set_num_threads(1)
r = parinfo.inspect()
truth = [p["num_threads"] for p in threadpoolctl.threadpool_info()
         if p["user_api"] == "openmp" and "torch" in p["filepath"]]
rows = [(s.count, str(s.source)) for s in r.settings if s.library in ("libgomp", "libiomp", "libomp")
        and s.owner == "torch"]
print(json.dumps({"truth": truth, "rows": rows, "torch": torch.get_num_threads()}))
""", timeout=120)
    if not out["rows"]:
        pytest.skip("this torch build has no OpenMP runtime of its own")
    count, source = out["rows"][0]
    assert count == out["truth"][0] == out["torch"] == 1
    assert source.startswith("set at run time") and "torch.set_num_threads" in source


HAVE_NUMEXPR = importlib.util.find_spec("numexpr") is not None
_NUMEXPR_TRUTH = """
import json, numexpr, parinfo
from parinfo.records.convert import dump
r = parinfo.inspect()
row = dump(next(x for x in r.settings if x.library == "numexpr"))
print(json.dumps({"truth": numexpr.get_num_threads(), "pool": numexpr.MAX_THREADS, "row": row,
                  "findings": {f.id: dump(f) for f in r.findings}}))
"""


@pytest.mark.skipif(not HAVE_NUMEXPR, reason="numexpr is not installed")
def test_numexpr_count_above_its_pool_is_refused_and_said():
    proc = run_py(_NUMEXPR_TRUTH, env=clean_env(NUMEXPR_NUM_THREADS="8", NUMEXPR_MAX_THREADS="4"))
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "NUMEXPR_MAX_THREADS" in proc.stderr  # numexpr's own complaint
    row = out["row"]
    assert out["pool"] == 4 and row["count"] == out["truth"] == 1  # refused, not capped at 4
    assert row["source"]["kind"] == "variable" and row["variable"] == "NUMEXPR_NUM_THREADS"
    assert row["source"]["text"] == ("env NUMEXPR_NUM_THREADS=8 refused: above its pool of NUMEXPR_MAX_THREADS=4, "
                             "so 1 runs instead")
    finding = out["findings"]["count-refused"]
    assert finding["severity"] == "warning" and "runs 1 thread, not 8" in finding["message"]
    assert "NUMEXPR_NUM_THREADS to at most 4" in finding["fix"] and "NUMEXPR_MAX_THREADS to 8" in finding["fix"]


@pytest.mark.skipif(not HAVE_NUMEXPR, reason="numexpr is not installed")
@pytest.mark.parametrize("env", [{"NUMEXPR_MAX_THREADS": "3"}, {"NUMEXPR_NUM_THREADS": "3"},
                                 {"OMP_NUM_THREADS": "3", "NUMEXPR_MAX_THREADS": "5"}, {}])
def test_numexpr_count_matches_its_getter(env):
    out = run_json(_NUMEXPR_TRUTH, env=clean_env(**env))
    row = out["row"]
    assert row["count"] == out["truth"] and row["source"]["kind"] in ("variable", "library default"), row
    assert row["refused"] is None and "count-refused" not in out["findings"]


@pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")
def test_a_count_pushed_by_parinfo_is_said_to_be_set_by_it():
    out = run_json("""
import json, os, numpy, threadpoolctl, parinfo
def openblas():
    r = parinfo.inspect()
    row = next(x for x in r.settings if x.library == "openblas")
    truth = next(p["num_threads"] for p in threadpoolctl.threadpool_info() if p["filepath"] == row.filepath)
    return {"count": row.count, "truth": truth, "source": row.source.to_json(),
            "findings": sorted(f.id for f in r.findings)}
default = openblas()
parinfo.apply("single-thread")
applied = openblas()
parinfo.set_num_threads(default["count"])
explicit = openblas()
print(json.dumps({"default": default, "applied": applied, "explicit": explicit}))
""")
    if out["default"]["count"] == 1:
        pytest.skip("one CPU: the profile's count cannot be told from the default")
    applied, explicit = out["applied"], out["explicit"]
    assert applied["count"] == applied["truth"] == 1
    assert applied["source"]["text"] == "set at run time by parinfo.apply (profile single-thread)"
    assert applied["source"]["kind"] == "profile" and "variable-after-load" not in applied["findings"]
    n = out["default"]["count"]
    assert explicit["count"] == explicit["truth"] == n
    assert explicit["source"]["text"] == f"set at run time by parinfo.set_num_threads({n})"
    assert explicit["source"]["kind"] == "explicit call"
    assert "variable-after-load" not in explicit["findings"]
