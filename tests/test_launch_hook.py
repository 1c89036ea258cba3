"""The start-up hook in launched Python programs: torch set on import, chaining, checks at exit.

A fake ``torch`` package stands in for the real one where the test is about the hook's mechanics
(fast, and it can misbehave on purpose); the real torch is covered in test_launch_run.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import HAVE_NUMPY, clean_env

from parinfo.launch.child import HOOK_DIR, HOOK_VAR
from parinfo.process.libraries import hook_facts

FAKE_TORCH = """
import sys
calls = []
READY = False
_intra, _inter = 2, 2
def set_num_threads(n):
    global _intra
    assert READY, "set before torch finished importing"
    calls.append(("intra", n)); _intra = n
def get_num_threads():
    return _intra
def set_num_interop_threads(n):
    global _inter
    calls.append(("inter", n))
    if {refuse}:
        raise RuntimeError("Error: cannot set number of interop threads after parallel work has started "
                           "or set_num_interop_threads called")
    _inter = n
def get_num_interop_threads():
    return _inter
import torch.sub  # a submodule imported while torch itself is importing
READY = True
"""


@pytest.fixture
def fake_torch(tmp_path):
    def make(refuse: bool = False) -> str:
        pkg = tmp_path / "fake" / "torch"
        pkg.mkdir(parents=True, exist_ok=True)
        (pkg / "__init__.py").write_text(FAKE_TORCH.format(refuse=refuse))
        (pkg / "sub.py").write_text("")
        return str(tmp_path / "fake")
    return make


def hooked_env(*paths: str, intra: str = "1", inter: str = "3", watch: str = "", **extra: str) -> dict:
    env = clean_env(**extra)
    env["PYTHONPATH"] = os.pathsep.join([HOOK_DIR, *paths])
    env[HOOK_VAR] = f"1 intra={intra} inter={inter} watch={watch} {hook_facts()}"
    env["PARINFO_PROFILE"] = "hooktest"
    return env


def run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_counts_are_set_once_torch_has_finished_importing(fake_torch):
    proc = run("import torch; print(torch.calls, torch.get_num_threads(), torch.get_num_interop_threads())",
               hooked_env(fake_torch()))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[('inter', 3), ('intra', 1)] 1 3"
    assert proc.stderr == ""


def test_torch_is_never_imported_by_the_hook(fake_torch):
    proc = run("import sys; print('torch' in sys.modules)", hooked_env(fake_torch()))
    assert proc.stdout.strip() == "False" and proc.stderr == ""


def test_intra_left_alone_when_the_launcher_says_so(fake_torch):
    proc = run("import torch; print(torch.calls)", hooked_env(fake_torch(), intra="-"))
    assert proc.stdout.strip() == "[('inter', 3)]"


def test_inter_op_count_refused_by_torch_is_reported_in_one_line(fake_torch):
    proc = run("import torch; print(torch.get_num_interop_threads())", hooked_env(fake_torch(refuse=True)))
    assert proc.returncode == 0 and proc.stdout.strip() == "2"
    (line,) = proc.stderr.splitlines()
    assert line.startswith("parinfo: not in force: torch inter-op threads = 2, profile hooktest wants 3")
    assert "cannot set number of interop threads" in line


def test_the_hook_leaves_sys_path_and_the_module_spec_as_without_it(fake_torch):
    code = (f"import sys, torch; print({HOOK_DIR!r} in sys.path, "
            "type(torch.__spec__.loader).__name__, type(torch.__loader__).__name__)")
    proc = run(code, hooked_env(fake_torch()))
    assert proc.stdout.split() == ["False", "SourceFileLoader", "SourceFileLoader"]


def test_an_existing_sitecustomize_still_runs(tmp_path, fake_torch):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    proc = run("import os, sitecustomize; print(os.environ.get('CHAINED'), sitecustomize.__file__)",
               hooked_env(str(other)))
    chained, path = proc.stdout.split()
    assert chained == "yes" and path == str(other / "sitecustomize.py")


def test_a_failing_sitecustomize_is_reported_like_python_does(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("raise ValueError('broken site')\n")
    proc = run("print('ran')", hooked_env(str(other)))
    assert proc.stdout.strip() == "ran"
    assert "Error in sitecustomize" in proc.stderr and "broken site" in proc.stderr


def test_a_torch_imported_by_an_earlier_sitecustomize_is_set_too(tmp_path, fake_torch):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import torch\n")
    proc = run("import torch; print(torch.get_num_threads(), torch.get_num_interop_threads())",
               hooked_env(str(other), fake_torch()))
    assert proc.stdout.strip() == "1 3", proc.stderr


def test_without_instructions_the_hook_only_chains(fake_torch):
    env = hooked_env(fake_torch())
    del env[HOOK_VAR]
    proc = run("import torch; print(torch.calls)", env)
    assert proc.stdout.strip() == "[]" and proc.stderr == ""


def test_unknown_instructions_are_ignored_with_one_line(fake_torch):
    env = hooked_env(fake_torch())
    env[HOOK_VAR] = "2 something"
    proc = run("import torch; print(torch.calls)", env)
    assert proc.stdout.strip() == "[]"
    assert proc.stderr.startswith("parinfo: ignoring _PARINFO_HOOK") and len(proc.stderr.splitlines()) == 1


def test_a_watched_variable_changed_by_the_program_is_reported_at_exit():
    code = "import os; os.environ['OMP_NUM_THREADS'] = '2'"
    proc = run(code, hooked_env(watch="OMP_NUM_THREADS", OMP_NUM_THREADS="1"))
    (line,) = proc.stderr.splitlines()
    assert line.startswith("parinfo: not in force: the program changed OMP_NUM_THREADS from '1' to '2'")


def test_all_well_means_no_output():
    proc = run("print('ok')", hooked_env(watch="OMP_NUM_THREADS", OMP_NUM_THREADS="1"))
    assert proc.stdout == "ok\n" and proc.stderr == ""


def test_verify_off_skips_the_checks():
    code = "import os; os.environ['OMP_NUM_THREADS'] = '2'"
    proc = run(code, hooked_env(watch="OMP_NUM_THREADS", OMP_NUM_THREADS="1", PARINFO_VERIFY="off"))
    assert proc.stderr == ""


def test_verify_reads_the_registrys_words_only():
    """PARINFO_VERIFY is an enum (auto, full, off): a value the report calls invalid ("0") is no "off"
    for the hook either, which checks as auto."""
    from parinfo.process.variables import validate

    code = "import os; os.environ['OMP_NUM_THREADS'] = '2'"
    proc = run(code, hooked_env(watch="OMP_NUM_THREADS", OMP_NUM_THREADS="1", PARINFO_VERIFY="0"))
    assert "OMP_NUM_THREADS" in proc.stderr and validate("PARINFO_VERIFY", "0") is not None


@pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")
def test_full_verification_reports_a_pool_that_read_another_value():
    code = textwrap.dedent("""
        import os
        os.environ['OPENBLAS_NUM_THREADS'] = '2'   # after launch, before numpy loads its OpenBLAS
        import numpy
    """)
    env = hooked_env(watch="OPENBLAS_NUM_THREADS", OPENBLAS_NUM_THREADS="1", PARINFO_VERIFY="full")
    proc = run(code, env)
    lines = proc.stderr.splitlines()
    assert any("the program changed OPENBLAS_NUM_THREADS" in line for line in lines), proc.stderr
    assert any(line.startswith("parinfo: not in force: openblas") and "uses 2 threads" in line
               and "OPENBLAS_NUM_THREADS=1" in line for line in lines), proc.stderr


@pytest.mark.skipif(not HAVE_NUMPY, reason="numpy is not installed")
def test_full_verification_is_quiet_when_pools_match():
    env = hooked_env(watch="OPENBLAS_NUM_THREADS,OMP_NUM_THREADS", OPENBLAS_NUM_THREADS="1",
                     OMP_NUM_THREADS="1", PARINFO_VERIFY="full")
    proc = run("import numpy", env)
    assert proc.returncode == 0 and proc.stderr == ""


def test_the_hook_imports_neither_parinfo_nor_torch(fake_torch):
    code = ("import sys; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('parinfo', 'torch', 'threadpoolctl')))")
    proc = run(code, hooked_env(fake_torch()))
    assert proc.stdout.strip() == "[]" and proc.stderr == ""


def test_parinfo_runtime_count_changed_by_the_program_is_reported_at_exit():
    runtime = pytest.importorskip("parinfo.runtime")
    if not hasattr(runtime, "configure"):
        pytest.skip("parinfo.runtime is not complete in this tree")
    code = "import parinfo.runtime as rt; rt.configure(intra_op=2, source='a library')"
    proc = run(code, hooked_env(watch="PARINFO_NUM_THREADS", PARINFO_NUM_THREADS="1"))
    (line,) = proc.stderr.splitlines()
    assert line.startswith("parinfo: not in force: parinfo intra-op threads = 2 (a library), profile hooktest wants 1")


def test_an_explicit_call_in_the_program_is_its_own_choice_not_a_failure():
    runtime = pytest.importorskip("parinfo.runtime")
    if not hasattr(runtime, "set_num_threads"):
        pytest.skip("parinfo.runtime is not complete in this tree")
    proc = run("import parinfo; parinfo.set_num_threads(2)",
               hooked_env(watch="PARINFO_NUM_THREADS", PARINFO_NUM_THREADS="1"))
    assert proc.returncode == 0 and proc.stderr == ""
