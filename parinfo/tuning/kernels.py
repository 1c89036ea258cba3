"""The built-in workloads' kernels (matmul, elementwise, ensemble) for numpy and torch.

Each function does its setup once and returns the zero-argument callable one timed call runs.
numpy and torch are imported inside, in the process that times the call.
"""
from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from typing import Any

ELEMENTWISE_LEN = 1 << 22  # 4M doubles: large enough that splitting pays, small enough to stay quick
ENSEMBLE_MODELS = 4
ENSEMBLE_WIDTH = 384
ENSEMBLE_BATCH = 64
ENSEMBLE_LAYERS = 3


def numpy_matmul(n: int) -> Callable[[], Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    return lambda: np.matmul(a, b, out=out)


def torch_matmul(n: int) -> Callable[[], Any]:
    import torch

    a = torch.randn(n, n)
    b = torch.randn(n, n)
    return lambda: torch.mm(a, b)


def numpy_elementwise(length: int) -> Callable[[], Any]:
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


def _thread_parallel_for(begin: int, end: int, grain_size: int, fn: Callable[[int, int], Any]) -> None:
    from parinfo.process.libraries import RUNTIME_VARS  # the library registry: only where it is needed

    n = int(os.environ.get(RUNTIME_VARS[0], "1") or 1)
    step = max(grain_size, math.ceil((end - begin) / n))
    bounds = [(b, min(end, b + step)) for b in range(begin, end, step)]
    threads = [threading.Thread(target=fn, args=bd) for bd in bounds[1:]]
    for t in threads:
        t.start()
    fn(*bounds[0])
    for t in threads:
        t.join()


def torch_elementwise(length: int) -> Callable[[], Any]:
    import torch

    x = torch.rand(length, dtype=torch.float64)
    out = torch.empty_like(x)
    return lambda: torch.add(torch.mul(torch.exp(x, out=out), 2.0, out=out), 1.0, out=out)


def ensemble(framework: str) -> Callable[[], Any]:
    from parinfo.process.libraries import Torch, family
    from parinfo.runtime import fork, wait

    x: Any
    models: list[list[Any]]
    if framework == family(Torch).module:
        import torch

        g = torch.Generator().manual_seed(0)
        x = torch.randn(ENSEMBLE_BATCH, ENSEMBLE_WIDTH, generator=g)
        models = [[torch.randn(ENSEMBLE_WIDTH, ENSEMBLE_WIDTH, generator=g) / ENSEMBLE_WIDTH ** 0.5
                   for _ in range(ENSEMBLE_LAYERS)] for _ in range(ENSEMBLE_MODELS)]

        def run(ws: list[Any]) -> Any:  # torch tensors or numpy arrays
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

        def run(ws: list[Any]) -> Any:  # torch tensors or numpy arrays
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
