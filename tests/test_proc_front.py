"""The one front for another process's /proc files (parinfo.machine.procfs): the shapes a task can take
(a process whose main thread exited while its threads run OpenBLAS, a zombie, a kernel thread, a
reused pid), a cgroup whose name is not UTF-8, a quota changed under a long-running scanner, and a
source check that no other module opens another process's /proc files. Ground truth comes from
threadpoolctl inside the targets and from /proc itself."""
from __future__ import annotations

import ast
import contextlib
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, Targets, clean_env, run_cli, start_target, stop_target

import parinfo.host
from parinfo.errors import UsageError
from parinfo.host.scanner import FOLLOW_S, Scanner
from parinfo.machine import procfs
from parinfo.machine.procfs import NotAProcess, Proc, ProcessGone
from parinfo.outside.inforce import IN_FORCE, counts_in_force
from parinfo.process.pools import PoolRow
from parinfo.records.convert import load
from parinfo.records.source import unknown as unknown_source

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# Limits OpenBLAS to 1 after import (ground truth printed), keeps two threads running matmuls, then
# ends its main thread with pthread_exit: /proc/PID/stat says Z while the process runs on.
LEADER_EXITS = """
import ctypes, os, sys, threading, time
import numpy, threadpoolctl
threadpoolctl.threadpool_limits(1)
pool = [p for p in threadpoolctl.threadpool_info() if p["internal_api"] == "openblas"][0]

def work():
    a = numpy.ones((120, 120))
    while True:
        a @ a
        time.sleep(0.005)

def end_at_eof():
    sys.stdin.readline()
    os._exit(0)

for _ in range(2):
    threading.Thread(target=work, daemon=True).start()
threading.Thread(target=end_at_eof).start()
print(pool["num_threads"], flush=True)
time.sleep(0.3)
ctypes.CDLL(None).pthread_exit(None)
"""

TARGET = """
import sys, threadpoolctl, numpy
threadpoolctl.threadpool_limits(1)
print([p for p in threadpoolctl.threadpool_info() if p["internal_api"] == "openblas"][0]["num_threads"], flush=True)
sys.stdin.readline()
"""


