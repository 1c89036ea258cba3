"""library_settings: each library's count and the source that decided it, modelled per library."""
from __future__ import annotations

import dataclasses
import importlib.util

import pytest
from conftest import HAVE_NUMPY, clean_env, run_json

from parinfo.machine.topology import machine_facts
from parinfo.process.defaults import ModuleFacts
from parinfo.process.frameworks import TorchInfo
from parinfo.process.pools import PoolRow
from parinfo.process.provenance import MODELS, RUNTIME, explain, library_settings, predict
from parinfo.records.convert import dump, load
from parinfo.records.source import SourceKind
from parinfo.records.unknown import Unknown

needs_numpy = pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")
HAVE_SCIPY = importlib.util.find_spec("scipy") is not None

SETTINGS = ("import json, os{imports}; {before}from parinfo.process.pools import native_pools; "
            "from parinfo.process.frameworks import torch_info; "
            "from parinfo.records.convert import dump; from parinfo.process.provenance import library_settings; "
            "from parinfo.machine.topology import machine_facts; "
            "print(json.dumps([dump(r) for r in library_settings(native_pools(), torch_info(), os.environ, None, "
            "machine_facts())]))")


def settings(imports: str = ", numpy", before: str = "", **kw) -> list[dict]:
    return run_json(SETTINGS.format(imports=imports, before=before), **kw)


def one(rows: list[dict], library: str, owner: str | None = None) -> dict:
    hits = [r for r in rows if r["library"] == library and (owner is None or r["owner"] == owner)]
    assert len(hits) == 1, rows
    return hits[0]


def facts(cpus: int = 2, physical: int = 2, logical: int | None = None, siblings=()):
    return dataclasses.replace(machine_facts(), affinity=tuple(range(cpus)), physical_cores=physical,
                               logical_cpus=logical or cpus, core_siblings=tuple(siblings))


# ---- the per-library rules, on made-up machines -------------------------------------------------

def test_openblas_precedence_and_cap_at_affinity():
    m = MODELS["openblas"]
    f = facts(cpus=4, physical=4)
    assert predict(m, {"OMP_NUM_THREADS": "2", "GOTO_NUM_THREADS": "3"}, f).variable == "GOTO_NUM_THREADS"
    p = predict(m, {"OPENBLAS_NUM_THREADS": "abc", "OMP_NUM_THREADS": "3"}, f)
    assert (p.count, p.variable) == (3, "OMP_NUM_THREADS")  # invalid values are skipped
    p = predict(m, {"OPENBLAS_NUM_THREADS": "16"}, f)
    assert p.count == 4 and p.phrase == "env OPENBLAS_NUM_THREADS=16, capped at 4 CPUs in affinity"
    p = predict(m, {"MKL_NUM_THREADS": "1"}, f)  # OpenBLAS ignores MKL's variable
    assert (p.count, p.source.kind, p.phrase) == (4, SourceKind.LIBRARY_DEFAULT, "default: 4 CPUs in affinity")


def test_libgomp_takes_the_first_list_element_and_is_not_capped():
    m = MODELS["libgomp"]
    assert predict(m, {"OMP_NUM_THREADS": "4,2"}, facts(cpus=8)).count == 4
    assert predict(m, {"OMP_NUM_THREADS": "8"}, facts(cpus=2)).count == 8
    assert predict(m, {"MKL_NUM_THREADS": "1"}, facts(cpus=3)).count == 3


def test_mkl_caps_at_physical_cores_unless_mkl_dynamic_false():
    m = MODELS["mkl"]
    f = facts(cpus=8, physical=4, siblings=[(0, 4), (1, 5), (2, 6), (3, 7)])
    p = predict(m, {"OMP_NUM_THREADS": "16"}, f)
    assert p.count == 4 and "capped at 4 physical cores" in p.phrase
    assert predict(m, {"OMP_NUM_THREADS": "16", "MKL_DYNAMIC": "FALSE"}, f).count == 16
    assert predict(m, {"MKL_NUM_THREADS": "2", "OMP_NUM_THREADS": "3"}, f).variable == "MKL_NUM_THREADS"
    p = predict(m, {}, f)
    assert (p.count, p.phrase) == (4, "default: 4 physical cores in affinity")


