"""The thread variables: one :class:`Var` per environment variable that steers some runtime's
threads, its syntax and what it controls, in the order of the report's variable list.

Who reads a variable is not written here: :attr:`Var.readers` asks the registry's records
(:mod:`parinfo.process.library_entries`). Other modules ask :mod:`parinfo.process.libraries`.
"""
from __future__ import annotations

import functools

from parinfo.machine.rounding import ROUNDING_VAR, ROUNDINGS
from parinfo.process.library_entries import RECORDS
from parinfo.process.library_parts import LibraryKind
from parinfo.records.record import record


@record(frozen=True)
class Var:
    """One thread-steering environment variable: its syntax and what it controls.

    ``kind`` is count | count_list | bool | enum | text | blocktime | cpu_count; ``choices`` the
    words of an enum; ``enum_list`` an enum that takes a comma-separated list (OMP_PROC_BIND);
    ``python`` the first Python version that reads it, when Python itself is the reader;
    ``set_on_import`` the (module, package) pairs whose import sets it (``os.environ.setdefault``);
    ``listed_unset`` False for one the report lists only when it is set (a mark, not a setting);
    ``generic`` True for a name other programs use too (NPROC): listed, and judged, only while a
    library that reads it is loaded.
    Who reads a variable is not written here: :attr:`readers` asks the library records.
    """

    name: str
    kind: str
    summary: str
    choices: tuple[str, ...] = ()
    enum_list: bool = False
    python: tuple[int, int] | None = None
    set_on_import: tuple[tuple[str, str], ...] = ()
    listed_unset: bool = True
    generic: bool = False

    @property
    def readers(self) -> tuple[str, ...]:
        """The libraries that read it: those whose own variable it is (by name prefix), then the
        frameworks, then the libraries that fall back to it; each group in registry order."""
        return _readers().get(self.name, ())


_OMP_BIND = ("true", "false", "master", "primary", "close", "spread")

