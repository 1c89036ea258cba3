"""N pinned instances: own CPUs, own counts and index, prefixed output, first failure, signals to all."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from conftest import clean_env
from test_launch_run import launch, launch_cmd, py

pytestmark = pytest.mark.once  # real servers, processes or cgroups: .ci/run runs these on its first Python only

CPUS = sorted(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(len(CPUS) < 2, reason="needs two usable CPUs")

REPORT = ("import json, os; print(json.dumps({'i': os.environ['PARINFO_INSTANCE'], "
          "'n': os.environ['PARINFO_INSTANCES'], 'cpus': sorted(os.sched_getaffinity(0)), "
          "'omp': os.environ['OMP_NUM_THREADS'], 'intra': os.environ['PARINFO_NUM_THREADS'], "
          "'profile': os.environ['PARINFO_PROFILE']}))")


def spec(n: int = 2, **kw) -> dict:
    return {"intra": 2, "inter": 1, "inst_intra": 1, "instances": [[CPUS[i % len(CPUS)]] for i in range(n)], **kw}


def by_instance(stdout: str) -> dict[str, dict]:
    rows = {}
    for line in stdout.splitlines():
        prefix, _, rest = line.partition(" ")
        rows[prefix] = json.loads(rest)
    return rows


@needs_two
def test_each_instance_has_its_own_cpus_index_and_counts():
    proc = launch(spec(2, name="multi"), *py(REPORT))
    assert proc.returncode == 0, proc.stderr
    rows = by_instance(proc.stdout)
    assert set(rows) == {"[0]", "[1]"}
    assert rows["[0]"]["i"] == "0" and rows["[1]"]["i"] == "1"
    assert rows["[0]"]["cpus"] == [CPUS[0]] and rows["[1]"]["cpus"] == [CPUS[1]]
    assert not set(rows["[0]"]["cpus"]) & set(rows["[1]"]["cpus"])
    for row in rows.values():
        assert row["n"] == "2" and row["omp"] == "1" and row["intra"] == "1" and row["profile"] == "multi"


@needs_two
@pytest.mark.torch
def test_each_instance_sets_torch_to_its_own_counts():
    code = ("import os, torch; print(os.environ['PARINFO_INSTANCE'], torch.get_num_threads(), "
            "torch.get_num_interop_threads(), sorted(os.sched_getaffinity(0)))")
    proc = launch(spec(2), *py(code), timeout=180)
    assert proc.returncode == 0, proc.stderr
    lines = sorted(proc.stdout.splitlines())
    assert lines == [f"[0] 0 1 1 [{CPUS[0]}]", f"[1] 1 1 1 [{CPUS[1]}]"]


def test_every_line_of_stdout_and_stderr_is_prefixed():
    code = ("import os, sys; i = os.environ['PARINFO_INSTANCE']\n"
            "print('a' + i); print('b' + i); sys.stderr.write('e' + i + '\\n'); sys.stdout.write('tail' + i)")
    proc = launch(spec(2), *py(code))
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["[0] a0", "[0] b0", "[0] tail0", "[1] a1", "[1] b1", "[1] tail1"]
    assert sorted(proc.stderr.splitlines()) == ["[0] e0", "[1] e1"]
    # lines of one instance keep their order
    assert [line for line in proc.stdout.splitlines() if line.startswith("[1]")] == ["[1] a1", "[1] b1", "[1] tail1"]


def test_the_first_failure_is_returned_and_the_others_finish():
    code = ("import os, sys, time; i = int(os.environ['PARINFO_INSTANCE'])\n"
            "if i == 1: sys.exit(3)\n"
            "time.sleep(1.0); print('finished', i); sys.exit(4 if i == 2 else 0)")
    proc = launch(spec(3), *py(code))
    assert proc.returncode == 3
    assert sorted(proc.stdout.splitlines()) == ["[0] finished 0", "[2] finished 2"]


def test_all_succeeding_gives_zero():
    assert launch(spec(2), *py("pass")).returncode == 0


def test_command_not_found_starts_nothing():
    proc = launch(spec(2), "parinfo-no-such-command")
    assert proc.returncode == 127
    assert proc.stderr.strip() == "parinfo: error: command not found: parinfo-no-such-command"


def test_kept_user_variable_is_said_once_for_all_instances():
    proc = launch(spec(2), *py("import os; print(os.environ['OPENBLAS_NUM_THREADS'])"),
                  env=clean_env(OPENBLAS_NUM_THREADS="2"))
    assert sorted(proc.stdout.splitlines()) == ["[0] 2", "[1] 2"]
    assert [line for line in proc.stderr.splitlines() if "keeping" in line] == [
        line for line in proc.stderr.splitlines() if line.startswith("parinfo: keeping OPENBLAS_NUM_THREADS")]
    assert len([line for line in proc.stderr.splitlines() if "keeping" in line]) == 1


def test_instance_cpus_outside_the_allowed_set_start_nothing():
    bad = {"intra": 1, "inter": 1, "inst_intra": 1, "instances": [[CPUS[0]], [max(CPUS) + 1]]}
    proc = launch(bad, *py("print('ran')"))
    assert proc.returncode != 0 and "ran" not in proc.stdout
    assert f"instance 1 of profile handmade asks for CPUs {max(CPUS) + 1}" in proc.stderr


@pytest.mark.timeout(90)
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_signal_to_the_launcher_reaches_every_instance(signame):
    sig = getattr(signal, signame)
    code = ("import os, signal, sys, time\n"
            "i = os.environ['PARINFO_INSTANCE']\n"
            "def on(s, f):\n"
            "    print('got', s, flush=True); sys.exit(10 + int(i))\n"
            f"signal.signal({int(sig)}, on)\n"
            "print('ready', flush=True)\n"
            "while True: time.sleep(0.05)\n")  # short: a signal caught just before a sleep began waits for its end
    proc = subprocess.Popen(launch_cmd(spec(2), *py(code)), env=clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        ready = 0
        lines = []
        deadline = time.monotonic() + 60
        while ready < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            ready += "ready" in line
        assert ready == 2, lines
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    got = sorted(line for line in out.splitlines() if "got" in line)
    assert got == [f"[0] got {int(sig)}", f"[1] got {int(sig)}"], err
    assert proc.returncode in (10, 11)


def test_an_instance_killed_by_a_signal_gives_128_plus_n():
    code = ("import os, signal\n"
            "if os.environ['PARINFO_INSTANCE'] == '0': os.kill(os.getpid(), signal.SIGKILL)")
    assert launch(spec(2), *py(code)).returncode == 128 + signal.SIGKILL


def test_instances_read_nothing_from_the_terminal():
    proc = launch(spec(1), *py("import sys; print(repr(sys.stdin.read()))"))
    assert proc.returncode == 0 and proc.stdout.strip() == "[0] ''"


def _read_until(stream, needle: bytes, seconds: float) -> bytes:
    """Bytes read from a raw pipe until ``needle`` shows up or ``seconds`` pass."""
    import select

    got = b""
    deadline = time.monotonic() + seconds
    while needle not in got and time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                break
            got += chunk
    return got


@pytest.mark.timeout(60)
def test_a_partial_line_is_passed_on_before_its_newline():
    code = ("import sys, time\n"
            "sys.stdout.write('\\r 50%'); sys.stdout.flush(); time.sleep(5); print(' done')")
    proc = subprocess.Popen(launch_cmd(spec(1), *py(code)), env=clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        start = time.monotonic()
        got = _read_until(proc.stdout, b"50%", 4)
        assert got == b"[0] \r 50%" and time.monotonic() - start < 4
        rest = proc.communicate(timeout=30)[0]
    finally:
        proc.kill()
    assert rest == b" done\n"


def test_a_huge_line_without_newline_is_relayed_in_bounded_time_and_memory(tmp_path):
    code = ("import sys\n"
            "w = sys.stdout.buffer.write\n"
            "for _ in range(1024): w(b'x' * 65536)\n"
            "w(b'\\nend\\n')")
    wrapper = ("import resource, subprocess, sys, json, time\n"
               "t = time.monotonic()\n"
               f"rc = subprocess.call(sys.argv[1:], stdout=open({str(tmp_path / 'out')!r}, 'wb'))\n"
               "print(json.dumps([rc, time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
    import sys

    proc = subprocess.run([sys.executable, "-c", wrapper, *launch_cmd(spec(1), *py(code))], env=clean_env(),
                          capture_output=True, text=True, timeout=60)
    rc, seconds, max_rss_kib = json.loads(proc.stdout)
    out = (tmp_path / "out").read_bytes()
    assert rc == 0 and out == b"[0] " + b"x" * (1 << 26) + b"\n[0] end\n"
    assert seconds < 20  # minutes before: the held line was re-copied on every read
    assert max_rss_kib < 150 * 1024, max_rss_kib


WAITER = ("import os, time\n"
          "print(os.getpid(), flush=True)\n"
          "time.sleep(60)\n")


def _instance_pids(proc, n: int) -> list[int]:
    pids = []
    deadline = time.monotonic() + 30
    while len(pids) < n and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(b"["):
            pids.append(int(line.split()[1]))
    assert len(pids) == n
    return pids


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _wait_for(pred, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.timeout(60)
def test_instances_die_with_a_killed_launcher():
    proc = subprocess.Popen(launch_cmd(spec(2), *py(WAITER)), env=clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    pids = []
    try:
        pids = _instance_pids(proc, 2)
        proc.kill()
        proc.wait()
        assert _wait_for(lambda: all(_state(p) in (None, "Z") for p in pids))
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.mark.timeout(60)
def test_job_control_stops_and_resumes_every_instance():
    # Its own process group in this session (not orphaned), as a shell's job would be.
    proc = subprocess.Popen(launch_cmd(spec(2), *py(WAITER)), env=clean_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, process_group=0)
    try:
        pids = _instance_pids(proc, 2)
        proc.send_signal(signal.SIGTSTP)
        assert _wait_for(lambda: all(_state(p) == "T" for p in pids) and _state(proc.pid) == "T")
        proc.send_signal(signal.SIGCONT)
        assert _wait_for(lambda: all(_state(p) in ("S", "R") for p in pids))
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        proc.kill()
