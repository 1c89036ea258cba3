"""Who reads each variable comes from the library registry: a variable that parinfo or a loaded
library really reads is never "read by nothing here", checked against the library's own answer."""
from __future__ import annotations

import json

from conftest import clean_env, run_cli, run_json

from parinfo.process.libraries import THREAD_VARS, library, records


def test_every_variable_a_record_reads_is_declared():
    for rec in records():
        for var in rec.variables + tuple(v for _, v in rec.roles):
            assert var in THREAD_VARS, f"{rec.name} reads {var}, which the registry does not declare"


def test_openblas_coretype_is_openblas_steering_not_its_count():
    openblas = library("openblas")
    assert "OPENBLAS_CORETYPE" in openblas.reads and "OPENBLAS_CORETYPE" not in openblas.count_vars
    assert THREAD_VARS["OPENBLAS_CORETYPE"].readers == ("openblas",)
    assert THREAD_VARS["PARINFO_QUOTA_ROUNDING"].readers == ("parinfo",)
    assert library("parinfo").var("quota_rounding") == "PARINFO_QUOTA_ROUNDING"


def _architecture(env: dict[str, str]) -> str:
    code = ("import json, numpy, threadpoolctl; print(json.dumps([i.get('architecture') "
            "for i in threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas']))")
    (arch,) = run_json(code, env=env)
    return str(arch)


def test_variables_read_by_parinfo_and_the_loaded_openblas_name_their_reader():
    native = _architecture(clean_env())
    asked = "Sandybridge" if native.lower() != "sandybridge" else "Haswell"
    env = clean_env(OPENBLAS_CORETYPE=asked, PARINFO_QUOTA_ROUNDING="ceil")
    assert _architecture(env).lower() == asked.lower()  # the loaded OpenBLAS reads it
    out = run_cli("show", "--json", env=env)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["machine"]["quota_rounding"] == "ceil"  # parinfo reads it
    rows = {row["name"]: row for row in report["environment"]}
    assert rows["OPENBLAS_CORETYPE"]["readers"] == ["openblas"] and rows["OPENBLAS_CORETYPE"]["valid"]
    assert rows["PARINFO_QUOTA_ROUNDING"]["readers"] == ["parinfo"]
    text = run_cli("show", env=env).stdout
    names = ("OPENBLAS_CORETYPE=", "PARINFO_QUOTA_ROUNDING=")
    lines = [line for line in text.splitlines() if line.lstrip().startswith(names)]
    assert len(lines) == 2 and all("read by nothing" not in line for line in lines)
    assert "read by openblas" in lines[0] and "read by parinfo" in lines[1]


def test_a_bad_rounding_value_is_one_finding_not_two():
    out = run_cli("show", "--json", env=clean_env(PARINFO_QUOTA_ROUNDING="up"))
    ids = [f["id"] for f in json.loads(out.stdout)["findings"] if "PARINFO_QUOTA_ROUNDING" in f["message"]]
    assert ids == ["invalid-variable"]


def test_an_unknown_thread_variable_is_not_claimed_to_be_read_by_nothing():
    text = run_cli("show", env=clean_env(OPENBLAS_VERBOSE="2")).stdout
    (line,) = [line for line in text.splitlines() if "OPENBLAS_VERBOSE=" in line]
    assert "read by nothing" not in line and "unknown to parinfo" in line
