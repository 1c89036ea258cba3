"""The gradient-boosting learners (XGBoost, LightGBM): no pool of their own, an OpenMP team per call.

Each call (``train``, ``predict``, a DMatrix or Dataset built) runs parallel regions of the OpenMP
runtime the library links (XGBoost's wheels ship a libgomp copy in ``xgboost.libs`` or ``xgboost_cpu.libs``, which the
loader shares with any copy of the same name already loaded, scikit-learn's; LightGBM's links the
system libgomp), so the threads are that runtime's pool, reported as its pool row. What the family
adds is the size of the team a call makes when it is passed no count, read through the library's
own C handle from the very OpenMP copy it uses (``omp_get_max_threads`` and its kin change
nothing and start no thread). A call's own ``nthread``/``n_jobs``/``num_threads`` overrides it and
cannot be seen from outside the call. Measured on xgboost 3.2.0 and lightgbm 4.7.0 (see
tests/test_library_learners.py).
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from parinfo.process import defaults
from parinfo.process.defaults import NO_FACTS, ModuleFacts
from parinfo.process.library_base import Library, QuotaRule
from parinfo.process.library_parts import LibraryKind, Push, as_count
from parinfo.process.library_runtimes import GnuOpenMP
from parinfo.safe_file import read_file

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts

#: libgomp's cap on every team (read once, at its load); parinfo lists it only where a library caps on it.
THREAD_LIMIT_VAR = "OMP_THREAD_LIMIT"

#: Where XGBoost reads a CPU quota: these fixed paths only (a container's own cgroup), never
#: /proc/self/cgroup, so a quota on a nested cgroup the process was moved into is not seen.
CGROUP_ROOT = "/sys/fs/cgroup"


def _read(path: str) -> str:
    return read_file(path, 256).decode("ascii", "replace")


def xgboost_quota_cpus(root: str = CGROUP_ROOT) -> int | None:
    """XGBoost's reading of the CPU quota (``GetCfsCPUCount``): cgroup v2 ``cpu.max`` rounded up,
    else v1 ``cpu/cpu.cfs_quota_us`` over its period rounded down, at least 1; None for no quota."""
    try:
        v2 = os.path.join(root, "cpu.max")
        if os.path.exists(v2):
            quota, period, *_ = [*_read(v2).split(), "", ""]
            if quota.isdigit() and period.isdigit() and int(quota) > 0 and int(period) > 0:
                return max(-(-int(quota) // int(period)), 1)
            return None
        quota_text = _read(os.path.join(root, "cpu", "cpu.cfs_quota_us")).strip()
        period_text = _read(os.path.join(root, "cpu", "cpu.cfs_period_us")).strip()
    except (OSError, ValueError):
        return None
    with contextlib.suppress(ValueError):
        quota_us, period_us = int(quota_text), int(period_text)
        if quota_us > 0 and period_us > 0:
            return max(quota_us // period_us, 1)
    return None


def thread_limit(env: Mapping[str, str]) -> int | None:
    """OMP_THREAD_LIMIT as libgomp takes it (a positive count), or None."""
    text = env.get(THREAD_LIMIT_VAR, "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def _openmp_calls(handle: Any) -> tuple[int, int, int]:
    """(omp_get_max_threads, omp_get_num_procs, omp_get_thread_limit) of the OpenMP runtime a
    library's loaded C ``handle`` resolves them to (its own dependency): none of them starts a team."""
    return (int(handle.omp_get_max_threads()), int(handle.omp_get_num_procs()),
            int(handle.omp_get_thread_limit()))


