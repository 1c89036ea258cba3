"""`parinfo show --pid` on real processes: counts in force read from memory, launch-environment counts
marked as such, and the edges (a kernel thread, a zombie, a process that exits during the read,
a process of another user)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import clean_env, run_cli, start_target, stop_target

from parinfo.outside.inforce import IN_FORCE
from parinfo.outside.remote import FROM_LAUNCH
from parinfo.process.tasks import ProcessGone

NUMPY_TARGET = """
import json, sys
import numpy, threadpoolctl
if len(sys.argv) > 1:
    threadpoolctl.threadpool_limits(int(sys.argv[1]))
print(json.dumps({i["filepath"]: i["num_threads"] for i in threadpoolctl.threadpool_info()}), flush=True)
sys.stdin.readline()
"""

# Loads a libgomp by hand and sets its count to 1 for the main thread: the launch value is stale.
GOMP_TARGET = """
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
lib.omp_set_num_threads(1)
print(json.dumps({"max": lib.omp_get_max_threads()}), flush=True)
sys.stdin.readline()
"""


def _one_line_exit_2(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr.strip()


def _gomp() -> Path:
    for package in ("sklearn", "torch"):
        spec = importlib.util.find_spec(package)  # found, not imported
        if spec is None or not spec.origin:
            continue
        site = Path(spec.origin).parent.parent
        for found in sorted(site.glob("scikit_learn.libs/libgomp*.so*")) + sorted(site.glob("torch/lib/libgomp*.so*")):
            return found
    pytest.skip("no libgomp shipped in this environment")


def test_numpy_limited_after_import_shows_the_count_read_from_memory():
    pytest.importorskip("numpy")
    proc, truth = start_target(NUMPY_TARGET, "1", env=clean_env(OPENBLAS_NUM_THREADS="2"))
    try:
        report = json.loads(run_cli("show", "--pid", str(proc.pid), "--json").stdout)
        blas = [p for p in report["pools"] if p["library"] == "openblas"]
        assert blas and {p["filepath"]: p["num_threads"] for p in blas} == truth == {p["filepath"]: 1 for p in blas}
        assert all(p["count_source"] == IN_FORCE.to_json() and "launch_count" not in p for p in blas)
        text = run_cli("show", "--pid", str(proc.pid))
        assert text.returncode == 0 and f"1 thread   {IN_FORCE}" in text.stdout, text.stdout
        assert "read from the process's memory: 1 of 1 pool" in text.stdout
    finally:
        stop_target(proc)


def test_a_count_only_the_launch_environment_gives_is_marked_never_in_force():
    gomp = _gomp()
    proc, truth = start_target(GOMP_TARGET, str(gomp), env=clean_env(OMP_NUM_THREADS="3"))
    try:
        assert truth == {"max": 1}  # what is in force: not what the launch environment says
        report = json.loads(run_cli("show", "--pid", str(proc.pid), "--json").stdout)
        (row,) = [p for p in report["pools"] if p["library"] == "libgomp"]
        assert row["num_threads"] is None
        assert (row["launch_count"], row["count_source"]) == (3, FROM_LAUNCH.to_json())
        assert "OMP_NUM_THREADS=3" in row["launch_from"]
        text = run_cli("show", "--pid", str(proc.pid)).stdout
        assert f"3 threads at launch   {FROM_LAUNCH}" in text and "in force (read" not in text
    finally:
        stop_target(proc)


def test_a_count_neither_readable_nor_set_at_launch_is_unknown_with_why():
    gomp = _gomp()
    proc, _ = start_target(GOMP_TARGET, str(gomp))
    try:
        report = json.loads(run_cli("show", "--pid", str(proc.pid), "--json").stdout)
        (row,) = [p for p in report["pools"] if p["library"] == "libgomp"]
        assert row["num_threads"] is None and "launch_count" not in row
        assert row["count_source"]["text"].startswith("unknown (kept inside the process")
        assert "none of OMP_NUM_THREADS was set at launch" in row["count_source"]["text"]
    finally:
        stop_target(proc)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_root_reads_the_counts_of_a_process_of_another_user():
    pytest.importorskip("numpy")
    proc, truth = start_target(NUMPY_TARGET, "1", env=clean_env(HOME="/tmp"),
                         prefix=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    try:
        report = json.loads(run_cli("show", "--pid", str(proc.pid), "--json").stdout)
        assert {p["filepath"]: p["num_threads"] for p in report["pools"] if p["library"] == "openblas"} == truth
        assert "unreadable" not in report["process"]
    finally:
        stop_target(proc)


def _kernel_thread() -> tuple[int, str] | None:
    for entry in sorted(os.listdir("/proc"), key=lambda e: int(e) if e.isdigit() else 1 << 30):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[6]) & 0x00200000:  # PF_KTHREAD
            return int(entry), stat[stat.index("(") + 1:stat.rindex(")")]
    return None


def test_a_kernel_thread_is_named_as_one():
    found = _kernel_thread()
    if found is None:
        pytest.skip("no kernel thread is visible in this pid namespace")
    pid, name = found
    line = _one_line_exit_2(run_cli("show", "--pid", str(pid)))
    assert line == f"parinfo: error: pid {pid} is a kernel thread ({name}): it has no user-space pools"


def test_a_zombie_is_named_with_its_parent():
    parent = subprocess.Popen([sys.executable, "-c", "import os, sys, time\npid = os.fork()\n"
                               "if pid == 0:\n    os._exit(0)\nprint(pid, flush=True)\nsys.stdin.readline()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=clean_env())
    try:
        child = int(parent.stdout.readline()) if parent.stdout else 0
        for _ in range(100):  # until the child has exited
            if Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
            threading.Event().wait(0.05)
        line = _one_line_exit_2(run_cli("show", "--pid", str(child)))
        # what the kernel calls them (python, python3, ...: whatever file the interpreter was started as)
        name, parent_name = (Path(f"/proc/{pid}/comm").read_text().strip() for pid in (child, parent.pid))
        assert f"pid {child} ({name}) is a zombie" in line
        assert f"its parent, pid {parent.pid} ({parent_name}), has not collected it yet" in line
    finally:
        stop_target(parent)


def test_a_process_that_exits_during_the_read_gets_one_line():
    from parinfo.diagnostics.outside_report import inspect_pid
    from parinfo.outside.remote import open_process

    proc = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(0.5)"],
                            stdout=subprocess.PIPE, text=True, env=clean_env())
    reaper = threading.Thread(target=proc.wait, daemon=True)  # reaped at once: no zombie is left behind
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"
        reaper.start()
        with pytest.raises(ProcessGone) as err:
            inspect_pid(open_process(proc.pid), sample_seconds=3.0)  # it exits while its threads are sampled
        assert str(err.value) == f"pid {proc.pid} exited while parinfo was reading it: nothing left to report"
    finally:
        proc.kill()
        reaper.join(timeout=10)


# A parent that starts two numpy children with multiprocessing (one limited after import); each child
# reports threadpoolctl's counts (ground truth inside it); the parent prints them and waits on stdin.
TREE_TARGET = """
import json, multiprocessing, os, sys

