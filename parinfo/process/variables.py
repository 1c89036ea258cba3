"""The environment variables that steer thread counts: who reads each, and what a valid value is.

This is the one table of such variables in parinfo; the inspector, the runtime and the profile
validator all read it.
"""
from __future__ import annotations

import re
from typing import NamedTuple

OPENMP = ("libgomp", "libiomp", "libomp")


class VarSpec(NamedTuple):
    """One thread-steering variable (a NamedTuple: cheaper to build at import than a dataclass)."""

    name: str
    kind: str  # count | count_list | bool | enum | text | blocktime | cpu_count
    readers: tuple[str, ...]
    summary: str
    choices: tuple[str, ...] = ()


_BOOL = ("true", "false", "1", "0", "yes", "no", "on", "off")

THREAD_VARS: dict[str, VarSpec] = {
    v.name: v
    for v in (
        VarSpec("OMP_NUM_THREADS", "count_list", (*OPENMP, "torch", "mkl", "openblas", "blis", "numexpr"),
                "OpenMP team size; fallback for MKL, OpenBLAS, BLIS, numexpr and torch"),
        VarSpec("MKL_NUM_THREADS", "count", ("mkl", "torch"), "MKL thread count; torch's first choice"),
        VarSpec("OPENBLAS_NUM_THREADS", "count", ("openblas",), "OpenBLAS thread count"),
        VarSpec("GOTO_NUM_THREADS", "count", ("openblas",), "OpenBLAS thread count (legacy name)"),
        VarSpec("BLIS_NUM_THREADS", "count", ("blis",), "BLIS thread count"),
        VarSpec("VECLIB_MAXIMUM_THREADS", "count", ("accelerate",), "Apple Accelerate thread cap"),
        VarSpec("NUMEXPR_NUM_THREADS", "count", ("numexpr",), "numexpr thread count"),
        VarSpec("NUMEXPR_MAX_THREADS", "count", ("numexpr",), "numexpr pool size cap"),
        VarSpec("OMP_DYNAMIC", "bool", OPENMP, "let OpenMP shrink teams at run time"),
        VarSpec("MKL_DYNAMIC", "bool", ("mkl",), "let MKL use fewer threads than asked (caps at physical cores)"),
        VarSpec("OMP_PROC_BIND", "enum", OPENMP, "OpenMP thread binding policy",
                ("true", "false", "master", "primary", "close", "spread")),
        VarSpec("OMP_PLACES", "text", OPENMP, "OpenMP places (threads, cores, sockets, or an explicit list)"),
        VarSpec("OMP_WAIT_POLICY", "enum", OPENMP, "OpenMP idle threads spin (active) or sleep (passive)",
                ("active", "passive")),
        VarSpec("KMP_AFFINITY", "text", ("libiomp", "libomp"), "Intel/LLVM OpenMP affinity"),
        VarSpec("KMP_BLOCKTIME", "blocktime", ("libiomp", "libomp"), "ms an Intel/LLVM OpenMP thread spins before sleeping"),
        VarSpec("GOMP_CPU_AFFINITY", "text", ("libgomp",), "GNU OpenMP CPU binding list"),
        VarSpec("KMP_DUPLICATE_LIB_OK", "bool", ("libiomp", "libomp"),
                "allow two OpenMP runtimes in one process (hides a real conflict)"),
        VarSpec("MKL_THREADING_LAYER", "enum", ("mkl",), "MKL threading layer for mkl_rt",
                ("intel", "sequential", "gnu", "tbb", "pgi")),
        VarSpec("PYTHON_CPU_COUNT", "cpu_count", ("python",), "overrides os.cpu_count() (Python 3.13+)"),
        VarSpec("PARINFO_NUM_THREADS", "count", ("parinfo",), "parinfo intra-op count"),
        VarSpec("PARINFO_NUM_INTEROP_THREADS", "count", ("parinfo",), "parinfo inter-op count"),
        VarSpec("PARINFO_BACKEND", "enum", ("parinfo",), "parinfo runtime backend", ("native", "sequential")),
        VarSpec("PARINFO_VERIFY", "enum", ("parinfo",),
                "what a program launched by `parinfo apply` checks at exit", ("auto", "full", "off")),
    )
}