class _OpenMPLearner(Library):
    """A library that runs its work as teams of the OpenMP runtime it links, sized per call."""

    kind = LibraryKind.PYTHON
    follows = GnuOpenMP  # its count is its OpenMP runtime's omp_get_max_threads()
    push = Push.NONE
    scopes = GnuOpenMP.scopes  # its count is its OpenMP runtime's, whose limits are the calling thread's
    listed = "loaded"
    per_call = ""  # the words naming the per-call argument that overrides the count
    changed_by = ""  # the calls that change the count at run time, in words

    def set_call(self, n: int | None = None) -> str:
        """What changes its count at run time (a report's words; parinfo sets none of them)."""
        return self.changed_by

    def how_to_set(self, n: int, pool: str | None = None) -> str:
        """Its OpenMP runtime's variable, or the count each call is given."""
        return f"{super().how_to_set(n, pool)}, or pass {n} as each call's {self.per_call}"

    def row_note(self, module: Any) -> str | None:
        return (f"the team a call makes when passed no count; a call's own {self.per_call} overrides it, "
                "unseen from outside the call")

    def _limit(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        """The cap its teams take from ``ctx`` (what :meth:`context` read), None when there is none."""
        if ctx.limit is None:
            return None, ""
        return ctx.limit, ctx.limit_why


class XGBoost(_OpenMPLearner):
    """XGBoost: each call's team is ``nthread`` (the call's, else the calling thread's global config,
    else OpenMP's ``omp_get_max_threads()``), capped at OpenMP's CPUs (affinity), its max threads and
    thread limit, and at the CPU quota XGBoost reads at fixed paths (:func:`xgboost_quota_cpus`)."""

    name = label = module = "xgboost"
    module_facts = ()
    per_call = "nthread/n_jobs (or xgboost.config_context(nthread=...) in its thread)"
    changed_by = ("xgboost.set_config(nthread=...) or config_context in this thread, or an OpenMP limit in this "
                  "thread (omp_set_num_threads, threadpoolctl's threadpool_limits)")
    note = ("an OpenMP team per call: nthread (per call, else xgboost.get_config()['nthread'] of the calling "
            "thread, else omp_get_max_threads()), capped at the CPUs in affinity, OMP_THREAD_LIMIT and the CPU "
            "quota read at /sys/fs/cgroup/cpu.max (rounded up) or /sys/fs/cgroup/cpu/cpu.cfs_quota_us (rounded "
            "down): a container's own cgroup, not a nested one")
    quota_rule = QuotaRule.ROOT_ONLY  # xgboost 3.2: a team of 2 (affinity) in a nested 0.5-CPU cgroup

    def context(self, module: Any, env: Mapping[str, str]) -> ModuleFacts:
        limits = [(n, why) for n, why in (
            (thread_limit(env), f"{THREAD_LIMIT_VAR}={env.get(THREAD_LIMIT_VAR)}"),
            (xgboost_quota_cpus(), "the CPU quota XGBoost reads under /sys/fs/cgroup")) if n is not None]
        if not limits:
            return NO_FACTS
        n, why = min(limits)
        return ModuleFacts(limit=n, limit_why=why)

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        n, why = defaults.affinity_cpus(facts)
        cap, cap_why = self._limit(facts, ctx)
        if cap is not None and cap < n:
            return cap, f"{cap} ({cap_why}; XGBoost caps its teams at it)"
        return n, f"{n} ({why}: OpenMP's default, which XGBoost caps at its CPUs)"

    def cap(self, facts: MachineFacts, env: Mapping[str, str],
            ctx: ModuleFacts | None = None) -> tuple[int | None, str]:
        n, why = defaults.affinity_cpus(facts)
        cap, cap_why = self._limit(facts, ctx or NO_FACTS)
        return (cap, cap_why) if cap is not None and cap < n else (n, why)

    def read_count(self, module: Any) -> int | None:
        """The team a call from this thread makes with no nthread: XGBoost's own rule over its
        global config and its OpenMP runtime (read through ``xgboost.core._LIB``)."""
        try:
            asked = as_count(module.get_config().get("nthread")) or 0
            most, procs, limit = _openmp_calls(module.core._LIB)
        except Exception:
            return None
        n = min(procs, most, limit)
        n = max(min(asked, n) if asked > 0 else n, 1)
        quota = xgboost_quota_cpus()
        return n if quota is None else min(n, quota)


class LightGBM(_OpenMPLearner):
    """LightGBM: each call's team is its ``num_threads`` (n_jobs), else OpenMP's
    ``omp_get_max_threads()``, capped by ``LGBM_SetMaxThreads`` when set; neither affinity nor a
    quota caps a count it is given (OpenMP's default follows affinity)."""

    name = label = module = "lightgbm"
    module_facts = ()
    per_call = "num_threads/n_jobs"
    changed_by = ("an OpenMP limit in this thread (omp_set_num_threads, threadpoolctl's threadpool_limits) or "
                  "LightGBM's LGBM_SetMaxThreads")
    note = ("an OpenMP team per call: num_threads (n_jobs; a count above the CPUs is kept), else "
            "omp_get_max_threads() (OMP_NUM_THREADS, else the CPUs in affinity; the quota is ignored), capped by "
            "LGBM_SetMaxThreads and OMP_THREAD_LIMIT")
    quota_rule = QuotaRule.IGNORES  # lightgbm 4.7: a team of 2 (affinity) in a 0.5-CPU cgroup

    def context(self, module: Any, env: Mapping[str, str]) -> ModuleFacts:
        n = thread_limit(env)
        return NO_FACTS if n is None else ModuleFacts(limit=n, limit_why=f"{THREAD_LIMIT_VAR}={n}")

    def default(self, facts: MachineFacts, ctx: ModuleFacts) -> tuple[int | None, str]:
        n, why = defaults.affinity_cpus(facts)
        cap, cap_why = self._limit(facts, ctx)
        if cap is not None and cap < n:
            return cap, f"{cap} ({cap_why}: libgomp caps every team at it)"
        return n, f"{n} ({why}: OpenMP's default; the CPU quota is ignored)"

    def cap(self, facts: MachineFacts, env: Mapping[str, str],
            ctx: ModuleFacts | None = None) -> tuple[int | None, str]:
        return self._limit(facts, ctx or NO_FACTS)

    def read_count(self, module: Any) -> int | None:
        """The team a call makes with no num_threads: OpenMP's count through ``lightgbm.basic._LIB``,
        capped by LightGBM's own maximum (``LGBM_GetMaxThreads``; -1: none) and the thread limit."""
        import ctypes  # only here: parinfo's import path stays without it

        try:
            handle = module.basic._LIB
            most, _, limit = _openmp_calls(handle)
        except Exception:
            return None
        most_set = ctypes.c_int(-1)
        with contextlib.suppress(Exception):  # LightGBM before 4.2 has no such maximum
            if handle.LGBM_GetMaxThreads(ctypes.byref(most_set)) != 0:
                most_set.value = -1
        n = min(most, limit)
        return max(min(n, most_set.value) if most_set.value > 0 else n, 1)
