"""The runtime against its anchors: every goal of the adaptive-runtime issue as a ratio measured in
one run, with PASS/FAIL, beside the machine's usable parallelism measured first.

    python bench/runtime.py [--repeats 5] [--only pfor,matmul,region,follow,lstm,ensemble,callers,capped,forkwait]

``follow`` times the region fixed cost as it runs (the budget's re-read check included) and with
the region method compiled from its source less the check, in alternating batches of one process,
against the noise (median absolute deviation) of that cost.

``forkwait`` times fork-then-wait (one task at a time) and fork-all-then-wait (2000 tasks, then
each waited for) against the first version of the runtime, commit 54b2816, unpacked from this
repository with ``git archive`` into a temporary folder: fresh processes of each, interleaved.

Before the figures it measures usable parallelism (two threads hashing, which releases the GIL,
against one) and again at the end; a run where it is below 0.9x of what the CPUs allow is marked
BUSY, and its figures are not the machine's. The state before each timing is controlled: pools and
adaptive call sites are warmed up first, timings of the variants are interleaved, and OpenBLAS's
idle workers are given time to stop spinning (SETTLE_S) before any timing that follows a
multi-threaded BLAS call. Variants that torch's state could bias run in fresh processes.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.abspath(__file__)
SETTLE_S = 0.3  # longer than OpenBLAS's idle spin (OPENBLAS_THREAD_TIMEOUT default: 2^28 cycles)
RESULTS: list[tuple[str, float, str, bool]] = []
BUSY = [False]


# usable parallelism ---------------------------------------------------------------------------
def parallelism() -> float:
    """Work done per second by two threads over one thread (hashlib releases the GIL): 2.0 on two
    idle CPUs, less when other processes take CPU time."""
    buf = os.urandom(1 << 22)

    def hash_loop(stop: float, count: list[int]) -> None:
        while time.perf_counter() < stop:
            hashlib.sha256(buf).digest()
            count[0] += 1

    def rate(k: int) -> float:
        counts = [[0] for _ in range(k)]
        stop = time.perf_counter() + 0.4
        ts = [threading.Thread(target=hash_loop, args=(stop, c)) for c in counts]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return sum(c[0] for c in counts)

    rate(1)
    return statistics.median(rate(2) / max(1, rate(1)) for _ in range(3))


def check_machine(when: str) -> None:
    usable = len(os.sched_getaffinity(0))
    p = parallelism()
    expected = min(2, usable)
    busy = p < 0.9 * expected
    BUSY[0] = BUSY[0] or busy
    load = os.getloadavg()[0]
    print(f"usable parallelism ({when}): {p:.2f}x of 2 threads ({usable} usable CPUs, load {load:.2f})"
          + ("  BUSY: figures below are not this machine's" if busy else ""), flush=True)


def goal(name: str, ratio: float, op: str, target: float, detail: str = "") -> None:
    ok = ratio >= target if op == ">=" else ratio <= target
    RESULTS.append((name, ratio, f"{op} {target}", ok))
    mark = " (busy machine)" if BUSY[0] else ""
    print(f"   GOAL {name}: {ratio:.3f} (goal {op} {target}) {'PASS' if ok else 'FAIL'}{mark}"
          + (f"  [{detail}]" if detail else ""), flush=True)


def interleaved(fns: dict, repeats: int, inner: int = 1, settle: float = 0.0) -> dict:
    """Median seconds per call of each callable, timed round-robin (drift hits all alike)."""
    times: dict = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            if settle:
                time.sleep(settle)
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            times[k].append((time.perf_counter() - t0) / inner)
    return {k: statistics.median(v) for k, v in times.items()}


def warm(call, site_of, limit_s: float = 4.0, period: int = 512) -> str:
    """Call ``call()`` until its adaptive call site has settled (re-checks ``period`` calls apart
    or more) or ``limit_s`` passed: the timings then show the steady state, not the exploration.
    Returns what the site chose."""
    end = time.perf_counter() + limit_s
    call()
    site = site_of()
    while time.perf_counter() < end and site is not None and site.period < period:
        call()
    return "adaptive off" if site is None else f"chose {site.pick}"


def child(name: str, *args: str, timeout: float = 600) -> dict:
    """Run one of this file's child sections in a fresh process; its last stdout line is JSON."""
    out = subprocess.run([sys.executable, HERE, "--child", name, *args], capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0 and not out.stdout.strip():
        raise RuntimeError(f"child {name} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# parallel_for np.sin ---------------------------------------------------------------------------
def bench_pfor(repeats: int) -> None:
    import numpy as np

    import parinfo.runtime as rt
    from parinfo.runtime import RUNTIME

    print(f"parallel_for np.sin vs serial ({rt.get_num_threads()} intra-op threads, grain 1024)")
    for n, target in ((10_000, 0.95), (200_000, 1.7), (8_000_000, 1.9)):
        x = np.linspace(0.0, 100.0, n)
        y = np.empty_like(x)

        def body(a: int, b: int, x=x, y=y) -> None:
            np.sin(x[a:b], out=y[a:b])

        def pfor(n=n, body=body) -> None:
            rt.parallel_for(0, n, 1024, body)

        def serial(x=x, y=y) -> None:
            np.sin(x, out=y)

        inner = max(1, 2_000_000 // n)
        most = min(rt.get_num_threads(), n // 1024)
        chose = warm(pfor, lambda body=body, n=n, most=most:
                     RUNTIME.adaptive.region_site(body, n, most) if RUNTIME.adaptive.enabled else None)
        med = interleaved({"serial": serial, "pfor": pfor}, max(repeats, 9), inner)
        pfor()
        assert np.array_equal(y, np.sin(x))
        goal(f"parallel_for np.sin {n:.0e} elements vs serial", med["serial"] / med["pfor"], ">=", target,
             f"serial {med['serial'] * 1e6:.1f} us, parallel_for {med['pfor'] * 1e6:.1f} us, chunks: {chose}")


# parallel_for of matmul row blocks -------------------------------------------------------------
def bench_matmul(repeats: int) -> None:
    import numpy as np

    import parinfo.runtime as rt
    from parinfo.runtime import RUNTIME

    n = 512  # 262k elements in the product
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    c = np.empty((n, n))

    def numpy_own() -> None:
        np.matmul(a, b, out=c)

    def rows(lo: int, hi: int) -> None:
        np.matmul(a[lo:hi], b, out=c[lo:hi])

    def pfor() -> None:
        rt.parallel_for(0, n, 16, rows)

    most = min(rt.get_num_threads(), n // 16)
    chose = warm(pfor, lambda: RUNTIME.adaptive.region_site(rows, n, most) if RUNTIME.adaptive.enabled else None)
    med = interleaved({"numpy": numpy_own, "pfor": pfor}, max(repeats, 9), 5, settle=SETTLE_S)
    print("parallel_for of matmul row blocks (512x512 @ 512x512) vs numpy's own BLAS threads")
    goal("parallel_for matmul row blocks vs numpy's BLAS", med["numpy"] / med["pfor"], ">=", 0.95,
         f"numpy {med['numpy'] * 1e3:.2f} ms, parallel_for {med['pfor'] * 1e3:.2f} ms, chunks: {chose}")


# region fixed cost ----------------------------------------------------------------------------
def child_region(with_torch: str) -> dict:
    from concurrent.futures import ThreadPoolExecutor

    if with_torch == "1":
        import torch
    import parinfo.runtime as rt
    from parinfo.runtime import RUNTIME

    rt.set_num_threads(2)

    def noop(a: int, b: int) -> None:
        pass

    def noop2(a: int, b: int) -> None:
        pass

    n = 20000
    for _ in range(2000):
        rt.parallel_for(0, 2, 1, noop)
        rt.parallel_for(0, 2, 1, noop2)
    RUNTIME.adaptive.region_site(noop2, 2, 2).pin(2)  # the split path, for information
    out = {}
    with ThreadPoolExecutor(2) as ex:
        def tpe() -> None:
            for f in [ex.submit(noop, 0, 1), ex.submit(noop, 1, 2)]:
                f.result()
        fns = {"region": lambda: rt.parallel_for(0, 2, 1, noop),
               "split": lambda: rt.parallel_for(0, 2, 1, noop2), "tpe": tpe}
        if with_torch == "1":
            t, o = torch.zeros(2), torch.zeros(2)
            fns["torch"] = lambda: torch.sin(t, out=o)
        for fn in fns.values():
            fn()
        med = interleaved(fns, 7, n // 10)
    out = {k: v * 1e6 for k, v in med.items()}
    return out


def bench_region(repeats: int) -> None:
    print("region fixed cost: parallel_for(0, 2, 1, noop) per call (fresh process each)")
    for with_torch in ("0", "1"):
        r = child("region", with_torch)
        extra = f", torch.sin on 2 elements {r['torch']:.2f} us" if "torch" in r else ""
        goal(f"region fixed cost {'with' if with_torch == '1' else 'without'} torch imported (us)",
             r["region"], "<=", 5.0,
             f"split into 2 chunks {r['split']:.2f} us, ThreadPoolExecutor 2 tasks {r['tpe']:.2f} us{extra}")


# the re-read check of a changing budget -------------------------------------------------------
def _compiled(method, strip: bool):
    """``method`` compiled again from its own source, with every ``if ... follow.due_ns ...:``
    statement removed when ``strip``: the region as it is, and the same less the re-read check.
    Both variants go through the same compilation, so only the check tells them apart."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
    removed = []

    class Strip(ast.NodeTransformer):
        def visit_If(self, node: ast.If):
            if strip and any(isinstance(n, ast.Attribute) and n.attr == "due_ns" for n in ast.walk(node.test)):
                removed.append(node.lineno)
                return None
            return self.generic_visit(node)

    tree = ast.fix_missing_locations(Strip().visit(tree))
    if strip and not removed:
        raise SystemExit(f"{method.__qualname__} has no re-read check to remove: update this bench")
    module = sys.modules[method.__module__]
    namespace: dict = {}
    exec(compile(tree, inspect.getsourcefile(method) or "<bench>", "exec"), vars(module), namespace)
    return namespace[method.__name__], len(removed)


def child_follow(repeats: str) -> dict:
    """Region fixed cost as it runs (the re-read check on every region, a re-read of affinity,
    cpuset and quota once a second) against the same region method without the check, both compiled
    from its source, timed in alternating batches of one process."""
    import parinfo.runtime as rt
    from parinfo.runtime.intraop import IntraopPool
    from parinfo.runtime.settings import read_facts
    from parinfo.runtime.state import RUNTIME

    rt.set_num_threads(2)

    def noop(a: int, b: int) -> None:
        pass

    for _ in range(2000):
        rt.parallel_for(0, 2, 1, noop)
    region = IntraopPool.region
    with_check, _ = _compiled(region, strip=False)
    without_check, checks = _compiled(region, strip=True)
    inner = 50000  # about 0.1 s a batch: a run spans several re-reads, so their cost is in the figure
    rereads_before = RUNTIME.follow.rereads
    times: dict[str, list[float]] = {"on": [], "off": []}
    t_start = time.perf_counter()
    for _ in range(int(repeats)):
        for variant, method in (("on", with_check), ("off", without_check)):
            IntraopPool.region = method
            t0 = time.perf_counter()
            for _ in range(inner):
                rt.parallel_for(0, 2, 1, noop)
            times[variant].append((time.perf_counter() - t0) / inner * 1e6)
    IntraopPool.region = region
    seconds = time.perf_counter() - t_start
    rereads = RUNTIME.follow.rereads - rereads_before
    t0 = time.perf_counter()
    for _ in range(200):
        read_facts()
    reread_ms = (time.perf_counter() - t0) / 200 * 1e3
    off = times["off"]
    noise = statistics.median(abs(t - statistics.median(off)) for t in off)  # median absolute deviation
    return {"on": statistics.median(times["on"]), "off": statistics.median(off), "noise": noise,
            "reread_ms": reread_ms, "rereads": rereads, "seconds": seconds, "checks": checks}


def bench_follow(repeats: int) -> None:
    print("re-read check of the budget per region: parallel_for(0, 2, 1, noop) as it runs, and compiled "
          "without the check (fresh process, alternating batches)")
    r = child("follow", str(max(repeats, 15)))
    cost = r["on"] - r["off"]
    goal("re-read check per region over the noise of the region's fixed cost", cost / max(r["noise"], 1e-3),
         "<=", 1.0,
         f"region {r['off']:.2f} us without the check ({r['checks']} checks removed), {r['on']:.2f} us with "
         f"it ({cost:+.3f} us), noise (MAD) {r['noise']:.3f} us; one re-read {r['reread_ms']:.2f} ms, once "
         f"a second ({r['reread_ms'] / 10:.3f}% of a CPU), {r['rereads']} re-reads in {r['seconds']:.1f} s")


# the tutorial's LSTM ensemble ------------------------------------------------------------------
def child_lstm(mode: str, repeats: str) -> dict:
    import torch

    import parinfo.runtime as rt

    class BidirectionalLSTM(torch.nn.Module):  # the tutorial's model: one LSTM, its output
        def __init__(self, c: int) -> None:
            super().__init__()
            self.cell = torch.nn.LSTM(c, c, bidirectional=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.cell(x)[0]

    class ForkingEnsemble(torch.nn.Module):  # the tutorial's ensemble, forking inside TorchScript
        def __init__(self, members: list) -> None:
            super().__init__()
            self.members = torch.nn.ModuleList(members)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            futures = [torch.jit.fork(m, x) for m in self.members]
            return torch.stack([torch.jit.wait(f) for f in futures]).sum(dim=0)

    torch.manual_seed(0)
    t_, b_, c_ = 50, 50, 256
    eager = [BidirectionalLSTM(c_) for _ in range(4)]
    x = torch.randn(t_, b_, c_)
    if mode == "jit_fork_intra1":
        torch.set_num_threads(1)
    scripted = [torch.jit.script(m) for m in eager]
    ensemble = torch.jit.script(ForkingEnsemble(eager)) if mode.startswith("jit_fork") else None

    def serial():
        return torch.stack([m(x) for m in scripted]).sum(dim=0)

    def parinfo_fork():  # the tutorial's scripted members through parinfo.fork: torch's pool
        fs = [rt.fork(m, x) for m in scripted]
        return torch.stack([rt.wait(f) for f in fs]).sum(dim=0)

    def parinfo_eager():  # eager members through parinfo.fork: parinfo's pool, adaptive
        fs = [rt.fork(m, x) for m in eager]
        return torch.stack([rt.wait(f) for f in fs]).sum(dim=0)

    def jit_fork():
        return ensemble(x)

    fn = {"serial": serial, "parinfo": parinfo_fork, "parinfo_eager": parinfo_eager}.get(mode, jit_fork)
    with torch.no_grad():
        assert torch.allclose(fn(), torch.stack([m(x) for m in eager]).sum(dim=0), atol=1e-5)
        for _ in range(3):
            fn()
        if mode == "parinfo_eager":  # the fork site explores, then settles on its choice
            from parinfo.runtime import RUNTIME

            warm(fn, lambda: RUNTIME.adaptive.fork_site(eager[0]) if RUNTIME.adaptive.enabled else None, 8.0, 64)
        times = []
        for _ in range(int(repeats)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    print(json.dumps({"ms": statistics.median(times) * 1e3, "torch_intra": torch.get_num_threads(),
                      "torch_inter": torch.get_num_interop_threads()}), flush=True)
    os._exit(0)  # torch may abort at exit after scripted fork


def bench_lstm(repeats: int) -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        print("LSTM ensemble: skipped (torch is not installed)")
        return
    modes = ("serial", "parinfo", "jit_fork", "jit_fork_intra1", "parinfo_eager")
    res: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(3):  # fresh processes, interleaved
        for m in modes:
            res[m].append(child("lstm", m, str(max(repeats, 7)))["ms"])
    med = {k: statistics.median(v) for k, v in res.items()}
    best = min(med["serial"], med["jit_fork"], med["jit_fork_intra1"])
    print("tutorial LSTM ensemble (4 scripted bidirectional LSTMs, T,B,C = 50,50,256), default settings, "
          "a fresh process per variant, median ms: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
    print("   serial: members called in turn; jit_fork: the scripted ensemble forking its members "
          "(intra1: after torch.set_num_threads(1)); parinfo: members through parinfo.fork/wait; "
          "parinfo_eager: the eager members through parinfo.fork/wait")
    goal("LSTM ensemble parinfo.fork vs serial", med["serial"] / med["parinfo"], ">=", 1.0)
    goal("LSTM ensemble parinfo.fork vs best of torch.jit.fork and serial", best / med["parinfo"], ">=", 0.95)
    print(f"   eager members through parinfo.fork vs serial: {med['serial'] / med['parinfo_eager']:.2f}x")


# numpy ensemble -------------------------------------------------------------------------------
def bench_ensemble(repeats: int) -> None:
    import numpy as np

    import parinfo.runtime as rt
    from parinfo.runtime import RUNTIME

    rng = np.random.default_rng(0)
    models = [[rng.standard_normal((384, 384)) / 20 for _ in range(3)] for _ in range(4)]
    x = rng.standard_normal((256, 384))

    def model(ws, x):
        h = x
        for _ in range(4):
            for w in ws:
                h = np.tanh(h @ w)
        return h

    def serial():
        return sum(model(ws, x) for ws in models)

    def forked():
        fs = [rt.fork(model, ws, x) for ws in models]
        return sum(rt.wait(f) for f in fs)

    from threadpoolctl import threadpool_limits

    def one_thread():  # all the work on one thread: half of it is the floor for any split
        with threadpool_limits(1, user_api="blas"):
            return serial()

    assert np.allclose(forked(), serial())
    chose = warm(forked, lambda: RUNTIME.adaptive.fork_site(model) if RUNTIME.adaptive.enabled else None, 6.0)
    med = interleaved({"serial": serial, "parinfo": forked, "one_thread": one_thread}, max(repeats, 9),
                      settle=SETTLE_S)
    usable = max(1, len(os.sched_getaffinity(0)))
    ceiling = med["serial"] / (med["one_thread"] / usable)
    print(f"numpy ensemble (4 models x 12 matmul+tanh), idle BLAS workers before each timing "
          f"(sleep {SETTLE_S} s); serial already runs the matmuls on {usable} BLAS threads: the "
          f"best any split can do here is the work of one thread ({med['one_thread'] * 1e3:.1f} ms) "
          f"over {usable} CPUs, {ceiling:.2f}x serial")
    goal("numpy ensemble parinfo.fork vs serial", med["serial"] / med["parinfo"], ">=", 1.3,
         f"serial {med['serial'] * 1e3:.1f} ms, parinfo {med['parinfo'] * 1e3:.1f} ms, tasks: {chose}, "
         f"{med['serial'] / med['parinfo'] / ceiling:.0%} of the ceiling")


# fork/wait with 8 callers, torch imported ------------------------------------------------------
_CALLERS_CHILD = """
import torch


def one(k: int) -> int:
    return k + 1


def scripted_loop(n: int) -> int:  # fork/wait inside TorchScript: torch's inter-op pool
    s = 0
    for k in range(n):
        s += torch.jit.wait(torch.jit.fork(one, k))
    return s
"""


def child_callers(mode: str) -> dict:
    import importlib.util
    import tempfile

    import torch

    import parinfo.runtime as rt

    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:  # TorchScript needs source
        f.write(_CALLERS_CHILD)
    spec = importlib.util.spec_from_file_location("callers_child", f.name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    loop = torch.jit.script(mod.scripted_loop)
    os.unlink(f.name)

    def plain(k: int) -> int:
        return k + 1

    n = 3000

    def caller() -> None:
        if mode == "parinfo":
            for k in range(n):
                rt.wait(rt.fork(plain, k))
        else:
            loop(n)

    def run() -> float:
        ts = [threading.Thread(target=caller) for _ in range(8)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return (time.perf_counter() - t0) / (8 * n)

    run()
    before = rt.info()["budget"]["native_changes"]
    per = statistics.median(run() for _ in range(3))
    changes = rt.info()["budget"]["native_changes"] - before
    print(json.dumps({"us": per * 1e6, "changes_per_task": changes / (3 * 8 * n)}), flush=True)
    os._exit(0)


def bench_callers(repeats: int) -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        print("8 callers: skipped (torch is not installed)")
        return
    res: dict[str, list[dict]] = {"parinfo": [], "jit": []}
    for _ in range(3):
        for m in res:
            res[m].append(child("callers", m))
    p = statistics.median(r["us"] for r in res["parinfo"])
    j = statistics.median(r["us"] for r in res["jit"])
    ch = max(r["changes_per_task"] for r in res["parinfo"])
    print(f"fork/wait per task, 8 callers, torch imported: parinfo {p:.2f} us (from Python), "
          f"torch.jit.fork {j:.2f} us (fork and wait inside a scripted loop, on torch's pool)")
    goal("fork/wait per task with 8 callers vs scripted torch.jit.fork", p / j, "<=", 1.0)
    goal("native limit changes per task with 8 callers", ch, "<=", 0.01)


# fork/wait against the first version ------------------------------------------------------------
FIRST_VERSION = "54b2816"


def child_forkwait(root: str, mode: str) -> dict:
    """Per-task microseconds of fork-then-wait (``each``) or fork-all-then-wait (``all``) with the
    parinfo under ``root``, alone in this process (as a program doing one of them would)."""
    sys.path.insert(0, root)
    import parinfo.runtime as rt

    assert os.path.abspath(rt.__file__).startswith(os.path.abspath(root)), rt.__file__

    def one(k: int) -> int:
        return k

    n = 2000

    def each() -> None:
        for k in range(n):
            rt.wait(rt.fork(one, k))

    def all_then_each() -> None:
        futs = [rt.fork(one, k) for k in range(n)]
        for f in futs:
            rt.wait(f)

    fn = each if mode == "each" else all_then_each
    runtime = getattr(rt, "RUNTIME", None)  # the first version has no adaptive sites
    warm(fn, lambda: runtime.adaptive.fork_site(one) if runtime is not None else None, 3.0)
    fn()
    return {"us": interleaved({mode: fn}, 15)[mode] / n * 1e6}


def bench_forkwait(repeats: int) -> None:
    import shutil
    import tempfile

    repo = os.path.dirname(os.path.dirname(HERE))
    tmp = tempfile.mkdtemp(prefix="parinfo-first-")
    try:
        archive = subprocess.run(["git", "-C", repo, "archive", FIRST_VERSION, "parinfo"], capture_output=True,
                                 timeout=60)
        if archive.returncode != 0:
            why = archive.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["git archive failed"]
            print(f"fork/wait against {FIRST_VERSION}: skipped ({why[0]})")
            return
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True, timeout=60)
        runs: dict[tuple[str, str], list[float]] = {}
        for _ in range(max(3, repeats)):
            for mode in ("each", "all"):
                for which, root in (("first", tmp), ("now", repo)):
                    runs.setdefault((which, mode), []).append(child("forkwait", root, mode)["us"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for key, what in (("each", "fork then wait, one task at a time"),
                      ("all", "fork 2000 tasks, then wait for each")):
        first = statistics.median(runs[("first", key)])
        now = statistics.median(runs[("now", key)])
        print(f"{what}: parinfo {now:.2f} us per task, commit {FIRST_VERSION} {first:.2f} us")
        goal(f"{what} vs commit {FIRST_VERSION}", now / first, "<=", 1.0)


# capped after return --------------------------------------------------------------------------
def bench_capped(repeats: int) -> None:
    import numpy as np
    from threadpoolctl import ThreadpoolController

    import parinfo.runtime as rt
    from parinfo.runtime import RUNTIME

    blas = [c for c in ThreadpoolController().lib_controllers if c.internal_api == "openblas"]
    if not blas:
        print("capped after return: skipped (no OpenBLAS)")
        return
    before = [c.num_threads for c in blas]
    a = np.ones((64, 64))

    def chunk(lo: int, hi: int) -> None:
        a @ a

    bad = 0
    RUNTIME.set_adaptive(False)  # every region splits and caps the pool: the hardest case
    for _ in range(10_000):
        rt.parallel_for(0, 2, 1, chunk)
        bad += [c.num_threads for c in blas] != before
    RUNTIME.set_adaptive(True)
    print(f"OpenBLAS count read after each of 10^4 regions (count before: {before})")
    goal("capped-after-return reads in 10^4 regions", bad, "<=", 0)


SECTIONS = {"pfor": bench_pfor, "matmul": bench_matmul, "region": bench_region, "follow": bench_follow,
            "lstm": bench_lstm, "ensemble": bench_ensemble, "callers": bench_callers, "capped": bench_capped,
            "forkwait": bench_forkwait}
CHILDREN = {"region": child_region, "follow": child_follow, "lstm": child_lstm, "callers": child_callers,
            "forkwait": child_forkwait}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(CHILDREN[sys.argv[2]](*sys.argv[3:])), flush=True)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default=",".join(SECTIONS))
    args = ap.parse_args()
    import parinfo.runtime as rt

    print(f"parinfo runtime bench: {os.cpu_count()} CPUs, backend {rt.info()['backend']}, "
          f"adaptive {'on' if rt.info()['adaptive']['enabled'] else 'off'}")
    check_machine("start")
    for name in args.only.split(","):
        SECTIONS[name.strip()](args.repeats)
    check_machine("end")
    passed = sum(ok for *_, ok in RESULTS)
    print(f"{passed}/{len(RESULTS)} goals passed" + ("  (BUSY machine: rerun on a quiet one)" if BUSY[0] else ""))


if __name__ == "__main__":
    main()
