"""`parinfo show` and `parinfo.inspect()` in real processes."""
from __future__ import annotations

import json
import re
import shutil

import jsonschema
import pytest
from conftest import REPO, clean_env, run_cli, run_json, run_py

SCHEMA = json.loads((REPO / "parinfo" / "diagnostics" / "report.schema.json").read_text())


def show_json(*args: str, **kw) -> dict:
    proc = run_cli("show", "--json", *args, **kw)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_json_report_follows_the_published_schema():
    report = show_json()
    jsonschema.validate(report, SCHEMA)
    assert report["schema_version"] == 2
    assert "numpy" in report["probes"]["imported"]  # numpy is probed by default


def test_pools_match_threadpoolctl_in_the_same_process():
    out = run_json("""
import json, numpy, threadpoolctl, parinfo
theirs = sorted((p["filepath"], p["num_threads"], p["internal_api"]) for p in threadpoolctl.threadpool_info())
ours = sorted((p.filepath, p.num_threads, p.internal_api) for p in parinfo.inspect().pools
              if p.seen_by == "threadpoolctl")
print(json.dumps({"theirs": theirs, "ours": ours}))
""")
    assert out["theirs"] and out["ours"] == out["theirs"]


def test_inspect_to_dict_is_the_json_payload():
    out = run_json("""
import json, subprocess, sys, parinfo
mine = parinfo.inspect(imports=[]).to_dict()
cli = json.loads(subprocess.run([sys.executable, "-m", "parinfo", "show", "--json", "-i", "none"],
                                capture_output=True, text=True, check=True).stdout)
print(json.dumps({"mine": sorted(mine), "cli": sorted(cli), "machine_same": mine["machine"] == cli["machine"],
                  "settings_same": mine["settings"] == cli["settings"]}))
""")
    assert out["mine"] == out["cli"] and out["machine_same"] and out["settings_same"]


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset is not installed")
def test_taskset_one_cpu_gives_one_usable_cpu():
    report = show_json(prefix=["taskset", "-c", "0"])
    assert report["machine"]["usable_cpus"] == 1
    assert report["machine"]["affinity"] == [0]
    assert report["runtime"]["intra_op"]["count"] == 1


def test_invalid_omp_num_threads_is_reported_and_fails_check():
    env = clean_env(OMP_NUM_THREADS="abc")
    report = show_json(env=env)
    row = next(r for r in report["environment"] if r["name"] == "OMP_NUM_THREADS")
    assert row["value"] == "abc" and row["valid"] is False and "not a positive integer" in row["problem"]
    assert any(f["id"] == "invalid-variable" for f in report["findings"])
    assert run_cli("show", "--check", env=env).returncode == 1


def test_openmp_list_syntax_is_valid():
    report = show_json(env=clean_env(OMP_NUM_THREADS="4,2"))
    row = next(r for r in report["environment"] if r["name"] == "OMP_NUM_THREADS")
    assert row["valid"] is True


