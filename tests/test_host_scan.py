"""`parinfo host` on real processes, each set of targets in a fresh cgroup of its own so that other
processes of the machine stay out of the sums: numpy processes at different counts (one limited
after import), a process with many threads, a family of workers from one parent, a zombie, a
taskset process, and processes of another user. Ground truth comes from threadpoolctl inside the
targets and from /proc."""
from __future__ import annotations

import json
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from conftest import Targets, clean_env, run_cli

import parinfo.host
from parinfo.diagnostics import fleet_rules
from parinfo.diagnostics.fleet_rows import ProcessLoad
from parinfo.records.source import Kind

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# Prints threadpoolctl's OpenBLAS count (ground truth inside the process), then waits for stdin.
TARGET = """
import sys, threadpoolctl, numpy
limit = {limit!r}
if limit:
    threadpoolctl.threadpool_limits(limit)
pool = [p for p in threadpoolctl.threadpool_info() if p["internal_api"] == "openblas"][0]
print(pool["num_threads"], flush=True)
sys.stdin.readline()
"""

FAMILY = """
import json, multiprocessing, os, sys, threadpoolctl, numpy

def count(_):
    import time
    time.sleep(0.3)  # every worker takes one task
    pool = [p for p in threadpoolctl.threadpool_info() if p["internal_api"] == "openblas"][0]
    return os.getpid(), pool["num_threads"]

with multiprocessing.get_context("fork").Pool(3) as workers:
    print(json.dumps(dict(workers.map(count, range(3)))), flush=True)
    sys.stdin.readline()
"""

THREADS = """
import sys, threading
stop = threading.Event()
for _ in range(60):
    threading.Thread(target=stop.wait, daemon=True).start()
print(threading.active_count(), flush=True)
sys.stdin.readline()
"""

ZOMBIE = """
import os, sys
child = os.fork()
if child == 0:
    os._exit(0)
print(child, flush=True)
sys.stdin.readline()
"""


def _cpu_mount() -> str | None:
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            tail = right.split()
            if len(tail) >= 3 and tail[0] == "cgroup" and "cpu" in tail[2].split(","):
                return left.split()[4]
    return None


