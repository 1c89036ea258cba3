"""One measured point in a fresh process: ``python -m parinfo.tuning.worker JOB_JSON RESULT_PATH``.

The parent launches it as ``parinfo apply`` launches a program (parinfo.tuning.measure.trial_child):
the thread variables are in its environment, so every library reads its count at load time as it
would in production, and the start-up hook sets torch's counts when torch is imported. The result
(or the user's error) goes to RESULT_PATH as JSON so whatever the workload prints cannot garble it.

Exit codes: 0 measured; 1 the user's code raised (traceback in the result); 2 bad workload request.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import TypedDict


class Job(TypedDict):
    """What the parent asks of this process (argv's JSON): the workload's spec (its JSON form) and how
    to time it."""

    spec: Mapping[str, object]
    concurrency: int
    warmup: int
    repeats: int
    min_time: float


class Result(TypedDict, total=False):
    """What this process writes to RESULT_PATH: the samples, their number of calls and the counts in
    force (:func:`counts_in_force`); or an ``error`` (user, usage) with its ``text`` and ``summary``."""

    samples: list[float]
    number: int
    in_force: dict[str, object]
    error: str
    text: str
    summary: str


def counts_in_force(framework: str) -> dict[str, object]:
    """The counts the loaded libraries report now (read-only: nothing is probed by setting): each
    native pool's copies by its API, then parinfo's and torch's counts, or why they were not read."""
    from parinfo.process import setter
    from parinfo.tuning.workloads import TORCH

    native: dict[str, list[int | None]] = {}
    seen: dict[str, object] = {}
    try:
        for pool in setter.native_pools():
            native.setdefault(pool.internal_api or "?", []).append(pool.get())
    except Exception as exc:  # a report, never a failure
        seen["native"] = f"unknown ({exc})"
    seen = {**native, **seen}
    if "parinfo.runtime.state" in sys.modules:  # the workload used parinfo's runtime
        try:
            info = sys.modules["parinfo.runtime.state"].RUNTIME.info()
            seen["parinfo"] = {"intra_op": info["intra_op"]["count"], "inter_op": info["inter_op"]["count"]}
        except Exception as exc:
            seen["parinfo"] = f"unknown ({exc})"
    intra, inter = setter.torch_counts()
    if framework == TORCH and intra is not None:
        seen["torch"] = {"intra_op": intra, "inter_op": inter}
    return seen


def run(job: Job) -> Result:
    """Build the workload under this process's counts and time it; returns the result dict."""
    from parinfo.tuning.timing import time_calls
    from parinfo.tuning.usercode import UserCodeError, WorkloadUsageError
    from parinfo.tuning.workloads import TORCH, read_spec

    workload = read_spec(job["spec"])
    fw = workload.framework
    if fw == TORCH:
        import torch  # noqa: F401 - the start-up hook sets its counts as the import finishes
    try:
        fn = workload.build()
        samples, number = time_calls(fn, concurrency=job["concurrency"], warmup=job["warmup"],
                                       repeats=job["repeats"], min_time=job["min_time"])
    except UserCodeError as exc:
        return {"error": "user", "text": exc.text, "summary": exc.summary}
    except WorkloadUsageError as exc:
        return {"error": "usage", "text": str(exc)}
    except MemoryError:  # a built-in workload too large for the memory free now (checked before, roughly)
        return {"error": "usage", "text": f"{workload.describe()}: out of memory building the workload"}
    return {"samples": samples, "number": number, "in_force": counts_in_force(fw)}


def write_result(path: str, text: str) -> None:
    """Write ``text`` to a new file ``path`` through :mod:`parinfo.safe_file`: the user's code ran in
    this process and may have left a FIFO or a link at that name."""
    import os

    import parinfo.safe_file as safe_file

    folder = safe_file.writable_dir(os.path.dirname(os.path.abspath(path)), make=False)
    try:
        fd = safe_file.create(folder, os.path.basename(path), 0o600)
    finally:
        os.close(folder)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def main(argv: list[str]) -> int:
    job = json.loads(argv[0])
    result = run(job)
    write_result(argv[1], json.dumps(result))
    return {"user": 1, "usage": 2}.get(result.get("error", ""), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