def test_physical_cores_in_affinity_use_core_siblings():
    f = dataclasses.replace(facts(cpus=8, physical=4, siblings=[(0, 4), (1, 5), (2, 6), (3, 7)]),
                            affinity=(0, 4, 1))
    assert predict(MODELS["torch intra-op"], {}, f).count == 2


def test_blis_defaults_to_one_and_torch_inter_op_to_hardware_concurrency():
    assert predict(MODELS["blis"], {}, facts(cpus=8)).count == 1
    assert predict(MODELS["blis"], {"OMP_NUM_THREADS": "3"}, facts(cpus=8)).count == 3
    f = dataclasses.replace(facts(cpus=1), logical_cpus=16)
    p = predict(MODELS["torch inter-op"], {"OMP_NUM_THREADS": "1"}, f, ModuleFacts(hardware_concurrency=16))
    assert p.count == 16 and "ignores affinity" in p.phrase


def test_explain_launch_value_now_value_and_run_time():
    m, f = MODELS["openblas"], facts(cpus=4)
    launch, now = {"OPENBLAS_NUM_THREADS": "2"}, {"OPENBLAS_NUM_THREADS": "1"}
    row = dump(explain("openblas", 2, m, now, launch, f))
    assert row["source"]["text"] == "env OPENBLAS_NUM_THREADS=2" and row["source"]["kind"] == "variable"
    assert "changed after launch" in row["note"]
    row = dump(explain("openblas", 1, m, now, launch, f))
    assert row["source"]["text"] == "env OPENBLAS_NUM_THREADS=1 (set after launch, before this library loaded)"
    row = dump(explain("openblas", 3, m, now, launch, f))
    assert (row["source"], row["variable"]) == (RUNTIME.to_json(), None) and RUNTIME.kind is SourceKind.RUN_TIME
    assert row["expected_from_env"] == 2
    row = dump(explain("openblas", None, m, now, launch, f))
    assert row["source"]["kind"] == "unknown" and row["source"]["text"].startswith("unknown (")
    row = dump(explain("openblas", 4, m, {}, Unknown("AccessDenied"), f))
    assert row["source"]["text"] == "default: 4 CPUs in affinity" and "unknown (AccessDenied)" in row["note"]


# ---- real processes ------------------------------------------------------------------------------

@needs_numpy
def test_openblas_num_threads_decides_openblas():
    row = one(settings(env=clean_env(OPENBLAS_NUM_THREADS="1")), "openblas")
    assert row["count"] == 1 and row["source"]["text"] == "env OPENBLAS_NUM_THREADS=1"
    assert row["variable"] == "OPENBLAS_NUM_THREADS" and row["expected_from_env"] == 1
    assert row["precedence"] == ["OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"]


@needs_numpy
def test_omp_num_threads_alone_decides_openblas():
    row = one(settings(env=clean_env(OMP_NUM_THREADS="1")), "openblas")
    assert row["count"] == 1 and row["source"]["text"] == "env OMP_NUM_THREADS=1"


@needs_numpy
def test_affinity_decides_the_default():
    row = one(settings(prefix=["taskset", "-c", "0"]), "openblas")
    assert row["count"] == 1 and row["source"]["kind"] == "library default"
    assert row["source"]["text"] == "default: 1 CPU in affinity"


@needs_numpy
def test_a_limit_set_at_run_time_is_said():
    row = one(settings(before="import threadpoolctl; threadpoolctl.threadpool_limits(1); "), "openblas")
    if row["expected_from_env"] == 1:
        pytest.skip("one CPU: a limit of 1 cannot be told from the default")
    assert row["count"] == 1 and row["source"]["kind"] == "run-time call"
    assert row["source"]["text"].startswith("set at run time")


