"""Each diagnostic rule fires on the facts it is about, and only then."""
from __future__ import annotations

import copy

import pytest

from parinfo.diagnostics import process_rules
from parinfo.diagnostics.model import Report
from parinfo.diagnostics.process_rules import at_least
from parinfo.records.convert import dump


def diagnose(sections: dict) -> list:
    """The rules over hand-made sections, read through the report's one parse path."""
    return process_rules.diagnose(Report.from_dict(sections))


def base(usable: int = 4, **machine) -> dict:
    m = {"usable_cpus": usable, "usable_physical_cores": usable, "smt": False, "quota": None,
         "affinity": list(range(usable)), "logical_cpus": usable}
    m.update(machine)
    return {
        "machine": m,
        "runtime": {"backend": "native", "intra_op": {"count": usable, "source": "default"},
                    "inter_op": {"count": 1, "source": "explicit call"}},
        "pools": [],
        "frameworks": {"torch": None},
        "settings": [],
        "environment": [],
    }


def ids(sections: dict) -> set[str]:
    return {f.id for f in diagnose(sections)}


def test_a_healthy_process_has_no_findings():
    assert diagnose(base()) == []


def test_torch_inter_op_times_intra_op_above_usable_is_oversubscription():
    s = base(2)
    s["frameworks"]["torch"] = {"intra_op": 2, "inter_op": 2, "interop_started": True}
    found = [f for f in diagnose(s) if f.id == "oversubscribed-interop"]
    assert len(found) == 1 and found[0].severity == "warning"
    assert "torch: 2 inter-op threads x 2 intra-op threads = 4" in found[0].message
    assert "torch.set_num_threads(1)" in found[0].fix
    s["frameworks"]["torch"]["intra_op"] = 1
    assert "oversubscribed-interop" not in ids(s)


def test_an_inter_op_pool_that_never_started_may_hurt_only():
    s = base(2)
    s["frameworks"]["torch"] = {"intra_op": 2, "inter_op": 2, "interop_started": False}
    found = [f for f in diagnose(s) if f.id == "oversubscribed-interop"]
    assert [f.severity for f in found] == ["info"] and "it has not" in found[0].message
    assert at_least(diagnose(s), "warning") == []


def test_parinfo_runtime_defaults_do_not_oversubscribe():
    """parinfo's inter-op tasks share one intra-op pool and the native budget, unlike torch's."""
    s = base(2)
    s["runtime"]["inter_op"]["count"] = 2
    s["runtime"]["intra_op"]["count"] = 2
    assert "oversubscribed-interop" not in ids(s)


def test_count_above_quota_names_the_quota():
    s = base(1, quota=0.5, affinity=[0, 1], logical_cpus=2)
    s["settings"] = [{"library": "openblas", "count": 2, "source": "default"}]
    found = [f for f in diagnose(s) if f.id == "count-above-quota"]
    assert found and "0.5" in found[0].message and "at most 1" in found[0].fix


def test_a_quota_wider_than_the_affinity_leaves_the_finding_to_the_affinity():
    """Quota 8, affinity 2: the affinity is what binds, and the quota must not be named as the limit."""
    s = base(2, quota=8.0, affinity=[0, 1], logical_cpus=16)
    s["settings"] = [{"library": "openblas", "count": 4, "source": "env OPENBLAS_NUM_THREADS=4"}]
    found = {f.id: f for f in diagnose(s)}
    assert "count-above-quota" not in found
    assert "affinity/cpuset" in found["count-above-usable"].message


def test_count_above_affinity_without_quota():
    s = base(1, affinity=[0])
    s["settings"] = [{"library": "libgomp", "count": 2, "source": "env OMP_NUM_THREADS=2"}]
    assert "count-above-usable" in ids(s)
    s["settings"][0]["count"] = 1
    assert "count-above-usable" not in ids(s)


def test_count_above_physical_cores_only_with_smt():
    s = base(4, usable_physical_cores=2, smt=True)
    s["settings"] = [{"library": "openblas", "count": 4, "source": "default"}]
    assert "count-above-physical-cores" in ids(s)
    s["machine"]["smt"] = False
    assert "count-above-physical-cores" not in ids(s)


def test_invalid_variable():
    s = base()
    s["environment"] = [{"name": "OMP_NUM_THREADS", "value": "abc", "valid": False,
                         "problem": "'abc' is not a positive integer", "readers": ["libgomp"]}]
    found = [f for f in diagnose(s) if f.id == "invalid-variable"]
    assert found and "OMP_NUM_THREADS='abc'" in found[0].message


def test_variable_changed_after_its_library_loaded():
    s = base()
    s["environment"] = [{"name": "OPENBLAS_NUM_THREADS", "value": "1", "launch_value": None, "valid": True,
                         "changed_after_launch": True, "readers": ["openblas"]}]
    s["settings"] = [{"library": "openblas", "owner": "numpy", "count": 4, "asked_now": 1,
                      "ignored_changes": ["OPENBLAS_NUM_THREADS"]}]
    found = [f for f in diagnose(s) if f.id == "variable-after-load"]
    assert len(found) == 1 and "openblas [numpy] runs 4, not 1" in found[0].message
    s2 = copy.deepcopy(s)
    s2["settings"][0].update(count=1, ignored_changes=[])  # loaded after the change: it took it
    assert "variable-after-load" not in ids(s2)


