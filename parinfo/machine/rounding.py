"""How a fractional CPU quota becomes a whole number of threads: parinfo's choice, and every runtime's.

A 1.5-CPU quota pays for 150 ms of CPU time per 100 ms period. Rounding it down (1 thread) never
runs into the limit but leaves half a CPU unused; rounding it up (2 threads) uses all of it, and two
busy threads spend the quota in the first 75 ms of each period and are throttled for the rest.
Runtimes disagree, so parinfo states its own rule (:data:`ROUNDINGS`, ``floor`` unless a profile's
``quota_rounding`` or ``PARINFO_QUOTA_ROUNDING`` says otherwise) and, beside it, what each runtime
would answer on the same machine (:func:`usable_by_rule`), each from its own source:

- ``go`` (Go 1.25 GOMAXPROCS, src/runtime/cgroup_linux.go ``adjustCgroupGOMAXPROCS``):
  min(affinity CPUs, max(2, ceil(quota))), the quota of the process's own cgroup only (no ancestors):
  a Kubernetes pod-level limit, on the pod's cgroup above the container's, is not seen
  (golang/go#81180), and Go answers the affinity CPUs.
- ``jdk`` (HotSpot ``CgroupUtil::processor_count``): min(affinity CPUs, ceil(quota)).
- ``dotnet`` (CoreCLR PAL cgroup.cpp ``ComputeCpuLimit``): min(affinity CPUs, ceil(quota)), and 1 for a
  quota of one CPU or less.
- ``loky`` (joblib/loky ``cpu_count``): min(os.cpu_count(), affinity CPUs, ceil(quota)), the quota
  read at the fixed paths /sys/fs/cgroup/cpu.max and /sys/fs/cgroup/cpu/cpu.cfs_quota_us only.
- ``rust`` (std ``available_parallelism``): min(affinity CPUs, max(1, floor(quota))), the tightest
  of the cgroup and its ancestors.
- ``nproc`` (GNU coreutils 9.8+ through gnulib ``num_processors``): min(affinity CPUs,
  max(1, round(quota))), the v2 hierarchy only (a v1 quota is ignored; older nproc ignores quotas).

Each is the runtime's default: GOMAXPROCS, -XX:ActiveProcessorCount, DOTNET_PROCESSOR_COUNT,
LOKY_MAX_CPU_COUNT and nproc's OpenMP variables override them, and are not read here.

The runtimes that take a default count without rounding a quota the same way (Node's libuv, CPython's
``os.process_cpu_count()``, torch, ONNX Runtime, DuckDB) follow them in :data:`RUNTIMES`; their rules
are in :mod:`parinfo.machine.runtime_readings`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from parinfo.machine import runtime_readings as _readings
from parinfo.machine.sysfs import Unreadable, read
from parinfo.records.source import PARINFO_DEFAULT, Source, variable

ROUNDINGS = ("floor", "ceil", "nearest")
DEFAULT = "floor"
ROUNDING_VAR = "PARINFO_QUOTA_ROUNDING"
#: The runtimes of :func:`usable_by_rule`, in the order reports show them, with their names in words:
#: the one list of them (the rules after ``nproc`` are in :mod:`parinfo.machine.runtime_readings`).
RUNTIMES = {"go": "Go", "jdk": "the JDK", "dotnet": ".NET", "loky": "loky", "rust": "Rust", "nproc": "GNU nproc",
            "node": "Node (libuv 1.51+)", "node20": "Node 20 (libuv before 1.49)",
            "python": "Python os.process_cpu_count()", "torch": "torch", "onnxruntime": "ONNX Runtime",
            "duckdb": "DuckDB"}

_LOKY_V2 = "sys/fs/cgroup/cpu.max"
_LOKY_V1 = ("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "sys/fs/cgroup/cpu/cpu.cfs_period_us")


def round_quota(quota: float, rule: str) -> int:
    """``quota`` CPUs as a whole number of threads by ``rule`` (one of :data:`ROUNDINGS`), at least 1."""
    if rule == "ceil":
        n = math.ceil(quota)
    elif rule == "nearest":
        n = math.floor(quota + 0.5)  # half up, as nproc rounds
    else:
        n = math.floor(quota)
    return max(1, n)


def rounding_from_env(environ: Mapping[str, str]) -> tuple[str, Source, str | None]:
    """(rule, source, problem) from PARINFO_QUOTA_ROUNDING: the default with no problem when it is
    unset, the default and why when its value is not one of :data:`ROUNDINGS`."""
    value = environ.get(ROUNDING_VAR)
    if value is None:
        return DEFAULT, PARINFO_DEFAULT, None
    rule = value.strip().lower()
    if rule in ROUNDINGS:
        return rule, variable(ROUNDING_VAR, value.strip()), None
    return DEFAULT, PARINFO_DEFAULT, f"{value!r} is not one of {', '.join(ROUNDINGS)}; used {DEFAULT}"


def _ceil(quota: float | None) -> int | None:
    return None if quota is None else max(1, math.ceil(quota))


def _bound(cpus: int, limit: int | None) -> int:
    return max(1, cpus if limit is None else min(cpus, limit))


def loky_quota(root: str) -> float | None:
    """The quota loky reads: /sys/fs/cgroup/cpu.max when it has two fields, else the v1 files at
    /sys/fs/cgroup/cpu/; None for no limit, or files it would not find or parse."""
    try:
        parts = read(root, _LOKY_V2).split()
        if len(parts) == 2:
            return None if parts[0] == "max" else _ratio(parts[0], parts[1])
    except Unreadable:
        pass
    try:
        quota, period = (read(root, rel).strip() for rel in _LOKY_V1)
    except Unreadable:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def usable_by_rule(cpus: int, logical: int | None, quota: float | None, leaf_quota: float | None,
                   v2_quota: float | None, loky: float | None, *, physical_in_affinity: int | None = None,
                   physical: int | None = None, outer_v2_quota: float | None = None,
                   environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """What each runtime of :data:`RUNTIMES` answers for a process that may run on ``cpus`` CPUs
    (affinity within the cpuset) under the quotas each one reads: ``quota`` (the tightest of the
    cgroup and its ancestors), ``leaf_quota`` (its own cgroup alone), ``v2_quota`` (the v2 hierarchy
    alone), ``loky`` (:func:`loky_quota`) and ``outer_v2_quota`` (the v2 level nearest the root that
    has one: libuv's). ``physical_in_affinity`` and ``physical`` (the machine's physical cores;
    torch's and ONNX Runtime's) default to ``cpus`` and ``logical``; ``environ`` (DuckDB's
    SLURM_CPUS_ON_NODE) to none. A caller of the first six arguments alone gets every row, those
    that read what it did not give as if the machine had no SMT, libuv no v2 quota and no Slurm."""
    go = None if leaf_quota is None else max(2, math.ceil(leaf_quota))
    dotnet = None if quota is None else 1 if quota <= 1 else math.ceil(quota)
    online = logical or cpus
    return {
        "go": _bound(cpus, go),
        "jdk": _bound(cpus, _ceil(quota)),
        "dotnet": _bound(cpus, dotnet),
        "loky": _bound(min(cpus, online), _ceil(loky)),
        "rust": _bound(cpus, None if quota is None else round_quota(quota, "floor")),
        "nproc": _bound(cpus, None if v2_quota is None else round_quota(v2_quota, "nearest")),
        **_readings.readings(cpus, physical_in_affinity=physical_in_affinity or cpus,
                             machine_physical=physical or online, online=online,
                             outer_v2_quota=outer_v2_quota,
                             duckdb_quota=leaf_quota if leaf_quota is not None else loky,
                             environ=environ or {}),
    }
