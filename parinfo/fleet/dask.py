"""Dask: gather every worker's row, and apply a profile to every worker through one named plugin.

This module imports ``distributed`` (its plugins subclass Dask's), so only :mod:`parinfo.fleet`
loads it, once a Dask target is given. Workers import it by reference when a plugin reaches them.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from distributed.diagnostics.plugin import NannyPlugin, WorkerPlugin

from parinfo.errors import ApplyError, ParinfoError
from parinfo.fleet import probe
from parinfo.fleet.report import Cluster, FleetReport

#: The worker plugin's name: registering again replaces it, never stacks a second copy.
PLUGIN_NAME = "parinfo-profile"
#: The nanny plugin's name (``restart=True``): variables in the worker's start-up environment.
NANNY_PLUGIN_NAME = "parinfo-profile-env"


def _executor_and_threads(worker: Any) -> tuple[Any, int]:
    return worker.executors["default"], int(worker.state.nthreads)


def _row_on_worker(per_thread: bool, dask_worker: Any = None) -> Mapping[str, object]:
    from parinfo.diagnostics.fleet_rows import ThreadPools

    threads = None
    if per_thread:
        executor, n = _executor_and_threads(dask_worker)
        read = probe.in_each_thread(executor.submit, n, probe.thread_pools)
        threads = [ThreadPools(name, pools) for name, pools in read]
    return probe.worker_row(str(dask_worker.address), threads)


def gather(client: Any, *, per_thread: bool = False, timeout: float = 30.0) -> FleetReport:
    """One row per worker of ``client``'s cluster (and one per host). ``per_thread=True`` also reads
    the pools' counts in every executor thread, through the task executor (it waits for busy threads)."""
    start = time.perf_counter()
    rows = client.run(_row_on_worker, per_thread, wait=True, on_error="return")
    good, failed = [], {}
    for address, row in rows.items():
        if isinstance(row, BaseException):
            failed[address] = f"{type(row).__name__}: {row}"
        else:
            good.append(row)
    info = Cluster("dask", str(client.scheduler.address), failed=failed)
    return FleetReport.from_rows(info, good, round(time.perf_counter() - start, 3), strict=False)


class ProfilePlugin(WorkerPlugin):
    """Applies a profile in each worker (resolved on the worker's own machine) and pushes the
    per-thread limits (OpenMP's) into every executor thread. Runs again on every new or restarted
    worker, since the scheduler keeps it registered."""

    name = PLUGIN_NAME
    idempotent = False

    def __init__(self, document: probe.ProfileDocument) -> None:
        self.document = document
        self.result: probe.AppliedOnWorker = {}

    def setup(self, worker: Any) -> None:
        from parinfo.profiles.applying import apply

        try:
            plan = self.document.resolve_here()
        except ParinfoError as exc:  # one line, in the client as in the worker
            raise type(exc)(f"worker {worker.address}: {exc}") from None
        counts = {key: s.value for key, s in plan.libraries.items()}
        executor, n = _executor_and_threads(worker)

        def push() -> int:
            probe.push_thread_limits(counts)
            return threading.get_native_id()

        # Per-thread limits first, in every executor thread, so apply() reports them as reached.
        pushed = probe.in_each_thread(executor.submit, n, push)
        try:
            done = apply(plan, reached_threads={tid for _, tid in pushed})
        except ParinfoError as exc:
            raise type(exc)(f"worker {worker.address}: {exc}") from None
        lines = done.lines()  # the words travel to the client
        self.result = {"applied": lines["applied"], "not_in_force": lines["not_in_force"],
                       "threads_reached": sorted({name for name, _ in pushed}), "threads": n}


class EnvironPlugin(NannyPlugin):
    """Puts the profile's variables (resolved on the nanny's machine) in the nanny's pre-spawn
    environment, so they are in a restarted worker's environment before anything is imported."""

    name = NANNY_PLUGIN_NAME
    restart = True

    def __init__(self, document: probe.ProfileDocument) -> None:
        self.document = document

    def setup(self, nanny: Any) -> None:
        from parinfo.process.libraries import role_var
        from parinfo.process.outer import PARINFO_SET_VAR

        plan = self.document.resolve_here()
        env = {name: str(value) for name, value in plan.env_without_preload.items()}
        profile_var = role_var("profile")
        ours = ",".join(sorted([*env, profile_var]))
        nanny.pre_spawn_env.update({**env, profile_var: plan.name, PARINFO_SET_VAR: ours})


def apply(client: Any, profile: Any, *, restart: bool = False) -> dict[str, probe.AppliedOnWorker]:
    """Apply ``profile`` to every worker of ``client``'s cluster, now and on every worker that
    starts later. The profile is checked here first; a profile that fails on a worker is
    unregistered and its one-line error raised here (ProfileError or ApplyError).
    ``restart=True`` also sets the variables in the nanny's start-up environment and restarts the
    workers, so the counts are in force before any import. Returns {worker: what was applied}."""
    document = probe.profile_document(profile)
    try:
        client.register_plugin(ProfilePlugin(document), name=PLUGIN_NAME)
        if restart:
            client.register_plugin(EnvironPlugin(document), name=NANNY_PLUGIN_NAME)
    except Exception as exc:
        _unregister(client, restart)
        if isinstance(exc, ParinfoError):
            raise
        raise ApplyError(f"applying {document.origin} on the workers failed: {type(exc).__name__}: {exc}") from None
    results: dict[str, probe.AppliedOnWorker] = client.run(_result_on_worker)  # the worker's address -> its result
    return results


def _unregister(client: Any, nanny: bool) -> None:
    for name, is_nanny in ((PLUGIN_NAME, False), (NANNY_PLUGIN_NAME, True)):
        if is_nanny and not nanny:
            continue
        try:
            client.unregister_worker_plugin(name, nanny=is_nanny)
        except Exception:  # not registered on some worker: nothing to remove there
            pass


def _result_on_worker(dask_worker: Any = None) -> probe.AppliedOnWorker:
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    return plugin.result.copy() if isinstance(plugin, ProfilePlugin) else {}


def registered(client: Any) -> dict[str, list[str]]:
    """The names of the worker plugins the scheduler keeps (and will run on new workers)."""
    return {"worker": sorted(client.run_on_scheduler(_scheduler_plugins))}


def _scheduler_plugins(dask_scheduler: Any = None) -> list[str]:
    return list(dask_scheduler.worker_plugins)


__all__ = ["NANNY_PLUGIN_NAME", "PLUGIN_NAME", "apply", "gather", "registered"]
