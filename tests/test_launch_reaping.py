"""No process an instance starts outlives the launch (issue 36), in real processes: parinfo killed by
SIGKILL, a daemon that holds an instance's output pipe, Ctrl-C pressed three times at instances that
ignore it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import clean_env

from parinfo.launch import reaping

pytestmark = pytest.mark.once  # real servers, processes or cgroups: .ci/run runs these on its first Python only

# Each instance starts a child that stays in its process group and ignores SIGTERM, and a daemon
# (setsid, then orphaned) that leaves the group; all three hold the instance's output pipes. Each
# writes its pid as a file name in the folder argv[1].
FAMILY = """
import os, signal, sys, time
d, i = sys.argv[1], os.environ['PARINFO_INSTANCE']
def mark(kind):
    open(os.path.join(d, f"{kind}-{i}-{os.getpid()}"), "w").close()
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    mark("stay")
    while True: time.sleep(1)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        mark("daemon")
        while True: time.sleep(1)
    os._exit(0)
deadline = time.monotonic() + 20  # the children mark themselves before the instance exits, even on a busy machine
while time.monotonic() < deadline and not all(any(n.startswith(f"{k}-{i}-") for n in os.listdir(d))
                                              for k in ("stay", "daemon")):
    time.sleep(0.01)
mark("instance")
print("ready", flush=True)
"""
FOREVER = "while True: time.sleep(0.05)\n"


def profile(tmp_path: Path) -> str:
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nname: reap\nintra_op: 1\ninter_op: 1\ninstances: 2\n")
    return str(path)


def start(tmp_path: Path, code: str, **kw) -> tuple[subprocess.Popen, Path]:
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "parinfo", "apply", profile(tmp_path), "--", sys.executable, "-c",
                             code, str(marks)], env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)
    return proc, marks


def wait_for(pred, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def pids(marks: Path) -> dict[str, int]:
    return {p.name: int(p.name.rsplit("-", 1)[1]) for p in marks.iterdir()}


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


def started(marks: Path, n: int = 6) -> dict[str, int]:
    assert wait_for(lambda: len(pids(marks)) >= n, 60), sorted(pids(marks))
    return pids(marks)


def kill_all(found: dict[str, int]) -> None:
    for pid in found.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def may_make_cgroup() -> bool:
    made = reaping._make_cgroup()
    if made is None:
        return False
    os.rmdir(made)
    return True


@pytest.mark.timeout(120)
def test_after_sigkill_of_parinfo_nothing_an_instance_started_runs_on(tmp_path):
    proc, marks = start(tmp_path, FAMILY + FOREVER)
    found = {}
    try:
        found = started(marks)
        proc.kill()
        proc.wait(timeout=30)
        in_groups = {k: v for k, v in found.items() if not k.startswith("daemon")}
        assert wait_for(lambda: not any(map(running, in_groups.values())), 10), \
            {k: running(v) for k, v in found.items()}
        if may_make_cgroup():  # a daemon that left its group is reached through the launch's cgroup
            assert wait_for(lambda: not any(map(running, found.values())), 10), \
                {k: running(v) for k, v in found.items()}
            cgroup = Path(reaping.cgroup_base() or "/nowhere", f"parinfo-launch-{proc.pid}")
            assert wait_for(lambda: not cgroup.exists(), 10), cgroup
    finally:
        proc.kill()
        kill_all(found)


@pytest.mark.timeout(120)
def test_a_daemon_holding_the_output_pipe_neither_keeps_parinfo_waiting_nor_outlives_it(tmp_path):
    proc, marks = start(tmp_path, FAMILY)  # the instances exit at once; their children stay
    found = {}
    try:
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
        found = pids(marks)
        assert proc.returncode == 0, err
        assert sorted(line for line in out.splitlines()) == ["[0] ready", "[1] ready"]
        assert took < 30, took
        assert len(found) == 6 and not any(map(running, found.values())), {k: running(v) for k, v in found.items()}
    finally:
        proc.kill()
        kill_all(found)


STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.path.join(sys.argv[1], f"instance-{os.environ['PARINFO_INSTANCE']}-{os.getpid()}"), "w").close()
print("ready", flush=True)
while True: time.sleep(0.05)
"""


@pytest.mark.timeout(120)
def test_ctrl_c_twice_and_a_wait_ends_instances_that_ignore_sigterm(tmp_path):
    proc, marks = start(tmp_path, STUBBORN)
    found = {}
    try:
        found = started(marks, 2)
        for _ in range(2):
            proc.send_signal(signal.SIGINT)
            next(line for line in proc.stderr if "Ctrl-C" in line)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGKILL, err
        assert "parinfo: 5 s after SIGTERM: SIGKILL sent to the 2 instances" in err
        assert 4 < time.monotonic() - t0 < 30
        assert not any(map(running, found.values()))
    finally:
        proc.kill()
        kill_all(found)