@pytest.fixture
def cgroup() -> Iterator[str]:
    """A fresh v1 cgroup with a 2-CPU quota (its usable CPUs: 2), removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("creating a cgroup needs root")
    mount = _cpu_mount()
    if mount is None:
        pytest.skip("no cgroup v1 hierarchy with the cpu controller")
    path = os.path.join(mount, f"parinfo-host-{uuid.uuid4().hex[:8]}")
    try:
        os.mkdir(path)
        with open(os.path.join(path, "cpu.cfs_period_us"), "w") as fh:
            fh.write("100000")
        with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as fh:
            fh.write("200000")
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup here: {exc}")
    try:
        yield path
    finally:
        for _ in range(50):
            try:
                os.rmdir(path)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)


@pytest.fixture
def targets(cgroup: str) -> Iterator[Targets]:
    t = Targets(cgroup)
    try:
        yield t
    finally:
        t.stop()


def _scan(cgroup: str) -> parinfo.host.HostReport:
    return parinfo.host.scan(cgroup=cgroup, interval=0)


def counted(findings: list) -> list:
    """The findings about counts: the numpy the targets load may be a known-bad version too
    (tests/test_advisories.py checks those)."""
    return [f for f in findings if f.id != "known-bad-version"]


def _tasks(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_numpy_processes_at_different_counts_in_force(targets, cgroup):
    two, truth_two = targets.start(TARGET.format(limit=None))
    one, truth_one = targets.start(TARGET.format(limit=1), env=clean_env(OPENBLAS_NUM_THREADS="2"))
    assert (truth_two, truth_one) == ("2", "1")
    report = _scan(cgroup)
    assert sorted(p.pid for p in report.processes) == sorted([two.pid, one.pid])
    (group,) = report.cgroups
    assert group.path == cgroup and group.quota == 2 and group.usable_cpus == 2
    for proc, truth in ((two, 2), (one, 1)):
        row = report.process(proc.pid)
        (pool,) = [p for p in row.pools if not p.duplicate_of]
        assert pool.library == "openblas" and pool.in_force and pool.count == truth, pool
        assert pool.source.text == "in force (read from the process's memory)"
        assert row.threads == _tasks(proc.pid) and row.usable_cpus == 2
        assert sum(row.states.values()) == row.threads
    # limited after import: its launch environment asked for 2, memory says 1, and 1 is shown
    assert report.process(one.pid).widest == ("openblas", 1)
    assert group.threads_at_once == 3
    (finding,) = counted(group.findings)
    assert finding.id == "host-oversubscribed"
    assert str(two.pid) in finding.message and str(one.pid) in finding.message
    assert "3 threads at once" in finding.message and "2 usable CPUs" in finding.message
    assert "OPENBLAS_NUM_THREADS=1" in finding.fix


def test_threads_grouped_by_owner(targets, cgroup):
    """A numpy process holds its main thread and OpenBLAS's workers alone (numpy's import starts
    them): host gives each its owner, in the JSON and the table."""
    proc, truth = targets.start(TARGET.format(limit=None))
    time.sleep(0.3)  # spinning OpenBLAS workers go to sleep
    row = _scan(cgroup).process(proc.pid)
    assert row.owners == {"openblas (numpy)": _tasks(proc.pid) - 1, "main thread": 1}
    assert int(truth) - 1 == row.owners["openblas (numpy)"]
    report = _scan(cgroup)
    (listed,) = [p for p in report.to_dict()["processes"] if p["pid"] == proc.pid]
    assert listed["threads"]["owners"] == row.owners
    shown = ", ".join(f"{owner} {n}" for owner, n in row.owners.items())
    assert f"threads by owner: {shown}" in report.table() and f"openblas (numpy) {int(truth) - 1}" in shown


def test_the_fix_works_as_printed(targets, cgroup):
    for _ in range(2):
        targets.start(TARGET.format(limit=None))
    (finding,) = counted(_scan(cgroup).cgroups[0].findings)
    assert finding.id == "host-oversubscribed" and "4 threads at once" in finding.message
    given = dict(re.findall(r"\b([A-Z_]+_NUM_THREADS)=(\d+)", finding.fix.split(";")[0]))
    assert given == {"OPENBLAS_NUM_THREADS": "1"}  # 2 usable CPUs shared by 2 processes
    targets.stop()
    targets.procs = []
    fixed = [targets.start(TARGET.format(limit=None), env=clean_env(**given)) for _ in range(2)]
    assert [truth for _, truth in fixed] == ["1", "1"]  # threadpoolctl inside agrees with the fix
    group = _scan(cgroup).cgroups[0]
    assert group.threads_at_once == 2 and counted(group.findings) == []


def test_a_family_of_workers_from_one_parent(targets, cgroup):
    parent, line = targets.start(FAMILY)
    truth = {int(pid): n for pid, n in json.loads(line).items()}
    report = _scan(cgroup)
    (family,) = report.families
    assert family.parent == parent.pid and sorted(family.pids) == sorted(truth)
    for pid, n in truth.items():
        row = report.process(pid)
        assert row.family == family.key and row.ppid == parent.pid
        assert row.widest == ("openblas", n)
    group = report.cgroups[0]
    assert group.threads_at_once == sum(truth.values()) + 2  # the parent's own pool of 2 counts too
    (finding,) = counted(group.findings)
    assert f"for the 3 workers of pid {parent.pid}" in finding.fix
    assert "run at most 1 worker there" in finding.fix and "OPENBLAS_NUM_THREADS=1" in finding.fix


def test_a_process_with_many_threads(targets, cgroup):
    proc, line = targets.start(THREADS)
    assert line == "61"
    row = _scan(cgroup).process(proc.pid)
    assert row.threads == 61 == _tasks(proc.pid)
    assert row.pools == [] and row.widest == (None, 1)
    assert sum(g.threads for g in row.groups) == 61
    assert row.states.get("S", 0) >= 60


def test_zombie_and_kernel_threads_have_no_row(targets, cgroup):
    parent, child = targets.start(ZOMBIE)
    for _ in range(100):  # the child may still be on its way out
        with open(f"/proc/{child}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.05)
    else:
        pytest.fail(f"pid {child} never became a zombie")
    report = _scan(cgroup)
    assert report.process(parent.pid) is not None and report.process(int(child)) is None
    machine = parinfo.host.scan(interval=0)
    assert all(p.pid != 2 for p in machine.processes)
    if os.path.isdir("/proc/2"):
        assert machine.kernel_threads >= 1


def test_taskset_process_has_one_usable_cpu(targets, cgroup):
    proc, truth = targets.start(TARGET.format(limit=None), prefix=["taskset", "-c", "0"])
    row = _scan(cgroup).process(proc.pid)
    assert row.affinity == 1 and row.usable_cpus == 1
    assert row.widest == ("openblas", int(truth)) == ("openblas", 1)


def test_another_users_process(targets, cgroup):
    mine, _ = targets.start(TARGET.format(limit=None))
    theirs, their_truth = targets.start(TARGET.format(limit=1), user="nobody")
    # root reads nobody's process, counts in force included
    row = _scan(cgroup).process(theirs.pid)
    assert row.user == "nobody" and row.widest == ("openblas", int(their_truth))
    # nobody may not read root's: its pools are unknown (permission), never guessed
    proc = run_cli("host", "--once", "--json", "--interval", "0.1", "--cgroup", cgroup,
                   prefix=["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"])
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    rows = {p["pid"]: p for p in payload["processes"]}
    assert rows[mine.pid]["pools_unknown"] == "unknown (permission: run as the process's user or root)"
    assert rows[mine.pid]["widest_pool"]["count"] is None and rows[mine.pid]["threads_at_once"] is None
    assert rows[theirs.pid]["widest_pool"] == {"library": "openblas", "count": 1}
    (group,) = payload["cgroups"]
    assert group["unknown_pids"] == [mine.pid] and group["threads_at_once"] == 1


def test_cli_text_json_and_bad_input(targets, cgroup):
    targets.start(TARGET.format(limit=None))
    targets.start(TARGET.format(limit=None))
    proc = run_cli("host", "--once", "--interval", "0.2", "--cgroup", cgroup, "--check")
    assert proc.returncode == 1, proc.stderr
    assert "[host-oversubscribed]" in proc.stdout and "openblas 2 (in force)" in proc.stdout
    payload = json.loads(run_cli("host", "--once", "--json", "--interval", "0.2", "--cgroup", cgroup).stdout)
    assert payload["schema_version"] == 2 and payload["interval"] >= 0.2
    assert payload["cgroups"][0]["throttling"] is not None
    for args, words in ((["--user", "no-such-user"], "no such user"),
                        (["--cgroup", "/no/such/cgroup"], "no such cgroup"), (["--interval", "-1"], "give seconds")):
        bad = run_cli("host", "--once", *args)
        assert bad.returncode == 2 and words in bad.stderr and "Traceback" not in bad.stderr


def test_a_cgroup_row_shows_only_its_own_cpu_pressure(targets, cgroup):
    # a v1 cgroup has no cpu.pressure: the figure of its processes' v2 cgroup (here the root, the
    # whole machine) is not its own, and the row says so; a v2 cgroup's own file gives a figure
    targets.start(TARGET.format(limit=None))
    (row,) = parinfo.host.scan(cgroup=cgroup, interval=0.3).cgroups
    if os.path.exists(f"{cgroup}/cpu.pressure"):
        assert isinstance(row.pressure_some, float) and 0 <= row.pressure_some <= 100
    else:
        assert isinstance(row.pressure_some, str)
        assert row.pressure_some.startswith("unknown (no CPU pressure file of its own: its processes' v2 cgroup is")


def test_user_filter():
    report = parinfo.host.scan(user=str(os.getuid()), interval=0)
    assert {p.pid for p in parinfo.host.scan(user=os.getuid(), interval=0).processes} >= {os.getpid()}
    assert report.process(os.getpid()) is not None
    assert {p.user for p in report.processes} == {report.process(os.getpid()).user}


def _load(pid: int, threads: int | None, **kw) -> ProcessLoad:
    return ProcessLoad(pid, "python", "openblas" if threads else None, threads,
                       variables=("OPENBLAS_NUM_THREADS",), **kw)


def test_rule_numbers_on_hand_made_loads():
    found = fleet_rules.cgroup_findings("cgroup /x", 8, [_load(1, 8), _load(2, 8)])
    (f,) = found
    assert "16 threads at once" in f.message and "OPENBLAS_NUM_THREADS=4" in f.fix
    # pools at 1 in more processes than CPUs: their own choice
    assert fleet_rules.cgroup_findings("m", 2, [_load(i, 1) for i in range(5)]) == []
    # one process alone is the process report's business
    assert fleet_rules.cgroup_findings("m", 2, [_load(1, 8)]) == []
    # unknown processes are named, not counted
    (f,) = fleet_rules.cgroup_findings("m", 2, [_load(1, 2), _load(2, 2), _load(3, None, unknown="unknown (x)")])
    assert "4 threads at once" in f.message and "unknown (permission): pids 3" in f.message
    # identical independent launches get the instances launch
    (f,) = fleet_rules.cgroup_findings("m", 4, [_load(i, 4, command="python serve.py", parent=10 + i)
                                                for i in range(2)])
    assert "parinfo apply multi-instance --instances 2 -- python serve.py" in f.fix and "=2" in f.fix


# A starter that launches 3 numpy workers and exits, leaving them to pid 1 or to a subreaper. Each worker
# prints threadpoolctl's OpenBLAS count (ground truth inside it) and runs until the stop file exists.
ORPHAN_WORKER = """
import os, sys, time, threadpoolctl, numpy
pool = [p for p in threadpoolctl.threadpool_info() if p["internal_api"] == "openblas"][0]
print(pool["num_threads"], flush=True)
end = time.time() + 60
while not os.path.exists(sys.argv[1]) and time.time() < end:
    time.sleep(0.05)
