"""Built-in workloads, command workloads and the counts each point really ran with."""
from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest
from conftest import clean_env, run_cli

FAST = ("--repeats", "2", "--min-time", "0", "--no-noise-check", "--json")


def tune_json(*args, env=None):
    proc = run_cli("tune", *FAST, *args, env=env, timeout=170)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.timeout(180)
def test_matmul_points_run_with_their_blas_count_in_a_fresh_process():
    out = tune_json("--size", "128", "--max", "2")
    assert out["mode"] == "subprocess" and out["workload"].startswith("matmul 128x128")
    for p in out["points"]:
        assert p["in_force"]["openblas"] == [p["intra_op"]]
        # 2 repeats a measurement; a point re-measured to confirm a close call pools both measurements
        assert p["median_s"] > 0 and p["repeats"] in (2, 4)


@pytest.mark.timeout(180)
def test_matmul_in_process_limits_the_loaded_pools():
    out = tune_json("--size", "128", "--max", "3", "--in-process")
    assert out["mode"] == "in-process"
    assert [p["in_force"]["openblas"] for p in out["points"]] == [[1], [2], [3]]


@pytest.mark.timeout(180)
def test_capped_count_is_reported_not_hidden():
    # OpenBLAS caps OPENBLAS_NUM_THREADS at the CPUs it sees: asking for more is said, not believed.
    cpus = len(os.sched_getaffinity(0))
    out = tune_json("--size", "128", "--min", str(cpus + 1), "--max", str(cpus + 1))
    ran = out["points"][0]["in_force"]["openblas"]
    if ran != [cpus + 1]:
        assert any("openblas ran" in n for n in out["notes"])


@pytest.mark.timeout(180)
def test_elementwise_workload_uses_the_runtime_pool():
    out = tune_json("elementwise", "--max", "2")
    assert "parinfo.parallel_for" in out["workload"]
    assert {p["intra_op"] for p in out["points"]} == {1, 2}
    for p in out["points"]:
        assert p["in_force"]["parinfo"]["intra_op"] == p["intra_op"]


@pytest.mark.timeout(180)
def test_ensemble_workload_sweeps_inter_op_pairs():
    out = tune_json("ensemble", "--max", "2")
    assert out["axis"] == "inter-op x intra-op threads"
    assert out["objective"] == "latency"
    pts = {(p["inter_op"], p["intra_op"]) for p in out["points"]}
    assert pts == {(1, 1), (1, 2), (2, 1), (2, 2)}  # the 2-D latency search: small grids are measured whole
    for p in out["points"]:
        assert p["in_force"]["parinfo"]["inter_op"] == p["inter_op"]
    assert set(out["counts"]) == {"intra_op", "inter_op"}


@pytest.mark.timeout(180)
def test_command_is_timed_as_a_whole_process_with_the_variables_set(tmp_path):
    log = tmp_path / "env.log"
    script = (f"import os; open({str(log)!r}, 'a').write(os.environ['OMP_NUM_THREADS'] + ' ' + "
              f"os.environ['OPENBLAS_NUM_THREADS'] + ' ' + os.environ['PARINFO_NUM_INTEROP_THREADS'] + '\\n')")
    out = tune_json("--max", "2", "--no-confirm", "--", sys.executable, "-c", script)
    assert out["mode"] == "command" and out["workload"].startswith("command ")
    assert [p["intra_op"] for p in out["points"]] == [1, 2]
    seen = log.read_text().split("\n")
    # warm-up + 2 repeats per point, each run with its own counts
    assert seen.count("1 1 1") == 3 and seen.count("2 2 1") == 3


@pytest.mark.timeout(180)
def test_command_throughput_runs_concurrent_copies(tmp_path):
    log = tmp_path / "runs.log"
    script = f"import os; open({str(log)!r}, 'a').write(os.environ['PARINFO_NUM_THREADS'] + '\\n')"
    out = tune_json("--objective", "throughput", "--max", "2", "--no-confirm", "--", sys.executable, "-c", script)
    runs = log.read_text().split()
    # 1x2 and 2x1 (or 1x1): a 2-request point starts two copies per run
    measured = {(p["inter_op"], p["intra_op"]) for p in out["points"]}
    expected = sum(3 * inter for inter, _ in measured)
    assert len(runs) == expected


@pytest.mark.torch
@pytest.mark.timeout(180)
def test_torch_framework_sets_torch_counts_in_the_worker():
    out = tune_json("--framework", "torch", "--size", "128", "--max", "2")
    assert "torch.mm" in out["workload"]
    for p in out["points"]:
        assert p["in_force"]["torch"]["intra_op"] == p["intra_op"]


@pytest.mark.timeout(120)
def test_progress_bar_only_on_a_terminal(tmp_path):
    import threading

    (tmp_path / "slow.py").write_text("import time\ndef f():\n    time.sleep(0.01)\n")
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:  # keep reading so the child never blocks on a full terminal buffer
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc = subprocess.run([sys.executable, "-m", "parinfo", "tune", "--module", "slow:f", "--max", "2",
                               "--repeats", "2", "--min-time", "0", "--no-noise-check"],
                              env=clean_env(PYTHONPATH=str(tmp_path), TERM="xterm", COLUMNS="100"),
                              stdout=subprocess.PIPE, stderr=slave, timeout=100)
    finally:
        os.close(slave)
        reader.join(timeout=10)
        os.close(master)
    err = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0
    assert "candidates" in err and "measuring" in err
    assert "Best: " in proc.stdout.decode()


@pytest.mark.timeout(120)
def test_in_process_tune_puts_the_counts_back():
    from conftest import run_json

    code = ("import json, parinfo\n"
            "parinfo.set_num_threads(1)\n"
            "r = parinfo.tune('matmul', size=64, max_threads=2, in_process=True, repeats=1, min_time=0,"
            " check_noise=False)\n"
            "from parinfo.process.setter import import_threadpoolctl as threadpoolctl\n"
            "blas = [p['num_threads'] for p in threadpoolctl().threadpool_info() if p['user_api'] == 'blas']\n"
            "print(json.dumps([parinfo.get_num_threads(), blas, sorted(p.intra for p in r.search.stats)]))")
    count, blas, measured = run_json(code)
    assert measured == [1, 2]
    assert count == 1 and set(blas) == {1}
