"""What Node, CPython, torch, ONNX Runtime and DuckDB take as their default count on this machine.

The rows of :data:`parinfo.machine.rounding.RUNTIMES` beside the quota-rounding ones: each reads
the machine its own way (some the quota, some only the affinity mask, some the whole machine), so
each is a rule of its own, read from the runtime's source and checked against the runtime in real
cgroups (tests/test_runtime_readings.py). Each rule takes plain numbers, not the machine's facts,
so the library records (:mod:`parinfo.process.library_frames`, ``library_inference``) give the
same count for the same runtime. Every rule is the runtime's default: the variables and flags
named in its docstring override it and are not read here.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

#: The first libuv that reads a quota (1.49) and the first that reads it as the ``node`` row says (1.51).
LIBUV_QUOTA_FROM, LIBUV_FLOOR_FROM = (1, 49), (1, 51)
#: Slurm's count of this job's CPUs on the node, which DuckDB takes before any quota.
SLURM_CPUS_VAR = "SLURM_CPUS_ON_NODE"


def _bound(cpus: int, limit: int | None) -> int:
    return max(1, cpus if limit is None else min(cpus, limit))


def node(cpus: int, outer_v2_quota: float | None) -> int:
    """Node's ``os.availableParallelism()`` with libuv 1.51+ (libuv#4746, the fix of libuv#4740; a
    ``node`` whose ``process.versions.uv`` says 1.51 or later): ``uv_available_parallelism`` in
    src/unix/linux.c is min(affinity CPUs, max(1, floor(quota))). The quota is cgroup v2's only:
    libuv walks from /sys/fs/cgroup/<the path in /proc/self/cgroup> up to /sys/fs/cgroup and keeps
    the quota of the last level with one, the outermost (its minimum is computed and not used), so
    ``outer_v2_quota`` is that one. Under v1 its ``uv__get_cgroupv1_constrained_cpu`` builds
    /sys/fs/cgroup/<the text after ":cpu,">/cpu.cfs_quota_us, a path no v1 layout has: no quota.
    libuv 1.49-1.50 (Node 22.12, for one) read v2 otherwise (libuv#4740, nodejs/node#58428: 1 on
    a 4-CPU pod with no CPU request); parinfo has no row for them. ``UV_THREADPOOL_SIZE`` sizes
    libuv's pool and is not read by ``availableParallelism()``; nothing overrides it. Which libuv a
    ``node`` has shows only by running it (``node -p process.versions.uv``)."""
    return _bound(cpus, None if outer_v2_quota is None else max(1, math.floor(outer_v2_quota)))


def node20(cpus: int) -> int:
    """Node 20's (and 18's) ``os.availableParallelism()``: libuv before 1.49 (Node 20 bundles 1.46)
    counts the affinity mask (``sched_getaffinity``, else ``sysconf(_SC_NPROCESSORS_ONLN)``) and
    reads no quota: 2 on 2 CPUs under a 0.5- or a 1.5-CPU quota (nodejs/node#59200)."""
    return max(1, cpus)


def node_row(libuv: tuple[int, int]) -> str | None:
    """The row that says what a ``node`` with libuv version ``libuv`` (major, minor) answers:
    ``node20`` before 1.49, ``node`` from 1.51, None between (no row)."""
    if libuv < LIBUV_QUOTA_FROM:
        return "node20"
    return "node" if libuv >= LIBUV_FLOOR_FROM else None


def python(cpus: int) -> int:
    """CPython 3.13+ ``os.process_cpu_count()`` (Modules/posixmodule.c, Lib/os.py): the CPUs in
    the affinity mask (``sched_getaffinity``), else ``os.cpu_count()``; no quota is read
    (cpython#149452 asks for one and is open). ``-X cpu_count=N`` and ``PYTHON_CPU_COUNT=N`` (3.13+)
    override it and ``os.cpu_count()`` alike; ``default`` for either keeps the count."""
    return max(1, cpus)


def torch(physical_in_affinity: int) -> int:
    """torch's intra-op default, ``at::get_num_threads()`` before any ``torch.set_num_threads``: in
    the x86 wheels (OpenMP backend with MKL, aten/src/ATen/ParallelOpenMP.cpp ``init_num_threads``)
    it is ``mkl_get_max_threads()``, MKL's physical cores in the affinity mask; a build without MKL
    takes ``intraop_default_num_threads()`` (aten/src/ATen/ParallelCommon.cpp: OMP_NUM_THREADS,
    then MKL_NUM_THREADS, else c10's ``TaskThreadPoolBase::defaultNumThreads``, cpuinfo's physical
    cores). No quota is read. OMP_NUM_THREADS, MKL_NUM_THREADS and ``torch.set_num_threads``
    override it. The build (MKL or not, OpenMP or the native pool) shows only in the loaded torch
    (``torch.__config__.parallel_info()``): parinfo gives the MKL wheels' rule."""
    return max(1, physical_in_affinity)


def onnxruntime(machine_physical: int) -> int:
    """ONNX Runtime's intra-op default, a new session's pool with ``intra_op_num_threads`` 0: the
    machine's physical cores (core/util/thread_utils.cc, one thread per core of
    core/platform/posix/env.cc ``GetNumPhysicalCpuCores``: cpuinfo's count of every core), the
    affinity mask and every cgroup quota ignored (measured on onnxruntime 1.32, in real cgroups and
    under taskset). Where cpuinfo fails it takes half of ``hardware_concurrency()``: a case parinfo
    does not see. ``SessionOptions.intra_op_num_threads`` and, from 1.29, ORT_INTRA_OP_NUM_THREADS
    override it."""
    return max(1, machine_physical)


def duckdb(online: int, quota: float | None, slurm_cpus: int | None = None) -> int:
    """DuckDB's default ``threads`` (``DBConfig::GetSystemMaxThreads``, src/main/config.cpp, and
    ``CGroups::GetCPULimit``, src/common/cgroups.cpp): SLURM_CPUS_ON_NODE when it is a number;
    else ceil(quota), where the quota is that of the cgroup /proc/self/cgroup names (the v1 cpu
    controller's first, then v2's), else of the hierarchy's root (/sys/fs/cgroup/cpu/ or
    /sys/fs/cgroup/): not the ancestors between, so a pod-level limit is missed; else
    ``std::thread::hardware_concurrency()``, the online CPUs (the affinity mask ignored). The quota
    is not capped at the CPUs: a 3-CPU quota on 2 CPUs gives 3 (measured, duckdb 2.0). ``SET
    threads``, ``duckdb.connect(config={'threads': n})`` override it; it reads no variable of its
    own. Older DuckDB releases read the root's files only (loky's paths)."""
    if slurm_cpus is not None:
        return max(1, slurm_cpus)
    return max(1, online if quota is None else math.ceil(quota))


def slurm_cpus(environ: Mapping[str, str]) -> int | None:
    """SLURM_CPUS_ON_NODE as DuckDB's cast takes it: digits, blanks around and a leading + allowed
    (0 gives 1 thread); else None, and it is ignored ("-3", "5x": measured, duckdb 2.0)."""
    value = environ.get(SLURM_CPUS_VAR, "").strip()
    value = value[1:] if value.startswith("+") else value
    return int(value) if value.isascii() and value.isdigit() else None


def readings(cpus: int, *, physical_in_affinity: int, machine_physical: int, online: int,
             outer_v2_quota: float | None, duckdb_quota: float | None,
             environ: Mapping[str, str]) -> dict[str, int]:
    """Every rule of this module, keyed as :data:`parinfo.machine.rounding.RUNTIMES` names them."""
    return {
        "node": node(cpus, outer_v2_quota),
        "node20": node20(cpus),
        "python": python(cpus),
        "torch": torch(physical_in_affinity),
        "onnxruntime": onnxruntime(machine_physical),
        "duckdb": duckdb(online, duckdb_quota, slurm_cpus(environ)),
    }
