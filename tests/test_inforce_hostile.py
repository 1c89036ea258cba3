"""Counts in force read from libraries that lie: a corpus of crafted files named like OpenBLAS, each
mapped by a real process (of another user where root runs the tests), each giving the truth (what
the library's own getter says inside the process) or "unknown (why)", never an exception, in
bounded time; and a fuzz of the ELF reader over mutated copies of numpy's OpenBLAS."""
from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import REPO, clean_env, run_cli, start_target, stop_target
from crafted_elf import after_load_bloom_zero, build, poke, section, sparse_dynsym

import parinfo.host
import parinfo.machine.procfs
from parinfo.machine.procfs import Proc
from parinfo.outside import inforce
from parinfo.outside.inforce import IN_FORCE, counts_in_force
from parinfo.process import elfcount, getter_code, libraries as reg
from parinfo.records.convert import dump
from parinfo.records.source import SourceKind, unknown as unknown_source
from parinfo.records.unknown import Unknown

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("gcc") is None,
                                reason="needs Linux and gcc")
elftools = pytest.importorskip("elftools.elf.elffile")

# Loads the file ("map": maps its bytes, as the loader could crash on it), sets the count to 2 when
# told to ("set"), prints what the library's own getter says, then waits on stdin.
TARGET = """
import ctypes, json, mmap, sys
path, how = sys.argv[1], sys.argv[2]
try:
    if how == "map":
        raise OSError
    lib = ctypes.CDLL(path)
except OSError:
    with open(path, "rb") as fh:
        kept = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
    print(json.dumps({"count": None}), flush=True)
else:
    if how == "set":
        lib.openblas_set_num_threads(2)
    print(json.dumps({"count": lib.openblas_get_num_threads()}), flush=True)
sys.stdin.readline()
"""

AS_NOBODY = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"]
SLOW = 1.0  # seconds: a crafted file may cost a read at most this much