def test_check_passes_on_a_clean_environment():
    proc = run_cli("show", "--check", "-i", "none", env=clean_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rich_report_names_every_section_and_has_no_colour_when_piped():
    proc = run_cli("show")
    assert proc.returncode == 0, proc.stderr
    for title in ("Machine", "CPU", "Backend", "Native pools", "Thread counts in force", "Thread variables",
                  "Live OS threads", "Findings"):
        assert title in proc.stdout
    assert "\x1b[" not in proc.stdout
    assert "usable CPUs" in proc.stdout


def _without_torch(tmp_path) -> dict[str, str]:
    """An environment where ``import torch`` fails, as where torch is not installed."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('no torch in this environment')\n")
    return clean_env(PYTHONPATH=str(tmp_path))


def test_torch_format_without_torch_says_so_and_adds_ours(tmp_path):
    proc = run_cli("show", "--format", "torch", "-i", "none", env=_without_torch(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "torch: not imported (ImportError: no torch in this environment): no ATen/Parallel lines"
    assert lines[1] == "parinfo/Parallel:"
    assert lines[2].startswith("\tparinfo.get_num_threads() : ")
    assert "Environment variables:" in lines and "\tOMP_NUM_THREADS : [not set]" in lines
    assert any(line.startswith("parinfo parallel backend: native") for line in lines)
    assert "\tusable CPUs : 2 = " in "\n".join(lines) or "usable CPUs" in proc.stdout


@pytest.mark.torch
def test_torch_format_loads_torch_and_starts_with_its_own_block():
    theirs = run_py("import torch; print(torch.__config__.parallel_info(), end='')", timeout=120).stdout
    proc = run_cli("show", "--format", "torch", "-i", "none", timeout=120)
    assert proc.returncode == 0, proc.stderr
    first = theirs.splitlines()
    assert proc.stdout.splitlines()[: len(first)] == first and first[0] == "ATen/Parallel:"
    assert "torch: not imported" not in proc.stdout


def test_the_api_block_says_torch_is_not_imported_and_how():
    text = run_json("import json, parinfo; print(json.dumps(parinfo.parallel_info()))")
    assert text.splitlines()[0].startswith("torch: not imported: ") and "--torch" in text.splitlines()[0]


def test_parallel_info_api_returns_the_same_block():
    out = run_json("""
import json, parinfo
text = parinfo.parallel_info()
print(json.dumps({"text": text, "torch_loaded": __import__("sys").modules.get("torch") is not None}))
""")
    assert "\nparinfo/Parallel:\n" in out["text"] and not out["torch_loaded"]
    assert "Thread counts in force (count : source):" in out["text"]


def test_import_option_reports_failures_and_rejects_bad_names():
    report = show_json("-i", "no_such_module_xyz")
    assert "no_such_module_xyz" in report["probes"]["failed"]
    proc = run_cli("show", "-i", "bad name!")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "--import" in proc.stderr


def test_bad_option_is_one_clear_usage_error():
    proc = run_cli("show", "--format", "xml")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_python_dash_m_parinfo_and_help():
    proc = run_cli("--help")
    assert proc.returncode == 0 and "show" in proc.stdout


def test_no_color_respected_on_a_terminal_like_console():
    out = run_json("""
import io, json, os
os.environ["NO_COLOR"] = "1"
from rich.console import Console
import parinfo
from parinfo.cli.render_text import render
buf = io.StringIO()
render(parinfo.inspect(imports=[]), Console(file=buf, force_terminal=True, width=120))
print(json.dumps(buf.getvalue()))
""")
    assert "\x1b[3" not in out  # no colour codes (bold/dim styles may remain)


@pytest.mark.torch
def test_torch_counts_match_torch_getters():
    out = run_json("""
import json, torch, parinfo
torch.set_num_threads(1)
r = parinfo.inspect(imports=[]).to_dict()
print(json.dumps({"report": r["frameworks"]["torch"], "intra": torch.get_num_threads(),
                  "inter": torch.get_num_interop_threads()}))
""")
    assert out["report"]["intra_op"] == out["intra"] == 1
    assert out["report"]["inter_op"] == out["inter"]


@pytest.mark.torch
def test_torch_format_with_torch_has_torch_lines_first():
    out = run_json("""
import json, torch, parinfo
print(json.dumps({"ours": parinfo.parallel_info(), "theirs": torch.__config__.parallel_info()}))
""")
    theirs = out["theirs"].rstrip("\n").splitlines()
    assert out["ours"].splitlines()[: len(theirs)] == theirs


@pytest.mark.torch
def test_show_never_imports_torch_unless_asked():
    report = show_json("-i", "none")
    assert report["frameworks"]["torch"] is None
    asked = show_json("--torch", "-i", "none")
    assert asked["frameworks"]["torch"]["version"].startswith("2.")


def test_terminal_output_is_the_plain_text_with_styles():
    out = run_json("""
import contextlib, io, json, re
from rich.console import Console
import parinfo
from parinfo.cli.render_text import render
report = parinfo.inspect(imports=[])
styled = io.StringIO()
render(report, Console(file=styled, force_terminal=True, width=300))
plain = io.StringIO()
with contextlib.redirect_stdout(plain):
    render(report)
print(json.dumps({"styled": styled.getvalue(), "plain": plain.getvalue()}))
""")
    assert "\x1b[" in out["styled"] and "\x1b[" not in out["plain"]
    assert re.sub(r"\x1b\[[0-9;]*m", "", out["styled"]) == out["plain"]