@pytest.mark.timeout(120)
def test_ctrl_c_three_times_ends_instances_that_ignore_it_and_says_each_step(tmp_path):
    proc, marks = start(tmp_path, STUBBORN)
    found = {}
    try:
        found = started(marks, 2)
        said = []
        for step in ("SIGINT passed on", "SIGTERM sent", "SIGKILL sent"):
            proc.send_signal(signal.SIGINT)
            said.append(next(line for line in proc.stderr if "Ctrl-C" in line or not line))  # past the check table
            assert step in said[-1], said
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signal.SIGKILL, err
        assert said[0] == "parinfo: Ctrl-C: SIGINT passed on to the 2 instances; Ctrl-C again sends SIGTERM\n"
        assert said[2] == "parinfo: Ctrl-C: SIGKILL sent to the 2 instances and every process they started\n"
        assert not any(map(running, found.values()))
    finally:
        proc.kill()
        kill_all(found)


GROUP = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    open(os.path.join(sys.argv[1], f"child-{os.getpid()}"), "w").close()
    while True: time.sleep(1)
open(os.path.join(sys.argv[1], f"leader-{os.getpid()}"), "w").close()
while True: time.sleep(1)
"""


@pytest.mark.timeout(60)
def test_without_a_cgroup_the_guard_ends_the_groups_it_was_given_when_its_pipe_closes(tmp_path):
    """What an unprivileged launch relies on when parinfo is killed: the guard alone, groups only."""
    group = subprocess.Popen([sys.executable, "-c", GROUP, str(tmp_path)], start_new_session=True)
    found = {}
    try:
        found = started(tmp_path, 2)
        guard = subprocess.Popen([sys.executable, "-I", "-S", reaping.GUARD], stdin=subprocess.PIPE,
                                 start_new_session=True)
        guard.stdin.write(f"g {group.pid}\n".encode())
        guard.stdin.close()  # as when parinfo dies: SIGTERM, ignored here, then SIGKILL
        assert guard.wait(timeout=20) == 0
        assert wait_for(lambda: not any(map(running, found.values())), 5)
    finally:
        group.kill()
        group.wait()
        kill_all(found)


CALLER = """
import os, subprocess, sys
from parinfo.launch.run import run_plan
from parinfo.profiles.plan import InstancePlan, Plan, Setting
cpu = min(os.sched_getaffinity(0))
insts = tuple(InstancePlan(i, (cpu,), 1, 1, {}) for i in range(2))
plan = Plan("api", "", "test", Setting("intra_op", 1, "given"), Setting("inter_op", 1, "given"), {}, {}, {},
            None, "given", insts)
own = subprocess.Popen(["sleep", "60"])
status = run_plan(plan, [sys.executable, "-c", "pass"])
print(status, own.poll(), flush=True)
own.kill()
"""


@pytest.mark.timeout(60)
def test_a_python_caller_keeps_its_own_children_across_a_launch_of_instances():
    done = subprocess.run([sys.executable, "-c", CALLER], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["0", "None"], done.stdout


ORPHANS = """
import os, sys, time
for _ in range(5):
    if os.fork() == 0:
        if os.fork() == 0:
            time.sleep(0.2)
            os._exit(0)
        os._exit(0)
    os.wait()
print("forked", flush=True)
time.sleep(4)
"""


def zombie_children(pid: int) -> list[int]:
    kids = [int(p) for t in os.listdir(f"/proc/{pid}/task")
            for p in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
    return [k for k in kids if not running(k) and Path(f"/proc/{k}").exists()]


@pytest.mark.timeout(60)
def test_orphans_that_exit_during_a_long_run_are_reaped_as_they_go(tmp_path):
    proc, _ = start(tmp_path, ORPHANS)
    try:
        assert sorted(proc.stdout.readline() for _ in range(2)) == ["[0] forked\n", "[1] forked\n"]
        time.sleep(0.5)  # the orphans have exited: zombies until parinfo reaps them
        assert wait_for(lambda: not zombie_children(proc.pid), 2.5), zombie_children(proc.pid)
        proc.communicate(timeout=30)
        assert proc.returncode == 0
    finally:
        proc.kill()


def stat_of(pid: int) -> tuple[bytes, int] | None:
    """A process's state letter and parent, from /proc/PID/stat; None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("code", "returncode"), [("raise SystemExit(3)", 3),
                                                  ("import os; os.kill(os.getpid(), 9)", -signal.SIGKILL)])
