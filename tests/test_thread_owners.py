"""Thread owners (parinfo.process.thread_owners): each OS thread attributed to the library that
started it, checked against threads whose starter is known independently (the threads that appear
across one library call), in the process itself and from outside (``show --pid``)."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap

import pytest

from parinfo.process import stack_words as sw, thread_owners as to
from parinfo.records.unknown import Unknown

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --- the pieces, on crafted input ------------------------------------------------------------------

MAPS = b"""\
00400000-00401000 r-xp 00000000 08:01 11 /usr/bin/python3.11
10000000-10010000 r-xp 00000000 08:01 12 /usr/lib/x86_64-linux-gnu/libc.so.6
20000000-20010000 r-xp 00000000 08:01 13 /v/lib/python3.11/site-packages/numpy.libs/libscipy_openblas64_-ab.so
30000000-30010000 r-xp 00000000 08:01 14 /v/lib/python3.11/site-packages/_polars_runtime_32/_polars_runtime.abi3.so
40000000-40010000 rw-p 00000000 00:00 0
50000000-50010000 r--p 00000000 08:01 15 /v/lib/python3.11/site-packages/pyarrow/libarrow.so.2600
not a line
"""


def _window(*words: int) -> bytes:
    return struct.pack(f"<{len(words)}Q", *words)


def test_maps_are_parsed_and_searched_by_address() -> None:
    maps = sw.Maps(sw.parse_maps(MAPS))
    assert len(maps.mappings) == 6
    found = maps.at(0x20000010)
    assert found is not None and found.executable and found.path.endswith("libscipy_openblas64_-ab.so")
    assert maps.at(0x20010000) is None  # the end is outside
    assert maps.at(0x40000000) is not None and not maps.at(0x40000000).executable  # type: ignore[union-attr]


def test_hostile_maps_and_stacks_are_skipped_not_raised() -> None:
    raw = (b"zz-10 r-xp 0 0 0 /x\n" b"10-zz r-xp 0 0 0 /x\n" b"\xff\xfe-1 r-xp\n" b"-\n\n"
           b"100-200 r-xp 00000000 08:01 9 /opt/\xff\xfe name with spaces.so (deleted)\n")
    maps = sw.Maps(sw.parse_maps(raw))
    (only,) = maps.mappings
    assert only.path.endswith("name with spaces.so (deleted)")
    owner = sw.owner_by_stack(_window(0x150) + b"\x01\x02\x03", maps, None)
    assert owner == "other (\ufffd\ufffd name with spaces.so (deleted))"
    assert isinstance(sw.owner_by_stack(b"", maps, None), Unknown)


def test_stack_pointer_from_the_syscall_file() -> None:
    assert sw.stack_pointer(b"202 0x7f 0x80 0x0 0x0 0x0 0x0 0x7ffc1000 0x7f0012\n") == 0x7ffc1000
    assert sw.stack_pointer(b"-1 0x7ffc2000 0x7f0012\n") == 0x7ffc2000
    assert isinstance(sw.stack_pointer(b"running\n"), sw.Running)
    assert not isinstance(sw.stack_pointer(b"garbage"), sw.Running)
    assert isinstance(sw.stack_pointer(None), Unknown)
    assert isinstance(sw.stack_pointer(b"garbage"), Unknown)
    assert isinstance(sw.stack_pointer(b""), Unknown)


def test_the_topmost_library_word_owns_the_thread_past_the_c_runtime() -> None:
    maps = sw.Maps(sw.parse_maps(MAPS))
    # Read bottom to top: an arrow word (not executable) and a polars word below; libc at the top.
    window = _window(0x30000100, 0x50000100, 0x20000100, 0x40000008, 0x10000100, 0x12345)
    assert sw.owner_by_stack(window, maps, "/usr/bin/python3.11") == "openblas (numpy)"
    assert sw.owner_by_stack(_window(0x30000100, 0x10000100), maps, None) == "polars"
    # The interpreter in the thread block, the C runtime (start_thread's frame), then the interpreter
    # again in the frames (its thread entry, the outermost): a Python thread, whatever lies deeper.
    window = _window(0x20000100, 0x400010, 0x10000100, 0x400010)
    assert sw.owner_by_stack(window, maps, "/usr/bin/python3.11") == sw.PYTHON
    assert sw.owner_by_stack(_window(0x400010), maps, "/usr/bin/python3.11") == sw.PYTHON
    # An interpreter word in the thread block that its frames do not confirm (a size that falls in a
    # non-PIE interpreter's text, as Python 3.14's stack size does), a C++ runtime start routine, then
    # a library in the frames: the library (a std::thread of DuckDB).
    assert sw.owner_by_stack(_window(0x20000100, 0x10000100, 0x400010), maps,
                             "/usr/bin/python3.11") == "openblas (numpy)"
    # The interpreter, then a library before any C runtime word (the thread block of Python 3.14 holds an
    # interpreter address above the worker's start routine): the library.
    assert sw.owner_by_stack(_window(0x20000100, 0x400010), maps, "/usr/bin/python3.11") == "openblas (numpy)"
    assert isinstance(sw.owner_by_stack(_window(0x50000100, 0x10000100, 7) + b"\x01", maps, None), Unknown)


@pytest.mark.parametrize(("path", "owner"), [
    ("/v/lib/python3.12/site-packages/pyarrow/libarrow.so.2600", "pyarrow"),
    ("/v/lib/python3.12/site-packages/_duckdb.cpython-312-x86_64-linux-gnu.so", "duckdb"),
    ("/v/lib/python3.12/site-packages/onnxruntime/capi/onnxruntime_pybind11_state.so", "onnxruntime"),
    ("/v/lib/python3.12/site-packages/opencv_python_headless.libs/libavcodec-1.so", "opencv"),
    ("/v/lib/python3.12/site-packages/xgboost.libs/libgomp-e985bcbb.so.1.0.0", "libgomp (xgboost)"),
    ("/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0", "libgomp (system)"),
    ("/v/lib/python3.12/site-packages/somepkg/_native.so", "other (somepkg)"),
    ("/opt/lib/libfoo.so", "other (libfoo.so)"),
])
def test_a_file_names_its_library(path: str, owner: str) -> None:
    assert sw.owner_of_file(path) == owner


# --- real processes ------------------------------------------------------------------------------

#: A child that runs STEPS one by one, noting the thread ids each one added, then says what the
#: in-process report attributes, and waits on stdin while it is read from outside.
_CHILD = textwrap.dedent("""
    import json, os, sys, threading, time
    def tids():
        return set(int(t) for t in os.listdir("/proc/self/task"))
    added = {}
    for name, code in json.loads(sys.argv[1]):
        before = tids()
        exec(code, globals())
        time.sleep(0.3)  # spinning workers (OpenBLAS) go to sleep
        added[name] = sorted(tids() - before)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="waiter")
    t.start()
    time.sleep(0.1)
    added["python"] = [t.native_id]
    import parinfo
    listing = parinfo.inspect().threads
    print(json.dumps({"added": added, "owners": {th.tid: th.owner for th in listing.threads},
                      "count": listing.owners}), flush=True)
    sys.stdin.readline()
    stop.set()
