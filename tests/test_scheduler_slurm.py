"""A Slurm allocation bounds the usable CPUs: the variables in their order, the "N(xM)" form, garbage
reported as invalid (never a traceback), the unbound-job finding, in fake trees and real processes."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import clean_env, run_cli
from fake_trees import FakeMachine

from parinfo.diagnostics.model import Report
from parinfo.diagnostics.process_rules import diagnose
from parinfo.machine.procfs import Proc
from parinfo.machine.scheduler import allocation
from parinfo.machine.topology import machine_facts
from parinfo.records.convert import dump
from parinfo.records.source import SourceKind


@pytest.mark.parametrize(("env", "cpus", "source"), [
    ({"SLURM_CPUS_PER_TASK": "4", "SLURM_CPUS_ON_NODE": "8"}, 4, "Slurm job 77: SLURM_CPUS_PER_TASK=4"),
    ({"SLURM_CPUS_ON_NODE": "8", "SLURM_JOB_CPUS_PER_NODE": "24(x2)"}, 8, "Slurm job 77: SLURM_CPUS_ON_NODE=8"),
    ({"SLURM_JOB_CPUS_PER_NODE": "24(x2),12"}, 24, "Slurm job 77: SLURM_JOB_CPUS_PER_NODE=24(x2),12"),
    ({"SLURM_JOB_CPUS_PER_NODE": "72(x2),36"}, 72, "Slurm job 77: SLURM_JOB_CPUS_PER_NODE=72(x2),36"),
    ({"SLURM_JOB_CPUS_PER_NODE": "40,8"}, 40, "Slurm job 77: SLURM_JOB_CPUS_PER_NODE=40,8"),
    ({"SLURM_JOB_CPUS_PER_NODE": " 6 "}, 6, "Slurm job 77: SLURM_JOB_CPUS_PER_NODE=6"),
])
def test_the_count_and_its_source(env, cpus, source):
    a = allocation({"SLURM_JOB_ID": "77", **env})
    assert (a.cpus, a.source.text, a.job, a.invalid) == (cpus, source, "77", {})
    assert a.source.kind is SourceKind.VARIABLE and a.source.detail == source.split(": ", 1)[1]


def test_outside_a_job_nothing_counts():
    a = allocation({"SLURM_CPUS_PER_TASK": "4", "SLURM_CPUS_ON_NODE": "8"})
    assert (a.cpus, a.source.kind, a.invalid) == (None, SourceKind.NONE, {})


@pytest.mark.parametrize(("name", "value"), [
    ("SLURM_CPUS_PER_TASK", "abc"), ("SLURM_CPUS_PER_TASK", "0"), ("SLURM_CPUS_PER_TASK", "-1"),
    ("SLURM_CPUS_PER_TASK", ""), ("SLURM_CPUS_PER_TASK", "1.5"), ("SLURM_CPUS_PER_TASK", "٣"),
    ("SLURM_CPUS_PER_TASK", "99999999999999999999"), ("SLURM_CPUS_ON_NODE", "8 cpus"),
    ("SLURM_JOB_CPUS_PER_NODE", "24(x)"), ("SLURM_JOB_CPUS_PER_NODE", "24(x2),foo"),
    ("SLURM_JOB_CPUS_PER_NODE", "(x2)"), ("SLURM_JOB_CPUS_PER_NODE", "0(x2)"),
    ("SLURM_JOB_CPUS_PER_NODE", "24(x2)\x1b[2J"),
])
def test_garbage_is_invalid_and_the_next_variable_counts(name, value):
    env = {"SLURM_JOB_ID": "5", name: value}
    if name != "SLURM_JOB_CPUS_PER_NODE":
        env["SLURM_JOB_CPUS_PER_NODE"] = "3(x4)"
    a = allocation(env)
    assert name in a.invalid and repr(value) in a.invalid[name]
    assert a.cpus == (3 if name != "SLURM_JOB_CPUS_PER_NODE" else None)


def test_a_garbage_job_id_is_invalid_but_the_count_holds():
    a = allocation({"SLURM_JOB_ID": "x;y", "SLURM_CPUS_PER_TASK": "2"})
    assert a.cpus == 2 and a.job is None and "SLURM_JOB_ID" in a.invalid
    assert a.source.text == "Slurm job: SLURM_CPUS_PER_TASK=2"


def _facts(tmp_path, env, cpus=8, affinity=None):
    m = FakeMachine(tmp_path).cpus(cpus)
    if affinity is not None:
        m = m.affinity(affinity)
    return machine_facts(m.build(), environ=env)


def test_the_allocation_bounds_usable_cpus(tmp_path):
    f = _facts(tmp_path, {"SLURM_JOB_ID": "9", "SLURM_CPUS_PER_TASK": "2"})
    assert (f.usable_cpus, f.usable_physical_cores, f.allocation) == (2, 2, 2)
    assert f.allocation_source.text == "Slurm job 9: SLURM_CPUS_PER_TASK=2"
    assert f.usable_rule == "min(affinity CPUs, cpuset CPUs, floor(cgroup quota), Slurm allocation), at least 1"
    # An allocation larger than what the process may run on changes nothing.
    g = _facts(tmp_path, {"SLURM_JOB_ID": "9", "SLURM_CPUS_PER_TASK": "16"})
    assert g.usable_cpus == 8 and g.allocation == 16


def test_environment_read_from_the_process_under_root(tmp_path):
    root = FakeMachine(tmp_path).cpus(8).file(
        "proc/self/environ", "PATH=/bin\0SLURM_JOB_ID=3\0SLURM_JOB_CPUS_PER_NODE=4(x2)\0").build()
    f = machine_facts(root)
    assert f.usable_cpus == 4 and f.allocation_source.text == "Slurm job 3: SLURM_JOB_CPUS_PER_NODE=4(x2)"


def _report(facts, settings=()):
    return Report.from_dict({"machine": dump(facts), "settings": list(settings)})


def test_unbound_job_finding(tmp_path):
    f = _facts(tmp_path, {"SLURM_JOB_ID": "9", "SLURM_CPUS_PER_TASK": "2"})
    found = diagnose(_report(f, [{"library": "openblas", "count": 8, "source": "default: 8 CPUs in affinity"}]))
    (unbound,) = [x for x in found if x.id == "scheduler-unbound"]
    assert unbound.severity == "warning"
    assert unbound.message == ("the job was allocated 2 CPUs (Slurm job 9: SLURM_CPUS_PER_TASK=2) but this "
                               "process may run on 8: the job is not bound to its CPUs")
    assert "`srun --cpu-bind=cores ...`" in unbound.fix and "`parinfo apply container`" in unbound.fix
    (above,) = [x for x in found if x.id == "count-above-usable"]
    assert above.message == ("openblas uses 8 threads but only 2 CPUs are usable "
                             "(Slurm job 9: SLURM_CPUS_PER_TASK=2)")


def test_bound_job_has_no_finding(tmp_path):
    f = _facts(tmp_path, {"SLURM_JOB_ID": "9", "SLURM_CPUS_PER_TASK": "2"}, affinity=[4, 5])
    assert f.usable_cpus == 2
    assert not [x for x in diagnose(_report(f)) if x.id in ("scheduler-unbound", "count-above-usable")]


def test_invalid_slurm_variable_finding(tmp_path):
    f = _facts(tmp_path, {"SLURM_JOB_ID": "9", "SLURM_CPUS_PER_TASK": "lots"})
    assert f.usable_cpus == 8 and f.allocation is None
    (bad,) = [x for x in diagnose(_report(f)) if x.id == "invalid-variable"]
    assert bad.message == "SLURM_CPUS_PER_TASK is invalid: 'lots' is not a positive integer"


# -- real processes -----------------------------------------------------------------------------

needs_two = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs in the affinity")


@needs_two
def test_show_in_an_unbound_job():
    out = run_cli("show", "--json", env=clean_env(SLURM_JOB_ID="41", SLURM_CPUS_PER_TASK="1"))
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    m = d["machine"]
    assert (m["usable_cpus"], m["allocation"]) == (1, 1)
    assert m["allocation_source"]["text"] == "Slurm job 41: SLURM_CPUS_PER_TASK=1"
    assert "scheduler-unbound" in {f["id"] for f in d["findings"]}
    intra = [s for s in d["settings"] if s["library"] == "parinfo intra-op"]
    assert intra and intra[0]["count"] == 1  # parinfo's own default follows the allocation
    text = run_cli("show", env=clean_env(SLURM_JOB_ID="41", SLURM_CPUS_PER_TASK="1")).stdout
    assert "Slurm allocation   1 CPU (Slurm job 41: SLURM_CPUS_PER_TASK=1)" in text


@needs_two
def test_show_in_a_bound_job():
    cpu = min(os.sched_getaffinity(0))
    out = run_cli("show", "--json", env=clean_env(SLURM_JOB_ID="41", SLURM_CPUS_PER_TASK="1"),
                  prefix=["taskset", "-c", str(cpu)])
    assert out.returncode == 0, out.stderr
    assert "scheduler-unbound" not in {f["id"] for f in json.loads(out.stdout)["findings"]}


@pytest.mark.parametrize("value", ["abc", "0", "", "1(x2", "\x1b[31m4"])
def test_garbage_in_a_real_process_is_invalid_not_a_traceback(value):
    env = clean_env(SLURM_JOB_ID="41", SLURM_CPUS_PER_TASK=value, SLURM_CPUS_ON_NODE="1")
    out = run_cli("show", "--json", env=env)
    assert out.returncode == 0 and "Traceback" not in out.stderr
    m = json.loads(out.stdout)["machine"]
    assert "SLURM_CPUS_PER_TASK" in m["invalid"] and m["allocation"] == 1
    text = run_cli("show", env=env)
    assert text.returncode == 0 and "invalid: SLURM_CPUS_PER_TASK:" in text.stdout
    assert "\x1b" not in text.stdout  # the value is shown escaped: no control character reaches the terminal


def test_another_process_allocation_is_read_from_its_environment():
    env = clean_env(SLURM_JOB_ID="8", SLURM_CPUS_ON_NODE="1")
    child = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"], env=env,
                             stdout=subprocess.PIPE, text=True)
    try:
        # read once it runs: right after exec its /proc/PID/environ can still read empty
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        f = machine_facts(proc=Proc.of(child.pid))
        assert f.allocation == 1 and f.allocation_source.text == "Slurm job 8: SLURM_CPUS_ON_NODE=1"
    finally:
        child.kill()
        child.wait()
