"""Workloads the tuner can time, and the timing loop itself.

A workload is described by a plain JSON-able dict (a "spec") so the parent can hand it to a fresh
worker process; :func:`build` turns a spec into a zero-argument callable inside the process that
times it. Heavy libraries are imported only there.

Spec keys: kind (matmul | elementwise | ensemble | stmt | module | command), framework (numpy |
torch), size, stmt, setup, module ("pkg.mod:func"), command (argv list).
"""
from __future__ import annotations

import linecache
import math
import os
import sys
import threading
import time
import traceback
from typing import Any, Callable

BUILTIN = ("matmul", "elementwise", "ensemble")
FRAMEWORKS = ("numpy", "torch")
ELEMENTWISE_LEN = 1 << 22  # 4M doubles: large enough that splitting pays, small enough to stay quick
ENSEMBLE_MODELS = 4
ENSEMBLE_WIDTH = 384
ENSEMBLE_BATCH = 64
ENSEMBLE_LAYERS = 3

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class UserCodeError(Exception):
    """The user's statement, setup or function raised; ``text`` is their traceback without parinfo's frames."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class WorkloadUsageError(Exception):
    """The workload cannot be built as asked (module or function not found): bad input, one line."""


def describe(spec: dict) -> str:
    """One line naming the workload, for tables, JSON and profile comments."""
    kind = spec["kind"]
    fw = spec.get("framework", "numpy")
    if kind == "matmul":
        n = spec.get("size", 1024)
        return f"matmul {n}x{n} float32 ({'torch.mm' if fw == 'torch' else 'numpy @'})"
    if kind == "elementwise":
        how = "torch ops" if fw == "torch" else "numpy ufuncs split by parinfo.parallel_for"
        return f"elementwise exp/mul/add over {spec.get('length', ELEMENTWISE_LEN)} doubles ({how})"
    if kind == "ensemble":
        return (f"ensemble of {ENSEMBLE_MODELS} independent {ENSEMBLE_LAYERS}-layer "
                f"{ENSEMBLE_WIDTH}-wide models, batch {ENSEMBLE_BATCH}, forked with parinfo.fork/wait ({fw})")
    if kind == "stmt":
        setup = spec.get("setup") or "pass"
        return f"stmt {spec['stmt']!r}" + (f" (setup {setup!r})" if setup != "pass" else "")
    if kind == "module":
        return f"module {spec['module']}"
    if kind == "command":
        import shlex

        return "command " + shlex.join(spec["command"])
    return kind


def uses_interop(spec: dict) -> bool:
    """True when one call of the workload itself forks inter-op tasks."""
    return spec["kind"] == "ensemble"


# ---------------------------------------------------------------- user code and tracebacks

def _register_source(name: str, src: str) -> None:
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` starting at the user's first frame (parinfo's own frames dropped)."""
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_PKG_DIR + os.sep):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def compile_user(src: str, name: str) -> Any:
    """Compile a --stmt/--setup text; raises SyntaxError for the caller to turn into one line."""
    return compile(src, name, "exec")


def _build_stmt(spec: dict) -> Callable[[], Any]:
    setup_src = spec.get("setup") or "pass"
    stmt_src = spec["stmt"]
    _register_source("<setup>", setup_src)
    _register_source("<stmt>", stmt_src)
    setup = compile_user(setup_src, "<setup>")
    stmt = compile_user(stmt_src, "<stmt>")
    ns: dict[str, Any] = {"__name__": "__parinfo_tune__"}
    try:
        exec(setup, ns)  # noqa: S102 - the user's own code, run on their request
    except Exception as exc:  # noqa: BLE001
        raise UserCodeError(user_traceback(exc)) from None

    def call() -> None:
        exec(stmt, ns)  # noqa: S102

    return call


def _build_module(spec: dict) -> Callable[[], Any]:
    import importlib

    target = spec["module"]
    mod_name, _, func_name = target.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        if exc.name and (mod_name == exc.name or mod_name.startswith(exc.name + ".")):
            raise WorkloadUsageError(
                f"--module {target}: no module named {exc.name!r} (run from the directory that holds it, "
                f"or put it on PYTHONPATH)") from None
        raise UserCodeError(user_traceback(exc)) from None
    except Exception as exc:  # noqa: BLE001
        raise UserCodeError(user_traceback(exc)) from None
    func = getattr(mod, func_name, None)
    if func is None:
        raise WorkloadUsageError(f"--module {target}: module {mod_name!r} has no attribute {func_name!r}")
    if not callable(func):
        raise WorkloadUsageError(f"--module {target}: {func_name!r} is not callable")
    return func


