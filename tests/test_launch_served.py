"""The whole launch a server gets, end to end: a profile with an allocator, Intel's OpenMP runtime and
local memory, run as two instances with per-instance logs and the read-back check; each instance then
checks in itself what it holds (maps, numa_maps, CPUs, torch's counts) and runs `parinfo show --check`
there. Skips, saying why, where torch, a library, NUMA support or a second CPU is missing."""
from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest
from conftest import HAVE_TORCH, clean_env, run_cli

from parinfo.launch.verify import CHECK_AFTER_S
from parinfo.process import preload as pre

# What an instance holds, read in itself, and its own `parinfo show --check --json` (in-process, so
# torch's counts are this process's); then it stays long enough for parinfo's read-back.
INSTANCE = textwrap.dedent(r"""
    import contextlib, io, json, os, sys, time
    import torch
    (torch.ones(256, 256) @ torch.ones(256, 256)).sum()
    from parinfo.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(["show", "--check", "--json"])
            rc = 0
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
    report = json.loads(out.getvalue())
    mapped = sorted({os.path.realpath(line.split()[-1]) for line in open("/proc/self/maps")
                     if len(line.split()) == 6 and line.split()[-1].startswith("/")})
    print(json.dumps({
        "instance": os.environ["PARINFO_INSTANCE"], "cpus": sorted(os.sched_getaffinity(0)),
        "policy": open("/proc/self/numa_maps").readline().split()[1], "mapped": mapped,
        "torch": [torch.get_num_threads(), torch.get_num_interop_threads()], "check": rc,
        "findings": [f["id"] for f in report["findings"]],
        "allocator": report["backend"]["allocator"]["source"]["kind"],
        "openmp": report["backend"]["openmp_runtime"]["source"]["kind"],
    }), flush=True)
    time.sleep(float(sys.argv[1]))
""")


def _installed(path: str | None, what: str, install: str) -> str:
    if path is None:
        pytest.skip(f"{what} is not installed here ({install})")
    return os.path.realpath(path)


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two instances need two usable CPUs")
@pytest.mark.skipif(not os.path.exists("/proc/self/numa_maps"), reason="kernel without NUMA support")
@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"),
                    reason="memory-policy system call numbers known for x86_64 and aarch64 only")
@pytest.mark.parametrize("allocator", ["jemalloc", "tcmalloc"])
def test_two_instances_hold_the_allocator_intel_openmp_local_memory_and_the_counts(tmp_path, allocator):
    rec, rt = pre.allocator(allocator), pre.openmp_runtime("intel")
    malloc_lib = _installed(pre.locate_allocator(rec).path, allocator, rec.install)
    omp_lib = _installed(pre.locate_runtime(rt).path, "Intel OpenMP", rt.install)
    prof = tmp_path / "serve.yaml"
    prof.write_text(f"version: 1\nname: serve\nintra_op: cores_per_instance\ninter_op: 1\nallocator: {allocator}\n"
                    "openmp: intel\nmemory: local\ninstances: {count: 2}\n")
    logs = tmp_path / "logs"
    proc = run_cli("apply", str(prof), "--check", "--log-dir", str(logs), "--", sys.executable, "-c", INSTANCE,
                   str(CHECK_AFTER_S + 1.5), env=clean_env(), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]  # --check: every instance as planned
    held = {}
    for index in (0, 1):
        # each instance's own output, in its own log file (the terminal has the prefixed stream)
        lines = (logs / f"instance-{index}.log").read_text().splitlines()
        held[index] = json.loads(next(line for line in lines if line.startswith("{")))
        assert f"[{index}] " + lines[0] in proc.stdout
    for index, got in held.items():
        assert got["instance"] == str(index) and len(got["cpus"]) == 1
        assert {malloc_lib, omp_lib} <= set(got["mapped"]), got["mapped"]
        assert got["policy"].startswith("bind:"), got["policy"]
        assert got["torch"] == [1, 1]  # one core per instance: intra-op 1, and the profile's inter-op 1
        assert got["check"] == 0, got["findings"]
        assert got["allocator"] == "profile" and got["openmp"] == "profile"
    assert held[0]["cpus"] != held[1]["cpus"]
    header = next(line for line in proc.stderr.splitlines() if "instance  pid" in line)
    assert header.split()[-2:] == ["preloaded", "result"]
    assert proc.stderr.count("as planned") == 2 and "did not get its plan" not in proc.stderr
