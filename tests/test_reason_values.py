"""Issue 37: readers give an Unknown (with the reason) where they could not read a fact, errors say
their kind by type, and the report's words stay the same at the JSON edge."""
from __future__ import annotations

import pytest
from fake_trees import FakeMachine

from parinfo import safe_file
from parinfo.errors import ProfileError
from parinfo.host.judging import own_pressure
from parinfo.machine import checks, mempolicy, proc_memory
from parinfo.machine.pressure import NOT_IN_REPORT, Pressure, PressureFacts, cpu_pressure
from parinfo.machine.proc_words import Denied
from parinfo.machine.procfs import Proc
from parinfo.machine.sysfs import topology
from parinfo.process.frameworks import torch_info_of, torch_pool_threads
from parinfo.process.getter_code import loaded_address
from parinfo.process.threads import OsThread, ThreadList, _from_psutil
from parinfo.process.torch_config import TorchFacts
from parinfo.profiles import yaml_nodes
from parinfo.records.convert import dump, dumps, load
from parinfo.records.source import Kind, file, unknown as unknown_source
from parinfo.records.unknown import Unknown, in_words
from parinfo.watching.sample import pressure_percent


class _Target:
    """A process as Memory reads it, its mem file at ``path``."""

    pid = 7

    def __init__(self, path: str) -> None:
        self.path = path

    def live_path(self, name: str) -> bytes:
        return self.path.encode()

    def shown(self, name: str) -> str:
        return f"/proc/7/{name}"

    def exists(self) -> bool:
        return True

    def permission_reason(self) -> str:
        return Denied("permission: run as the process's user or root")


def test_memory_reads_give_bytes_or_an_unknown_with_the_reason(tmp_path):
    mem_file = tmp_path / "mem"
    mem_file.write_bytes(b"\x01\x02\x03\x04")
    with proc_memory.Memory(_Target(str(mem_file))) as mem:
        assert mem.read(0, 4) == b"\x01\x02\x03\x04"
        assert mem.read(2, 4) == Unknown("short read of the process's memory at 0x2")
    with proc_memory.Memory(_Target(str(tmp_path))) as mem:  # a directory: opens, cannot be read
        assert mem.read(0x10, 4) == Unknown("cannot read the process's memory at 0x10: Is a directory")
    refused = proc_memory.Memory(_Target(str(mem_file / "below")))  # ENOTDIR: said once, for every read
    want = Unknown("cannot open /proc/7/mem: Not a directory")
    assert refused.read(0, 4) == want and refused.read(8, 4) == want


def test_a_refused_memory_read_keeps_its_denied_reason(tmp_path, monkeypatch):
    def refuse(*args: object) -> int:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(proc_memory.os, "open", refuse)
    got = proc_memory.Memory(_Target(str(tmp_path / "mem"))).read(0, 4)
    assert isinstance(got, Unknown) and isinstance(got.why, Denied)
    assert str(got) == "unknown (permission: run as the process's user or root)"


def _proc_tree(tmp_path, pid: int) -> str:
    base = tmp_path / "proc" / str(pid)
    base.mkdir(parents=True)
    (base / "status").write_text("Name:\tx\nMems_allowed_list:\t0\n")
    return str(tmp_path)


def test_a_missing_or_unreadable_numa_maps_is_an_unknown_with_why(tmp_path):
    root = _proc_tree(tmp_path, 4250)
    proc = Proc(4250, root)
    assert mempolicy._read(proc, "numa_maps", 1 << 16, "a kernel without NUMA support") == \
        Unknown("/proc/4250/numa_maps does not exist (a kernel without NUMA support)")
    got = mempolicy.memory_policy(proc, root)
    assert got.source == unknown_source("/proc/4250/numa_maps does not exist (a kernel without NUMA support)")
    (tmp_path / "proc" / "4250" / "numa_maps").mkdir()  # there, but no file to read
    raw = mempolicy._read(proc, "numa_maps", 1 << 16, "a kernel without NUMA support")
    assert isinstance(raw, Unknown) and "/proc/4250/numa_maps" in raw.why
    assert mempolicy.memory_policy(proc, root).source == unknown_source(raw.why)


def test_a_getter_parinfo_cannot_decode_is_an_unknown_with_why():
    assert loaded_address(b"\x0f\x0b", 0x1000, "x86_64") == \
        Unknown("the getter's code is not a load parinfo knows (byte 0x0f at +0)")
    assert loaded_address(b"\xc3", 0x1000, "x86_64") == Unknown("the getter returns without loading a variable")
    assert loaded_address(b"\x8b\x05\0\0\0\0", 0x1000, "x86_64") == \
        Unknown("no return within the getter's first 6 bytes")
    assert loaded_address(b"\xc3", 0x1000, "riscv") == Unknown("parinfo does not decode riscv getters")
    assert loaded_address(b"\0\0\0\0", 0x1000, "aarch64") == \
        Unknown("the getter's code is not a load parinfo knows (instruction 0x00000000 at +0)")


def test_torch_pool_threads_of_an_unlisted_process_is_unknown_in_the_same_words():
    threads = _from_psutil(1 << 30, "no such process")  # no such pid: psutil cannot list its threads
    assert isinstance(threads.count, str)
    got = torch_pool_threads(threads)
    assert isinstance(got, Unknown) and str(got) == threads.count
    info = torch_info_of(TorchFacts(), threads)
    assert info.pool_threads == threads.count and info.interop_started == threads.count


