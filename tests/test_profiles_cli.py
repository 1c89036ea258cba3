"""`parinfo profiles` and `parinfo apply PROFILE`: output, exit codes, and one-line errors."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_env, run_cli

CORPUS = Path(__file__).resolve().parent / "profiles_bad"


def _one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("parinfo: error: ")
    return lines[0][len("parinfo: error: "):]


def test_profiles_lists_the_shipped_profiles():
    proc = run_cli("profiles")
    assert proc.returncode == 0, proc.stderr
    for name in ("latency", "throughput", "balanced", "multi-instance", "single-thread", "container"):
        assert name in proc.stdout
    assert "Dask" in proc.stdout  # single-thread's description
    items = json.loads(run_cli("profiles", "--json").stdout)
    assert {i["name"] for i in items} >= {"latency", "container"}
    assert all(i["description"] and Path(i["path"]).is_file() for i in items)


def test_apply_prints_every_setting_with_its_why():
    proc = run_cli("apply", "balanced", env=clean_env(COLUMNS="200"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for word in ("intra_op", "inter_op", "libraries.blas", "OMP_NUM_THREADS", "BLIS_NUM_THREADS", "affinity",
                 "max(1, usable_physical_cores // 2) = max(1,"):
        assert word in out


def test_apply_json_is_the_plan():
    from parinfo.profiles.loading import resolve_profile
    from parinfo.records.convert import dump

    proc = run_cli("apply", "latency", "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    want = dump(resolve_profile("latency"))
    assert got == want


def _bash(script: str, **env: str) -> str:
    full = clean_env(**env)
    full["PARINFO"] = f"{sys.executable} -m parinfo"
    return subprocess.run(["bash", "-c", script], env=full, capture_output=True, text=True, timeout=60,
                          check=True).stdout


def test_export_lines_eval_in_a_shell():
    out = _bash('eval "$($PARINFO apply container --export)"; echo "$OMP_WAIT_POLICY $PARINFO_NUM_INTEROP_THREADS"')
    assert out.strip() == "passive 1"


def test_export_keeps_the_users_variables_unless_forced():
    script = 'eval "$($PARINFO apply single-thread --export {})"; echo "$OMP_NUM_THREADS $MKL_NUM_THREADS"'
    assert _bash(script.format(""), OMP_NUM_THREADS="7").strip() == "7 1"
    assert _bash(script.format("--force"), OMP_NUM_THREADS="7").strip() == "1 1"
    text = run_cli("apply", "single-thread", "--export", env=clean_env(OMP_NUM_THREADS="7")).stdout
    assert "# OMP_NUM_THREADS kept: already set to 7" in text


def test_export_quotes_values_for_the_shell(tmp_path):
    p = tmp_path / "q.yaml"
    p.write_text("version: 1\nenv:\n  OMP_PLACES: '{0:2};$(touch pwned)'\n")
    out = _bash(f'cd {tmp_path} && eval "$($PARINFO apply {p} --export)"; echo "$OMP_PLACES"')
    assert out.strip() == "{0:2};$(touch pwned)"
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("name", ["tab_indent.yaml", "unknown_top_key.yaml", "duplicate_key.yaml",
                                  "expr_bad_char.yaml", "non_utf8.yaml", "alias_bomb.yaml", "extends_cycle_a.yaml",
                                  "empty.yaml", "python_tag.yaml"])
def test_bad_profiles_give_one_line_and_exit_2(name):
    import yaml

    expected = yaml.safe_load((CORPUS / "expected.yaml").read_text())[name]
    line = _one_line_error(run_cli("apply", str(CORPUS / name)))
    assert line.replace(str(CORPUS) + "/", "").split(":", 3)[:1] == expected.split(":", 3)[:1]
    assert line.endswith(expected.split(": ", 1)[1]) or "cycle" in line


def test_machine_dependent_errors_on_this_machine(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("version: 1\ninstances: usable_physical_cores + 1\n")
    line = _one_line_error(run_cli("apply", str(p)))
    assert re.match(rf"{re.escape(str(p))}:2:12: instances: (\d+) instances need at least \1 usable physical "
                    rf"cores?; \d+ (is|are) usable here \(", line), line


def test_unknown_profile_name_and_option_errors():
    assert "did you mean 'latency'" in _one_line_error(run_cli("apply", "latensy"))
    assert "--json and --export" in _one_line_error(run_cli("apply", "latency", "--json", "--export"))
    assert "--instances 0" in _one_line_error(run_cli("apply", "latency", "--instances", "0"))
    assert "--instances" in _one_line_error(run_cli("apply", "latency", "--instances", "4096"))


def test_instances_option_shows_pinned_instances():
    proc = run_cli("apply", "multi-instance", "--instances", "1", "--json")
    plan = json.loads(proc.stdout)
    assert len(plan["instances"]) == 1 and plan["instances"][0]["cpus"]


def test_apply_runs_a_command_after_double_dash():
    proc = run_cli("apply", "single-thread", "--", sys.executable, "-c",
                   "import os, sys; print(os.environ['OMP_NUM_THREADS'], os.environ['PARINFO_PROFILE']); sys.exit(3)")
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.split() == ["1", "single-thread"]
