"""Outer threads: what runs this process's work several at a time, and who set its thread variables.

A native pool's count is per caller: a Dask worker runs ``nthreads`` tasks at once in one process,
each of which may open a full BLAS or OpenMP team; a Ray worker runs one task at a time on the CPUs
the task was granted; a loky (joblib) worker is one of ``n_jobs`` processes on the host. The outer
count times the pool count is what can run at once. This module finds the outer count (given, or
detected from the framework already imported: never imported here) and names who set each thread
variable: the Dask nanny, Ray, loky, parinfo, or the user.
"""
from __future__ import annotations

import math
import os
import sys
from collections.abc import Collection, Mapping
from dataclasses import field

from parinfo.process import libraries as reg
from parinfo.process.environment import EnvRow
from parinfo.records.convert import OMIT_NONE
from parinfo.records.record import record
from parinfo.records.source import Kind, Source, argument, unknown
from parinfo.safe_text import plural

#: Variable that lists, in a launched worker's environment, the variables parinfo put there.
PARINFO_SET_VAR = "_PARINFO_FLEET_SET"

USER = "the user"
PARINFO = "parinfo"
RAY = "ray (the task's CPUs, set in the worker when a task starts)"
LOKY = "loky (joblib: cpu_count // n_jobs, in the worker's start-up environment)"
NANNY_PRE_SPAWN = "dask nanny (distributed.nanny.pre-spawn-environ, before the worker started)"
NANNY_ENVIRON = "dask nanny (distributed.nanny.environ, after the worker started)"


@record
class OuterThreads:
    """The outer parallelism of a process: the report's ``outer`` section (its JSON).

    - ``framework``: user, dask, ray, loky, or None when nothing runs the process's work several at
      a time.
    - ``threads``: tasks the process runs at once, or None.
    - ``cpus``: the CPUs the framework grants the process, or None when it grants none and the
      usable CPUs are the budget.
    - ``source``: how it was found, in one line.
    - ``variables_set_by``: {variable: who set it} for the thread variables that are set (see
      :func:`set_by`); None when not asked (a fleet worker row carries it in its variables instead).
    """

    framework: str | None = None
    threads: int | None = None
    cpus: int | None = None
    source: Source | None = None
    variables_set_by: dict[str, str] | None = field(default=None, metadata=OMIT_NONE)


#: The modules whose frameworks run a process's work several at a time (Dask, Ray, loky): without
#: one of them imported, nothing is detected.
FRAMEWORK_MODULES = ("distributed", "ray", "joblib.externals.loky", "loky")
NONE_DETECTED = Source(Kind.NONE, "", "none detected (not a Dask, Ray or loky worker); pass outer_threads=N")


def outer_of_modules(modules: Collection[str]) -> OuterThreads:
    """The outer parallelism of a process known only by the modules it imported (read from inside
    by parinfo's attach): none when no framework of :data:`FRAMEWORK_MODULES` is imported; else
    unknown, since a worker's count lives in the framework's objects."""
    found = [m for m in FRAMEWORK_MODULES if m in modules]
    if not found:
        return OuterThreads(None, None, None, NONE_DETECTED)
    return OuterThreads(None, None, None, unknown(f"{', '.join(found)} imported: a worker's outer threads are "
                                                  "read by parinfo.inspect() inside the process, not by attach"))


def outer_threads(explicit: int | None = None, usable: int | None = None) -> OuterThreads:
    """The outer parallelism of this process. ``explicit`` (``inspect(outer_threads=N)``) wins over
    detection (Dask, then Ray, then loky: a framework already imported, never imported here)."""
    if explicit is not None:
        return OuterThreads("user", int(explicit), None,
                            argument("outer_threads", f"given: outer_threads={int(explicit)}"))
    for detect in (_dask, _ray, _loky):
        found = detect(usable)
        if found is not None:
            return found
    return OuterThreads(None, None, None, NONE_DETECTED)


def _dask(usable: int | None) -> OuterThreads | None:
    if "distributed" not in sys.modules:
        return None
    try:
        from distributed.worker import Worker

        workers = [w for w in list(Worker._instances) if getattr(w, "status", None) is not None
                   and str(w.status.name) not in ("closed", "closing", "failed")]
    except Exception:
        return None
    if not workers:
        return None
    threads = sum(int(w.state.nthreads) for w in workers)
    where = "dask worker" if len(workers) == 1 else f"{len(workers)} dask workers in this process"
    return OuterThreads("dask", threads, None, Source(
        Kind.FRAMEWORK, "dask", f"{where}: {plural(threads, 'thread')} run tasks at once (nthreads)"))


