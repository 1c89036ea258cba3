"""machine_facts in real processes: taskset affinity, another process's pid, a real cgroup quota."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import real_cgroup
from conftest import clean_env, run_json

from parinfo.machine.procfs import Proc
from parinfo.machine.topology import machine_facts

FACTS = ("import json; from parinfo.records.convert import dump; from parinfo.machine.topology import machine_facts; "
         "print(json.dumps(dump(machine_facts())))")

needs_taskset = pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset is not installed")


@needs_taskset
def test_taskset_one_cpu_gives_one_usable_cpu():
    d = run_json(FACTS, prefix=["taskset", "-c", "0"])
    assert d["affinity"] == [0]
    assert d["usable_cpus"] == 1
    assert d["usable_physical_cores"] == 1
    assert d["logical_cpus"] == os.cpu_count()


@needs_taskset
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 CPUs")
def test_facts_of_another_pid():
    proc = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while os.sched_getaffinity(proc.pid) != {1} and time.monotonic() < deadline:
            time.sleep(0.01)
        f = machine_facts(proc=Proc.of(proc.pid))
        assert f.affinity == (1,)
        assert f.usable_cpus == 1
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def quota_cgroup():
    """A fresh cgroup limited to 0.5 CPU (50000/100000), as (path, kind); removed afterwards."""
    with real_cgroup.quota_cgroup(0.5) as made:
        if isinstance(made, str):
            pytest.skip(f"cannot make a cgroup: {made}")
        yield made


@pytest.mark.timeout(60)
def test_real_cgroup_quota_half_a_cpu(quota_cgroup):
    cg, kind = quota_cgroup
    procs = cg / "cgroup.procs"

    def enter() -> None:
        procs.write_text(str(os.getpid()))

    out = subprocess.run([sys.executable, "-c", FACTS], env=clean_env(), capture_output=True, text=True,
                         timeout=60, preexec_fn=enter)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout.strip().splitlines()[-1])
    assert d["quota"] == 0.5
    assert d["usable_cpus"] == 1
    name = "cpu.cfs_quota_us" if kind == "v1" else "cpu.max"
    assert d["quota_source"]["text"] == str(cg / name)
    assert d["cgroup_path"].endswith(cg.name)


@pytest.mark.timeout(60)
def test_real_cgroup_quota_of_another_pid(quota_cgroup):
    cg, _ = quota_cgroup
    procs = cg / "cgroup.procs"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                             preexec_fn=lambda: procs.write_text(str(os.getpid())))
    try:
        f = machine_facts(proc=Proc.of(child.pid))
        assert f.quota == 0.5 and f.usable_cpus == 1
        assert machine_facts().quota_source != f.quota_source  # this process is not in that cgroup
    finally:
        child.kill()
        child.wait()
