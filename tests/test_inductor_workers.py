"""torch.compile's compile workers (issue 40, item 3): the report's ``inductor`` row (the count
Inductor sizes its compile pool with, its source, whether a pool is alive), read only when torch is
imported and never importing ``torch._inductor``; the ``compile-workers-above-usable`` finding
under a real 0.5-CPU quota, quiet with TORCHINDUCTOR_COMPILE_THREADS=1; the container profile
bringing the workers to 1 in a launched program. Checked against torch's own
``torch._inductor.config.compile_threads`` in the same process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import clean_env, run_cli
from test_findings_pools import found, row, sections

from parinfo.process import libraries as reg
from parinfo.process.library_parts import Does

RULE = "compile-workers-above-usable"
VAR = "TORCHINDUCTOR_COMPILE_THREADS"

# Imports torch (not torch._inductor), reads the report, then asks torch itself.
_PROBE = """
import json, sys
import torch
from parinfo.diagnostics.report import inspect
r = inspect()
rows = {row.library: row for row in r.settings}
row = rows.get("inductor")
out = {"count": row.count, "source": row.source.kind.value, "note": row.note, "usable": r.machine.usable_cpus,
       "imported_by_report": "torch._inductor" in sys.modules,
       "findings": [{"id": f.id, "message": f.message, "fix": f.fix} for f in r.findings]}
import torch._inductor.config as config
out["torch_says"] = config.compile_threads
print(json.dumps(out))
"""


def _in_cgroups(procs_files: list[str], code: str, env: dict[str, str]) -> dict:
    join = " && ".join(f"echo $$ > {p}" for p in procs_files)
    cmd = ["sh", "-c", f'{join} && exec "$@"', "sh", sys.executable, "-c", code]
    proc = subprocess.run(cmd, env=clean_env(**env), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _memory_cgroup(limit: int) -> Path | str:
    """A fresh cgroup v1 memory directory limited to ``limit`` bytes, or why none could be made."""
    base = Path("/sys/fs/cgroup/memory")
    if os.geteuid() != 0 or not (base / "cgroup.procs").exists():
        return "no writable cgroup v1 memory hierarchy"
    cg = base / f"parinfo-test-{uuid.uuid4().hex[:12]}"
    try:
        cg.mkdir()
        (cg / "memory.limit_in_bytes").write_text(str(limit))
    except OSError as exc:
        return f"cannot make a memory cgroup: {exc}"
    return cg


def _two_cpus() -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs in affinity: Inductor's default is then above a 0.5-CPU quota")


# -- in real processes ----------------------------------------------------------------------------------
@pytest.mark.torch
def test_compile_workers_above_a_half_cpu_quota(quota_cgroup):
    _two_cpus()
    procs = [os.path.join(quota_cgroup, "cgroup.procs")]
    mem = _memory_cgroup(4 << 30)
    if isinstance(mem, Path):
        procs.append(str(mem / "cgroup.procs"))
    try:
        out = _in_cgroups(procs, _PROBE, {})
    finally:
        if isinstance(mem, Path):
            mem.rmdir()
    assert not out["imported_by_report"], "parinfo's report imported torch._inductor"
    want = min(32, len(os.sched_getaffinity(0)))
    assert out["count"] == out["torch_says"] == want and out["source"] == "library default"
    assert out["usable"] == 1
    (hit,) = [f for f in out["findings"] if f["id"] == RULE]
    assert f"runs {want} compile workers (default: " in hit["message"] and "0.5 CPUs" in hit["message"]
    assert "the CPU quota is not read" in hit["message"]
    if isinstance(mem, Path):
        assert f"share the memory limit of 4.0 GiB ({4 / want:.1f} GiB each)" in hit["message"]
    assert f"set {VAR}=1 " in hit["fix"] and "parinfo apply container" in hit["fix"]
    # the generic CPU-pool rules leave the compile workers to their own finding
    assert not [f for f in out["findings"] if f["message"].startswith("inductor ")]


@pytest.mark.torch
def test_quiet_with_one_compile_worker(quota_cgroup):
    _two_cpus()
    env = clean_env(**{VAR: "1"})
    procs = os.path.join(quota_cgroup, "cgroup.procs")
    cmd = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", sys.executable, "-m", "parinfo", "show", "--torch",
           "--json"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    (mine,) = [r for r in report["settings"] if r["library"] == "inductor"]
    assert mine["count"] == 1 and mine["source"]["kind"] == "variable" and mine["variable"] == VAR
    assert report["machine"]["quota"] == 0.5
    assert not [f for f in report["findings"] if f["id"] == RULE]


@pytest.mark.torch
def test_container_profile_brings_the_workers_to_one():
    code = "import json, torch._inductor.config as c; print(json.dumps(c.compile_threads))"
    proc = run_cli("apply", "container", "--", sys.executable, "-c", code, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == 1
    bare = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=300)
    assert json.loads(bare.stdout.strip().splitlines()[-1]) == min(32, len(os.sched_getaffinity(0)))


@pytest.mark.torch
def test_a_compile_pool_alive_is_reported():
    code = """