def test_torch_pool_threads_counts_and_the_native_backend_is_unknown_for_interop():
    threads = ThreadList(3, [OsThread(1, "python"), OsThread(2, "PTThreadPool"), OsThread(3, "pt_thread_pool")],
                         file("/proc/1/task"))
    assert torch_pool_threads(threads) == 2
    native = torch_info_of(TorchFacts(parallel_info="ATen parallel backend: native thread pool\n"), threads)
    assert native.pool_threads == 2
    assert native.interop_started == ("unknown (native thread pool backend: intra-op and inter-op workers share "
                                      "the name PTThreadPool; 2 such threads)")
    assert torch_info_of(TorchFacts(parallel_info="ATen parallel backend: OpenMP\n"), threads).interop_started is True


PSI = "some avg10=1.00 avg60=1.00 avg300=1.00 total=1000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def test_cpu_pressure_says_no_psi_only_when_the_file_is_missing(tmp_path):
    missing = FakeMachine(tmp_path).cpus(2).build()
    assert cpu_pressure(missing).system == \
        Unknown("cannot read /proc/pressure/cpu: No such file or directory; the kernel has no PSI")
    unreadable = FakeMachine(tmp_path).cpus(2).directory("proc/pressure/cpu").build()
    assert cpu_pressure(unreadable).system == Unknown("cannot read /proc/pressure/cpu: Is a directory")


def _pressure(total_usec: int) -> Pressure:
    return Pressure(file("/proc/pressure/cpu"), 1.0, total_usec)


def test_pressure_percent_and_own_pressure_are_a_figure_or_an_unknown():
    assert pressure_percent(_pressure(0), _pressure(500_000), 1.0) == 50.0
    assert pressure_percent(Unknown("a"), _pressure(1), 1.0) == Unknown("a")
    assert pressure_percent(Unknown("a"), Unknown("b"), 1.0) == Unknown("b")
    a = PressureFacts(_pressure(0), _pressure(0), None)
    b = PressureFacts(_pressure(0), _pressure(250_000), None)
    assert own_pressure("/sys/fs/cgroup/job", a, b, 1.0) == Unknown("no CPU pressure file of its own: no v2 cgroup")
    assert own_pressure("/sys/fs/cgroup/job", a, PressureFacts(b.system, b.cgroup, "/sys/fs/cgroup/job"), 1.0) == 25.0
    assert in_words(Unknown("x")) == "unknown (x)" and in_words(25.0) == 25.0


def test_pressure_facts_write_an_unknown_as_its_words_and_read_them_back():
    facts = PressureFacts(Unknown("cannot read /proc/pressure/cpu: Is a directory"), _pressure(7))
    data = dump(facts)
    assert data["system"] == "unknown (cannot read /proc/pressure/cpu: Is a directory)"
    back = load(PressureFacts, data, strict=True)
    assert back == facts and dumps(dump(back)) == dumps(data)
    assert load(PressureFacts, {"cgroup": "unknown (no cgroup v2 hierarchy)"}, strict=True).system == NOT_IN_REPORT
    assert load(PressureFacts, {"system": 3}, strict=False).system == NOT_IN_REPORT
    with pytest.raises(Exception, match="system"):
        load(PressureFacts, {"system": 3}, strict=True)
    assert Unknown.from_words("n/a") == Unknown("n/a")  # another program's text: the reason itself


def test_an_empty_numa_cpulist_is_skipped_and_only_that(tmp_path):
    empty = FakeMachine(tmp_path).cpus(4, numa=2).file("sys/devices/system/node/node2/cpulist", "\n").build()
    got = topology(empty)
    assert got.numa_node_ids == (0, 1) and "numa_nodes" not in got.unknown
    # a file whose text reads "is empty" is garbage, not an empty node
    words = FakeMachine(tmp_path).cpus(4, numa=2).file("sys/devices/system/node/node2/cpulist", "is empty").build()
    bad = topology(words)
    assert bad.numa_nodes == () and bad.unknown["numa_nodes"].startswith("unexpected content in")


def test_a_port_out_of_range_and_one_that_is_no_number_are_told_apart_by_kind():
    with pytest.raises(checks.BadValue) as out:
        checks.port("70000", "--port", "give a port")
    assert out.value.reason.startswith("port 70000 is out of range")
    with pytest.raises(checks.BadValue) as bad:
        checks.port("7x", "--port", "give a port")
    assert bad.value.reason.startswith("port 7x is not a number")
    with pytest.raises(checks.BadValue) as big:
        checks.integer("99", "--n", 1, 10)
    assert big.value.out_of_range and str(big.value) == "--n 99: out of range (1-10) (give a whole number from 1 to 10)"


def test_a_profile_on_fuse_is_refused_with_the_fuse_fix(tmp_path, monkeypatch):
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\n")
    monkeypatch.setattr(safe_file, "_on_fuse", lambda fd: True)
    with pytest.raises(ProfileError) as info:
        yaml_nodes.read_text(path)
    assert info.value.fix == "copy the profile to a local file" and "FUSE" in info.value.message


def test_a_missing_profile_file_is_a_missing_problem(tmp_path):
    problem = yaml_nodes.file_problem(tmp_path / "none.yaml")
    assert isinstance(problem, yaml_nodes.Missing) and problem == "no such file"
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "gone")
    dangling = yaml_nodes.file_problem(tmp_path / "dangling.yaml")
    assert dangling == "is a dangling symbolic link" and not isinstance(dangling, yaml_nodes.Missing)
    with pytest.raises(ProfileError) as info:
        yaml_nodes.read_text(tmp_path / "none.yaml")
    assert info.value.fix == "check the path, or give the name of a shipped profile"


def test_a_kind_unknown_source_words_are_those_of_the_unknown():
    assert unknown_source("x").kind is Kind.UNKNOWN and unknown_source("x").text == str(Unknown("x"))