#: The variables that carry each library's thread count (torch has none of its own).
LIBRARY_VARS: dict[str, tuple[str, ...]] = {
    "openmp": ("OMP_NUM_THREADS",),
    "mkl": ("MKL_NUM_THREADS",),
    "blas": ("OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS"),
    "numexpr": ("NUMEXPR_NUM_THREADS",),
    "torch": (),
}

_INT = re.compile(r"^\s*\+?(\d+)\s*$")
_BLOCKTIME = re.compile(r"^\s*(\d+)\s*(ms|us|s)?\s*$", re.IGNORECASE)


def parse_count(value: str, *, allow_list: bool = False) -> int:
    """Parse a thread-count value; with ``allow_list`` an OpenMP list like "4,2" gives its first element.

    Raises ValueError saying what is wrong.
    """
    text = value
    if allow_list and "," in value:
        parts = value.split(",")
        for p in parts[1:]:
            if not _INT.match(p) or int(p) < 1:
                raise ValueError(f"{value!r} is not a list of positive integers")
        text = parts[0]
    m = _INT.match(text)
    if not m:
        raise ValueError(f"{value!r} is not a positive integer")
    n = int(m.group(1))
    if n < 1:
        raise ValueError(f"{value!r} is not a positive integer")
    return n


def validate(name: str, value: str) -> str | None:
    """Return why ``value`` is invalid for variable ``name``, or None when it is valid (or unchecked)."""
    spec = THREAD_VARS.get(name)
    if spec is None:
        return None
    kind = spec.kind
    try:
        if kind in ("count", "count_list"):
            parse_count(value, allow_list=kind == "count_list")
        elif kind == "bool":
            if value.strip().lower() not in _BOOL:
                return f"{value!r} is not a boolean (use TRUE or FALSE)"
        elif kind == "enum":
            items = [v.strip().lower() for v in value.split(",")] if name == "OMP_PROC_BIND" else [value.strip().lower()]
            bad = [v for v in items if v not in spec.choices]
            if bad or not items:
                return f"{value!r} is not one of {', '.join(spec.choices)}"
        elif kind == "blocktime":
            if value.strip().lower() != "infinite" and not _BLOCKTIME.match(value):
                return f"{value!r} is not a time (an integer of ms, or 'infinite')"
        elif kind == "cpu_count":
            if value.strip().lower() != "default":
                parse_count(value)
        elif kind == "text":
            if not value.strip():
                return "empty value"
    except ValueError as exc:
        return str(exc)
    return None


def count_from_env(name: str, environ: dict[str, str]) -> int | None:
    """The count a variable asks for, or None when it is unset or invalid (libraries then ignore it)."""
    value = environ.get(name)
    if value is None:
        return None
    spec = THREAD_VARS.get(name)
    try:
        return parse_count(value, allow_list=spec is not None and spec.kind == "count_list")
    except ValueError:
        return None


# Prefixes of variables that steer some runtime's threads; a set variable with one of these
# prefixes is reported even when it is not in THREAD_VARS.
THREAD_PREFIXES = ("OMP_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "GOTO_", "BLIS_", "NUMEXPR_",
                   "VECLIB_", "TBB_", "PARINFO_")


def looks_thread_related(name: str) -> bool:
    """True when ``name`` is in THREAD_VARS or starts with a prefix in THREAD_PREFIXES."""
    return name in THREAD_VARS or name.startswith(THREAD_PREFIXES)


def is_false(value: str | None) -> bool:
    """True when a boolean variable's value means off (FALSE, 0, no, off)."""
    return value is not None and value.strip().lower() in ("false", "0", "no", "off")