def _ray(usable: int | None) -> OuterThreads | None:
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        if not ray.is_initialized():
            return None
        ctx = ray.get_runtime_context()
        if ctx.worker.mode != ray._private.worker.WORKER_MODE:
            return None
        granted = ctx.get_assigned_resources().get("CPU")
    except Exception:
        return None
    cpus = max(math.floor(granted), 1) if granted else 1
    what = f"{granted:g} CPU{'s' if granted != 1 else ''}" if granted else "no CPU (counted as 1, as ray does)"
    return OuterThreads("ray", 1, cpus,
                        Source(Kind.FRAMEWORK, "ray", f"ray worker: one task at a time, granted {what}"))


def loky_siblings() -> int | None:
    """How many loky workers share this one's parent (n_jobs on this host), or None when unknown."""
    try:
        import psutil

        count = 0
        for child in psutil.Process(os.getppid()).children():
            try:
                cmd = child.cmdline()
            except psutil.Error:
                continue
            if "--process-name" in cmd and any(a.startswith("LokyProcess") for a in cmd):
                count += 1
        return count or None
    except Exception:
        return None


def in_loky_worker() -> bool:
    """True in a worker process started by loky (joblib's default process backend)."""
    if not any(m in sys.modules for m in ("joblib.externals.loky", "loky")):
        return False
    import multiprocessing

    return multiprocessing.current_process().name.startswith("LokyProcess")


def _loky(usable: int | None) -> OuterThreads | None:
    if not in_loky_worker():
        return None
    n = loky_siblings()
    if n is None:
        return OuterThreads("loky", 1, None, Source(
            Kind.FRAMEWORK, "loky", "loky worker: one task at a time (its sibling workers could not be counted)"))
    share = max(1, (usable or 1) // n)
    return OuterThreads("loky", 1, share, Source(
        Kind.FRAMEWORK, "loky", f"loky worker: one of {n} on this host, so {share} of {usable} usable CPUs each"))


# -- who set a variable ------------------------------------------------------------------------

def _dask_config(key: str) -> dict[str, str]:
    if "dask" not in sys.modules or "distributed" not in sys.modules:
        return {}
    try:
        import dask

        cfg = dask.config.get(key, default={}) or {}
        return {str(k): str(v) for k, v in cfg.items() if v is not None}
    except Exception:
        return {}


def _loky_vars() -> tuple[str, ...]:
    try:
        from joblib._parallel_backends import ParallelBackendBase

        return tuple(ParallelBackendBase.MAX_NUM_THREADS_VARS)
    except Exception:
        return ()


def set_by(env_rows: list[EnvRow], framework: str | None = None,
           parinfo_set: Mapping[str, str] | None = None,
           launch_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Who set each thread variable that is set: {name: who} for the rows of an environment report.

    Evidence, first match wins: parinfo (an in-process ``parinfo.apply`` set this value, or a
    fleet launch listed it in PARINFO_SET_VAR); the Dask nanny (the worker's config asks for this
    value, before start-up or after it); Ray (OMP count equal to the task's CPUs, unset at launch);
    loky (in a loky worker, one of joblib's variables present at start-up); else the user, at launch
    or after it. ``parinfo_set``: what ``parinfo.apply`` set in this process (``Runtime.env_set()``).
    """
    parinfo_set = parinfo_set or {}
    launch = launch_env or {}
    listed = set(launch.get(PARINFO_SET_VAR, "").split(",")) - {""}
    pre_spawn = _dask_config("distributed.nanny.pre-spawn-environ") if framework == "dask" else {}
    after = _dask_config("distributed.nanny.environ") if framework == "dask" else {}
    omp = reg.LIBRARY_VARS["openmp"][0]
    loky = _loky_vars() if framework == "loky" else ()
    out: dict[str, str] = {}
    for row in env_rows:
        name, value = row.name, row.value
        if value is None:
            continue
        at_launch = row.launch_value == value
        if parinfo_set.get(name) == value or (at_launch and (name in listed or name == PARINFO_SET_VAR)):
            out[name] = PARINFO
        elif at_launch and pre_spawn.get(name) == value:
            out[name] = NANNY_PRE_SPAWN
        elif not at_launch and after.get(name) == value:
            out[name] = NANNY_ENVIRON
        elif framework == "ray" and name == omp and row.launch_value is None:
            out[name] = RAY
        elif at_launch and name in loky:
            out[name] = LOKY
        else:
            out[name] = (f"{USER} (at launch)" if at_launch
                         else "this process, after launch (user code or a library it imported)")
    return out
