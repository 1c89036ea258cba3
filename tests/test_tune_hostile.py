"""Hostile values for `parinfo tune`: one line and exit 2 before anything runs; exit codes as a shell gives."""
from __future__ import annotations

import pytest
from conftest import clean_env, run_cli
from test_tune_errors import one_line_exit_2

FAST = ("--repeats", "1", "--min-time", "0", "--warmup", "0", "--no-noise-check", "--max", "1")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, needles", [
    (("--timeout", "nan"), ("--timeout nan", "not a number of seconds")),
    (("--timeout", "inf"), ("--timeout inf", "not a number of seconds")),
    (("--timeout", "-inf"), ("--timeout",)),
    (("--min-time", "nan"), ("--min-time nan", "not a number of seconds")),
    (("--min-time", "inf"), ("--min-time inf", "not a number of seconds")),
    (("--size", "200000"), ("--size 200000", "GiB", "use a smaller --size")),
    (("--size", "200000", "--in-process"), ("--size 200000",)),
])
def test_bad_numbers_one_line_exit_2(args, needles):
    one_line_exit_2(run_cli("tune", *FAST, "--stmt", "pass", *args, env=clean_env())
                    if "--size" not in args else run_cli("tune", *FAST, *args, env=clean_env()), *needles)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("extra", [(), ("--in-process",)])
def test_keyboard_interrupt_in_the_statement_exits_130(extra):
    proc = run_cli("tune", *FAST, *extra, "--stmt", "raise KeyboardInterrupt", env=clean_env())
    assert proc.returncode == 130, (proc.returncode, proc.stderr)


@pytest.mark.timeout(60)
def test_a_command_killed_by_sigkill_exits_137_and_says_so():
    proc = run_cli("tune", *FAST, "--", "sh", "-c", "kill -9 $$", env=clean_env())
    assert proc.returncode == 137, (proc.returncode, proc.stderr)
    assert "killed by SIGKILL (signal 9)" in proc.stderr.strip().splitlines()[-1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("extra", [(), ("--in-process",)])
def test_sys_exit_in_the_statement_is_a_failure_that_says_so(extra):
    proc = run_cli("tune", *FAST, *extra, "--stmt", "import sys; sys.exit(0)", env=clean_env())
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "called sys.exit(0)" in proc.stderr.strip().splitlines()[-1]
    assert proc.stdout == ""


def test_a_command_that_is_a_directory_is_permission_denied(tmp_path):
    one_line_exit_2(run_cli("tune", *FAST, "--", str(tmp_path), env=clean_env()),
                    "permission denied", "it is a directory")


@pytest.mark.parametrize("mode, needle", [(0o644, "permission denied (it is not executable)"),
                                          (0o755, "Exec format error")])
def test_a_file_that_cannot_be_run_is_one_line(tmp_path, mode, needle):
    # not executable, or executable but not a program (exec fails on its content)
    target = tmp_path / "notaprogram"
    target.write_bytes(b"\x00\x01 not a program\n")
    target.chmod(mode)
    one_line_exit_2(run_cli("tune", *FAST, "--", str(target), env=clean_env()), "cannot run", needle)


@pytest.mark.parametrize("name, needle", [("a\nb", "one non-empty line"), ("n" * 81, "longer than 80"),
                                          ("   ", "one non-empty line")])
def test_a_name_apply_would_reject_is_refused_before_measuring(tmp_path, name, needle):
    prof = tmp_path / "p.yaml"
    one_line_exit_2(run_cli("tune", *FAST, "--stmt", "pass", "--write", str(prof), "--name", name,
                            env=clean_env()), "--name", needle)
    assert not prof.exists()


@pytest.mark.timeout(60)
def test_a_written_profile_with_a_given_name_is_accepted_by_apply(tmp_path):
    prof = tmp_path / "p.yaml"
    name = "my tuned profile " + "x" * 60  # 77 characters
    proc = run_cli("tune", *FAST, "--stmt", "pass", "--write", str(prof), "--name", name, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    applied = run_cli("apply", str(prof), "--export", env=clean_env())
    assert applied.returncode == 0, applied.stderr
