"""Ray: gather one row per worker process of a connected Ray.

Ray has no call that runs a function in every worker, so one probe task per CPU of the cluster is
sent, each holding its CPU until a shared moment so that they run at once on distinct workers; idle
workers are reused first, so the probes land on the workers earlier tasks left behind. A round whose
probes met on fewer workers than were sent (one started after the moment) is sent again, holding
longer. Each row
describes its worker as a 1-CPU task finds it (the pools' counts were set by earlier tasks, which
is what the reused-worker case is about). Rows are deduplicated by process.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from parinfo.fleet import probe
from parinfo.fleet.report import Cluster, FleetReport

#: How long each probe holds its CPU, so that the probes spread over distinct workers; a round
#: that reached fewer workers than it sent probes (one started late and landed on a worker already
#: probed) is sent again, holding longer, up to the last.
HOLDS_S = (0.3, 1.0, 2.0)


def _row_in_task(until: float) -> Mapping[str, object]:
    import ray

    wait = until - time.time()
    if wait > 0:
        time.sleep(wait)
    ctx = ray.get_runtime_context()
    return probe.worker_row(f"{ctx.get_node_id()[:8]}/{ctx.get_worker_id()[:8]}")


def gather(ray: Any, *, timeout: float = 60.0) -> FleetReport:
    """One row per Ray worker reached (and one per host). ``ray`` is the connected ``ray`` module."""
    start = time.perf_counter()
    if not ray.is_initialized():
        from parinfo.errors import UsageError

        raise UsageError("Ray is not connected in this process: call ray.init(address=...) first")
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    task = ray.remote(num_cpus=1, max_retries=0)(_row_in_task)
    unique: dict[tuple[object, object], Mapping[str, object]] = {}  # by (host, pid): one row a process
    for hold in HOLDS_S:
        until = time.time() + hold
        rows = ray.get([task.remote(until) for _ in range(cpus)],
                       timeout=max(1.0, timeout - (time.perf_counter() - start)))
        reached = {(r["host"]["key"], r["pid"]): r for r in rows}
        unique.update(reached)
        if len(reached) >= cpus:
            break
    address = ray.get_runtime_context().gcs_address
    info = Cluster("ray", str(address), cpus)
    return FleetReport.from_rows(info, list(unique.values()), round(time.perf_counter() - start, 3), strict=False)
