"""Launches with the layout keys, in real processes on this machine: memory bound to the nodes of each
program's CPUs (numa_maps shows it), each instance read back and checked (--check), per-instance
logs (--log-dir), one instance started alone (--instance-index)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import clean_env, run_cli

from parinfo.launch.verify import CHECK_AFTER_S, EXIT_CHECK_FAILED
from parinfo.machine.cpulist import format_cpu_list

pytestmark = pytest.mark.once  # real servers, processes or cgroups: .ci/run runs these on its first Python only

CPUS = sorted(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(len(CPUS) < 2, reason="needs two usable CPUs")
needs_syscall = pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"),
                                   reason="memory-policy system call numbers known for x86_64 and aarch64 only")
needs_numa = pytest.mark.skipif(not os.path.exists("/proc/self/numa_maps"), reason="kernel without NUMA support")

# What an instance holds, seen from inside: its index, CPUs and the policy of its first mapping.
PROBE = ("import json, os, sys, time\n"
         "policy = open('/proc/self/numa_maps').readline().split()[1]\n"
         "print(json.dumps({'i': os.environ.get('PARINFO_INSTANCE'), 'n': os.environ.get('PARINFO_INSTANCES'), "
         "'cpus': sorted(os.sched_getaffinity(0)), 'policy': policy}))\n"
         "sys.stdout.flush()\n"
         "time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)\n")
STAY = str(CHECK_AFTER_S + 1.5)  # long enough to be read back


@pytest.fixture
def profile(tmp_path):
    def write(text: str) -> str:
        path = tmp_path / "p.yaml"
        path.write_text("version: 1\nname: lay\nintra_op: 1\ninter_op: 1\n" + text)
        return str(path)
    return write


def apply(*args: str) -> subprocess.CompletedProcess:
    return run_cli("apply", *args, env=clean_env(), timeout=180)


def rows(stdout: str) -> dict[str, dict]:
    out = {}
    for line in stdout.splitlines():
        prefix, _, rest = line.partition(" ")
        out[prefix] = json.loads(rest)
    return out


def table(stderr: str) -> dict[str, list[str]]:
    """The check table's rows by instance index (the cells split on runs of spaces)."""
    lines = [line for line in stderr.splitlines() if line.startswith("parinfo:   ")]
    cells = [re.split(r"\s{2,}", line[len("parinfo:   "):].strip()) for line in lines]
    return {c[0]: c for c in cells[1:]}


@needs_syscall
@needs_numa
def test_one_program_with_local_memory_is_bound_to_its_nodes(profile):
    proc = apply(profile("memory: local\n"), "--", sys.executable, "-c", PROBE)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["policy"] == "bind:0"
    plain = apply(profile("memory: none\n"), "--", sys.executable, "-c", PROBE)
    assert json.loads(plain.stdout)["policy"] == "default"


@needs_two
@needs_syscall
@needs_numa
def test_two_instances_get_their_cpus_and_memory_and_the_table_says_so(profile):
    proc = apply(profile("memory: local\ninstances: 2\n"), "--check", "--", sys.executable, "-c", PROBE, STAY)
    assert proc.returncode == 0, proc.stderr
    got = rows(proc.stdout)
    assert got["[0]"] == {"i": "0", "n": "2", "cpus": [CPUS[0]], "policy": "bind:0"}
    assert got["[1]"] == {"i": "1", "n": "2", "cpus": [CPUS[1]], "policy": "bind:0"}
    checked = table(proc.stderr)
    header = next(line for line in proc.stderr.splitlines() if "instance  pid" in line)
    assert re.split(r"\s{2,}", header[len("parinfo:   "):].strip()) == [
        "instance", "pid", "cpus", "memory", "variables", "counts", "result"]
    assert set(checked) == {"0", "1"}
    for index, cells in checked.items():
        assert cells[2] == str(CPUS[int(index)]) and cells[3] == "bind:0" and cells[-1] == "as planned"
        assert cells[4].endswith("as set")
    assert "did not get its plan" not in proc.stderr


