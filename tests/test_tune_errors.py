"""Bad input to `parinfo tune`: one line and exit 2; a failing workload shows its own error."""
from __future__ import annotations

import sys
import textwrap

import pytest
from conftest import clean_env, run_cli, run_py

FAST = ("--repeats", "2", "--min-time", "0", "--no-noise-check")

USER_MOD = textwrap.dedent('''
    def helper():
        raise ValueError("user says no")

    def boom():
        helper()

    not_callable = 3
''')


@pytest.fixture
def user_env(tmp_path):
    (tmp_path / "usermod.py").write_text(USER_MOD)
    (tmp_path / "badimport.py").write_text("import json\nraise RuntimeError('broken at import')\n")
    return clean_env(PYTHONPATH=str(tmp_path))


def one_line_exit_2(proc, *needles):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize("args, needles", [
    (("--min", "4", "--max", "2"), ("--min 4 is above --max 2",)),
    (("--max", "0"), ("--max must be at least 1",)),
    (("--min", "0"), ("--min must be at least 1",)),
    (("--max", "100000"), ("--max 100000",)),
    (("--repeats", "0"), ("--repeats must be at least 1",)),
    (("--objective", "speed"), ("--objective 'speed'",)),
    (("--framework", "jax"), ("--framework 'jax'",)),
    (("--objective", "throughput", "--min", "2", "--min-inter", "2", "--max", "2"), ("does not fit",)),
    (("--min-inter", "3", "--max-inter", "2"), ("--min-inter 3 is above --max-inter 2",)),
    (("--timeout", "0"), ("--timeout",)),
    (("--stmt", "x = ("), ("--stmt:", "line 1")),
    (("--setup", "import os"), ("--setup needs --stmt",)),
    (("--stmt", "pass", "--module", "a:b"), ("give one workload",)),
    (("--module", "no_colon"), ("use pkg.module:function",)),
    (("--module", "nosuchmodule_xyz:f"), ("no module named 'nosuchmodule_xyz'",)),
    (("--module", "usermod:missing"), ("has no attribute 'missing'",)),
    (("--module", "usermod:not_callable"), ("is not callable",)),
    (("--plot", "curve.txt"), ("must end in .svg or .png",)),
    (("--plot", "/nonexistent-dir/c.svg"), ("does not exist",)),
    (("--write", "/nonexistent-dir/p.yaml"), ("does not exist",)),
    (("--in-process", "--", "true"), ("--in-process cannot time a command",)),
    (("--in-process", "ensemble"), ("inter-op count is set once",)),
    (("nosuchworkload",), ("command not found: 'nosuchworkload'", "built-in workloads")),
    (("--workload", "bogus"), ("unknown workload 'bogus'",)),
])
def test_bad_input_one_line_exit_2(user_env, args, needles):
    one_line_exit_2(run_cli("tune", *FAST, *args, env=user_env), *needles)


def test_statement_that_raises_shows_the_users_traceback_and_exits_1(user_env):
    proc = run_cli("tune", "--stmt", "x = 1\ny = x / 0", "--setup", "import math", *FAST, env=user_env)
    assert proc.returncode == 1
    err = proc.stderr
    assert err.startswith("Traceback (most recent call last):")
    assert 'File "<stmt>", line 2' in err and "y = x / 0" in err
    assert "ZeroDivisionError: division by zero" in err
    assert "parinfo/" not in err and "_tune" not in err
    assert err.strip().splitlines()[-1] == "parinfo: the workload raised (its traceback is above)"


def test_setup_that_raises_shows_the_users_traceback(user_env):
    proc = run_cli("tune", "--stmt", "pass", "--setup", "import nosuchthing_abc", *FAST, env=user_env)
    assert proc.returncode == 1
    assert 'File "<setup>", line 1' in proc.stderr and "nosuchthing_abc" in proc.stderr
    assert "_tune" not in proc.stderr


def test_module_function_that_raises_shows_its_own_frames(user_env):
    proc = run_cli("tune", "--module", "usermod:boom", *FAST, env=user_env)
    assert proc.returncode == 1
    err = proc.stderr
    assert "usermod.py" in err and "in boom" in err and "in helper" in err
    assert "ValueError: user says no" in err
    assert "_tune" not in err and "parinfo/" not in err


def test_module_broken_at_import_is_the_users_error(user_env):
    proc = run_cli("tune", "--module", "badimport:f", *FAST, env=user_env)
    assert proc.returncode == 1
    assert "RuntimeError: broken at import" in proc.stderr and "badimport.py" in proc.stderr


def test_in_process_raising_statement_is_also_clean(user_env):
    proc = run_cli("tune", "--in-process", "--stmt", "raise KeyError('k')", *FAST, env=user_env)
    assert proc.returncode == 1
    assert 'File "<stmt>", line 1' in proc.stderr and "KeyError: 'k'" in proc.stderr
    assert "_tune" not in proc.stderr


def test_failing_command_stops_the_sweep_with_its_code_and_output(user_env, tmp_path):
    marker = tmp_path / "runs"
    script = f"import sys; open({str(marker)!r}, 'a').write('x'); print('out line'); " \
             f"print('err line', file=sys.stderr); sys.exit(7)"
    proc = run_cli("tune", *FAST, "--max", "2", "--", sys.executable, "-c", script, env=user_env)
    assert proc.returncode == 7
    assert "out line" in proc.stderr and "err line" in proc.stderr
    assert "exited with code 7" in proc.stderr and "the sweep stopped" in proc.stderr
    assert marker.read_text() == "x"  # stopped at the first run


def test_missing_matplotlib_gives_the_install_hint():
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from parinfo.cli import main\n"
            "main(['tune', '--plot', 'c.svg', '--max', '1', '--repeats', '1', '--no-noise-check'])")
    proc = run_py(code, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "parinfo: error: matplotlib is needed for --plot: pip install 'parinfo[plot]'"


def test_api_raises_typed_errors():
    import parinfo
    from parinfo.tuning.measure import WorkloadFailed

    with pytest.raises(parinfo.UsageError, match="above --max"):
        parinfo.tune(min_threads=3, max_threads=2)
    with pytest.raises(parinfo.UsageError, match="must be an integer"):
        parinfo.tune(max_threads=2.5)
    with pytest.raises(WorkloadFailed) as info:
        parinfo.tune(stmt="assert False, 'nope'", max_threads=1, repeats=1, check_noise=False)
    assert isinstance(info.value, parinfo.TuneError)
    assert info.value.exit_code == 1 and "AssertionError: nope" in info.value.output


def test_workload_names_are_declared_once_by_their_classes():
    from parinfo.cli import tune as tune_cli
    from parinfo.tuning import workloads

    assert list(workloads.BUILTIN) == ["matmul", "elementwise", "ensemble"]
    assert all(workloads.BUILTIN[name].kind == name == workloads.KINDS[name].kind for name in workloads.BUILTIN)
    assert workloads.BUILTIN[workloads.DEFAULT] is workloads.Matmul
    assert tune_cli._WORKLOADS == workloads.described() == "matmul (default), elementwise, ensemble"
    elementwise = workloads.choose("elementwise", "numpy", 64, None, None, None, None)
    assert type(elementwise) is workloads.Elementwise and elementwise.framework == "numpy"
