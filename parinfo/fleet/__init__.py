"""The same report and profiles across every worker of a Dask or Ray cluster.

- :func:`gather` (a ``distributed.Client`` or the connected ``ray`` module): a :class:`FleetReport`
  with one row per worker and one per host, and the findings ``outer-times-inner`` (a worker's task
  threads x its pools' threads above its CPUs) and ``host-oversubscribed`` (the sum over a host).
- :func:`apply` (Dask): one named plugin that applies a profile on every worker, now and after restarts.
- :func:`ray_runtime_env`: a Ray ``runtime_env`` that puts a profile in force in every worker at start-up.
- :func:`connect_dask` and :func:`connect_ray`: reach a cluster by address under one timeout; a
  malformed, refused, silent or garbage-speaking address raises ConnectError (one line).

Dask and Ray are imported only when a target of theirs is given; importing this package loads neither.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from parinfo.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from parinfo.fleet.probe import AppliedOnWorker
    from parinfo.fleet.report import FleetReport

__all__ = ["FleetReport", "apply", "connect_dask", "connect_ray", "dask_config", "gather", "ray_runtime_env"]


def _kind(target: Any) -> str:
    ray = sys.modules.get("ray")
    if ray is not None and target is ray:
        return "ray"
    module = type(target).__module__ or ""
    if module.startswith("distributed") and hasattr(target, "register_plugin"):
        return "dask"
    if module.startswith("ray"):
        return "ray"
    raise UsageError(f"a fleet target is a distributed.Client or the connected ray module, "
                     f"not {type(target).__name__}")


def gather(target: Any, *, per_thread: bool = False, timeout: float = 60.0) -> FleetReport:
    """One row per worker of ``target`` (a ``distributed.Client``, or the connected ``ray`` module or
    the context ``ray.init`` returned) and one per host. Fast: the rows are read in each worker's
    control thread; ``per_thread=True`` (Dask) also reads every executor thread's counts through the
    task executor, waiting for busy threads."""
    if _kind(target) == "dask":
        from parinfo.fleet import dask

        return dask.gather(target, per_thread=per_thread, timeout=timeout)
    import ray

    from parinfo.fleet import ray as fleet_ray

    if per_thread:
        raise UsageError("per_thread=True is for Dask: a Ray worker runs one task thread")
    return fleet_ray.gather(ray, timeout=timeout)


def apply(target: Any, profile: Any, *, restart: bool = False) -> dict[str, AppliedOnWorker]:
    """Apply ``profile`` on every worker of a Dask cluster (see :func:`parinfo.fleet.dask.apply`).
    For Ray, pass ``runtime_env=ray_runtime_env(profile)`` to ``ray.init`` or to a task instead."""
    if _kind(target) != "dask":
        raise UsageError("fleet.apply is for Dask; for Ray use ray.init(runtime_env=parinfo.fleet.ray_runtime_env(P))")
    from parinfo.fleet import dask

    return dask.apply(target, profile, restart=restart)


def __getattr__(name: str) -> Any:
    if name in ("ray_runtime_env", "dask_config"):
        from parinfo.fleet import env

        return getattr(env, name)
    if name in ("connect_dask", "connect_ray"):
        from parinfo.fleet import connect

        return getattr(connect, name)
    if name == "FleetReport":
        from parinfo.fleet.report import FleetReport

        return FleetReport
    raise AttributeError(f"module 'parinfo.fleet' has no attribute {name!r}")