@needs_numpy
@pytest.mark.skipif(not HAVE_SCIPY, reason="scipy is not installed")
def test_variable_set_after_numpy_but_before_scipy():
    rows = settings(imports=", numpy", before="os.environ['OPENBLAS_NUM_THREADS'] = '1'; import scipy.linalg; ")
    numpy_row, scipy_row = one(rows, "openblas", "numpy"), one(rows, "openblas", "scipy")
    if numpy_row["count"] == 1:
        pytest.skip("one CPU: the default cannot be told from the variable")
    assert numpy_row["source"]["text"].startswith("default:")
    assert "changed after launch" in numpy_row["note"]
    assert scipy_row["count"] == 1
    assert scipy_row["source"]["text"] == "env OPENBLAS_NUM_THREADS=1 (set after launch, before this library loaded)"


def test_numexpr_is_modelled_when_imported(tmp_path):
    # A stand-in with numexpr's module attributes, deciding its count the way numexpr does at import.
    (tmp_path / "numexpr.py").write_text(
        "import os\nncores = 8\nMAX_THREADS = 64\n"
        "nthreads = int(os.environ.get('NUMEXPR_NUM_THREADS') or os.environ.get('OMP_NUM_THREADS') or 8)\n"
        "def get_num_threads():\n    return nthreads\n")
    code = ("import json, os, numexpr; from parinfo.records.convert import dump; "
            "from parinfo.process.provenance import library_settings; "
            "from parinfo.machine.topology import machine_facts; "
            "rows = library_settings([], None, os.environ, None, machine_facts()); "
            "numexpr.nthreads = 5; rows += library_settings([], None, os.environ, None, machine_facts()); "
            "print(json.dumps([dump(r) for r in rows]))")
    rows = run_json(code, env=clean_env(PYTHONPATH=str(tmp_path), NUMEXPR_NUM_THREADS="3"))
    assert [r["library"] for r in rows] == ["numexpr", "numexpr"]
    assert rows[0]["source"]["text"] == "env NUMEXPR_NUM_THREADS=3" and rows[0]["count"] == 3
    assert rows[0]["precedence"] == ["NUMEXPR_NUM_THREADS", "OMP_NUM_THREADS"]
    assert rows[1]["source"]["text"] == "set at run time (numexpr.set_num_threads)"
    rows = run_json(code, env=clean_env(PYTHONPATH=str(tmp_path)))
    assert rows[0]["count"] == 8 and rows[0]["source"]["text"].startswith("default: 8 ")


def test_a_library_without_a_model_is_unknown_not_run_time():
    pools = [{"library": "flexiblas", "num_threads": 4, "owner": "system", "filepath": "/usr/lib/libflexiblas.so"},
             {"library": "vcomp", "num_threads": 2, "owner": "unknown", "filepath": "/x/vcomp140.dll"}]
    rows = [dump(r) for r in library_settings([load(PoolRow, p, strict=True) for p in pools], None, {}, {}, facts())]
    assert [r["source"]["kind"] for r in rows] == ["unknown", "unknown"]
    assert rows[0]["source"]["text"] == "unknown (decided by FlexiBLAS's backend)"
    assert rows[1]["source"]["text"] == "unknown (parinfo has no model for vcomp)"
    assert rows[0]["owner"] == "system" and rows[0]["count"] == 4


def _torch_copies(env: dict[str, str], counts: dict[str, int], intra: int, mkl: bool = True) -> dict[str, dict]:
    """The rows of copies of libgomp, MKL and OpenBLAS that torch ships (and a libgomp of numpy's),
    with torch's intra-op count ``intra``."""
    pools = [{"library": lib, "owner": owner, "filepath": f"/{owner}/{lib}.so", "num_threads": counts[lib]}
             for lib, owner in (("libgomp", "torch"), ("mkl", "torch"), ("openblas", "torch"), ("libgomp", "numpy"))]
    torch = {"intra_op": intra, "inter_op": 1, "mkl_available": mkl, "aten_backend": "native thread pool",
             "hardware_concurrency": 2}
    rows = [dump(r) for r in library_settings([load(PoolRow, p, strict=True) for p in pools],
                                              load(TorchInfo, torch, strict=True), env, env, facts())]
    return {f"{r['library']} {r['owner']}": r["source"] for r in rows}