def _wait_for_state(pid: int, state: str, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            if fh.read().rsplit(b")", 1)[1].split()[0].decode() == state:
                return
        time.sleep(0.05)
    pytest.fail(f"pid {pid} never reached state {state}")


# -- a process whose main thread exited -------------------------------------------------------------


def test_a_process_whose_main_thread_exited_is_read_through_its_live_threads():
    pytest.importorskip("numpy")
    proc, truth = start_target(LEADER_EXITS)
    try:
        assert truth == 1
        _wait_for_state(proc.pid, "Z")  # the main thread is a zombie; the process is not
        (row,) = [c for c in counts_in_force(Proc.of(proc.pid)) if c.library == "openblas"]
        assert (row.count, row.source) == (truth, IN_FORCE)

        out = run_cli("show", "--pid", str(proc.pid), "--json")
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        blas = [p for p in report["pools"] if p["library"] == "openblas"]
        assert blas and all(p["num_threads"] == truth and p["count_source"] == IN_FORCE.to_json() for p in blas), blas
        assert "main thread has exited" in report["process"]["note"]

        rows = [p for p in parinfo.host.scan(interval=0).processes if p.pid == proc.pid]
        assert rows, "host left out a process whose main thread exited"
        (pool,) = [p for p in rows[0].pools if p.library == "openblas"]
        assert (pool.count, pool.in_force) == (truth, True)
        assert rows[0].threads == len(os.listdir(f"/proc/{proc.pid}/task")) - 1  # the exited main thread
    finally:
        stop_target(proc)


def test_a_real_zombie_is_still_named_as_one():
    code = ("import os, sys, time\nchild = os.fork()\nif child == 0:\n    os._exit(0)\n"
            "print(child, flush=True)\nsys.stdin.readline()\n")
    proc, child = start_target(code)
    try:
        _wait_for_state(child, "Z")
        with pytest.raises(NotAProcess, match="is a zombie"):
            Proc(child).check()
        out = run_cli("show", "--pid", str(child))
        assert out.returncode == 2 and "zombie" in out.stderr and "Traceback" not in out.stderr
    finally:
        stop_target(proc)


# -- the front on fake trees -------------------------------------------------------------------------


def _stat_line(pid: int, name: bytes, state: str, ppid: int = 1, flags: int = 0, start: int = 100) -> bytes:
    rest = [state, str(ppid)] + ["0"] * 4 + [str(flags)] + ["0"] * 12 + [str(start)] + ["0"] * 30
    return b"%d (%s) %s\n" % (pid, name, " ".join(rest).encode())


def _fake(tmp_path: Path, pid: int, stat: bytes, tasks: dict[int, bytes] | None = None) -> str:
    base = tmp_path / "proc" / str(pid)
    base.mkdir(parents=True)
    (base / "stat").write_bytes(stat)
    for tid, line in (tasks or {pid: stat}).items():
        (base / "task" / str(tid)).mkdir(parents=True)
        (base / "task" / str(tid) / "stat").write_bytes(line)
    return str(tmp_path)


def test_stat_names_with_parentheses_spaces_and_bytes_parse_exactly():
    st = procfs.parse_stat(_stat_line(7, b"a) (b \xff", "S", ppid=3, start=42))
    assert (st.pid, st.name, st.state, st.ppid, st.start) == (7, "a) (b \udcff", "S", 3, 42)
    for garbage in (b"", b"7 (x", b"7 (x) S", b"\xff\xff"):
        with pytest.raises(ValueError):
            procfs.parse_stat(garbage)


def test_kernel_threads_zombies_and_leaders_that_exited_on_a_fake_tree(tmp_path):
    root = _fake(tmp_path, 50, _stat_line(50, b"kworker/0:1", "I", ppid=2, flags=procfs.PF_KTHREAD))
    with pytest.raises(NotAProcess, match="kernel thread"):
        Proc(50, root).check()
    root = _fake(tmp_path, 60, _stat_line(60, b"dead", "Z"))
    with pytest.raises(NotAProcess, match="zombie"):
        Proc(60, root).check()
    root = _fake(tmp_path, 70, _stat_line(70, b"server", "Z"),
                 {70: _stat_line(70, b"server", "Z"), 71: _stat_line(71, b"worker", "R")})
    (tmp_path / "proc" / "70" / "task" / "71" / "environ").write_bytes(b"OMP_NUM_THREADS=3\0")
    proc = Proc(70, root)
    assert proc.check().pid == 70 and proc.leader_exited
    assert proc.environ() == {"OMP_NUM_THREADS": "3"}  # read through thread 71
    with pytest.raises(ProcessGone):
        Proc(99, root).check()


def test_a_reused_pid_is_not_taken_for_the_process_first_read(tmp_path):
    root = _fake(tmp_path, 80, _stat_line(80, b"first", "S", start=100))
    proc = Proc(80, root)
    proc.stat()
    (tmp_path / "proc" / "80" / "stat").write_bytes(_stat_line(80, b"second", "S", start=999))
    assert not proc.same()
    with pytest.raises(ProcessGone, match="exited while parinfo was reading it"):
        proc.stat()


@pytest.mark.parametrize("pid", [0, -1, True, 1.5, "7"])
def test_a_pid_that_is_not_a_whole_number_above_zero_is_refused(pid):
    with pytest.raises(UsageError):
        Proc(pid)  # type: ignore[arg-type]


def test_files_are_read_within_bounds(tmp_path):
    root = _fake(tmp_path, 90, _stat_line(90, b"big", "S"))
    (tmp_path / "proc" / "90" / "environ").write_bytes(b"A=" + b"x" * (5 << 20) + b"\0")
    assert len(Proc(90, root).read("environ", 1 << 20)) == 1 << 20


# -- cgroups: a name that is not UTF-8, a quota that changes -----------------------------------------


@contextlib.contextmanager
def _targets_in_cgroup(cpus: float, suffix: bytes = b"") -> Iterator[tuple[Targets, Path, str]]:
    """Targets started in a fresh real cgroup limited to ``cpus`` CPUs whose name ends with ``suffix``
    (any bytes), its path and kind (v1 or v2); skipped where none can be made."""
    from real_cgroup import quota_cgroup

    with quota_cgroup(cpus, os.fsdecode(suffix)) as made:
        if isinstance(made, str):
            pytest.skip(f"cannot make a cgroup with a quota here: {made}")
        path, kind = made
        targets = Targets(str(path))
        try:
            yield targets, path, kind
        finally:
            targets.stop()


def test_a_cgroup_whose_name_is_not_utf8_keeps_its_quota():
    pytest.importorskip("numpy")
    with _targets_in_cgroup(0.5, b"-\xff\x1b[2J") as (targets, _, _):
        proc, truth = targets.start(TARGET)
        assert int(truth) == 1
        rows = [p for p in parinfo.host.scan(interval=0).processes if p.pid == proc.pid]
        assert rows and rows[0].usable_cpus == 1
        (group,) = [g for g in parinfo.host.scan(interval=0).cgroups if proc.pid in g.pids]
        assert group.quota == 0.5, group

        out = run_cli("show", "--pid", str(proc.pid))
        assert out.returncode == 0, out.stderr
        assert "0.5 CPUs" in out.stdout and "\x1b" not in out.stdout
        host = run_cli("host", "--once", "--json")
        assert host.returncode == 0 and "\x1b" not in host.stdout, host.stderr
        assert any(c["quota"] == 0.5 and proc.pid in c["pids"] for c in json.loads(host.stdout)["cgroups"])


def test_a_quota_changed_under_a_running_scanner_shows_in_its_next_scan():
    pytest.importorskip("numpy")
    from real_cgroup import set_quota

    scanner = Scanner()
    with _targets_in_cgroup(2) as (targets, path, kind):
        proc, _ = targets.start(TARGET)

        def row() -> tuple[float | None, int]:
            (group,) = [g for g in scanner.scan().cgroups if proc.pid in g.pids]
            return group.quota, group.usable_cpus

        assert row() == (2.0, 2)
        set_quota(path, kind, 0.5)
        time.sleep(FOLLOW_S + 0.1)
        assert row() == (0.5, 1)
        targets.stop()
    scanner.scan()
    assert path.name not in " ".join(i.path for i in scanner._cgroups.values())  # forgotten once empty


def _usable_series(text: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {s.labels.get("cgroup", ""): s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "parinfo_usable_cpus"}


def test_a_quota_changed_under_host_serve_shows_in_its_next_scrape():
    pytest.importorskip("numpy")
    pytest.importorskip("prometheus_client")
    from prometheus_server import scrape, serve, stop
    from real_cgroup import set_quota

    with _targets_in_cgroup(2) as (targets, path, kind):
        targets.start(TARGET)
        server, port = serve("host", "--cgroup", str(path))
        try:
            assert _usable_series(scrape(port)).get(str(path)) == 2
            set_quota(path, kind, 0.5)
            time.sleep(FOLLOW_S + 0.1)
            assert _usable_series(scrape(port)).get(str(path)) == 1
        finally:
            stop(server)


def test_a_quota_changed_under_watch_shows_in_its_next_sample():
    pytest.importorskip("numpy")
    from real_cgroup import set_quota

    from parinfo.watching.sample import Sampler

    with _targets_in_cgroup(2) as (targets, path, kind):
        proc, _ = targets.start(TARGET)
        sampler = Sampler(proc.pid)
        assert (sampler.usable, sampler.quota) == (2, 2.0)
        set_quota(path, kind, 0.5)
        time.sleep(FOLLOW_S + 0.1)
        sampler.read()
        assert (sampler.usable, sampler.quota) == (1, 0.5)


# -- permission as root -------------------------------------------------------------------------------


def test_a_process_root_may_not_read_says_why_not_that_root_is_needed():
    if os.geteuid() != 0:
        pytest.skip("needs root")
    try:
        os.close(os.open("/proc/1/mem", os.O_RDONLY))
        pytest.skip("root may read pid 1's memory here")
    except PermissionError:
        pass
    why = Proc(1).permission_reason()
    assert "run as the process's user or root" not in why and "refused even to root" in why, why


# -- one module opens another process's /proc files ---------------------------------------------------


def _proc_paths(tree: ast.AST) -> list[int]:
    """Lines building a /proc path for a pid: an f-string "proc/{...}" or "/proc" joined to a value."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = node.values
            for a, b in itertools.pairwise(parts):
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.endswith("proc/") \
                        and isinstance(b, ast.FormattedValue):
                    lines.append(node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "listdir" and node.args \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == "/proc":
            lines.append(node.lineno)
    return lines


# The front is procfs.py alone: the modules split from it build no /proc path of a process
# (proc_words parses what procfs read, proc_memory opens the path Proc.live_path gives, capabilities
# reads /proc/sys only).
FRONT = ("machine/procfs.py",)


def test_only_the_front_builds_paths_into_another_process():
    package = REPO / "parinfo"
    offenders = {}
    for path in package.rglob("*.py"):
        if path.relative_to(package).as_posix() in FRONT:
            continue
        found = _proc_paths(ast.parse(path.read_text()))
        if found:
            offenders[str(path.relative_to(REPO))] = found
    assert not offenders, f"/proc paths of another process built outside parinfo/machine/procfs.py: {offenders}"


def test_the_source_check_finds_what_it_looks_for():
    assert sorted(_proc_paths(ast.parse('open(f"/proc/{pid}/maps")\nos.listdir("/proc")'))) == [1, 2]


def test_a_vanished_process_is_one_line_through_the_cli():
    proc = subprocess.Popen([sys.executable, "-c", "pass"], env=clean_env())
    proc.wait(timeout=30)
    out = run_cli("show", "--pid", str(proc.pid))
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    probe = subprocess.run([sys.executable, "-c", "from parinfo.outside.inforce import counts_in_force\n"
                            "from parinfo.machine.procfs import Proc\n"
                            f"counts_in_force(Proc.of({proc.pid}))"], capture_output=True, text=True, timeout=60,
                           env=clean_env(PYTHONPATH=str(REPO)))
    assert "ProcessGone" in probe.stderr


def test_a_count_the_kernel_refused_is_never_replaced_by_a_launch_environment_guess(monkeypatch):
    """The host scan tells a refusal by its type (procfs.Denied carried as CountInForce.denied), not
    by its words: a refused read stays unknown with its reason, another failure falls back to what
    the launch environment asks for (said so)."""
    from parinfo.host import pool_counts, scanner as sc
    from parinfo.machine.topology import machine_facts
    from parinfo.outside.inforce import CountInForce

    row = load(PoolRow, {"library": "openblas", "filepath": "/lib/libopenblas.so", "owner": "numpy"}, strict=True)
    static = sc._Static(("python",), "python", 0, {"OPENBLAS_NUM_THREADS": "1"}, symbol_maps="x")
    for denied, expect_count in ((True, None), (False, 1)):
        monkeypatch.setattr(pool_counts, "in_force", lambda pid, maps, d=denied: {"/lib/libopenblas.so": CountInForce(
            "openblas", "/lib/libopenblas.so", None, unknown_source("the reason, in any words"), denied=d)})
        (pool,) = Scanner()._counts(1, [row], static, machine_facts())
        assert pool.count == expect_count and not pool.in_force
        assert (pool.source.text == "unknown (the reason, in any words)") is denied, pool.source


def test_a_process_whose_threads_vanish_while_it_is_read_is_no_crash(tmp_path):
    """The main thread says Z and the task folder is already gone (the process ended between the two
    reads): no live thread to follow, so it is a zombie to check() and no row to a scan, never an error."""
    base = tmp_path / "proc" / "62"
    base.mkdir(parents=True)
    (base / "stat").write_bytes(_stat_line(62, b"ending", "Z"))
    proc = Proc(62, str(tmp_path))
    assert proc.follow_live_thread() is False
    with pytest.raises(NotAProcess, match="zombie"):
        proc.check()