def test_intel_and_llvm_openmp_together_is_an_error():
    s = base()
    s["pools"] = [{"library": "libiomp", "user_api": "openmp"}, {"library": "libomp", "user_api": "openmp"}]
    found = {f.id: f for f in diagnose(s)}
    assert found["openmp-intel-llvm"].severity == "error"


def test_gnu_and_llvm_openmp_is_a_warning():
    s = base()
    s["pools"] = [{"library": "libgomp", "user_api": "openmp"}, {"library": "libomp", "user_api": "openmp"}]
    assert {f.id: f.severity for f in diagnose(s)}["several-openmp"] == "warning"


def test_openmp_and_tbb_mixed():
    s = base()
    s["pools"] = [{"library": "libgomp", "user_api": "openmp"}, {"library": "tbb", "user_api": "tbb"}]
    assert "openmp-tbb-mixed" in ids(s)


def test_openblas_pthreads_beside_openmp():
    s = base()
    s["pools"] = [
        {"library": "openblas", "user_api": "blas", "internal_api": "openblas",
         "threading_layer": "pthreads", "num_threads": 4},
        {"library": "libgomp", "user_api": "openmp", "internal_api": "openmp", "num_threads": 4},
    ]
    assert {f.id: f.severity for f in diagnose(s)}["openblas-pthreads-with-openmp"] == "info"
    s["environment"] = [{"name": "OMP_WAIT_POLICY", "value": "ACTIVE", "valid": True, "readers": []}]
    assert {f.id: f.severity for f in diagnose(s)}["openblas-pthreads-with-openmp"] == "warning"
    s["pools"][0]["threading_layer"] = "openmp"
    assert "openblas-pthreads-with-openmp" not in ids(s)


_BY_IMPORT = ("set by the import of scikit-learn", ["scikit-learn"])
_AT_LAUNCH = ("set at launch", [])


@pytest.mark.parametrize("who, loaded, severity, words", [
    (_BY_IMPORT, [], None, ""),
    (_AT_LAUNCH, [], None, ""),
    (_BY_IMPORT, ["libgomp"], None, ""),
    (_BY_IMPORT, ["libomp"], None, ""),
    (_AT_LAUNCH, ["libgomp"], None, ""),
    (_AT_LAUNCH, ["libiomp"], "info", "unset KMP_DUPLICATE_LIB_OK unless"),
    (_BY_IMPORT, ["libiomp", "libomp"], "error", "single OpenMP runtime"),
    (_AT_LAUNCH, ["libiomp", "libomp"], "error", "unset KMP_DUPLICATE_LIB_OK"),
])
def test_kmp_duplicate_lib_ok_fires_only_where_it_can_hurt(who, loaded, severity, words):
    set_by, importers = who
    s = base()
    s["environment"] = [{"name": "KMP_DUPLICATE_LIB_OK", "value": "True", "valid": True, "readers": [],
                         "set_by": set_by, "importers": importers}]
    s["pools"] = [{"library": lib, "user_api": "openmp"} for lib in loaded]
    found = [f for f in diagnose(s) if f.id == "kmp-duplicate-lib-ok"]
    if severity is None:
        assert found == []
        return
    (f,) = found
    assert f.severity == severity and set_by in f.message and words in f.fix


def test_kmp_duplicate_lib_ok_set_false_is_no_finding():
    s = base()
    s["environment"] = [{"name": "KMP_DUPLICATE_LIB_OK", "value": "FALSE", "valid": True, "set_by": "set at launch"}]
    s["pools"] = [{"library": "libiomp", "user_api": "openmp"}, {"library": "libomp", "user_api": "openmp"}]
    assert "kmp-duplicate-lib-ok" not in ids(s)


def test_duplicate_copies_are_info():
    s = base()
    s["pools"] = [{"library": "openblas", "user_api": "blas", "filepath": "/a"},
                  {"library": "openblas", "user_api": "blas", "filepath": "/b", "duplicate_of": "/a"}]
    assert {f.id: f.severity for f in diagnose(s)}["duplicate-runtime-copies"] == "info"


def test_findings_are_sorted_by_severity_and_filtered_by_at_least():
    s = base(2)
    s["pools"] = [{"library": "libiomp", "user_api": "openmp"}, {"library": "libomp", "user_api": "openmp"},
                  {"library": "openblas", "user_api": "blas", "filepath": "/b", "duplicate_of": "/a"}]
    s["frameworks"]["torch"] = {"intra_op": 2, "inter_op": 2}
    found = diagnose(s)
    ranks = [f.severity.rank for f in found]
    assert ranks == sorted(ranks, reverse=True)
    assert {f.severity for f in at_least(found, "warning")} <= {"warning", "error"}
    assert at_least(found, "error")[0].id == "openmp-intel-llvm"


@pytest.mark.parametrize("finding", diagnose({
    **base(1, quota=0.5),
    "settings": [{"library": "x", "count": 3}],
    "environment": [{"name": "KMP_DUPLICATE_LIB_OK", "value": "1", "valid": True, "readers": []}],
}))
def test_every_finding_has_all_its_parts(finding):
    d = dump(finding)
    assert set(d) == {"id", "severity", "message", "why", "fix"}
    assert all(isinstance(v, str) and v for v in d.values())
    assert "\n" not in finding.message
