"""import_probes: load the modules whose pools the report shows; failures are reported, not raised."""
from __future__ import annotations

import pytest
from conftest import HAVE_NUMPY, clean_env, run_json

PROBE = ("import json, sys; from parinfo.records.convert import dump; "
         "from parinfo.process.probing import import_probes; r = dump(import_probes({arg})); ")


def probe(arg: str, tail: str = "print(json.dumps(r))", **kw):
    return run_json(PROBE.format(arg=arg) + tail, **kw)


@pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")
def test_default_probe_imports_numpy_and_never_torch():
    out = probe("None", "print(json.dumps([r, 'numpy' in sys.modules, 'torch' in sys.modules]))")
    r, has_numpy, has_torch = out
    assert r["requested"] == ["numpy"] and r["imported"] == ["numpy"]
    assert r["already_imported"] == [] and r["failed"] == {}
    assert has_numpy is True and has_torch is False


def test_explicit_list_failures_and_already_imported():
    r = probe("['json', ' no_such_module_xyz ', 'json', 'bad name', '', 'colorsys']")
    assert r["requested"] == ["json", "no_such_module_xyz", "bad name", "colorsys"]
    assert r["already_imported"] == ["json"]
    assert r["imported"] == ["colorsys"]
    assert r["failed"]["no_such_module_xyz"].startswith("ModuleNotFoundError")
    assert "not a module name" in r["failed"]["bad name"]


def test_a_module_that_raises_or_exits_on_import_is_reported(tmp_path):
    (tmp_path / "boom_mod.py").write_text("raise RuntimeError('kaboom')\n")
    (tmp_path / "exit_mod.py").write_text("import sys; sys.exit(3)\n")
    env = clean_env(PYTHONPATH=str(tmp_path))
    r = probe("['boom_mod', 'exit_mod']", env=env)
    assert r["failed"]["boom_mod"] == "RuntimeError: kaboom"
    assert r["failed"]["exit_mod"].startswith("SystemExit")


def test_probing_keeps_what_an_import_sets_as_a_program_would():
    """threadpoolctl's import sets KMP_DUPLICATE_LIB_OK: a probe imports it as the user's program would,
    so `parinfo show -i threadpoolctl` and `import threadpoolctl; parinfo.inspect()` see the same."""
    out = probe("['threadpoolctl']", "import os; print(json.dumps([r, os.environ.get('KMP_DUPLICATE_LIB_OK')]))")
    r, value = out
    assert r["imported"] == ["threadpoolctl"] and value == "True"
    assert r["environ_changed"] == {"KMP_DUPLICATE_LIB_OK": "True"}


def test_environment_changes_made_by_an_import_are_reported(tmp_path):
    (tmp_path / "sets_omp.py").write_text("import os; os.environ['OMP_NUM_THREADS'] = '1'\n")
    r = probe("['sets_omp']", env=clean_env(PYTHONPATH=str(tmp_path)))
    assert r["environ_changed"] == {"OMP_NUM_THREADS": "1"}