"""

STARTER = """
import json, os, subprocess, sys
worker, stop = sys.argv[1], sys.argv[2]
procs = [subprocess.Popen([sys.executable, "-c", worker, stop], stdout=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, text=True) for _ in range(3)]
print(json.dumps({p.pid: int(p.stdout.readline()) for p in procs}), flush=True)
os._exit(0)
"""

# A subreaper (PR_SET_CHILD_SUBREAPER) that runs the starter as a job of its own (its own process group,
# as a shell runs a job) and prints what it printed; orphans then come to the subreaper, not pid 1.
REAPER = """
import ctypes, subprocess, sys
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
job = subprocess.Popen([sys.executable, "-c", {starter!r}, {worker!r}, {stop!r}], stdout=subprocess.PIPE,
                       text=True, start_new_session=True)
print(job.stdout.readline().strip(), flush=True)
job.wait()
sys.stdin.readline()
"""


def _orphans(targets: Targets, stop: str, reaper: bool, env: dict[str, str] | None = None) -> dict[int, int]:
    """Start 3 numpy workers whose starter exits; wait until they are adopted; their counts by pid."""
    if reaper:
        proc, line = targets.start(REAPER.format(starter=STARTER, worker=ORPHAN_WORKER, stop=stop), env=env)
        adopter = proc.pid
    else:
        args = f"import sys\nsys.argv[1:] = [{ORPHAN_WORKER!r}, {stop!r}]\n"
        _, line = targets.start(args + STARTER, env=env)
        adopter = 1
    truth = {int(pid): n for pid, n in json.loads(line).items()}
    for _ in range(200):
        if all(_ppid(pid) == adopter for pid in truth):
            break
        time.sleep(0.05)
    assert all(_ppid(pid) == adopter for pid in truth)
    return truth


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize("reaper", [False, True], ids=["pid1", "subreaper"])
def test_orphans_are_not_a_family_to_fix_at_their_adopter(targets, cgroup, tmp_path, reaper):
    stop = str(tmp_path / "stop")
    try:
        truth = _orphans(targets, stop, reaper)
        report = _scan(cgroup)
        (family,) = [f for f in report.families if sorted(f.pids) == sorted(truth)]
        assert family.adopted_by is not None and family.adopted_by.startswith(f"pid {family.parent} (")
        for pid, n in truth.items():
            assert report.process(pid).widest == ("openblas", n)
        (finding,) = counted([f for c in report.cgroups for f in c.findings])
        assert "workers of pid" not in finding.fix and "environment pid" not in finding.fix
        assert f"the 3 processes under pid {family.parent} (" in finding.fix
        given = dict(re.findall(r"\b([A-Z_]+_NUM_THREADS)=(\d+)", finding.fix))
        assert given == {"OPENBLAS_NUM_THREADS": "1"}
        text = run_cli("host", "--cgroup", cgroup, "--once", "--interval", "0.2").stdout
        assert f"{family.adopted_by}: 3 processes it adopted" in text and "3 workers" not in text
    finally:
        open(stop, "w").close()
    # the fix as printed: start each one with the variable; threadpoolctl inside agrees, no finding
    targets.stop()
    targets.procs = []
    stop = str(tmp_path / "stop2")
    try:
        fixed = _orphans(targets, stop, reaper, env=clean_env(**given))
        assert set(fixed.values()) == {1}
        assert counted([f for c in _scan(cgroup).cgroups for f in c.findings]) == []
    finally:
        open(stop, "w").close()


def test_a_family_started_by_its_parent_is_not_adopted(targets, cgroup):
    parent, _ = targets.start(FAMILY)
    (family,) = _scan(cgroup).families
    assert family.parent == parent.pid and family.adopted_by is None


# numpy and scikit-learn (its wheel ships libgomp), limited inside with threadpoolctl when asked; prints
# threadpoolctl's counts by internal API (ground truth inside the process), then waits for stdin.
OPENMP_TARGET = """
import json, sys, threadpoolctl, numpy, sklearn.cluster
limit = {limit!r}
if limit:
    threadpoolctl.threadpool_limits(limit)