def test_torch_sets_the_libraries_its_records_say_it_sets_along():
    """torch sets its OpenMP runtime's and MKL's count to its intra-op count (their records'
    set_along): at run time by its setter, otherwise by itself (its OpenMP runtime when it initialised)."""
    said = _torch_copies({}, {"libgomp": 3, "mkl": 3, "openblas": 3}, 3)  # 3: no variable or default says so
    assert said["torch intra-op torch"]["kind"] == "run-time call"
    assert said["libgomp torch"] == {
        "kind": "run-time call", "detail": "torch.set_num_threads(3)",
        "text": "set at run time by torch.set_num_threads(3), which sets torch's OpenMP runtime too"}
    assert said["mkl torch"]["text"] == "set at run time by torch.set_num_threads(3), which sets torch's MKL too"
    assert said["openblas torch"]["text"] == said["libgomp numpy"]["text"] == "set at run time (API call)"
    said = _torch_copies({"MKL_NUM_THREADS": "1"}, {"libgomp": 1, "mkl": 1, "openblas": 2}, 1)
    assert said["libgomp torch"] == {"kind": "framework", "detail": "torch",
                                     "text": "set by torch to its intra-op count (1) when it initialised"}
    assert said["libgomp numpy"]["kind"] == "run-time call"  # another package's copy: torch did not set it
    said = _torch_copies({"MKL_NUM_THREADS": "1", "OMP_NUM_THREADS": "2"}, {"libgomp": 2, "mkl": 2, "openblas": 2}, 2,
                         mkl=False)
    assert said["mkl torch"] == {"kind": "framework", "detail": "torch",
                                 "text": "set by torch to its intra-op count (2)"}


# A profile whose counts are the machine's defaults for OpenBLAS (CPUs in affinity), applied before
# numpy loads: OpenBLAS reads the variable the profile set, though the launch environment predicts
# the same count. The source must say so, from the evidence of what apply() found loaded.
AFTER_APPLY = """
import json
import parinfo
from parinfo.records.convert import dump
parinfo.apply({profile!r})
{late}
report = parinfo.inspect()
print(json.dumps([dump(s) for s in report.settings]))
"""

SAME_AS_DEFAULT = """version: 1
name: same-as-default
intra_op: usable_cpus
inter_op: 1
libraries:
  blas: usable_cpus
"""


@needs_numpy
def test_a_library_loaded_after_apply_read_the_profiles_variable_even_when_the_default_agrees(tmp_path):
    profile = tmp_path / "same.yaml"
    profile.write_text(SAME_AS_DEFAULT)
    late = run_json(AFTER_APPLY.format(profile=str(profile), late="import numpy"))
    row = one(late, "openblas")
    # the variable decided it, and apply() set the variable: the source is the profile, naming both
    assert row["source"]["kind"] == "profile" and row["variable"] == "OPENBLAS_NUM_THREADS", row
    assert row["source"]["detail"] == "same-as-default (OPENBLAS_NUM_THREADS)", row
    assert row["source"]["text"].endswith("(set by parinfo.apply, profile same-as-default, before this library loaded)")
    assert row["count"] == row["expected_from_env"]


@needs_numpy
def test_a_library_loaded_before_apply_is_said_to_be_set_by_its_push_not_by_the_variable(tmp_path):
    profile = tmp_path / "same.yaml"
    profile.write_text(SAME_AS_DEFAULT)
    early = run_json("import numpy\n" + AFTER_APPLY.format(profile=str(profile), late=""))
    row = one(early, "openblas")
    assert row["source"]["text"] == "set at run time by parinfo.apply (profile same-as-default)", row
