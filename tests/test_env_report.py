"""environment_report: every thread variable, its validity, and whether it changed after launch."""
from __future__ import annotations

from conftest import clean_env, run_json

from parinfo.machine.procfs import Proc
from parinfo.process.environment import environment_report, launch_environment
from parinfo.process.libraries import listed_unset
from parinfo.process.variables import THREAD_VARS
from parinfo.records.convert import dump
from parinfo.records.unknown import Unknown

REPORT = ("import json, os; from parinfo.records.convert import dump; "
          "from parinfo.process.environment import environment_report as r; "
          "print(json.dumps({x.name: dump(x) for x in r()}))")


def by_name(rows):
    return {r.name: dump(r) for r in rows}


def test_every_known_variable_has_a_row_even_when_unset():
    rows = by_name(environment_report({}, {}))
    assert {n for n in THREAD_VARS if listed_unset(n)} <= set(rows)
    row = rows["MKL_NUM_THREADS"]
    assert row["value"] is None and row["launch_value"] is None
    assert row["valid"] is None and row["problem"] is None
    assert row["changed_after_launch"] is False
    assert "mkl" in row["readers"] and row["known"] is True


def test_invalid_openmp_count_is_reported_in_a_real_process():
    rows = run_json(REPORT, env=clean_env(OMP_NUM_THREADS="abc"))
    row = rows["OMP_NUM_THREADS"]
    assert row["value"] == "abc" and row["launch_value"] == "abc"
    assert row["valid"] is False
    assert "abc" in row["problem"]
    assert row["changed_after_launch"] is False


def test_openmp_list_syntax_is_valid():
    rows = run_json(REPORT, env=clean_env(OMP_NUM_THREADS="4,2"))
    assert rows["OMP_NUM_THREADS"]["valid"] is True
    assert rows["OMP_NUM_THREADS"]["problem"] is None


def test_other_invalid_values():
    env = {"MKL_DYNAMIC": "maybe", "OMP_PROC_BIND": "spread,close", "KMP_BLOCKTIME": "soon",
           "OPENBLAS_NUM_THREADS": "4,2", "OMP_WAIT_POLICY": "PASSIVE"}
    rows = by_name(environment_report(env, env))
    assert rows["MKL_DYNAMIC"]["valid"] is False
    assert rows["OMP_PROC_BIND"]["valid"] is True
    assert rows["KMP_BLOCKTIME"]["valid"] is False
    assert rows["OPENBLAS_NUM_THREADS"]["valid"] is False  # lists are OpenMP syntax only
    assert rows["OMP_WAIT_POLICY"]["valid"] is True


def test_variable_changed_after_launch_is_flagged_from_the_launch_environment():
    code = ("import os, json; from parinfo.records.convert import dump; "
            "os.environ['OMP_NUM_THREADS'] = '1'; os.environ.pop('MKL_NUM_THREADS'); "
            "from parinfo.process.environment import environment_report as r; "
            "print(json.dumps({x.name: dump(x) for x in r()}))")
    rows = run_json(code, env=clean_env(OMP_NUM_THREADS="2", MKL_NUM_THREADS="2", BLIS_NUM_THREADS="3"))
    omp = rows["OMP_NUM_THREADS"]
    assert (omp["launch_value"], omp["value"], omp["changed_after_launch"]) == ("2", "1", True)
    mkl = rows["MKL_NUM_THREADS"]
    assert (mkl["launch_value"], mkl["value"], mkl["changed_after_launch"]) == ("2", None, True)
    assert rows["BLIS_NUM_THREADS"]["changed_after_launch"] is False


def test_thread_looking_variables_outside_the_table_are_listed():
    rows = by_name(environment_report({"KMP_SETTINGS": "1", "GOMP_SPINCOUNT": "100", "HOME": "/root"},
                                      {"OMP_SCHEDULE": "static"}))
    assert rows["KMP_SETTINGS"]["known"] is False and rows["KMP_SETTINGS"]["valid"] is None
    assert rows["KMP_SETTINGS"]["changed_after_launch"] is True
    assert rows["OMP_SCHEDULE"]["value"] is None and rows["OMP_SCHEDULE"]["launch_value"] == "static"
    assert "GOMP_SPINCOUNT" in rows and "HOME" not in rows


def test_unknown_launch_environment_is_said_not_guessed():
    rows = by_name(environment_report({"OMP_NUM_THREADS": "2"}, Unknown("AccessDenied")))
    row = rows["OMP_NUM_THREADS"]
    assert row["launch_value"] == "unknown (AccessDenied)"
    assert row["changed_after_launch"] is None
    assert row["valid"] is True


def test_launch_environment_of_a_missing_process_is_unknown():
    out = launch_environment(Proc.of(2**22 + 12345))
    assert isinstance(out, Unknown) and str(out).startswith("unknown (")


def test_rows_are_json_serialisable():
    import json

    json.dumps([dump(r) for r in environment_report()])


def test_launch_environment_equals_psutils_view_and_ignores_later_edits():
    code = ("import json, os, psutil; os.environ['OMP_NUM_THREADS'] = '1'; "
            "from parinfo.process.environment import launch_environment; "
            "print(json.dumps([launch_environment(), dict(psutil.Process().environ())]))")
    ours, theirs = run_json(code, env=clean_env(OMP_NUM_THREADS="3"))
    assert ours == theirs
    assert ours["OMP_NUM_THREADS"] == "3"


def test_the_variables_parinfo_apply_sets_are_read_by_parinfo_and_listed_only_when_set():
    """PARINFO_PROFILE and the instance marks name what launched the program: parinfo reads them (a
    count's source is the profile), so they are never "read by nothing"; unset they are no setting."""
    env = {"PARINFO_PROFILE": "latency", "PARINFO_INSTANCE": "0", "PARINFO_INSTANCES": "2"}
    rows = by_name(environment_report(env, env))
    for name in env:
        assert rows[name]["known"] is True and rows[name]["readers"] == ["parinfo"] and rows[name]["valid"] is True
        assert not listed_unset(name)
    assert not set(env) & set(by_name(environment_report({}, {})))