def work(limit, queue, stop):
    import numpy, threadpoolctl
    if limit:
        threadpoolctl.threadpool_limits(limit)
    queue.put((os.getpid(), {i["filepath"]: i["num_threads"] for i in threadpoolctl.threadpool_info()}))
    stop.wait(60)

ctx = multiprocessing.get_context("fork")
queue, stop = ctx.Queue(), ctx.Event()
children = [ctx.Process(target=work, args=(limit, queue, stop)) for limit in (None, 1)]
for child in children:
    child.start()
print(json.dumps(dict(queue.get(timeout=60) for _ in children)), flush=True)
sys.stdin.readline()
stop.set()
for child in children:
    child.join()
"""


def test_show_pid_children_lists_each_childs_pools_with_its_pid():
    pytest.importorskip("numpy")
    proc, truth = start_target(TREE_TARGET)
    try:
        truth = {int(pid): pools for pid, pools in truth.items()}
        report = json.loads(run_cli("show", "--pid", str(proc.pid), "--children", "--json").stdout)
        rows = [p for p in report["pools"] if p["library"] == "openblas"]
        assert {p["pid"] for p in rows} == set(truth), report["pools"]
        for row in rows:
            assert row["num_threads"] == truth[row["pid"]][row["filepath"]]  # threadpoolctl inside the child
            assert row["count_source"] == IN_FORCE.to_json()
        assert sorted(row["num_threads"] for row in rows) == sorted(
            n for pools in truth.values() for n in pools.values())
        text = run_cli("show", "--pid", str(proc.pid), "--children").stdout
        for pid in truth:
            assert any(line.strip().startswith(f"pid {pid}: OpenBLAS") for line in text.splitlines()), text
        alone = json.loads(run_cli("show", "--pid", str(proc.pid), "--json").stdout)
        assert alone["pools"] == [] or all("pid" not in p for p in alone["pools"])
    finally:
        stop_target(proc)
