"""Census of one process that holds every pool issue 38 names: how many of its OS threads the pools
``parinfo.inspect()`` reports account for, and which named threads no pool accounts for.

The process (this one) loads numpy, onnxruntime (one session on a one-node model: built with onnx
when it is installed, else written out here as its few protobuf bytes), polars, pyarrow, duckdb (one
connection, one query), numba (one prange run), tokenizers (one batch encode of a tiny in-memory
BPE tokenizer), OpenCV (one resize), xgboost and lightgbm (one small train each), each doing the
work that starts its threads; a library that is not installed is skipped with a line. It then reads
every thread's name (/proc/self/task/*/comm) and ``parinfo.inspect()``, and prints: the threads by
name, each report row's claim, the threads accounted for, and the unaccounted by name.

It prints the count two ways. BEFORE (what the report alone allowed): each row's claim matched to
threads by name. AFTER: each thread's owner as the report gives it (``threads.owners``, by thread
name or by the code the thread's stack starts in: parinfo.process.thread_owners): a thread is
accounted for by a pool when its owner is a library the report lists a pool or count for; the rest
are named: the main thread, Python threads, allocator background threads, and any other owner.

A row's claim is the live threads it reports (a ``live_threads`` field, where a library family
gives one), else its count in force less the calling thread (the main thread joins OpenMP's,
OpenBLAS's and numba's teams). Libraries whose teams are an OpenMP runtime's pool (XGBoost,
LightGBM; numba's omp layer) claim nothing of their own: that runtime's row holds their threads.
Workers take the name of the thread that started them, so a claim is matched first against threads
named as the pool names them, then against threads named like the process; the main thread is
counted apart.

    python bench/pool_census.py
"""
from __future__ import annotations

import collections
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from _machine import report_machine  # bench/ is on sys.path when run as a script

# Keep the pools small and alike on any machine: the census is about who owns a thread, not how many.
STEPS: list[tuple[str, Callable[[], str]]] = []


def step(name: str) -> Callable[[Callable[[], str]], Callable[[], str]]:
    def add(fn: Callable[[], str]) -> Callable[[], str]:
        STEPS.append((name, fn))
        return fn
    return add


@step("numpy")
def _numpy() -> str:
    import numpy as np

    a = np.ones((256, 256))
    return f"matmul {float((a @ a).sum()):.0f}"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: bytes | int) -> bytes:
    """One protobuf field: a varint (wire type 0) or a length-delimited value (wire type 2)."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _identity_model() -> bytes:
    """An ONNX model y = Identity(x), x and y float[1], opset 13: the ModelProto's bytes, without onnx."""
    import importlib.util

    if importlib.util.find_spec("onnx") is not None:
        import onnx
        from onnx import TensorProto, helper

        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
        graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 7
        return bytes(onnx._serialize(model)) if hasattr(onnx, "_serialize") else model.SerializeToString()
    dim = _field(1, _field(1, 1))  # TensorShapeProto.dim { dim_value: 1 }
    tensor = _field(1, _field(1, 1) + _field(2, dim))  # TypeProto.tensor_type { elem_type: FLOAT, shape }
    value = {name: _field(1, name.encode()) + _field(2, tensor) for name in ("x", "y")}
    node = _field(1, b"x") + _field(2, b"y") + _field(4, b"Identity")
    graph = _field(1, node) + _field(2, b"g") + _field(11, value["x"]) + _field(12, value["y"])
    return _field(1, 7) + _field(7, graph) + _field(8, _field(2, 13))  # ir_version, graph, opset_import


@step("onnxruntime")
def _onnxruntime() -> str:
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(_identity_model(), providers=["CPUExecutionProvider"])
    STEPS_KEEP.append(session)  # a session's pools live as long as it does
    out = session.run(None, {"x": np.ones(1, dtype=np.float32)})
    return f"one session, ran: {out[0].tolist()}"


@step("polars")
def _polars() -> str:
    import polars as pl

    df = pl.DataFrame({"k": [i % 7 for i in range(100_000)], "v": range(100_000)})
    return f"group_by: {df.group_by('k').agg(pl.col('v').sum()).height} groups"


@step("pyarrow")
def _pyarrow() -> str:
    import io

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    table = pcsv.read_csv(io.BytesIO(b"k,v\n" + b"".join(b"%d,%d\n" % (i % 5, i) for i in range(20_000))))
    grouped = table.group_by("k").aggregate([("v", "sum")])
    return f"read_csv + group_by: {grouped.num_rows} groups, sum {pc.sum(table['v']).as_py()} ({pa.__version__})"


