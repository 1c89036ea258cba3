"""A process's NUMA memory policy, read for itself (get_mempolicy) and from outside (/proc/PID/numa_maps,
Mems_allowed_list), with sources; hostile numa_maps files are read in bounded time; show reports it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import clean_env, run_cli

from parinfo.machine import mempolicy as mp
from parinfo.machine.procfs import Proc
from parinfo.records.source import Kind

NUMACTL = shutil.which("numactl")
needs_numactl = pytest.mark.skipif(NUMACTL is None, reason="numactl is not installed")
needs_syscall = pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"),
                                   reason="memory-policy system call numbers known for x86_64 and aarch64 only")

MAPS = (b"55d0c0000000 bind:0-1 file=/usr/bin/python3 mapped=10 N0=10 kernelpagesize_kB=4\n"
        b"7f0000000000 bind:0-1 anon=3 dirty=3 N1=3 kernelpagesize_kB=4\n"
        b"7f1000000000 interleave:0-1 anon=2 N0=1 N1=1 kernelpagesize_kB=4\n"
        b"7ffd00000000 bind:0-1 stack anon=5 N0=5 kernelpagesize_kB=4\n")


def fake_proc(tmp_path, pid: int, numa_maps: bytes | None, status: str = "Name:\tx\nMems_allowed_list:\t0-1\n"):
    base = tmp_path / "proc" / str(pid)
    base.mkdir(parents=True)
    (base / "status").write_text(status)
    if numa_maps is not None:
        (base / "numa_maps").write_bytes(numa_maps)
    return str(tmp_path)


def test_the_policy_most_mappings_show_is_the_processes_with_a_note_on_the_others():
    assert mp.parse_numa_maps(MAPS) == ("bind", (0, 1), "3 of 4 mappings read; others: interleave:0-1")
    assert mp.parse_numa_maps(b"7f00 weighted interleave:0-3 anon=1\n") == ("weighted interleave", (0, 1, 2, 3), None)
    assert mp.parse_numa_maps(b"7f00 prefer (many)=static:1 anon=1\n") == ("prefer (many)", (1,), None)
    assert mp.parse_numa_maps(b"7f00 default anon=1\n7f01 default\n") == ("default", (), None)


def test_garbage_and_a_cut_last_line_are_left_out():
    assert mp.parse_numa_maps(b"") == (None, (), None)
    assert mp.parse_numa_maps(b"\x1b[31m bind:0\nzzz\n") == (None, (), None)
    assert mp.parse_numa_maps(b"7f00 default anon=1\n7f01 bind:0") == ("default", (), None)  # the cut line
    assert mp.parse_numa_maps(b"7f00 bind:99999999999999999999-1\n") == (None, (), None)


def test_another_process_is_read_from_numa_maps_and_status(tmp_path):
    got = mp.memory_policy(Proc.of(4242, str(tmp_path)), fake_proc(tmp_path, 4242, MAPS))
    assert (got.policy, got.nodes, got.allowed, got.text) == ("bind", (0, 1), (0, 1), "bind:0-1")
    assert got.source.kind is Kind.FILE and got.source.detail == "/proc/4242/numa_maps"
    assert got.allowed_source.kind is Kind.FILE and "Mems_allowed_list" in got.allowed_source.text


def test_missing_or_empty_files_are_unknown_with_the_reason(tmp_path):
    got = mp.memory_policy(Proc.of(4243, str(tmp_path)), fake_proc(tmp_path, 4243, None, status="Name:\tx\n"))
    assert got.policy is None and got.source.kind is Kind.UNKNOWN and "numa_maps" in got.text
    assert got.allowed is None and "no Mems_allowed_list" in str(got.allowed_source)
    empty = mp.memory_policy(Proc.of(4244, str(tmp_path)),
                             fake_proc(tmp_path, 4244, b"", status="Mems_allowed_list:\tx-\n"))
    assert empty.policy is None and "is empty" in empty.text
    assert "not a node list" in str(empty.allowed_source)


def test_a_fake_root_without_proc_files_is_unknown_for_this_process_and_gone_for_another(tmp_path):
    got = mp.memory_policy(None, str(tmp_path))
    assert got.policy is None and "/proc/self/numa_maps does not exist" in got.text
    assert got.allowed is None and "/proc/self/status does not exist" in str(got.allowed_source)
    from parinfo.machine.procfs import ProcessGone

    with pytest.raises(ProcessGone):
        mp.memory_policy(Proc.of(4246, str(tmp_path)), str(tmp_path))


def test_a_huge_numa_maps_is_read_as_a_bounded_prefix(tmp_path):
    # 64 KiB of bind:1 lines, then 32 MiB of interleave lines: read whole, interleave would win.
    first = b"7f0000000000 bind:1 anon=1 N1=1 kernelpagesize_kB=4\n"
    rest = b"7f1000000000 interleave:0-1 anon=1 N1=1 kernelpagesize_kB=4\n"
    huge = first * (mp.NUMA_MAPS_LIMIT // len(first) + 1) + rest * ((32 << 20) // len(rest))
    got = mp.memory_policy(Proc.of(4245, str(tmp_path)), fake_proc(tmp_path, 4245, huge))
    assert got.text == "bind:1" and got.note is None


@needs_syscall
def test_this_thread_is_read_with_get_mempolicy_and_set_policy_round_trips():
    code = ("import json; from parinfo.machine import mempolicy as mp\n"
            "before = mp.memory_policy()\n"
            "mp.set_policy(mp.MPOL_BIND, [0]); bound = mp.memory_policy()\n"
            "mp.set_policy(mp.MPOL_DEFAULT, []); after = mp.memory_policy()\n"
            "print(json.dumps([before.text, bound.text, after.text, bound.source.kind.value]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["default", "bind:0", "default", "getter"]


@needs_syscall
def test_a_node_outside_the_cpuset_is_refused_in_words():
    with pytest.raises(mp.PolicyError, match="set_mempolicy: refused"):
        mp.set_policy(mp.MPOL_BIND, [4000])
    assert mp.get_policy()[0] == mp.MPOL_DEFAULT


@needs_numactl
def test_show_reports_the_memory_policy_of_a_bound_process_from_outside_and_inside():
    proc = subprocess.Popen([NUMACTL, "--membind=0", sys.executable, "-c", "import time; time.sleep(60)"],
                            env=clean_env())
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # numactl execs python: wait for it
            if b"python" in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
                break
            time.sleep(0.05)
        out = run_cli("show", "--pid", str(proc.pid), "--json", timeout=120)
        assert out.returncode == 0, out.stderr
        memory = json.loads(out.stdout)["memory"]
        assert memory["policy"] == "bind" and memory["nodes"] == [0]
        assert memory["source"] == {"kind": "file", "detail": f"/proc/{proc.pid}/numa_maps",
                                    "text": f"file: /proc/{proc.pid}/numa_maps"}
        text = run_cli("show", "--pid", str(proc.pid), timeout=120).stdout
        assert "Memory policy" in text and f"bind:0 (file: /proc/{proc.pid}/numa_maps)" in text
    finally:
        proc.kill()
        proc.wait()
    inside = run_cli("show", "--json", prefix=[NUMACTL, "--membind=0"], timeout=120)
    assert json.loads(inside.stdout)["memory"]["policy"] == "bind"
    assert json.loads(run_cli("show", "--json", timeout=120).stdout)["memory"]["policy"] == "default"
