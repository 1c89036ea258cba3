"""cpu_identity: fast /proc/cpuinfo + sysfs path, ISA extensions, caches, py-cpuinfo per-boot cache."""
from __future__ import annotations

import json
import os

import pytest
from conftest import clean_env, run_json
from fake_trees import FakeMachine

from parinfo.machine import cpuid
from parinfo.machine.cpuid import cpu_identity
from parinfo.machine.sysfs import Unreadable
from parinfo.records.convert import dump

SPR = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse sse2 lm avx avx2 fma f16c avx512f avx512dq avx512bw avx512vl avx_vnni avx512_bf16 \
avx512_vnni avx512_fp16 amx_bf16 amx_tile amx_int8

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: SHOULD NOT BE READ
"""

GRAVITON = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm asimddp \
sve i8mm bf16 svebf16
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40

processor\t: 1
Features\t: fp asimd
"""


@pytest.fixture(autouse=True)
def _fresh_caches():
    cpuid._fast.cache_clear()
    cpuid._slow_for_boot.cache_clear()
    yield
    cpuid._fast.cache_clear()
    cpuid._slow_for_boot.cache_clear()


def test_x86_sapphire_rapids_isa_and_caches(tmp_path):
    root = (FakeMachine(tmp_path).cpuinfo(SPR)
            .caches({"L1d": "48K", "L1i": "32K", "L2": "2048K", "L3": "107520K"}).build())
    d = dump(cpu_identity(root))
    assert d["brand"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert d["vendor"] == "GenuineIntel"
    assert d["arch"] == "x86_64"
    assert d["isa"] == [name for name, _ in cpuid.X86_ISA]
    assert d["isa_checked"] == d["isa"]
    assert d["caches"] == {"L1d": 48 * 1024, "L1i": 32 * 1024, "L2": 2 * 1024**2, "L3": 105 * 1024**2}
    assert d["unknown"] == {}
    assert "py-cpuinfo" not in d["source"]["text"]


def test_x86_without_avx512(tmp_path):
    text = SPR.replace("avx512", "zz").replace("amx", "zz").replace("avx_vnni", "zz")
    d = dump(cpu_identity(FakeMachine(tmp_path).cpuinfo(text).build()))
    assert d["isa"] == ["AVX", "AVX2", "FMA", "F16C"]
    assert "AVX-512F" in d["isa_checked"] and "AMX-TILE" in d["isa_checked"]


def test_arm_features_vendor_and_missing_brand(tmp_path):
    d = dump(cpu_identity(FakeMachine(tmp_path).cpuinfo(GRAVITON).caches({"L1d": "64K", "L2": "1M"}).build()))
    assert d["arch"] == "aarch64"
    assert d["vendor"] == "ARM"
    assert d["isa"] == ["NEON", "SVE", "DOTPROD", "I8MM", "BF16"]
    assert d["isa_checked"] == [name for name, _ in cpuid.ARM_ISA]
    assert d["brand"] is None and d["unknown"]["brand"] == "not in /proc/cpuinfo"
    assert d["caches"] == {"L1d": 65536, "L2": 1024**2}


def test_no_proc_cpuinfo_is_unknown_with_reason(tmp_path):
    d = dump(cpu_identity(FakeMachine(tmp_path).caches({"L2": "512K"}).build()))
    assert d["brand"] is None and d["vendor"] is None and d["isa"] == [] and d["isa_checked"] == []
    for name in ("brand", "vendor", "isa"):
        assert d["unknown"][name].startswith("cannot read /proc/cpuinfo")
    assert d["caches"] == {"L2": 512 * 1024}


def test_missing_and_garbage_caches(tmp_path):
    d = dump(cpu_identity(FakeMachine(tmp_path).cpuinfo(SPR).build()))
    assert d["caches"] == {} and "/sys/devices/system/cpu/cpu0/cache" in d["unknown"]["caches"]
    root = (FakeMachine(tmp_path).cpuinfo(SPR).caches({"L1d": "48K", "L2": "big"}).build())
    d = dump(cpu_identity(root))
    assert d["caches"] == {"L1d": 48 * 1024}
    assert "index1" in d["unknown"]["caches"]


def test_result_is_a_copy(tmp_path):
    root = FakeMachine(tmp_path).cpuinfo(SPR).build()
    cpu_identity(root).isa.clear()
    assert "AVX" in dump(cpu_identity(root))["isa"]


def test_real_machine_fast_path_never_imports_py_cpuinfo():
    code = ("import json, sys; from parinfo.records.convert import dump; "
            "from parinfo.machine.cpuid import cpu_identity; d = dump(cpu_identity()); "
            "d['imported'] = 'cpuinfo' in sys.modules; print(json.dumps(d))")
    d = run_json(code)
    if d["brand"] is None:
        pytest.skip("this machine's /proc/cpuinfo has no brand: py-cpuinfo is the documented fallback")
    assert d["imported"] is False
    assert d["arch"] == os.uname().machine


def _fake_py_cpuinfo(calls):
    def fake():
        calls.append(1)
        return {"brand_raw": "Fake CPU 9000", "vendor_id_raw": "FakeVendor", "arch_string_raw": "x86_64",
                "flags": ["avx", "avx2", "avx512vnni"], "hz_advertised_friendly": "3.0 GHz",
                "format": cpuid.CACHE_FORMAT}
    return fake


def test_slow_result_cached_per_boot_on_disk(tmp_path, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(cpuid, "_call_py_cpuinfo", _fake_py_cpuinfo(calls))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(cpuid, "_boot_id", lambda root: "1234abcd-0000-4000-8000-000000000001")
    d = dump(cpu_identity(slow=True))
    assert d["hz_advertised"] == "3.0 GHz" and "py-cpuinfo" in d["source"]["text"]
    stored = tmp_path / "cache" / "parinfo" / "cpuinfo-1234abcd-0000-4000-8000-000000000001.json"
    assert json.loads(stored.read_text())["brand_raw"] == "Fake CPU 9000"
    cpuid._slow_for_boot.cache_clear()  # a new process: only the file remains
    assert dump(cpu_identity(slow=True))["hz_advertised"] == "3.0 GHz"
    assert calls == [1]


def test_fallback_to_py_cpuinfo_when_proc_cpuinfo_is_missing(tmp_path, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(cpuid, "_call_py_cpuinfo", _fake_py_cpuinfo(calls))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def unreadable(root):
        raise Unreadable("cannot read /proc/cpuinfo: No such file or directory")

    monkeypatch.setattr(cpuid, "_first_processor", unreadable)
    d = dump(cpu_identity())
    assert d["brand"] == "Fake CPU 9000" and d["vendor"] == "FakeVendor"
    assert d["isa"] == ["AVX", "AVX2", "AVX-512VNNI"]
    assert "brand" not in d["unknown"] and "isa" not in d["unknown"]
    assert "hz_advertised" not in d
    assert calls == [1]


def test_unwritable_cache_dir_is_tolerated(tmp_path, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(cpuid, "_call_py_cpuinfo", _fake_py_cpuinfo(calls))
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert dump(cpu_identity(slow=True))["hz_advertised"] == "3.0 GHz"


def test_corrupt_cache_file_is_recomputed(tmp_path, monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(cpuid, "_call_py_cpuinfo", _fake_py_cpuinfo(calls))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cpuid, "_boot_id", lambda root: "feedbeef")
    (tmp_path / "parinfo").mkdir()
    (tmp_path / "parinfo" / "cpuinfo-feedbeef.json").write_text("{not json")
    assert dump(cpu_identity(slow=True))["hz_advertised"] == "3.0 GHz"
    assert calls == [1]


def test_py_cpuinfo_failure_is_unknown(monkeypatch, tmp_path):
    import sys

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setitem(sys.modules, "cpuinfo", None)  # makes "import cpuinfo" fail

    def unreadable(root):
        raise Unreadable("cannot read /proc/cpuinfo: No such file or directory")

    monkeypatch.setattr(cpuid, "_first_processor", unreadable)
    d = dump(cpu_identity())
    assert d["brand"] is None
    assert d["unknown"]["brand"].startswith("py-cpuinfo failed")
    assert not list(tmp_path.rglob("*.json"))  # a failure is not cached


@pytest.mark.timeout(120)
def test_real_py_cpuinfo_runs_once_per_boot(tmp_path):
    code = ("import json, sys; from parinfo.records.convert import dump; "
            "from parinfo.machine.cpuid import cpu_identity; d = dump(cpu_identity(slow=True)); "
            "d['imported'] = 'cpuinfo' in sys.modules; print(json.dumps(d))")
    env = clean_env(XDG_CACHE_HOME=str(tmp_path))
    first = run_json(code, env=env, timeout=100)
    assert first["imported"] is True
    assert "py-cpuinfo" in first["source"]["text"]
    if not os.path.exists("/proc/sys/kernel/random/boot_id"):
        pytest.skip("no boot id on this machine: nothing is cached on disk")
    assert list((tmp_path / "parinfo").glob("cpuinfo-*.json"))
    second = run_json(code, env=env, timeout=100)
    assert second["imported"] is False
    assert second["hz_advertised"] == first["hz_advertised"]


HOSTILE_CACHE = """
import json, os, sys, time
from parinfo.machine import cpuid
calls = []
def fake():
    calls.append(1)
    return {"brand_raw": "Fake", "flags": ["avx"], "hz_advertised_friendly": "1 GHz",
            "format": cpuid.CACHE_FORMAT}
cpuid._call_py_cpuinfo = fake
cpuid._boot_id = lambda root: "cafe0001"
os.makedirs(os.path.join(os.environ["XDG_CACHE_HOME"], "parinfo"), exist_ok=True)
path = os.path.join(os.environ["XDG_CACHE_HOME"], "parinfo", "cpuinfo-cafe0001.json")
kind = sys.argv[1]
if kind == "fifo":
    os.mkfifo(path)
elif kind == "zero":
    os.symlink("/dev/zero", path)
elif kind == "huge":
    with open(path, "w") as f:
        f.write('{"format": %d, "brand_raw": "%s"}' % (cpuid.CACHE_FORMAT, "x" * 10_000_000))
elif kind == "types":
    with open(path, "w") as f:
        json.dump({"format": cpuid.CACHE_FORMAT, "brand_raw": 7, "flags": "avx"}, f)
elif kind == "deep":
    with open(path, "w") as f:
        f.write("[" * 100_000)
from parinfo.records.convert import dump
t = time.monotonic()
d = dump(cpuid.cpu_identity(slow=True))
print(json.dumps({"hz": d["hz_advertised"], "calls": len(calls), "s": time.monotonic() - t}))
"""


@pytest.mark.parametrize("kind", ["fifo", "zero", "huge", "types", "deep"])
def test_hostile_cache_file_is_ignored_quickly(tmp_path, kind):
    """A FIFO, a link to /dev/zero, a huge file or wrong types in the cache never block, never eat
    memory and never reach the report: py-cpuinfo's answer is recomputed instead."""
    import subprocess
    import sys

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", HOSTILE_CACHE, kind], env=env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout.strip().splitlines()[-1])
    assert d["hz"] == "1 GHz" and d["calls"] == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to another user)")
def test_a_cache_folder_another_user_can_write_is_neither_read_nor_written(tmp_path, monkeypatch):
    """Issue 36: the user nobody owns the cache folder, so what it holds may be planted and what
    parinfo writes there may be redirected: py-cpuinfo's answer is recomputed and not stored."""
    calls: list[int] = []
    monkeypatch.setattr(cpuid, "_call_py_cpuinfo", _fake_py_cpuinfo(calls))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cpuid, "_boot_id", lambda root: "feedbee1")
    folder = tmp_path / "parinfo"
    folder.mkdir()
    (folder / "cpuinfo-feedbee1.json").write_text(json.dumps(
        {"brand_raw": "Planted", "hz_advertised_friendly": "9 GHz", "format": cpuid.CACHE_FORMAT}))
    os.chown(folder, 65534, 65534)
    d = dump(cpu_identity(slow=True))
    assert d["hz_advertised"] == "3.0 GHz" and calls == [1]
    assert sorted(p.name for p in folder.iterdir()) == ["cpuinfo-feedbee1.json"]