@step("duckdb")
def _duckdb() -> str:
    import duckdb

    con = duckdb.connect()
    STEPS_KEEP.append(con)
    (total,) = con.execute("SELECT sum(range) FROM range(2000000)").fetchone() or (None,)
    return f"one connection, one query: {total}"


@step("numba")
def _numba() -> str:
    import numpy as np
    from numba import njit, prange

    @njit(parallel=True)
    def total(a: Any) -> float:
        s = 0.0
        for i in prange(a.shape[0]):
            s += a[i]
        return s

    return f"prange: {total(np.ones(10_000)):.0f}"


@step("tokenizers")
def _tokenizers() -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "abc": 5}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b"), ("ab", "c")], unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    encoded = tok.encode_batch(["abc ab a", "cab abc"] * 200)
    return f"batch encode: {len(encoded)} texts"


@step("opencv")
def _opencv() -> str:
    import cv2
    import numpy as np

    return f"resize: {cv2.resize(np.zeros((1024, 1024, 3), np.uint8), (512, 512)).shape}"


def _xy() -> tuple[Any, Any]:
    import numpy as np

    x = np.random.default_rng(0).random((4000, 8))
    return x, (x[:, 0] > 0.5).astype(float)


@step("xgboost")
def _xgboost() -> str:
    import xgboost as xgb

    x, y = _xy()
    return f"train: {xgb.train({'max_depth': 3}, xgb.DMatrix(x, label=y), 2).num_boosted_rounds()} rounds"


@step("lightgbm")
def _lightgbm() -> str:
    import lightgbm as lgb

    x, y = _xy()
    booster = lgb.train({"objective": "binary", "verbose": -1}, lgb.Dataset(x, label=y), 2)
    return f"train: {booster.current_iteration()} rounds"


STEPS_KEEP: list[object] = []


def thread_names() -> list[tuple[int, str]]:
    """(tid, name) of this process's threads."""
    out = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm", encoding="utf-8", errors="replace") as fh:
                out.append((int(tid), fh.read().strip()))
        except OSError:
            continue  # ended meanwhile
    return sorted(out)


def _live(row: dict[str, Any]) -> int | None:
    live = row.get("live_threads")
    return live if isinstance(live, int) and not isinstance(live, bool) else None


def claims(report: dict[str, Any]) -> list[tuple[str, int, str, tuple[str, ...]]]:
    """(row, threads claimed, how, thread names it goes by) for each report row that holds threads."""
    from parinfo.process import libraries as reg

    out = []
    pool_files = set()
    for row in report.get("pools") or []:
        pool_files.add(row.get("filepath"))
        live, count = _live(row), row.get("num_threads")
        name = f"{row.get('library')} ({row.get('owner')})"
        names = tuple(row.get("thread_names") or ())
        if live is not None:
            out.append((name, live, "live threads it reports", names))
        elif isinstance(count, int):
            out.append((name, max(count - 1, 0), f"count {count} less the calling thread", names))
    for row in report.get("settings") or []:
        lib = reg.find(row.get("library") or "")
        if row.get("own") or row.get("filepath") in pool_files or lib is None or lib.kind is not reg.LibraryKind.PYTHON:
            continue
        on_openmp = lib.follows is not None and issubclass(lib.follows, reg.OpenMPLibrary)
        if on_openmp or "threading layer omp" in (row.get("note") or ""):
            out.append((row["library"], 0, "its teams are its OpenMP runtime's pool (that row holds them)", ()))
            continue
        live, count = _live(row), row.get("count")
        if live is not None:
            out.append((row["library"], live, "live threads it reports", ()))
        elif isinstance(count, int):
            out.append((row["library"], max(count - 1, 0), f"count {count} less the calling thread", ()))
    return out


def account(threads: list[tuple[int, str]], rows: list[tuple[str, int, str, tuple[str, ...]]]
            ) -> tuple[int, list[str]]:
    """(threads accounted for, the names of those left): the main thread, then each claim against
    threads of the names it goes by, then against threads named like the process."""
    main = os.getpid()
    process_name = dict(threads).get(main, "")
    left = collections.Counter(name for tid, name in threads if tid != main)
    accounted = 1 if any(tid == main for tid, _ in threads) else 0
    for _, n, _, names in rows:
        for name in (*names, process_name):
            take = min(n, left[name])
            left[name] -= take
            accounted, n = accounted + take, n - take
    return accounted, sorted(left.elements())