@needs_two
def test_an_instance_that_moves_off_its_cpus_is_named_and_check_fails(profile):
    code = ("import os, sys, time\n"
            f"if os.environ['PARINFO_INSTANCE'] == '1': os.sched_setaffinity(0, {{{CPUS[0]}}})\n"
            "time.sleep(float(sys.argv[1]))\n")
    path = profile("instances: 2\n")
    proc = apply(path, "--check", "--", sys.executable, "-c", code, STAY)
    assert proc.returncode == EXIT_CHECK_FAILED, proc.stderr
    bad = [line for line in proc.stderr.splitlines() if "did not get its plan" in line]
    assert len(bad) == 1
    assert re.fullmatch(rf"parinfo: instance 1 \(pid \d+\) did not get its plan: CPUs {CPUS[0]}, not {CPUS[1]}",
                        bad[0])
    assert table(proc.stderr)["1"][-1] == "MISMATCH" and table(proc.stderr)["0"][-1] == "as planned"
    unchecked = apply(path, "--", sys.executable, "-c", code, STAY)
    assert unchecked.returncode == 0 and "did not get its plan" in unchecked.stderr


@needs_two
def test_a_failing_instance_keeps_its_own_status_under_check(profile):
    code = ("import os, sys, time\ntime.sleep(float(sys.argv[1]))\n"
            "sys.exit(5 if os.environ['PARINFO_INSTANCE'] == '0' else 0)")
    proc = apply(profile("instances: 2\n"), "--check", "--", sys.executable, "-c", code, STAY)
    assert proc.returncode == 5


@needs_two
def test_instances_that_end_before_the_check_print_no_table(profile):
    proc = apply(profile("instances: 2\n"), "--check", "--", sys.executable, "-c", "print('quick')")
    assert proc.returncode == 0
    assert sorted(proc.stdout.splitlines()) == ["[0] quick", "[1] quick"]
    assert proc.stderr == ""


@needs_two
def test_the_counts_column_reads_the_pools_each_instance_loaded(profile):
    pytest.importorskip("numpy")
    code = "import numpy, sys, time\ntime.sleep(float(sys.argv[1]))"
    proc = apply(profile("instances: 2\n"), "--check", "--", sys.executable, "-c", code, STAY)
    assert proc.returncode == 0, proc.stderr
    for cells in table(proc.stderr).values():
        assert re.search(r"\bopenblas 1\b", cells[-2]), cells