def _numpy_matmul(n: int) -> Callable[[], Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    return lambda: np.matmul(a, b, out=out)


def _torch_matmul(n: int) -> Callable[[], Any]:
    import torch

    a = torch.randn(n, n)
    b = torch.randn(n, n)
    return lambda: torch.mm(a, b)


def _numpy_elementwise(length: int) -> Callable[[], Any]:
    import numpy as np

    x = np.random.default_rng(0).random(length)
    out = np.empty_like(x)
    grain = 1 << 15

    def chunk(begin: int, end: int) -> None:
        o = out[begin:end]
        np.exp(x[begin:end], out=o)
        np.multiply(o, 2.0, out=o)
        np.add(o, 1.0, out=o)

    try:
        from parinfo.runtime import parallel_for
    except ImportError:  # the runtime is absent: split across plain threads of the intra-op count
        parallel_for = _thread_parallel_for

    return lambda: parallel_for(0, length, grain, chunk)


def _thread_parallel_for(begin: int, end: int, grain: int, fn: Callable[[int, int], None]) -> None:
    n = int(os.environ.get("PARINFO_NUM_THREADS", "1") or 1)
    step = max(grain, math.ceil((end - begin) / n))
    bounds = [(b, min(end, b + step)) for b in range(begin, end, step)]
    threads = [threading.Thread(target=fn, args=bd) for bd in bounds[1:]]
    for t in threads:
        t.start()
    fn(*bounds[0])
    for t in threads:
        t.join()


def _torch_elementwise(length: int) -> Callable[[], Any]:
    import torch

    x = torch.rand(length, dtype=torch.float64)
    out = torch.empty_like(x)
    return lambda: torch.add(torch.mul(torch.exp(x, out=out), 2.0, out=out), 1.0, out=out)


def _ensemble(framework: str) -> Callable[[], Any]:
    from parinfo.runtime import fork, wait

    if framework == "torch":
        import torch

        g = torch.Generator().manual_seed(0)
        x = torch.randn(ENSEMBLE_BATCH, ENSEMBLE_WIDTH, generator=g)
        models = [[torch.randn(ENSEMBLE_WIDTH, ENSEMBLE_WIDTH, generator=g) / ENSEMBLE_WIDTH ** 0.5
                   for _ in range(ENSEMBLE_LAYERS)] for _ in range(ENSEMBLE_MODELS)]

        def run(ws: list) -> Any:
            h = x
            for w in ws:
                h = torch.tanh(torch.mm(h, w))
            return h
    else:
        import numpy as np

        rng = np.random.default_rng(0)
        x = rng.standard_normal((ENSEMBLE_BATCH, ENSEMBLE_WIDTH), dtype=np.float32)
        models = [[rng.standard_normal((ENSEMBLE_WIDTH, ENSEMBLE_WIDTH), dtype=np.float32)
                   / np.float32(ENSEMBLE_WIDTH ** 0.5) for _ in range(ENSEMBLE_LAYERS)]
                  for _ in range(ENSEMBLE_MODELS)]

        def run(ws: list) -> Any:
            h = x
            for w in ws:
                h = np.tanh(h @ w)
            return h

    def call() -> Any:
        futures = [fork(run, ws) for ws in models]
        total = wait(futures[0])
        for f in futures[1:]:
            total = total + wait(f)
        return total

    return call


def build(spec: dict) -> Callable[[], Any]:
    """The zero-argument callable that one timed call runs (setup done here, once)."""
    kind = spec["kind"]
    fw = spec.get("framework", "numpy")
    if kind == "matmul":
        return (_torch_matmul if fw == "torch" else _numpy_matmul)(spec.get("size", 1024))
    if kind == "elementwise":
        return (_torch_elementwise if fw == "torch" else _numpy_elementwise)(spec.get("length", ELEMENTWISE_LEN))
    if kind == "ensemble":
        return _ensemble(fw)
    if kind == "stmt":
        return _build_stmt(spec)
    if kind == "module":
        return _build_module(spec)
    raise ValueError(f"cannot build workload kind {kind!r} in-process")


# ---------------------------------------------------------------- timing

def _run_calls(fn: Callable[[], Any], calls: int, concurrency: int) -> float:
    """Wall time of ``concurrency`` threads each making ``calls`` calls (one thread: the caller)."""
    if concurrency <= 1:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return time.perf_counter() - t0
    errors: list[BaseException] = []
    start = threading.Barrier(concurrency + 1)

    def body() -> None:
        start.wait()
        try:
            for _ in range(calls):
                fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors.append(exc)

    threads = [threading.Thread(target=body, name=f"parinfo-tune-request-{i}") for i in range(concurrency)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed


def time_calls(fn: Callable[[], Any], *, concurrency: int = 1, warmup: int = 1, repeats: int = 5,
               min_time: float = 0.05, max_number: int = 10_000) -> tuple[list[float], int]:
    """Warm up, pick calls per sample so a sample lasts about ``min_time``, then time ``repeats`` samples.

    Returns (seconds per request for each sample, calls per sample per stream). User exceptions
    come back as UserCodeError carrying the user's traceback.
    """
    try:
        last = 0.0
        for _ in range(max(1, warmup)):
            last = _run_calls(fn, 1, concurrency)
        number = max(1, min(max_number, math.ceil(min_time / max(last, 1e-9))))
        samples = [_run_calls(fn, number, concurrency) / (number * concurrency) for _ in range(repeats)]
    except Exception as exc:  # noqa: BLE001
        raise UserCodeError(user_traceback(exc)) from None
    return samples, number