#: Thread names of allocator background threads (a library's, but no pool of its).
ALLOCATOR_THREADS = ("jemalloc_bg_thd",)


def reported_libraries(report: dict[str, Any]) -> set[str]:
    """The owners a report's rows stand for: "library (package)" of each pool row, and the library of
    each count row (a library's second pool, "onnxruntime inter-op", is its library's)."""
    from parinfo.process import libraries as reg

    out = {f"{row.get('library')} ({row.get('owner')})" for row in report.get("pools") or []}
    for row in report.get("settings") or []:
        lib = reg.find(row.get("library") or "")
        if lib is not None and lib.kind is reg.LibraryKind.PYTHON:
            out.update(n for n in (lib.name, lib.module) if n)
    return out


def by_owner(report: dict[str, Any]) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    """(threads a reported pool's library owns, those by owner, the others by what they are)."""
    libraries = reported_libraries(report)
    pooled: collections.Counter[str] = collections.Counter()
    rest: collections.Counter[str] = collections.Counter()
    for thread in report["threads"]["threads"]:
        owner = thread.get("owner") or "unknown (not read)"
        if thread.get("name") in ALLOCATOR_THREADS:
            rest[f"allocator background thread ({owner})"] += 1
        elif owner in libraries:
            pooled[owner] += 1
        elif owner == "python":
            rest["Python thread"] += 1
        else:
            rest[owner] += 1
    return sum(pooled.values()), pooled, rest


def main() -> None:
    report_machine()
    print(f"python {sys.version.split()[0]}")
    for name, fn in STEPS:
        try:
            said = fn()
        except ModuleNotFoundError as exc:
            print(f"  {name:12s} skipped: {exc.name} is not installed")
            continue
        except Exception as exc:  # a library that is there but fails its step: the census goes on
            print(f"  {name:12s} skipped: {type(exc).__name__}: {exc}")
            continue
        print(f"  {name:12s} {said}")
    threads = thread_names()
    import parinfo

    report = parinfo.inspect().to_dict()
    rows = claims(report)
    print(f"\nOS threads: {len(threads)}; by name: " + ", ".join(
        f"{name} {n}" for name, n in collections.Counter(n for _, n in threads).most_common()))
    print("rows of parinfo.inspect() that hold threads:")
    for name, n, how, _ in rows:
        print(f"  {name:40s} {n:3d}  ({how})")
    accounted, left = account(threads, rows)
    share = accounted / len(threads) if threads else 0.0
    print(f"\nBEFORE (report rows' claims matched by name): TOTAL {len(threads)} threads; ACCOUNTED {accounted} "
          f"({share:.0%}: the main thread and the rows above)")
    print("  unaccounted by name: " + (", ".join(f"{name} {n}" for name, n in collections.Counter(left).most_common())
                                       or "none"))
    listed = report["threads"]["threads"]
    pooled, owners, rest = by_owner(report)
    share = pooled / len(listed) if listed else 0.0
    print(f"\nAFTER (each thread's owner, parinfo.inspect().threads.owners): TOTAL {len(listed)} threads; "
          f"ACCOUNTED BY POOLS {pooled} ({share:.0%})")
    print("  by owner: " + ", ".join(f"{owner} {n}" for owner, n in owners.most_common()))
    print("  the rest, named: " + (", ".join(f"{what} {n}" for what, n in rest.most_common()) or "none"))
    timings()


def timings(repeats: int = 15) -> None:
    """parallel_info() and inspect() in this process after their first call, beside threadpoolctl's
    threadpool_info() (the anchor: it lists the native pools only), medians of ``repeats``."""
    import threadpoolctl

    import parinfo

    def median_ms(fn: Any) -> float:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    first = time.perf_counter()
    parinfo.parallel_info()
    first_ms = (time.perf_counter() - first) * 1e3
    info = median_ms(parinfo.parallel_info)
    inspect = median_ms(parinfo.inspect)
    anchor = median_ms(threadpoolctl.threadpool_info)
    print(f"\nparallel_info() here: first call {first_ms:.1f} ms, then median {info:.2f} ms (goal <= 5 ms); "
          f"inspect() {inspect:.2f} ms; threadpoolctl.threadpool_info() {anchor:.2f} ms; "
          f"ratio {info / anchor:.1f}")


if __name__ == "__main__":
    main()