@needs_two
def test_log_dir_holds_each_instances_output_and_the_terminal_the_prefixed_stream(profile, tmp_path):
    code = ("import os, sys; i = os.environ['PARINFO_INSTANCE']\n"
            "print('out', i); sys.stdout.flush(); sys.stderr.write('err ' + i + '\\n')")
    logs = tmp_path / "logs"
    proc = apply(profile("instances: 2\n"), "--log-dir", str(logs), "--", sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["[0] out 0", "[1] out 1"]
    assert sorted(proc.stderr.splitlines()) == ["[0] err 0", "[1] err 1"]
    for i in ("0", "1"):
        assert sorted((logs / f"instance-{i}.log").read_text().splitlines()) == [f"err {i}", f"out {i}"]


def test_a_log_dir_that_cannot_be_made_starts_nothing(profile, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = apply(profile("instances: 1\n"), "--log-dir", str(blocker / "logs"), "--",
                 sys.executable, "-c", "print('ran')")
    assert proc.returncode == 2 and "ran" not in proc.stdout
    assert proc.stderr.startswith(f"parinfo: error: --log-dir {blocker / 'logs'}: cannot write a log there")


@needs_two
@needs_syscall
@needs_numa
def test_instance_index_starts_that_instance_alone_in_place_of_parinfo(profile):
    path = profile("memory: local\ninstances: 2\n")
    proc = apply(path, "--instance-index", "1", "--", sys.executable, "-c", PROBE)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"i": "1", "n": "2", "cpus": [CPUS[1]], "policy": "bind:0"}


@pytest.mark.parametrize("args, message", [
    (["--instance-index", "2"], "--instance-index 2: profile lay lays out 2 instances here, numbered 0-1"),
    (["--instance-index", "-1"], "--instance-index"),
    (["--instance-index", "0", "--check"], "--log-dir and --check apply to programs that parinfo starts"),
])
def test_instance_index_mistakes_are_one_line_and_exit_2(profile, args, message):
    if len(CPUS) < 2:
        pytest.skip("needs two usable CPUs")
    proc = apply(profile("instances: 2\n"), *args, "--", sys.executable, "-c", "print('ran')")
    assert proc.returncode == 2 and "ran" not in proc.stdout
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_log_dir_and_instance_index_need_a_launch_of_instances(profile):
    one = apply(profile(""), "--log-dir", "logs", "--", sys.executable, "-c", "print('ran')")
    assert one.returncode == 2 and "this profile runs one program" in one.stderr and "ran" not in one.stdout
    plan = apply(profile("instances: 1\n"), "--check")
    assert plan.returncode == 2 and "give the command after --" in plan.stderr
    alone = apply(profile(""), "--instance-index", "0", "--", sys.executable, "-c", "print('ran')")
    assert alone.returncode == 2 and "runs one process, not instances" in alone.stderr


def test_one_program_is_read_back_too_with_check(profile):
    cpu = CPUS[-1]
    path = profile(f"affinity: [{cpu}]\n")
    stay = ["import os, sys, time\nprint(os.environ['PARINFO_PROFILE'])\nsys.stdout.flush()\n"
            "time.sleep(float(sys.argv[1]))", STAY]
    proc = apply(path, "--check", "--", sys.executable, "-c", *stay)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "lay\n"  # not prefixed: one program's output is its own
    assert proc.stderr.splitlines()[0] == f"parinfo: the program read back {CHECK_AFTER_S:g} s after it started " \
                                          "(from /proc):"
    assert table(proc.stderr)["-"][2] == str(cpu) and table(proc.stderr)["-"][-1] == "as planned"
    moved = apply(path, "--check", "--", sys.executable, "-c",
                  f"import os, sys, time\nos.sched_setaffinity(0, {{{CPUS[0]}, {cpu}}})\n"
                  "time.sleep(float(sys.argv[1]))", STAY)
    if len(CPUS) > 1:
        assert moved.returncode == EXIT_CHECK_FAILED
        both = format_cpu_list([CPUS[0], cpu])
        assert re.search(rf"^parinfo: the program \(pid \d+\) did not get its plan: CPUs {both}, not {cpu}$",
                         moved.stderr, re.M), moved.stderr


# A hand-built plan whose node the kernel refuses: the program still runs, and a line says what happened.
REFUSED = r"""
import sys
from parinfo.profiles.plan import Plan, Setting
from parinfo.launch.run import run_plan
plan = Plan("odd", "", "test", Setting("intra_op", 1, "given"), Setting("inter_op", 1, "given"),
            memory="local", memory_nodes=(4000,))
sys.exit(run_plan(plan, sys.argv[1:]))
"""
# The same launch where parinfo knows no system call numbers for this CPU (as on a CPU it does not know).
NO_SYSCALL = r"""
import sys
from parinfo.machine import mempolicy
from parinfo.profiles.plan import Plan, Setting
from parinfo.launch.run import run_plan
mempolicy._SYSCALLS.clear()
plan = Plan("odd", "", "test", Setting("intra_op", 1, "given"), Setting("inter_op", 1, "given"),
            memory="local", memory_nodes=(0,))
sys.exit(run_plan(plan, sys.argv[1:]))
"""


@needs_syscall
@needs_numa
def test_a_binding_the_kernel_refuses_is_said_and_the_program_runs():
    proc = subprocess.run([sys.executable, "-c", REFUSED, sys.executable, "-c", PROBE], capture_output=True,
                          text=True, env=clean_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["policy"] == "default"
    assert proc.stderr.strip() == ("parinfo: memory local not set for profile odd's program: set_mempolicy: refused "
                                   "(a node outside this process's cpuset, or not online); its memory follows the "
                                   "kernel's default policy")


@needs_syscall
@needs_numa
def test_apply_in_process_binds_the_calling_thread_and_says_what_it_reaches():
    code = ("import json, threading, time, parinfo\n"
            "t = threading.Thread(target=time.sleep, args=(1,)); t.start()\n"
            "r = parinfo.apply({'version': 1, 'name': 'm', 'memory': 'local', 'intra_op': 1}).lines()\n"
            "seen = {}\n"
            "def child(): seen['policy'] = open('/proc/thread-self/numa_maps').readline().split()[1]\n"
            "c = threading.Thread(target=child); c.start(); c.join()\n"
            "print(json.dumps({'applied': [a for a in r['applied'] if a.startswith('memory')], "
            "'main': open('/proc/self/numa_maps').readline().split()[1], 'new': seen['policy']}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["main"] == "bind:0" and got["new"] == "bind:0"
    assert len(got["applied"]) == 1 and got["applied"][0].startswith("memory bind:0 (set_mempolicy) for the calling "
                                                                      "thread")
    assert "already running keep" in got["applied"][0]


@needs_numa
@pytest.mark.skipif(shutil.which("numactl") is None, reason="numactl is not installed")
def test_without_the_system_call_numactl_binds_the_program_and_says_so():
    proc = subprocess.run([sys.executable, "-c", NO_SYSCALL, sys.executable, "-c", PROBE], capture_output=True,
                          text=True, env=clean_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["policy"] == "bind:0"
    assert proc.stderr.startswith("parinfo: memory local for profile odd's program through numactl --membind=0 "
                                  "(parinfo does not know the memory-policy system calls of ")


def test_without_the_system_call_or_numactl_the_line_says_neither_is_there(tmp_path):
    env = clean_env(PATH=str(tmp_path))  # no numactl on this PATH; the program is given by its full path
    proc = subprocess.run([sys.executable, "-c", NO_SYSCALL, sys.executable, "-c", "print('ran')"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "ran\n"
    assert proc.stderr.strip().endswith("and numactl is not installed; its memory follows the kernel's default "
                                        "policy")


def _preloadable() -> None:
    from parinfo.process import preload as pre

    for rec, locate in ((pre.allocator("jemalloc"), pre.locate_allocator), (pre.openmp_runtime("intel"),
                                                                           pre.locate_runtime)):
        if locate(rec).path is None:  # type: ignore[arg-type]
            pytest.skip(f"{rec.name} is not installed here ({rec.install})")


@needs_two
def test_each_instance_is_checked_for_its_preloaded_allocator_and_openmp_runtime(profile):
    _preloadable()
    path = profile("allocator: jemalloc\nopenmp: intel\ninstances: 2\n")
    code = "import sys, time\ntime.sleep(float(sys.argv[1]))"
    proc = apply(path, "--check", "--", sys.executable, "-c", code, STAY)
    assert proc.returncode == 0, proc.stderr
    header = next(line for line in proc.stderr.splitlines() if "instance  pid" in line)
    assert re.split(r"\s{2,}", header[len("parinfo:   "):].strip())[-2] == "preloaded"
    for cells in table(proc.stderr).values():
        assert cells[-2:] == ["jemalloc, intel", "as planned"], cells
    # An instance that starts itself again without the preload (its own environment reset) is named.
    again = ("import os, sys, time\n"
             "if os.environ['PARINFO_INSTANCE'] == '1' and 'LD_PRELOAD' in os.environ:\n"
             "    env = {k: v for k, v in os.environ.items() if k != 'LD_PRELOAD'}\n"
             "    os.execve(sys.executable, [sys.executable, '-c', 'import sys, time; time.sleep(float(sys.argv[1]))',"
             " sys.argv[1]], env)\n"
             "time.sleep(float(sys.argv[1]))\n")
    proc = apply(path, "--check", "--", sys.executable, "-c", again, STAY)
    assert proc.returncode == EXIT_CHECK_FAILED, proc.stderr
    bad = [line for line in proc.stderr.splitlines() if "did not get its plan" in line]
    assert len(bad) == 1 and bad[0].startswith("parinfo: instance 1 "), bad
    assert "jemalloc, intel not loaded (LD_PRELOAD: " in bad[0]
    assert table(proc.stderr)["1"][-2] == "none" and table(proc.stderr)["0"][-1] == "as planned"