print(json.dumps({{p["internal_api"]: p["num_threads"] for p in threadpoolctl.threadpool_info()}}), flush=True)
sys.stdin.readline()
"""


def _openmp_targets(targets: Targets, limit: int | None, env: dict[str, str]) -> list:
    pytest.importorskip("sklearn")
    started = [targets.start(OPENMP_TARGET.format(limit=limit), env=env) for _ in range(2)]
    for _, line in started:
        truth = json.loads(line)
        if "openmp" not in truth:
            pytest.skip("scikit-learn loaded no OpenMP runtime here")
        assert truth == ({"openblas": limit, "openmp": limit} if limit else truth), truth
    return [proc for proc, _ in started]


@pytest.mark.parametrize("env", [{"OMP_NUM_THREADS": "2"}, {}], ids=["omp-2-at-launch", "no-variable"])
def test_counts_limited_inside_are_not_summed_from_the_launch_environment(targets, cgroup, env):
    """The issue's case: two processes limited to 1 thread inside (threadpoolctl agrees) whose launch
    environment (or the default on their 2 CPUs) predicts libgomp at 2. The rows show the prediction,
    labelled; the sums and the warning count what is in force only; an info note says it is a prediction."""
    procs = _openmp_targets(targets, 1, clean_env(**env))
    report = _scan(cgroup)
    (group,) = report.cgroups
    for proc in procs:
        row = report.process(proc.pid)
        (gomp,) = [p for p in row.pools if p.library == "libgomp" and not p.duplicate_of]
        assert gomp.count == 2 and not gomp.in_force and not gomp.attached
        assert gomp.source.kind is Kind.LAUNCH_ENVIRONMENT and "may have changed it" in gomp.source.text
        assert row.widest == ("openblas", 1) and row.threads_at_once == 1  # read from memory: threadpoolctl's 1
        assert row.widest_predicted == ("libgomp", 2) and row.threads_predicted == 2
    assert group.usable_cpus == 2 and group.threads_at_once == 2
    assert group.threads_predicted == 4 and sorted(group.predicted_pids) == sorted(p.pid for p in procs)
    (note,) = counted(group.findings)
    assert (note.id, note.severity) == ("host-oversubscribed-predicted", "info")
    assert "a prediction" in note.message and "--attach" in note.fix and "OMP_NUM_THREADS=1" in note.fix
    assert report.problems() == []
    proc = run_cli("host", "--once", "--interval", "0.1", "--cgroup", cgroup, "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "libgomp 2 (launch env)" in proc.stdout and "[host-oversubscribed]" not in proc.stdout
    assert "2 threads at once in force; up to 4 if the counts predicted" in proc.stdout
    payload = json.loads(run_cli("host", "--once", "--json", "--interval", "0", "--cgroup", cgroup).stdout)
    (cg,) = payload["cgroups"]
    assert (cg["threads_at_once"], cg["threads_at_once_predicted"]) == (2, 4) and payload["schema_version"] == 2
    for row in payload["processes"]:
        assert row["threads_at_once"] == 1 and row["widest_pool"] == {"library": "openblas", "count": 1}
        assert row["predicted"] == {"widest_pool": {"library": "libgomp", "count": 2}, "threads_at_once": 2}


def test_counts_in_force_over_the_cpus_still_warn_beside_predictions(targets, cgroup):
    """OpenBLAS at 2 read from memory in two processes of a 2-CPU cgroup: 4 threads at once in force,
    the warning fires on them alone; their libgomp (predicted at 2 as well) adds nothing to the sum."""
    procs = _openmp_targets(targets, None, clean_env(OMP_NUM_THREADS="2"))
    report = _scan(cgroup)
    (group,) = report.cgroups
    for proc in procs:
        row = report.process(proc.pid)
        assert row.widest == ("openblas", 2) and row.threads_predicted is None
    assert group.threads_at_once == 4 and group.predicted_pids == []
    (finding,) = counted(group.findings)
    assert (finding.id, finding.severity) == ("host-oversubscribed", "warning")
    assert "4 threads at once" in finding.message and "openblas=2" in finding.message


def test_predictions_alone_make_an_info_note_on_hand_made_loads():
    def load(pid: int, threads: int | None, predicted: int | None) -> ProcessLoad:
        return ProcessLoad(pid, "python", "openblas" if threads else None, threads,
                           variables=("OMP_NUM_THREADS",), predicted_pool="libgomp" if predicted else None,
                           predicted=predicted)

    (note,) = fleet_rules.cgroup_findings("m", 2, [load(1, 1, 4), load(2, None, 4)])
    assert note.severity == "info" and "up to 8 threads" in note.message and "add up to 1" in note.message
    # in force over the CPUs: the warning, and no note beside it
    (f,) = fleet_rules.cgroup_findings("m", 2, [load(1, 2, 4), load(2, 2, None)])
    assert (f.id, f.severity) == ("host-oversubscribed", "warning") and "4 threads at once" in f.message
    # predictions within the CPUs: nothing
    assert fleet_rules.cgroup_findings("m", 4, [load(1, 1, 2), load(2, 1, 2)]) == []
