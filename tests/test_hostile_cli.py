"""Hostile command lines and outputs: one line and exit 2, never a traceback; --export safe to eval."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import clean_env, run_cli

EVIL_NAMES = [
    "evil\ntouch INJECTED\n",
    "evil$(touch INJECTED)",
    "evil`touch INJECTED`",
    "evil'; touch INJECTED; '",
    'evil"; touch INJECTED; "',
    "evil\r\x1b[2J",
]


@pytest.mark.parametrize("stem", EVIL_NAMES)
def test_export_is_safe_to_eval_whatever_the_file_name(tmp_path, stem):
    path = tmp_path / f"{stem}.yaml"
    path.write_text("version: 1\nname: plain\nintra_op: 1\n")
    env = clean_env(PARINFO=f"{sys.executable} -m parinfo", P=str(path))
    proc = subprocess.run(["bash", "-c", 'eval "$($PARINFO apply "$P" --export)" && echo "$PARINFO_PROFILE"'],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "INJECTED").exists()
    assert proc.stdout.strip() == "plain"


def test_export_comments_hold_no_control_characters(tmp_path):
    path = tmp_path / "a\x1b[31mb\u202e.yaml"
    path.write_text("version: 1\nintra_op: 1\n")
    out = run_cli("apply", str(path), "--export").stdout
    comments = [line for line in out.splitlines() if line.startswith("#")]
    assert comments and not any("\x1b" in c or "\u202e" in c for c in comments)
    assert "\\x1b" in comments[0]


@pytest.mark.parametrize("value", ["²", "①", "٣", "9" * 5000, "0x10", "-1", "0", "1.5", ""])
def test_bad_instances_values_are_one_line(value):
    for args in (["--instances", value], [f"--instances={value}"]):
        proc = run_cli("apply", "latency", *args, "--", sys.executable, "-c", "print('ran')")
        assert proc.returncode == 2, proc.stderr
        assert "ran" not in proc.stdout and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "--instances" in proc.stderr


@pytest.mark.parametrize("command", [[""], ["", "x"]])
def test_an_empty_command_name_is_a_usage_error(command):
    proc = run_cli("apply", "latency", "--", *command)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "empty name" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_nul_in_the_command_is_refused_in_process():
    from parinfo.errors import UsageError
    from parinfo.profiles.loading import resolve_profile
    from parinfo.profiles.launch import run_plan

    with pytest.raises(UsageError, match="NUL"):
        run_plan(resolve_profile("latency"), ["a\0b"], replace=False)


@pytest.mark.parametrize("args", [["show"], ["show", "--json"], ["apply", "latency"],
                                  ["apply", "latency", "--export"], ["profiles"]])
@pytest.mark.parametrize("target", ["closed", "full"])
def test_a_closed_or_full_stdout_is_one_line_and_exit_2(args, target):
    redirect = ">&-" if target == "closed" else ">/dev/full"
    cmd = " ".join([sys.executable, "-m", "parinfo", *args]) + " " + redirect
    proc = subprocess.run(["bash", "-c", cmd], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "output" in proc.stderr


def test_a_reader_that_goes_away_is_not_an_error():
    cmd = f"{sys.executable} -m parinfo show | head -c 10 >/dev/null"
    proc = subprocess.run(["bash", "-c", cmd], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


def test_version_and_program_name():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("parinfo 0.")
    assert "python -m parinfo" in run_cli("--help").stdout


# A fuzz over argument lists built from real option names and hostile values. Runs main() in this
# process (no command is launched: "--" is never generated) and fails on any exception but SystemExit.
OPTIONS = ["show", "apply", "profiles", "--json", "--export", "--check", "--check=error", "--format",
           "torch", "json", "rich", "-i", "--import", "--instances", "--force", "--torch", "--help",
           "latency", "single-thread", "container", "nosuch"]
HOSTILE = st.one_of(st.sampled_from(OPTIONS), st.text(max_size=12),
                    st.sampled_from(["²", "①", "\x00", "\x1b[2J", "-", "--", "9" * 5000, "/proc/kmsg",
                                     "/dev/zero", "=", "--instances=", "--format="]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(HOSTILE, max_size=5).filter(lambda a: "--" not in a and (not a or a[0] != "tune")))
def test_fuzzed_arguments_never_raise(args):
    from contextlib import redirect_stderr, redirect_stdout

    from parinfo.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code in (0, 1, 2), (args, err.getvalue())
    if info.value.code == 2 and err.getvalue():
        assert len(err.getvalue().strip().splitlines()) == 1, (args, err.getvalue())


ESCAPES = "\x1b[31m\x1b]0;title\x07\x1b[2J\r\u202e"


@pytest.mark.parametrize("fmt", ["rich", "torch"])
def test_show_never_prints_control_characters_from_the_environment(fmt):
    proc = run_cli("show", "--format", fmt, env=clean_env(OMP_PLACES="x" + ESCAPES, KMP_AFFINITY=ESCAPES))
    assert proc.returncode == 0, proc.stderr
    for ch in "\x1b\x07\r\u202e":
        assert ch not in proc.stdout
    assert "\\x1b" in proc.stdout


def test_apply_never_prints_control_characters_from_a_profile(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text('version: 1\nenv:\n  OMP_PLACES: "a\\e[2Jb"\n')
    proc = run_cli("apply", str(path))
    # Refused when the profile is read (env values are printable ASCII); the message escapes it.
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "\x1b" not in proc.stdout + proc.stderr


def test_check_takes_a_level():
    env = clean_env(OMP_NUM_THREADS="abc")  # an invalid variable: a warning
    assert run_cli("show", "--check", "-i", "none", env=env).returncode == 1
    assert run_cli("show", "--check=warning", "-i", "none", env=env).returncode == 1
    assert run_cli("show", "--check=error", "-i", "none", env=env).returncode == 0
    proc = run_cli("show", "--check=loud", "-i", "none")
    assert proc.returncode == 2 and "--check=loud" in proc.stderr


def test_json_and_torch_format_conflict():
    proc = run_cli("show", "--json", "--format", "torch")
    assert proc.returncode == 2 and "pick one" in proc.stderr


def test_a_huge_count_is_shown_valid_but_capped_with_what_runs():
    import json

    huge = "99999999999999999999"
    proc = run_cli("show", "-i", "none", env=clean_env(PARINFO_NUM_THREADS=huge))
    assert proc.returncode == 0, proc.stderr
    assert f"PARINFO_NUM_THREADS={huge}" in proc.stdout and "valid, capped:" in proc.stdout
    report = json.loads(run_cli("show", "--json", "-i", "none", env=clean_env(PARINFO_NUM_THREADS=huge)).stdout)
    ceiling = report["runtime"]["pool_ceiling"]
    row = next(r for r in report["settings"] if r["library"] == "parinfo intra-op")
    assert row["capped_to"] == ceiling == 4 * os.cpu_count()
    found = {f["id"]: f for f in report["findings"]}
    assert f"at most {ceiling} threads run" in found["count-above-ceiling"]["message"]
    assert f"uses {ceiling} threads" in found["count-above-usable"]["message"]