def test_a_leader_s_exit_is_seen_without_reaping_it_until_released(code, returncode):
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()\n" + code], stdin=subprocess.PIPE)
    leader = reaping.Leader(proc)
    try:
        assert leader.poll() is None
        proc.stdin.close()
        assert leader.wait() == returncode and leader.poll() == returncode
        reaper = reaping.Reaper(None, None, None, False, frozenset(reaping._children()) - {proc.pid})
        reaper.leaders.append(leader)
        reaper.reap()  # the orphans' reaping leaves an instance alone...
        assert stat_of(proc.pid) == (b"Z", os.getpid()) and proc.returncode is None
        reaper.finish()  # ...which is reaped only at the end
        assert proc.returncode == returncode and stat_of(proc.pid) is None
    finally:
        proc.kill()
        proc.wait()


# Instance 0 fails at once, instance 1 runs on for 2 s; each writes its pid as a file name in argv[1].
EARLY_EXIT = """
import os, sys, time
i = os.environ['PARINFO_INSTANCE']
open(os.path.join(sys.argv[1], f"instance-{i}-{os.getpid()}"), "w").close()
if i == "1":
    time.sleep(2)
sys.exit(3 if i == "0" else 0)
"""
# Runs the command in argv[1:] as a child subreaper: whatever it leaves, running or a zombie, becomes
# this process's child, and is listed once it has exited.
SUBREAPER = """
import ctypes, json, os, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
print(proc.pid, flush=True)
err = proc.communicate()[1]
left = [int(p) for t in os.listdir("/proc/self/task") for p in open(f"/proc/self/task/{t}/children").read().split()]
print(json.dumps({"status": proc.returncode, "left": left, "stderr": err}), flush=True)
"""


@pytest.mark.timeout(120)
def test_an_instance_that_exited_stays_a_zombie_of_parinfo_until_the_launch_ends(tmp_path):
    """Its pid is its group's id: reaped early, the number could go to another user's process, which
    the end of the launch would then signal as the instance's group."""
    import json

    marks = tmp_path / "marks"
    marks.mkdir()
    wrapper = subprocess.Popen([sys.executable, "-c", SUBREAPER, sys.executable, "-m", "parinfo", "apply",
                                profile(tmp_path), "--", sys.executable, "-c", EARLY_EXIT, str(marks)],
                               env=clean_env(), stdout=subprocess.PIPE, text=True)
    found = {}
    try:
        parinfo = int(wrapper.stdout.readline())
        found = started(marks, 2)
        first = next(pid for name, pid in found.items() if name.startswith("instance-0-"))
        second = next(pid for name, pid in found.items() if name.startswith("instance-1-"))
        time.sleep(0.5)  # long past instance 0's exit; instance 1 still runs
        assert running(second)
        assert stat_of(first) == (b"Z", parinfo)
        report = json.loads(wrapper.stdout.readline())
        assert wrapper.wait(timeout=30) == 0
        assert report["status"] == 3, report["stderr"]
        assert report["left"] == [], report  # no zombie, nothing running
        assert stat_of(first) is None and stat_of(second) is None
    finally:
        wrapper.kill()
        kill_all(found)


@pytest.mark.timeout(60)
def test_the_guard_is_given_a_group_only_for_an_instance_outside_the_cgroup():
    """The cgroup is unambiguous after a SIGKILL of parinfo; a group's id may be another's by then."""
    if not may_make_cgroup():
        pytest.skip("parinfo may not make a cgroup here")
    cgroup = reaping._make_cgroup()
    assert cgroup is not None
    read, write = os.pipe()
    reaper = reaping.Reaper(cgroup, None, write, False, frozenset(reaping._children()))
    inside = subprocess.Popen(["sleep", "30"], preexec_fn=reaper.preexec(None), start_new_session=True)
    outside = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        for proc in (inside, outside):
            reaper.watch(reaping.Leader(proc))
        reaper.orders = None
        os.close(write)
        with os.fdopen(read, "rb") as fh:
            assert fh.read() == f"g {outside.pid}\n".encode()
    finally:
        for proc in (inside, outside):
            proc.kill()
            proc.wait()
        reaper.finish()
        assert wait_for(lambda: not Path(cgroup, "cgroup.procs").read_text(), 5)
        os.rmdir(cgroup)


def test_the_guard_never_signals_a_group_again_once_it_is_gone():
    from parinfo.launch import guard

    gone = subprocess.Popen(["true"], start_new_session=True)
    gone.wait()
    groups = [gone.pid]
    assert guard.send(groups, [], 0) is False and groups == []
