"""What a report keeps from one call to the next in this process (threadpoolctl's controller, the loaded
objects, the owners of threads already attributed) stays true: a count changed, a library loaded and
a pool started between two reports are all in the second."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from parinfo.process import thread_owners as to
from parinfo.process.threads import OsThread, ThreadList

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=ROOT, OPENBLAS_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                         timeout=240, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_loader_counts_a_library_loaded() -> None:
    found = _run("""
        import ctypes, json
        from parinfo.process.mapped import loader_generation
        before = loader_generation()
        ctypes.CDLL("libm.so.6")  # loaded already (the interpreter's): nothing new
        same = loader_generation()
        import _ctypes_test  # an extension module: one object more
        print(json.dumps([before, same, loader_generation()]))
        """)
    before, same, after = found  # type: ignore[misc]
    if before is None:
        pytest.skip("this C library's loader does not count its loads")
    assert same == before and after[0] > before[0]


def test_a_count_changed_between_reports_is_in_the_second() -> None:
    pytest.importorskip("numpy")
    found = _run("""
        import json
        import numpy, threadpoolctl
        import parinfo
        def openblas():
            return [p["num_threads"] for p in parinfo.inspect().to_dict()["pools"] if p["library"] == "openblas"]
        first = openblas()
        threadpoolctl.threadpool_limits(1, user_api="blas")
        print(json.dumps([first, openblas()]))
        """)
    first, second = found  # type: ignore[misc]
    if not first:
        pytest.skip("this numpy has no OpenBLAS")
    assert first[0] == 2 and second == [1] * len(first)


def test_a_library_loaded_and_a_pool_started_between_reports_are_in_the_second() -> None:
    pytest.importorskip("polars")
    gomp = _gomp()
    if gomp is None:
        pytest.skip("no wheel here ships a libgomp to load")
    found = _run(f"""
        import ctypes, json
        import polars as pl
        import parinfo
        def seen():
            report = parinfo.inspect().to_dict()
            return ([p["library"] for p in report["pools"]], report["threads"]["owners"].get("polars", 0),
                    report["threads"]["count"])
        first = seen()
        ctypes.CDLL({gomp!r})
        pl.DataFrame({{"k": [i % 7 for i in range(100_000)], "v": range(100_000)}}).group_by("k").agg(pl.col("v").sum())
        print(json.dumps([first, seen()]))
        """)
    (libs1, polars1, count1), (libs2, polars2, count2) = found  # type: ignore[misc]
    assert "libgomp" not in libs1 and "libgomp" in libs2
    assert count2 > count1 and polars2 > polars1


def test_an_owner_is_kept_by_tid_and_start_time_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread read at one report is not read again at the next; a tid given again to a thread
    that started later is."""
    asked: list[int] = []

    def by_stack(self: to.Reader, tid: int, memory: object) -> str:
        asked.append(tid)
        self.by_stack_found[tid] = "pyarrow"  # what owner() records: mimic it for the stand-in
        return "pyarrow"

    monkeypatch.setattr(to.Reader, "by_stack", by_stack)
    monkeypatch.setattr(to, "_KNOWN", {})
    tid = 1 << 30  # a tid no thread has: the listing is made up, the process is this one

    def listing(started: int) -> ThreadList:
        return ThreadList(1, [OsThread(tid, "worker", started=started)])

    assert to.attribute(listing(100), python={}).owners == {"pyarrow": 1}
    assert to.attribute(listing(100), python={}).owners == {"pyarrow": 1}
    assert asked == [tid]
    to.attribute(listing(101), python={})  # the tid given again: read again
    assert asked == [tid, tid]


def test_maps_are_read_once_a_report_and_not_at_all_when_nothing_changed() -> None:
    reads = _run("""
        import json
        import parinfo
        from parinfo.machine.procfs import Proc
        reads, real = [], Proc.maps
        Proc.maps = lambda self: reads.append(1) or real(self)
        counts = []
        for _ in range(4):
            parinfo.inspect()
            counts.append(len(reads))
            reads.clear()
        print(json.dumps(counts))
        """)
    assert reads[0] == 1 and reads[-1] == 0, reads  # type: ignore[index]


def test_a_runtime_file_replaced_on_disk_between_reports_is_seen_deleted(tmp_path: object) -> None:
    """A package upgrade replaces a loaded library's file: the next report sees it as the maps say,
    deleted, though the loader loaded nothing since."""
    gomp = _gomp()
    if gomp is None:
        pytest.skip("no wheel here ships a libgomp to load")
    found = _run(f"""
        import ctypes, json, os, shutil
        from parinfo.process.mapped import current_objects
        copy = os.path.join({str(tmp_path)!r}, "libgomp.so.1")
        shutil.copy({gomp!r}, copy)
        ctypes.CDLL(copy)
        first = [p for p in current_objects() if p.startswith(copy)]
        shutil.copy({gomp!r}, copy + ".new")
        os.replace(copy + ".new", copy)  # what pip does: a new file in its place
        print(json.dumps([first, [p for p in current_objects() if p.startswith(copy)]]))
        """)
    first, second = found  # type: ignore[misc]
    assert first == [os.path.join(str(tmp_path), "libgomp.so.1")]
    assert second == [first[0] + " (deleted)"]


def _gomp() -> str | None:
    for folder in (os.path.join(p, n) for p in sys.path if os.path.isdir(p)
                   for n in ("scikit_learn.libs", "xgboost_cpu.libs", "xgboost.libs")):
        if os.path.isdir(folder):
            for name in os.listdir(folder):
                if name.startswith("libgomp"):
                    return os.path.join(folder, name)
    return None
