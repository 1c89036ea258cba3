"""bench/launch.py: its smallest run prints the machine's usable parallelism, one figure per arm and the
ratio, and every arm held what it claims (malloc and omp_* calls served by the files it preloads,
instances pinned or not); an arm that lacks what it claims stops the bench."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from parinfo.process import preload

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _jemalloc() -> str | None:
    path = preload.locate_allocator(preload.allocator("jemalloc")).path
    return os.path.realpath(path) if path else None


def _iomp() -> str | None:
    path = preload.locate_runtime(preload.openmp_runtime("intel")).path
    return os.path.realpath(path) if path else None


def _bench_module():
    sys.path.insert(0, str(BENCH))
    try:
        import launch
    finally:
        sys.path.remove(str(BENCH))
    return launch


def _result(cpus: list[int], malloc: str, omp: str, env: dict[str, str] | None = None) -> dict:
    return {"affinity_start": cpus, "affinity_end": cpus, "libs": [malloc, omp], "malloc_from": malloc,
            "omp_from": omp, "env": env or {}, "requests": 10, "checksum": 1.0, "torch_threads": 1,
            "torch_interop_threads": 1, "os_threads": 3}


def test_an_arm_without_what_it_claims_stops_the_bench() -> None:
    launch = _bench_module()
    files = launch.Files("/opt/lib/libjemalloc.so.2", "/opt/lib/libiomp5.so")
    arm = launch.Arm("run_cpu", lambda server, env: [], {}, pinned=True, preloads=True)
    good = [_result([0], files.jemalloc, files.iomp, {"MALLOC_CONF": "x"}),
            _result([1], files.jemalloc, files.iomp, {"MALLOC_CONF": "x"})]
    launch.check(arm, good, files, [0, 1])  # holds what it claims: no error

    glibc = [dict(good[0], malloc_from="/lib/libc.so.6"), good[1]]
    with pytest.raises(launch.BenchError, match=r"run_cpu did not have what it claims: instance 0: malloc calls"):
        launch.check(arm, glibc, files, [0, 1])
    gomp = [good[0], dict(good[1], omp_from="/torch/lib/libgomp.so.1")]
    with pytest.raises(launch.BenchError, match=r"instance 1: omp_\* calls reach /torch/lib/libgomp.so.1"):
        launch.check(arm, gomp, files, [0, 1])
    shared = [dict(good[0], affinity_start=[0, 1]), good[1]]
    with pytest.raises(launch.BenchError, match="not pinned to disjoint CPUs"):
        launch.check(arm, shared, files, [0, 1])

    plain = launch.Arm("plain", lambda server, env: [], {}, pinned=False, preloads=False)
    preloaded = [_result([0, 1], "/lib/libc.so.6", "/torch/lib/libgomp.so.1"),
                 _result([0, 1], files.jemalloc, "/torch/lib/libgomp.so.1")]
    with pytest.raises(launch.BenchError, match="plain did not have what it claims: instance 1: malloc"):
        launch.check(plain, preloaded, files, [0, 1])


@pytest.mark.torch
@pytest.mark.timeout(600)
def test_smallest_run_prints_each_arm_and_verifies_what_it_held(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    jemalloc = _jemalloc()
    if jemalloc is None:
        pytest.skip("jemalloc is not installed")
    if shutil.which("lscpu") is None or shutil.which("taskset") is None:
        pytest.skip("run_cpu needs lscpu and taskset")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("two instances need two CPUs")
    iomp = _iomp()
    out_json = tmp_path / "launch.json"
    proc = subprocess.run([sys.executable, str(BENCH / "launch.py"), "--quick", "--rounds", "1", "--seconds",
                           "0.3", "--json", str(out_json)], capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()

    assert re.match(r"usable parallelism: [\d.]+ of \d+ CPUs \((quiet|BUSY|UNSTEADY)", lines[0])
    assert sum(line.startswith("usable parallelism:") for line in lines) == 2  # at the start and the end
    assert re.search(r"^parinfo preloads allocator jemalloc: " + re.escape(jemalloc) + "$", proc.stdout, re.M)
    assert re.search(r"^round 1: plain [\d.]+  run_cpu [\d.]+  parinfo [\d.]+ requests/s$", proc.stdout, re.M)
    for arm in ("plain", "run_cpu", "parinfo"):
        assert f"{arm}: verified" in lines
        assert re.search(rf"^{arm} +[\d.]+ +[\d.]+ +[\d.]+ +[\d.]+$", proc.stdout, re.M)
    assert re.match(r"parinfo / run_cpu: [\d.]+ \(median of per-round ratios [\d.]+; goal >= 1.0\): (met|NOT met)",
                    lines[-1])

    report = json.loads(out_json.read_text())
    arms = report["arms"]
    assert set(arms) == {"plain", "run_cpu", "parinfo"}
    usable = sorted(os.sched_getaffinity(0))
    for name, arm in arms.items():
        assert len(arm["rates"]) == 1 and arm["rates"][0] > 0
        facts = arm["facts"]
        assert len(facts) == 2 and all(f["requests"] >= 1 for f in facts)
        if name == "plain":
            for f in facts:
                assert f["affinity_start"] == usable
                assert "jemalloc" not in f["malloc_from"] and not any("libiomp5" in p for p in f["libs"])
                assert "LD_PRELOAD" not in f["env"]
            continue
        cpus = [f["affinity_start"] for f in facts]
        flat = [c for instance in cpus for c in instance]
        assert len(set(flat)) == len(flat) and all(c != usable for c in cpus)
        for f in facts:
            assert f["malloc_from"] == jemalloc and jemalloc in f["libs"]
            assert "MALLOC_CONF" in f["env"]
            if iomp:
                assert f["omp_from"] == iomp
    if iomp:  # run_cpu binds Intel's threads; parinfo leaves them unbound inside the pinned instance
        assert all(f["env"].get("KMP_AFFINITY") for f in arms["run_cpu"]["facts"])
        assert not any("KMP_AFFINITY" in f["env"] for f in arms["parinfo"]["facts"])
    assert sorted(f["env"]["PARINFO_INSTANCE"] for f in arms["parinfo"]["facts"]) == ["0", "1"]
    assert report["parinfo_over_run_cpu"] == pytest.approx(arms["parinfo"]["rates"][0] / arms["run_cpu"]["rates"][0])


FAKE_SERVER = """
import os, sys, time
folder = sys.argv[1]
if os.environ.get("FAKE_MODE") == "early":
    sys.exit("fake server: no model here")
open(os.path.join(folder, f"ready-{os.getpid()}"), "w").close()
while not os.path.exists(os.path.join(folder, "go")):
    time.sleep(0.01)
print("fake server: failing after the go", file=sys.stderr)
sys.exit(3)
"""


@pytest.mark.parametrize(("mode", "message"), [
    ("early", r"plain: 0 of 2 instances became ready; the launcher's output ends:\n(.|\n)*no model here"),
    ("late", r"plain: exit codes \[3, 3\], 0 of 2 results(.|\n)*failing after the go"),
])
def test_a_failing_instance_stops_the_bench_with_its_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            mode: str, message: str) -> None:
    launch = _bench_module()
    server = tmp_path / "fake_server.py"
    server.write_text(FAKE_SERVER)
    monkeypatch.setattr(launch, "SERVER", str(server))
    log = tmp_path / "launchers.log"
    log.write_text("")
    files = launch.Files("/opt/lib/libjemalloc.so.2", None)
    plain = next(a for a in launch.make_arms(str(tmp_path), files, "unused.yaml", str(log)) if a.name == "plain")
    plain.env["FAKE_MODE"] = mode
    with pytest.raises(launch.BenchError, match=message):
        launch.run_once(plain, [], 0.1, str(tmp_path), str(log))
