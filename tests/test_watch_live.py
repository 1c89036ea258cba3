"""`parinfo show --pid` and `parinfo watch` on real processes: taskset, a real cgroup with a CPU
quota (root only), unknown and foreign pids, a process that exits mid-watch."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import REPO, clean_env, run_cli

BUSY = r"""
import sys, threading, time
sys.stdin.readline()          # wait until the test has placed us in the cgroup
def spin():
    end = time.time() + 60
    while time.time() < end:
        pass
for i in range(4):
    threading.Thread(target=spin, name="spin-%d" % i, daemon=True).start()
print("busy", flush=True)
time.sleep(60)
"""


def _child(code: str = "import time; time.sleep(60)", prefix: list[str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([*(prefix or []), sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=clean_env())


def _stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=10)


def _no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset is not installed")
def test_show_pid_of_a_child_under_taskset_shows_usable_1():
    child = _child(prefix=["taskset", "-c", "0"])
    try:
        time.sleep(0.3)
        proc = run_cli("show", "--pid", str(child.pid), "--json")
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert report["machine"]["usable_cpus"] == 1 and report["machine"]["affinity"] == [0]
        assert report["process"]["pid"] == child.pid and report["process"]["inspected_from"] != child.pid
        assert "cannot be read from outside" in report["process"]["counts"] and report["pools"] == []
        assert report["threads"]["count"] >= 1 and report["live"]["tree"]["processes"] == 1
        text = run_cli("show", "--pid", str(child.pid))
        assert text.returncode == 0 and "usable CPUs        1" in text.stdout
        assert "Thread counts in force" in text.stdout and "cannot be read from outside" in text.stdout
    finally:
        _stop(child)


def test_show_pid_lists_runtimes_from_maps_and_children():
    pytest.importorskip("numpy")
    code = ("import numpy, os, sys, time\n"
            "if os.fork() == 0:\n    time.sleep(60)\n    os._exit(0)\n"
            "time.sleep(60)")
    parent = _child(code)
    try:
        time.sleep(1.0)
        report = json.loads(run_cli("show", "--pid", str(parent.pid), "--children", "--json").stdout)
        assert any(p["user_api"] == "blas" for p in report["pools"]), report["pools"]
        assert all(p["seen_by"] == f"/proc/{p['pid']}/maps" for p in report["pools"])
        assert len({p["pid"] for p in report["pools"]}) == 2  # the forked child's copy is listed as its own
        # OpenBLAS keeps its count in an exported variable: read from memory (tests/test_inforce.py)
        assert all(p["num_threads"] == len(os.sched_getaffinity(0)) and p["count_source"]["text"].startswith("in force")
                   for p in report["pools"] if p["library"] == "openblas")
        assert report["live"]["tree"]["processes"] == 2
    finally:
        _stop(parent)


def test_unknown_pid_is_one_line_and_exit_2():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = dead.stdout.strip()
    for args, says in ((("show", "--pid", pid), "no process with pid"),
                       (("watch", "--pid", pid, "--once"), "no process with pid"),
                       (("show", "--pid", "0"), "--pid 0: out of range"),
                       (("watch", "--pid", "-5", "--once"), "--pid -5: not a whole number")):
        proc = run_cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr
        _no_traceback(proc)


def test_bad_options_are_one_line():
    for args in (("watch", "--interval", "0"), ("watch", "--interval", "nan"), ("watch", "--children"),
                 ("watch", "--samples", "0"), ("watch", "--once", "--samples", "2"),
                 ("watch", "-n", "2", "--serve", "127.0.0.1:1"),
                 ("show", "--children"), ("show", "--pid", "1", "--torch"),
                 ("show", "--pid", "1", "--format", "torch")):
        proc = run_cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1
        _no_traceback(proc)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_pid_of_another_user_shows_what_can_be_read():
    # parinfo runs as nobody and looks at this (root) test process: its maps, environment and memory
    # (and so its memory policy, in numa_maps) are not readable; its identity, CPUs and threads are.
    proc = run_cli("show", "--pid", str(os.getpid()), "--json",
                   prefix=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"],
                   env=clean_env(PYTHONPATH=str(REPO), HOME="/tmp"))
    if proc.returncode == 0 and "unreadable" not in json.loads(proc.stdout)["process"]:
        pytest.skip("this kernel lets another user read the maps")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    permission = "unknown (permission: run as the process's user or root)"
    assert report["process"]["unreadable"] == {"pools": permission, "environment": permission}
    assert report["pools"] == [] and report["environment"] == []
    assert report["memory"]["policy"] is None and report["memory"]["source"]["text"] == permission
    assert report["process"]["pid"] == os.getpid() and report["threads"]["count"] >= 1
    text = run_cli("show", "--pid", str(os.getpid()), prefix=["setpriv", "--reuid=65534", "--regid=65534",
                                                             "--clear-groups"],
                   env=clean_env(PYTHONPATH=str(REPO), HOME="/tmp"))
    assert text.returncode == 0 and text.stdout.count(permission) == 3  # memory policy, pools, variables
    _no_traceback(text)


def test_process_exiting_mid_watch_ends_the_watch_cleanly():
    child = _child("import time; time.sleep(1.5)")
    try:
        proc = run_cli("watch", "--pid", str(child.pid), "--interval", "0.3", "--json", timeout=30)
    finally:
        child.wait(timeout=10)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines and all(s["pid"] == child.pid for s in lines)
    assert proc.stderr.strip() == f"parinfo: pid {child.pid} exited; watch ended"


def test_watch_samples_prints_that_many_and_ends():
    """``--samples N``: N samples, each titled with its number, then exit 0 without a word on stderr;
    as JSON lines with --json; and the usual last line when the process ends first."""
    child = _child()
    try:
        text = run_cli("watch", "--pid", str(child.pid), "--samples", "2", "--interval", "0.1", timeout=30)
        as_json = run_cli("watch", "--pid", str(child.pid), "-n", "3", "--interval", "0.1", "--json", timeout=30)
    finally:
        _stop(child)
    assert text.returncode == 0 and text.stderr == "", text.stderr
    heads = [line for line in text.stdout.splitlines() if not line.startswith(" ")]
    assert [h.split(":")[0] for h in heads] == [f"pid {child.pid}, sample 1 of 2", f"pid {child.pid}, sample 2 of 2"]
    assert text.stdout.count("  verdict ") == 2
    assert as_json.returncode == 0 and as_json.stderr == "", as_json.stderr
    assert [json.loads(line)["pid"] for line in as_json.stdout.splitlines()] == [child.pid] * 3
    short = _child("import time; time.sleep(2.5)")  # alive when watch starts, even on a loaded machine
    try:
        ended = run_cli("watch", "--pid", str(short.pid), "--samples", "50", "--interval", "0.3", "--json", timeout=30)
    finally:
        short.wait(timeout=10)
    assert ended.returncode == 0 and 0 < len(ended.stdout.splitlines()) < 50
    assert ended.stderr.strip() == f"parinfo: pid {short.pid} exited; watch ended"


def test_api_watch_and_inspect_pid():
    import parinfo

    samples = list(parinfo.watch(interval=0.1, count=2))
    assert len(samples) == 2 and all(isinstance(s, parinfo.Sample) for s in samples)
    assert samples[0].pid == os.getpid() and samples[0].threads >= 1 and samples[0].verdict
    with pytest.raises(parinfo.UsageError):
        next(parinfo.watch(interval=-1))
    child = _child()
    try:
        report = parinfo.inspect(pid=child.pid)
        assert report.process.pid == child.pid and "live" in report.to_dict()
    finally:
        _stop(child)


def test_watch_without_quota_reports_no_throttling():
    child = _child(BUSY)
    try:
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "busy"
        proc = run_cli("watch", "--pid", str(child.pid), "--once", "--json", "--interval", "0.5")
        assert proc.returncode == 0, proc.stderr
        sample = json.loads(proc.stdout)
        if sample["quota"] is not None:
            pytest.skip("this test runs under a CPU quota")
        assert sample["throttling"] is None and not sample["verdict"].startswith("throttled")
        assert sample["threads"] == 5 and sample["cpu_percent"] > 10
        report = json.loads(run_cli("show", "--pid", str(child.pid), "--json").stdout)
        assert "throttled" not in {f["id"] for f in report["findings"]}
    finally:
        _stop(child)


# -- a real cgroup with a 0.5-CPU quota --------------------------------------------------------------

def test_watch_sees_throttling_in_a_real_quota_cgroup(quota_cgroup):
    child = _child(BUSY)
    try:
        with open(os.path.join(quota_cgroup, "cgroup.procs"), "w") as fh:
            fh.write(str(child.pid))
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "busy"
        proc = run_cli("watch", "--pid", str(child.pid), "--once", "--json", timeout=60)
        assert proc.returncode == 0, proc.stderr
        sample = json.loads(proc.stdout)
        assert sample["quota"] == 0.5 and sample["usable_cpus"] == 1
        t = sample["throttling"]
        assert t is not None and t["throttled"] > 0 and t["quota"] == 0.5, sample
        assert t["cgroup"] == quota_cgroup
        assert "0.5-CPU quota" in sample["verdict"] and sample["verdict"].startswith("throttled in")
        report = json.loads(run_cli("show", "--pid", str(child.pid), "--json").stdout)
        assert report["live"]["throttling"]["worst"]["throttled"] > 0
    finally:
        _stop(child)


def test_watch_on_a_terminal_ends_with_one_line_when_the_process_exits():
    import pty
    import select

    child = _child("import time; time.sleep(1.2)")
    leader, follower = pty.openpty()
    proc = None
    try:
        proc = subprocess.Popen([sys.executable, "-m", "parinfo", "watch", "--pid", str(child.pid),
                                 "--interval", "0.3"], stdin=follower, stdout=follower, stderr=subprocess.PIPE,
                                text=True, cwd=REPO, env=clean_env())
        screen = b""
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:  # the live view, read as a terminal would
            if select.select([leader], [], [], 0.1)[0]:
                screen += os.read(leader, 1 << 16)
        code = proc.wait(timeout=5)
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        child.wait(timeout=10)
        os.close(leader)
        os.close(follower)
    assert code == 0 and err == f"parinfo: pid {child.pid} exited; watch ended\n", err
    assert b"\x1b[H\x1b[2J" in screen and f"pid {child.pid}:".encode() in screen  # it did refresh in place
    assert b"Traceback" not in screen


def _on_a_terminal(*args: str, seconds: float = 2.5, command: str = "watch") -> str:
    """What ``parinfo COMMAND ARGS`` writes to a terminal (a pty) in ``seconds``, then after Ctrl-C."""
    import pty
    import select
    import signal

    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "parinfo", command, *args], stdin=follower, stdout=follower,
                            stderr=follower, env=clean_env(), close_fds=True)
    os.close(follower)
    out = b""
    try:
        end = time.time() + seconds
        while time.time() < end:
            if select.select([leader], [], [], 0.1)[0]:
                try:
                    out += os.read(leader, 65536)
                except OSError:
                    break
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
        while select.select([leader], [], [], 0.2)[0]:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        os.close(leader)
    assert proc.returncode == 0, out
    return out.decode(errors="replace")


def test_watch_on_a_terminal_says_how_to_stop_once_per_screen():
    out = _on_a_terminal("--interval", "0.3")
    frames = [f for f in out.split("\x1b[H\x1b[2J") if f.strip()]
    assert frames and all(f.count("Ctrl-C") == 1 for f in frames), out
    assert "Traceback" not in out


def test_host_refreshing_on_a_terminal_says_how_to_stop_once_per_screen():
    out = _on_a_terminal("--interval", "0.3", command="host")
    frames = [f for f in out.split("\x1b[H\x1b[2J") if f.strip()]
    assert frames and all(f.count("Ctrl-C") == 1 for f in frames), out
    assert "Traceback" not in out
    assert "Ctrl-C" not in _on_a_terminal("--once", "--interval", "0.2", seconds=2.5, command="host")


def test_watch_says_nothing_about_stopping_in_json_or_piped_output():
    assert "Ctrl-C" not in _on_a_terminal("--interval", "0.3", "--json", seconds=1.5)
    assert "Ctrl-C" not in _on_a_terminal("--once", "--interval", "0.2", seconds=1.5)
    proc = subprocess.Popen([sys.executable, "-m", "parinfo", "watch", "--interval", "0.2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=clean_env())
    time.sleep(1.5)
    proc.terminate()
    out, err = proc.communicate(timeout=10)
    assert out.strip() and "Ctrl-C" not in out + err
