"""The timing loop: warm-up, calls batched to last ``min_time``, repeated samples, concurrent requests."""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from parinfo.tuning.usercode import user_error


def run_calls(fn: Callable[[], Any], calls: int, concurrency: int) -> float:
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
        except BaseException as exc:  # re-raised in the caller
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
    (and SystemExit) come back as UserCodeError carrying the user's traceback.
    """
    try:
        last = 0.0
        for _ in range(max(1, warmup)):
            last = run_calls(fn, 1, concurrency)
        number = max(1, min(max_number, math.ceil(min_time / max(last, 1e-9))))
        samples = [run_calls(fn, number, concurrency) / (number * concurrency) for _ in range(repeats)]
    except (Exception, SystemExit) as exc:
        raise user_error(exc) from None
    return samples, number