""")


def _owners_inside_and_out(steps: list[tuple[str, str]]) -> tuple[dict[str, list[int]], dict[int, str], dict[int, str]]:
    env = {**os.environ, "PYTHONPATH": ROOT, "OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(steps)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None and child.stdin is not None
        said = json.loads(child.stdout.readline())
        out = subprocess.run([sys.executable, "-m", "parinfo", "show", "--pid", str(child.pid), "--json"],
                             capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        outside = {t["tid"]: t.get("owner") for t in json.loads(out.stdout)["threads"]["threads"]}
        child.stdin.write("\n")
        child.stdin.flush()
    finally:
        child.wait(timeout=60)
    inside = {int(tid): owner for tid, owner in said["owners"].items()}
    assert sum(said["count"].values()) == len(inside)
    return said["added"], inside, outside


def _check(added: dict[str, list[int]], owners: dict[int, str], expected: dict[str, str], pid_owner: str) -> None:
    assert owners[min(owners)] == pid_owner
    for step, owner in expected.items():
        assert added[step], f"{step} started no thread"
        for tid in added[step]:
            assert owners.get(tid) == owner, (step, tid, owners.get(tid), owners)


def test_openblas_and_python_threads_inside_and_from_outside() -> None:
    pytest.importorskip("numpy")
    steps = [("numpy", "import numpy as np; a = np.ones((300, 300)); a @ a")]
    added, inside, outside = _owners_inside_and_out(steps)
    expected = {"numpy": "openblas (numpy)", "python": "python"}
    _check(added, inside, expected, "main thread")
    _check(added, outside, expected, "main thread")


@pytest.mark.pools("polars", "pyarrow", "duckdb")
def test_frame_libraries_threads_inside_and_from_outside() -> None:
    steps = [
        ("numpy", "import numpy"),  # pyarrow imports it: its OpenBLAS threads are not pyarrow's
        ("polars", "import polars as pl; pl.DataFrame({'k': [i % 7 for i in range(50000)]}).group_by('k').len()"),
        ("pyarrow", "import io, pyarrow.csv as c; c.read_csv(io.BytesIO(b'k\\n' + b'1\\n' * 20000))"),
        ("duckdb", "import duckdb; con = duckdb.connect(); con.execute('SELECT sum(range) FROM range(100000)')"),
    ]
    added, inside, outside = _owners_inside_and_out(steps)
    expected = {"numpy": "openblas (numpy)", "polars": "polars", "pyarrow": "pyarrow", "duckdb": "duckdb",
                "python": "python"}
    _check(added, inside, expected, "main thread")
    _check(added, outside, expected, "main thread")


@pytest.mark.pools("tokenizers", "cv2")
def test_tokenizers_and_opencv_threads_inside_and_from_outside() -> None:
    steps = [
        ("numpy", "import numpy as np"),
        ("opencv import", "import cv2"),  # its own OpenBLAS copy starts its workers at load
        ("opencv", "cv2.resize(np.zeros((1024, 1024, 3), np.uint8), (512, 512))"),
        ("tokenizers", textwrap.dedent("""
            from tokenizers import Tokenizer, models
            tok = Tokenizer(models.BPE(vocab={"[UNK]": 0, "a": 1}, merges=[], unk_token="[UNK]"))
            tok.encode_batch(["a a a"] * 400)
        """)),
    ]
    added, inside, outside = _owners_inside_and_out(steps)
    expected = {"numpy": "openblas (numpy)", "opencv import": "openblas (opencv_python_headless)",
                "opencv": "opencv", "tokenizers": "tokenizers", "python": "python"}
    _check(added, inside, expected, "main thread")
    _check(added, outside, expected, "main thread")


def test_another_users_process_is_placed_by_name_else_unknown_with_why() -> None:
    """A process whose memory parinfo may not read (root's, read as nobody): a thread is placed by
    the name a family declares for its threads ("polars" for polars-N; both families for a name two
    declare), else owned by "unknown (why)"; the main thread is still named."""
    if os.geteuid() != 0:
        pytest.skip("needs root to read as another user")
    code = textwrap.dedent("""
        import ctypes, threading, time
        def named(name):
            ctypes.CDLL(None).prctl(15, name.encode())  # PR_SET_NAME: the kernel's name of this thread
            time.sleep(30)
        for name in ("polars-0", "jemalloc_bg_thd", "worker"):
            threading.Thread(target=named, args=(name,)).start()
        time.sleep(0.3)
        print(1, flush=True)
        time.sleep(30)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline()
        env = {**os.environ, "PYTHONPATH": ROOT}
        script = ("import json, os; from parinfo.machine.procfs import Proc;"
                  "from parinfo.process.thread_owners import owners_of;"
                  f"p = Proc.of({child.pid}); os.setuid(65534); print(json.dumps(owners_of(p)))")
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        owners = json.loads(out.stdout)
        declared = [lib.name for lib in to.reg.records() if "jemalloc_bg_thd" in dict(lib.thread_names)]
        assert len(declared) >= 2
        unknown = "unknown (its stack cannot be read: permission: run as the process's user or root)"
        assert owners == {"main thread": 1, "polars": 1, " or ".join(declared): 1, unknown: 1}, owners
    finally:
        child.kill()
        child.wait()


def test_a_threads_own_stack_ends_at_its_thread_block_not_at_its_mappings_top() -> None:
    # Stacks merged into one mapping (guard regions that /proc/PID/maps does not show): the thread
    # block above the stack pointer (glibc's tcb and self, both its own address) ends the thread's words.
    import struct

    base = 0x7000_0000
    words = [0] * 64
    block = base + 8 * 40
    words[40], words[42] = block, block
    raw = struct.pack(f"<{len(words)}Q", *words)
    assert sw.thread_block_end(raw, base, base + (1 << 24)) == min(block + sw.BLOCK_SPAN, base + len(raw))
    assert sw.thread_block_end(raw, base, block + 16) == block + 16  # at most the mapping's end
    assert sw.thread_block_end(struct.pack("<8Q", *range(8)), base, base + 64) is None