@pytest.fixture(scope="module")
def corpus() -> Iterator[Path]:
    """A folder every user may read, for the crafted files."""
    folder = Path(tempfile.mkdtemp(prefix="parinfo-elf-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _symbol(path: Path, name: str) -> tuple[int, int]:
    """(file offset of .dynsym entry ``name``, st_value)."""
    with open(path, "rb") as fh:
        elf = elftools.ELFFile(fh)
        table = elf.get_section_by_name(".dynsym")
        for i, sym in enumerate(table.iter_symbols()):
            if sym.name == name:
                return table["sh_offset"] + i * table["sh_entsize"], sym["st_value"]
    raise AssertionError(f"{path} exports no {name}")


def _read(pid: int) -> tuple[inforce.CountInForce, float]:
    started = time.perf_counter()
    (row,) = counts_in_force(Proc.of(pid))
    return row, time.perf_counter() - started


def _mapped(path: Path, *, set_it: bool = True, load: bool = True) -> tuple[subprocess.Popen, int | None]:
    """A process (nobody's, when root runs the tests) that loads ``path`` (or only maps its bytes),
    and its own getter's count."""
    prefix = AS_NOBODY if os.geteuid() == 0 and shutil.which("setpriv") else None
    how = "map" if not load else "set" if set_it else "keep"
    proc, truth = start_target(TARGET, str(path), how, env=clean_env(HOME="/tmp"),
                               prefix=prefix)
    return proc, truth["count"]


# -- files that tell the truth: the count the library's own getter gives, read from memory --------

TRUTHFUL: dict[str, tuple[tuple[str, ...], Callable[[Path], None] | None]] = {
    "got": (("-DMAXT=64",), None),  # the getter loads through the GOT (a default-visibility variable)
    "symtab-local": (("-DLOCAL",), None),  # blas_cpu_number only in .symtab, as in OpenBLAS 0.3.34
    "no-symbol": (("-DLOCAL", "-s"), None),  # stripped: only the getter's code says where the count is
    "bloom-size-0": ((), after_load_bloom_zero),
}


@pytest.mark.parametrize("case", list(TRUTHFUL))
def test_a_truthful_library_gives_its_getters_count(corpus, case):
    flags, after = TRUTHFUL[case]
    path = build(corpus, f"libopenblas_{case}.so", *flags)
    proc, truth = _mapped(path)
    try:
        assert truth == 2
        if after is not None:
            after(path)
        row, took = _read(proc.pid)
        assert (row.count, row.source) == (2, IN_FORCE), row
        assert took < SLOW
    finally:
        stop_target(proc)


# -- files that lie, are broken or too big: unknown, with why ------------------------------------

def _patched_symbol(path: Path) -> None:
    """blas_cpu_number's .dynsym value pointed at the "OpenBLAS..." string, in place, after load."""
    entry, _ = _symbol(path, "blas_cpu_number")
    _, string = _symbol(path, "openblas_config")
    poke(path, entry + 8, struct.pack("<Q", string))


def _patched_getter(path: Path) -> None:
    """The getter's load displaced to the "OpenBLAS..." string, in place, after load (the process's
    own code changes with it)."""
    _, getter = _symbol(path, "openblas_get_num_threads")
    _, string = _symbol(path, "openblas_config")
    poke(path, getter + 2, struct.pack("<i", string - (getter + 6)))  # mov eax, [rip+disp32]


def _shdrs_past_end(path: Path) -> None:
    poke(path, 0x28, struct.pack("<Q", path.stat().st_size + 4096))


def _huge(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(elfcount.MAX_FILE + 1)


HOSTILE: dict[str, tuple[tuple[str, ...], bool, Callable[[Path], None] | None, str]] = {
    # case: (gcc flags, set the count to 2 in the target, change to the file once loaded, why)
    "million": (("-DCOUNT=1000000", "-DMAXT=64"), False, None,
                "the variable holds 1000000, beyond 1..64: the build's maximum for OpenBLAS"),
    "million-no-bound": (("-DCOUNT=1000000", "-DLOCAL"), False, None,
                         "the variable holds 1000000, beyond 1..1024: parinfo's bound for OpenBLAS"),
    "liar": (("-DLIAR",), True, None,
             "openblas_get_num_threads loads another variable than the file's blas_cpu_number"),
    "something-else": (("-DELSEWISE",), True, None, "the getter's code is not a load parinfo knows"),
    "patched-symbol": ((), True, _patched_symbol,
                       "openblas_get_num_threads loads another variable than the file's blas_cpu_number"),
    "patched-getter": (("-DLOCAL",), True, _patched_getter, "loads another variable than the file's"),
    "patched-getter-stripped": (("-DLOCAL", "-s"), True, _patched_getter, "loads from outside the library's data"),
    "section-headers-past-end": ((), True, _shdrs_past_end, "the file's section header table points past its end"),
    "million-entry-dynsym": ((), True, sparse_dynsym(1_000_000), "claims 1000000 entries, beyond the"),
    "large-dynsym-no-hash": ((), True, sparse_dynsym(elfcount.MAX_ENTRIES - 1), "the file exports none of"),
    "huge-file": ((), True, _huge, "bytes, beyond the"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_lying_broken_or_huge_library_is_unknown_with_why(corpus, case):
    flags, set_it, after, why = HOSTILE[case]
    path = build(corpus, f"libopenblas_{case}.so", *flags)
    proc, _ = _mapped(path, set_it=set_it)
    try:
        if after is not None:
            after(path)
        row, took = _read(proc.pid)
        assert row.count is None and row.source.kind is SourceKind.UNKNOWN and why in row.source.detail, row
        assert took < SLOW
    finally:
        stop_target(proc)


@pytest.mark.parametrize("keep", [16, 63, 64, 200, 2000, -1])
def test_a_truncated_library_is_unknown(corpus, keep):
    path = build(corpus, f"libopenblas_cut{keep}.so")
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(size - 1 if keep < 0 else keep)
    proc, _ = _mapped(path, load=False)  # the loader could crash on it: the target maps the bytes itself
    try:
        row, took = _read(proc.pid)
        assert row.count is None and row.source.kind is SourceKind.UNKNOWN, row
        assert took < SLOW
    finally:
        stop_target(proc)


def test_show_and_the_host_scan_survive_crafted_libraries(corpus):
    """The issue's cases end to end: a bloom size of 0 (it crashed both), a million-entry .dynsym (a
    23 s scan) and a count of 1000000 (believed) mapped by processes of another user."""
    made = [(build(corpus, "libopenblas_e2e_bloom.so"), True, after_load_bloom_zero, 2),
            (build(corpus, "libopenblas_e2e_dynsym.so"), True, sparse_dynsym(1_000_000), None),
            (build(corpus, "libopenblas_e2e_million.so", "-DCOUNT=1000000"), False, None, None)]
    procs = []
    try:
        for path, set_it, after, _ in made:
            procs.append(_mapped(path, set_it=set_it)[0])
            if after is not None:
                after(path)
        started = time.perf_counter()
        scanned = {p.pid: p for p in parinfo.host.scan(interval=0).processes}
        assert time.perf_counter() - started < 5 * SLOW
        for proc, (_, _, _, count) in zip(procs, made, strict=True):
            (pool,) = scanned[proc.pid].pools
            assert (pool.count, pool.in_force) == (count, True) if count else not pool.in_force, pool
            shown = run_cli("show", "--pid", str(proc.pid), "--json")
            assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
            (row,) = json.loads(shown.stdout)["pools"]
            assert row.get("num_threads") == count and (count or row["count_source"]["kind"] == "unknown"), row
    finally:
        for proc in procs:
            stop_target(proc)


def test_touching_a_file_does_not_force_a_parse(corpus, monkeypatch):
    path = build(corpus, "libopenblas_touched.so", "-DMAXT=64")
    proc, _ = _mapped(path)
    try:
        first, _ = _read(proc.pid)
        parsed: list[int] = []
        real = elfcount.locate
        monkeypatch.setattr(elfcount, "locate", lambda fd, spec: parsed.append(fd) or real(fd, spec))
        os.utime(path)  # a new mtime and ctime
        again, _ = _read(proc.pid)
        assert again == first and first.count == 2 and parsed == []
    finally:
        stop_target(proc)


def test_new_files_past_the_shared_time_are_tried_on_a_later_read(corpus, monkeypatch):
    path = build(corpus, "libopenblas_later.so", "-DMAXT=64")
    proc, _ = _mapped(path)
    try:
        monkeypatch.setattr(elfcount, "SHARED_S", 0.0)
        row, _ = _read(proc.pid)
        assert row.count is None and "read again later" in row.source.text, row
        monkeypatch.setattr(elfcount, "SHARED_S", 1.0)
        monkeypatch.setattr(elfcount._Window, "spent", 0.0)
        row, _ = _read(proc.pid)
        assert (row.count, row.source) == (2, IN_FORCE)
    finally:
        stop_target(proc)


# -- the reader's own bounds, without a process ---------------------------------------------------

def _numpy_openblas() -> Path:
    numpy = pytest.importorskip("numpy")
    found = sorted((Path(numpy.__file__).resolve().parent.parent / "numpy.libs").glob("lib*openblas*.so*"))
    if not found:
        pytest.skip("this numpy bundles no OpenBLAS")
    return found[0]


def test_the_elf_reader_survives_mutated_copies_of_numpys_openblas(tmp_path, monkeypatch):
    """Bytes of the headers and tables the reader walks, changed at random (seeded): each reading
    is a place or a reason, never an exception, and bounded in time."""
    monkeypatch.setattr(elfcount, "SHARED_S", 1e9)  # every mutation read, not a few per window
    monkeypatch.setattr(elfcount._Window, "spent", 0.0)  # and the time spent here forgotten afterwards
    copy = tmp_path / "libopenblas_fuzz.so"
    shutil.copy(_numpy_openblas(), copy)
    spec = reg.library("openblas").count_symbol
    assert spec is not None
    fd = os.open(copy, os.O_RDWR)
    try:
        clean = elfcount.locate(fd, spec)
        assert clean.missing is None, clean
        size = os.fstat(fd).st_size
        header = os.pread(fd, 64, 0)
        shoff, = struct.unpack_from("<Q", header, 0x28)
        phoff, = struct.unpack_from("<Q", header, 0x20)
        regions = [(0, 64), (phoff, phoff + 56 * 16), (shoff, size)]
        for name in (".dynsym", ".symtab", ".strtab"):
            _, offset, length = section(copy, name)
            regions += [(offset, offset + min(length, 4096))]
        rng = random.Random(27)
        values = [0, 1, 0xFFFFFFFF, 1 << 63, size, size - 1, 1 << 40]
        ends = time.monotonic() + 4.0
        tries = reasons = 0
        while time.monotonic() < ends:
            lo, hi = rng.choice(regions)
            at = rng.randrange(lo, max(hi - 8, lo + 1))
            if rng.random() < 0.5:
                new = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            else:
                at -= at % 4
                new = struct.pack("<Q", rng.choice(values) if rng.random() < 0.7 else rng.getrandbits(64))
            old = os.pread(fd, len(new), at)
            os.pwrite(fd, new, at)
            started = time.perf_counter()
            got = elfcount.locate(fd, spec)
            assert time.perf_counter() - started < elfcount.BUDGET_S + SLOW
            assert isinstance(got, elfcount.Place)
            reasons += got.missing is not None
            os.pwrite(fd, old, at)
            tries += 1
        assert tries >= 20 and reasons >= 1
        print(f"{tries} mutated files read, {reasons} unknown with a reason")
    finally:
        os.close(fd)


def test_the_getter_decoder_takes_any_bytes():
    rng = random.Random(8)
    forms = [b"\x8b\x05", b"\x48\x8b\x05", b"\x8b\x00", b"\x83\x3d", b"\x85\xc0", b"\x74", b"\xc3", b"\xf3\x0f\x1e\xfa"]
    for _ in range(3000):
        if rng.random() < 0.5:
            code = bytes(rng.randrange(256) for _ in range(rng.randint(0, 80)))
        else:
            code = b"".join(rng.choice(forms) + bytes(rng.randrange(256) for _ in range(rng.randint(0, 5)))
                            for _ in range(rng.randint(1, 12)))
        for machine in ("x86_64", "aarch64", "EM_386"):
            got = getter_code.loaded_address(code, rng.getrandbits(47), machine)
            assert isinstance(got, Unknown) or (isinstance(got[0], int) and isinstance(got[1], bool))


@pytest.mark.parametrize(("machine", "code", "want"), [
    # numpy 2.5's OpenBLAS 0.3.34: a check of blas_num_threads, then the load of blas_cpu_number
    ("x86_64", bytes.fromhex("8b053e281a01 85c0 740e 8b0538281a01 c3"), (0x1000 + 0x10 + 0x11A2838, False)),
    # numpy 2.4's: cmp dword [rip+d], 0; je; mov eax, [rip+d]; ret
    ("x86_64", bytes.fromhex("833d89bdfe0000 7407 8b057dbdfe00 c3"), (0x1000 + 0xF + 0xFEBD7D, False)),
    # through the GOT
    ("x86_64", bytes.fromhex("488b05c92e0000 8b00 c3"), (0x1000 + 7 + 0x2EC9, True)),
    # aarch64: adrp x0, #0x12000; ldr w0, [x0, #0x24]; ret
    ("aarch64", struct.pack("<III", 0x90000000 | (0x12 >> 2 << 5) | ((0x12 & 3) << 29), 0xB9402400, 0xD65F03C0),
     ((0x1000 & ~0xFFF) + 0x12000 + 0x24, False)),
    # aarch64 through the GOT: adrp x0; ldr x0, [x0, #8]; ldr w0, [x0]; ret
    ("aarch64", struct.pack("<IIII", 0x90000000 | (1 << 5), 0xF9400400, 0xB9400000, 0xD65F03C0),
     (0x1000 + 0x4000 + 8, True)),
])
def test_the_getter_decoder_reads_the_forms_builds_use(machine, code, want):
    assert getter_code.loaded_address(code, 0x1000, machine) == want


def test_what_the_registry_says_bounds_the_reader():
    spec = reg.library("openblas").count_symbol
    assert spec is not None and spec.getters and spec.max_symbol and spec.max_count >= 64
    assert json.loads(json.dumps(dump(inforce.CountInForce("openblas", "/x", None, unknown_source("y")))))


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_a_deleted_library_read_by_its_own_user_is_unknown_with_why(corpus):
    """Only root may open /proc/PID/map_files: the process's own user gets why, not a wrong file."""
    path = build(corpus, "libopenblas_gone.so")
    proc, truth = _mapped(path)
    try:
        path.unlink()
        probe = ("import json, sys; from parinfo.outside.inforce import counts_in_force\n"
                 "from parinfo.machine.procfs import Proc\n"
                 "rows = counts_in_force(Proc.of(int(sys.argv[1])))\n"
                 "print(json.dumps([[r.count, str(r.source), r.path, r.deleted] for r in rows]))")
        out = subprocess.run([*AS_NOBODY, sys.executable, "-c", probe, str(proc.pid)], capture_output=True,
                             text=True, timeout=60, env=clean_env(PYTHONPATH=str(REPO), HOME="/tmp"))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == [[None, "unknown (the library file was deleted or replaced after load: only "
                                                 "root can open the copy the process maps)", str(path), True]]
        assert _read(proc.pid)[0].count == truth == 2  # root reads it through map_files
    finally:
        stop_target(proc)


def test_the_reading_budget_is_cpu_time_so_a_busy_machine_does_not_make_a_count_unknown(monkeypatch):
    """A file that needs more of parinfo's own work than the budget is refused with that reason; a
    reading that only waits (a machine busy with other processes, a slow disk) is not."""
    monkeypatch.setattr(elfcount, "SHARED_S", 1e9)
    monkeypatch.setattr(elfcount._Window, "spent", 0.0)
    spec = reg.library("openblas").count_symbol
    assert spec is not None
    fd = os.open(_numpy_openblas(), os.O_RDONLY)
    try:
        refused = elfcount.locate(fd, spec, budget_s=0.0)
        assert refused.missing == "the library file took more than 0.0 s of CPU to read", refused
        real_pread = os.pread

        def waiting_pread(*args):
            time.sleep(0.02)  # waits, as a read on a busy machine does, without working
            return real_pread(*args)

        monkeypatch.setattr(elfcount.os, "pread", waiting_pread)
        started = time.monotonic()
        place = elfcount.locate(fd, spec, budget_s=0.05)
        waited = time.monotonic() - started
    finally:
        os.close(fd)
    assert waited > 0.05  # more wall time than the budget went by
    assert place.missing is None and place.getter, place


def test_a_library_built_for_another_machine_is_never_in_force(corpus):
    """A file whose e_machine is not the process's (an aarch64 libopenblas mapped by an x86-64
    process, as data: the process never runs its code) gives no count, with why; the process's
    machine is read from the vDSO the kernel mapped into it."""
    import platform

    here = platform.machine()
    other, number = ("x86_64", 62) if here == "aarch64" else ("aarch64", 183)
    path = build(corpus, "libopenblas_other_machine.so")
    proc, truth = _mapped(path)
    try:
        assert truth == 2
        poke(path, 18, struct.pack("<H", number))  # e_machine, after load
        row, took = _read(proc.pid)
        assert row.count is None and row.source.kind is SourceKind.UNKNOWN, row
        assert row.source.detail == f"a library built for {other}, not this process's {here}"
        assert took < SLOW
        with parinfo.machine.procfs.Proc(proc.pid).memory() as mem:
            maps = parinfo.machine.procfs.Proc(proc.pid).maps().decode()
            assert inforce.process_machine(maps, mem) == here
    finally:
        stop_target(proc)