# The order here is the order of the report's variable list.
VARIABLES: tuple[Var, ...] = (
    Var("OMP_NUM_THREADS", "count_list", "OpenMP team size; fallback for MKL, OpenBLAS, BLIS, numexpr and torch"),
    Var("MKL_NUM_THREADS", "count", "MKL thread count; torch's first choice"),
    Var("OPENBLAS_NUM_THREADS", "count", "OpenBLAS thread count"),
    Var("GOTO_NUM_THREADS", "count", "OpenBLAS thread count (legacy name)"),
    Var("OPENBLAS_CORETYPE", "text", "OpenBLAS kernels: a CPU name (Haswell, SkylakeX...) that replaces its "
        "CPU detection"),
    Var("BLIS_NUM_THREADS", "count", "BLIS thread count"),
    Var("VECLIB_MAXIMUM_THREADS", "count", "Apple Accelerate thread cap"),
    Var("NUMEXPR_NUM_THREADS", "count", "numexpr thread count"),
    Var("NUMEXPR_MAX_THREADS", "count", "numexpr pool size cap"),
    Var("OMP_DYNAMIC", "bool", "let OpenMP shrink teams at run time"),
    Var("MKL_DYNAMIC", "bool", "let MKL use fewer threads than asked (caps at physical cores)"),
    Var("OMP_PROC_BIND", "enum", "OpenMP thread binding policy", _OMP_BIND, enum_list=True),
    Var("OMP_PLACES", "text", "OpenMP places (threads, cores, sockets, or an explicit list)"),
    Var("OMP_WAIT_POLICY", "enum", "OpenMP idle threads spin (active) or sleep (passive)", ("active", "passive")),
    Var("KMP_AFFINITY", "text", "Intel/LLVM OpenMP affinity"),
    Var("KMP_BLOCKTIME", "blocktime", "ms an Intel/LLVM OpenMP thread spins before sleeping"),
    Var("GOMP_SPINCOUNT", "spincount", "how long a GNU OpenMP thread spins before sleeping (0: sleeps at once)"),
    Var("OPENBLAS_THREAD_TIMEOUT", "count", "an idle OpenBLAS thread (pthreads build) spins 2^N cycles before "
        "sleeping (4 to 30, default 28)"),
    Var("GOMP_CPU_AFFINITY", "text", "GNU OpenMP CPU binding list"),
    Var("KMP_DUPLICATE_LIB_OK", "bool", "allow two OpenMP runtimes in one process (hides a real conflict)",
        set_on_import=(("sklearn", "scikit-learn"), ("threadpoolctl", "threadpoolctl"))),
    Var("MKL_THREADING_LAYER", "enum", "MKL threading layer for mkl_rt", ("intel", "sequential", "gnu", "tbb", "pgi")),
    Var("TORCHINDUCTOR_COMPILE_THREADS", "count", "torch.compile's compile workers (read when torch._inductor "
        "is imported)"),
    Var("NUMBA_NUM_THREADS", "count", "numba's parallel thread count (threads launched; read at import)"),
    Var("NUMBA_THREADING_LAYER", "enum", "numba's threading layer (or a safety class that picks one)",
        ("default", "safe", "threadsafe", "forksafe", "tbb", "omp", "workqueue")),
    Var("ORT_INTRA_OP_NUM_THREADS", "count", "ONNX Runtime intra-op pool of each new session (read when it is made)"),
    Var("ORT_INTER_OP_NUM_THREADS", "count", "ONNX Runtime inter-op pool of each new ORT_PARALLEL session"),
    Var("RAYON_NUM_THREADS", "count", "rayon's global pool (tokenizers), read when the pool starts"),
    Var("RAYON_RS_NUM_CPUS", "count", "rayon's global pool (legacy name; RAYON_NUM_THREADS wins)"),
    Var("TOKENIZERS_PARALLELISM", "text", "tokenizers: false (0, off, no, f, n, or empty) runs batches in "
        "the calling thread; read at each call"),
    Var("OPENCV_FOR_THREADS_NUM", "count", "OpenCV's own pool (read at its first getNumThreads or parallel call)"),
    Var("OMP_THREAD_LIMIT", "count", "OpenMP thread limit: caps every team of an OpenMP runtime, and Arrow's CPU "
        "pool, its default included", listed_unset=False),
    Var("ARROW_IO_THREADS", "count", "Arrow's IO pool size (read at pyarrow.io_thread_count()'s first call)"),
    Var("POLARS_MAX_THREADS", "count", "Polars' thread pool size (read when the pool starts, fixed after)"),
    Var("TF_NUM_INTRAOP_THREADS", "count", "TensorFlow's intra-op pool (read when the first op starts its context)"),
    Var("TF_NUM_INTEROP_THREADS", "count", "TensorFlow's inter-op pool (read when the first op starts its context)"),
    Var("NPROC", "count", "XLA's Eigen pool in JAX's CPU backend (read when it starts; a generic name other tools "
        "may read too)", listed_unset=False, generic=True),
    Var("JAX_NUM_CPU_DEVICES", "count", "JAX's CPU devices (read at import; its Eigen pool is never smaller)"),
    Var("XLA_FLAGS", "text", "XLA's flags: --xla_force_host_platform_device_count sets JAX's CPU devices"),
    Var("PYTHON_CPU_COUNT", "cpu_count", "overrides os.cpu_count() (Python 3.13+)", python=(3, 13)),
    Var("PYTHON_GIL", "enum", "free-threaded CPython: 0 keeps the GIL off, 1 turns it on (3.13+)", ("0", "1"),
        python=(3, 13)),
    Var("PARINFO_NUM_THREADS", "count", "parinfo intra-op count"),
    Var("PARINFO_NUM_INTEROP_THREADS", "count", "parinfo inter-op count"),
    Var("PARINFO_BACKEND", "enum", "parinfo runtime backend", ("native", "sequential")),
    Var("PARINFO_VERIFY", "enum", "what a program launched by `parinfo apply` checks at exit", ("auto", "full", "off")),
    Var("PARINFO_ADAPTIVE", "bool", "parinfo runtime's per-call-site choices (0 turns them off)"),
    Var("PARINFO_FOLLOW_QUOTA", "bool", "parinfo runtime's defaults follow a changing CPU quota (0 turns it off)"),
    Var(ROUNDING_VAR, "enum", "how parinfo rounds a fractional CPU quota to usable CPUs", ROUNDINGS),
    Var("PARINFO_PRELOAD", "text", "the LD_PRELOAD entries `parinfo apply` put first (a profile's allocator and "
        "OpenMP runtime)"),
    Var("PARINFO_PROFILE", "text", "the profile `parinfo apply` launched the program with (names the source "
        "of the counts it set)", listed_unset=False),
    Var("PARINFO_INSTANCE", "text", "this instance's index among those `parinfo apply --instances` started",
        listed_unset=False),
    Var("PARINFO_INSTANCES", "count", "how many instances `parinfo apply --instances` started", listed_unset=False),
)


@functools.cache
def _readers() -> dict[str, tuple[str, ...]]:
    """Variable -> the records that read it: its own library first, then frameworks, then others."""
    found: dict[str, list[tuple[int, int, str]]] = {}
    for i, rec in enumerate(RECORDS):
        for var in rec.variables:
            group = 0 if var.startswith(rec.env_prefixes or ("\0",)) else 1 if rec.kind is LibraryKind.FRAMEWORK else 2
            found.setdefault(var, []).append((group, i, rec.name))
    return {v: tuple(n for _, _, n in sorted(rows)) for v, rows in found.items()}


#: Every thread variable parinfo knows, by name, in report order.
THREAD_VARS: dict[str, Var] = {v.name: v for v in VARIABLES}