import json, torch
from parinfo.diagnostics.report import inspect
def note():
    return next(r.note for r in inspect().settings if r.library == "inductor")
before = note()
import torch._inductor.config
imported = note()
torch.compile(lambda x: (x.sin() + x.cos()).sum())(torch.randn(8))
print(json.dumps([before, imported, note(), torch._inductor.config.compile_threads]))
"""
    env = clean_env(**{VAR: "2", "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"})
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    before, imported, after, size = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "torch._inductor not imported yet" in before
    assert imported == "no compile pool started in this process"
    assert size == 2 and after.startswith("compile thread pool alive: ") and after.endswith(" of 2 workers started")


@pytest.mark.torch
def test_a_value_torch_refuses_makes_its_import_raise():
    proc = subprocess.run([sys.executable, "-c", "import torch._inductor.config"], env=clean_env(**{VAR: "two"}),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "ValueError" in proc.stderr
    assert reg.library("inductor").reading(VAR, "two").does is Does.RAISES


# -- the registry's rule, on hand-made reports -------------------------------------------------------
def test_parses_as_python_int():
    lib = reg.library("inductor")
    for value, want in (("3", 3), (" 3 ", 3), ("+3", 3), ("3_0", 30), ("0", 1), ("-2", 1), ("x", None), ("", None)):
        assert lib.count_in(VAR, {VAR: value}) == want, value


def test_default_follows_affinity_up_to_32_and_ignores_the_quota():
    from profile_machines import machine

    lib = reg.library("inductor")
    assert lib.default(machine(4, quota=0.5), lib.context(None, {}))[0] == 4
    assert lib.default(machine(64), lib.context(None, {}))[0] == 32


def test_rule_on_a_report():
    s = sections(2, quota=0.5, usable_cpus=1, affinity=[0, 1])
    s["settings"] = [row("inductor", 2)]
    (hit,) = found(s, RULE)
    assert "runs 2 compile workers (default: 2 CPUs in affinity), but the cgroup CPU quota allows 0.5 CPUs" \
        in hit.message
    assert not found(s, "count-above-quota") and not found(s, "oversubscribed-pools")
    s["settings"] = [row("inductor", 2, {"kind": "variable", "detail": f"{VAR}=2", "text": f"env {VAR}=2"},
                         variable=VAR)]
    (hit,) = found(s, RULE)
    assert f"runs 2 compile workers (env {VAR}=2)" in hit.message and "--force" in hit.fix
    s["settings"] = [row("inductor", 1)]
    assert not found(s, RULE)
    s = sections(2)  # no quota, both CPUs usable: the default fits
    s["settings"] = [row("inductor", 2)]
    assert not found(s, RULE)


def test_variable_is_listed_only_while_torch_is_imported():
    assert reg.listed_unset(VAR, modules=set()) is False
    assert reg.listed_unset(VAR, modules={"torch"}) is True
