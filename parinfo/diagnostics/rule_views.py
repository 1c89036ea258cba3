"""What the rules ask of a report, over its sections: the counts in force, the OpenMP runtimes and
BLAS pools loaded, the variables set, and how a finding shows a variable's value.
"""
from __future__ import annotations

from typing import NamedTuple

from parinfo.diagnostics.model import Report
from parinfo.process import libraries as reg
from parinfo.process.library_base import INTER_OP, Library
from parinfo.process.pools import PoolRow
from parinfo.process.serving import bypassed_by_parinfo
from parinfo.process.setting_row import SettingRow

#: The threading layers of a BLAS copy whose teams are an OpenMP runtime's threads (threadpoolctl's
#: words: OpenBLAS and BLIS "openmp", MKL "intel" and "gnu").
OPENMP_LAYERS = frozenset({"openmp", "intel", "gnu"})


def counts_in_force(r: Report) -> list[tuple[str, int]]:
    """Every thread count in force: (who, count), for pools that can be busy at once (not an I/O
    pool, whose threads wait on I/O, nor compile workers: :meth:`Registry.apart_rows`)."""
    io_pools = reg.apart_rows()
    return [(row.library, row.count) for row in r.settings if row.count is not None and row.library not in io_pools]

def openmp_libs(r: Report) -> set[str]:
    return {p.library for p in r.pools if p.user_api == "openmp"}

def bypassed_files(r: Report) -> set[str]:
    """Files of OpenMP runtimes loaded but never called: a profile had parinfo preload another
    runtime, to which every omp_* and GOMP_* entry point resolves (torch's libgomp under Intel's)."""
    return set(bypassed_by_parinfo(r.backend.openmp))

def called_pools(r: Report) -> list[PoolRow]:
    bypassed = bypassed_files(r)
    return [p for p in r.pools if not (p.filepath and p.filepath in bypassed)]

def row_family(row: SettingRow) -> tuple[Library, str | None] | None:
    """The family of a settings row and its pool (None: the main one): "pyarrow" is Arrow's main
    pool, "pyarrow io" its pool "io", "torch intra-op" torch's main pool, "torch inter-op" its pool
    "inter-op"; None for a row of no family parinfo knows."""
    lib = reg.find(row.library)
    if lib is not None:
        return lib, None
    name, _, pool = row.library.rpartition(" ")
    lib = reg.find(name)
    if lib is None:
        return None
    if any(p.name == pool for p in lib.pools):
        return lib, pool
    return (lib, None) if pool == "intra-op" else None


class AtOnce(NamedTuple):
    """A CPU pool that may run at the same time as the others: how a finding names it, its count
    (``threads``), its family and pool (None: unknown, or its main pool), and whether the count is
    predicted, not read (Polars' pool before its first query, DuckDB's for a new connection)."""

    who: str
    threads: int
    family: Library | None
    pool: str | None
    predicted: bool = False


def pools_at_once(r: Report) -> list[AtOnce]:
    """Every CPU pool of the process that may run while the others run: a pool whose count is in
    force for a loaded library, whether its threads have started or start at its first use (a
    program that imports a library uses it, and nothing tells when). That is:

    - each native copy that is called (:func:`called_pools`): a loaded copy's pool is in force and
      its threads start at its first call; but not a BLAS copy whose threading layer is an OpenMP
      runtime's while one is loaded: its teams are that runtime's threads, summed with its row;
    - each Python-module library imported (a settings row of a family that is not native): its
      count in force (read through its getter, or what a pool made now gets: an ONNX Runtime
      session, tokenizers' pool), else, where none can be read, the count the environment predicts
      (``expected_from_env``, marked: Polars' pool before its first query, DuckDB's for a new
      connection).

    Left out, each for a reason: an I/O pool (Arrow's: its threads wait on I/O); a library whose
    count is another's (``follows``: XGBoost's and LightGBM's teams are the threads of the OpenMP
    runtime they link, whose pool row is summed); an inter-op pool (torch's inter-op x intra-op is
    ``oversubscribed-interop``'s; ONNX Runtime's exists only in a session made in ORT_PARALLEL mode,
    which parinfo cannot see, and default sessions are sequential); a framework's count where a copy
    it ships is sized along with it (``set_along``: torch's OpenMP runtime or MKL, whose pool row is
    summed, holds its intra-op threads); parinfo's own pools (its inter-op tasks share one intra-op
    pool, under the native budget)."""
    called = called_pools(r)
    has_openmp = any(p.user_api == "openmp" for p in called)
    out = [AtOnce(p.library + (f" [{p.owner}]" if p.owner else ""), p.num_threads, reg.find(p.library), None)
           for p in called if p.num_threads is not None
           and not (has_openmp and p.user_api == "blas" and p.threading_layer in OPENMP_LAYERS)]
    sized_by = {p.owner for p in called if _set_along(p) == p.owner}  # frameworks whose pool is a copy's
    io_pools = reg.apart_rows()
    for row in r.settings:
        found = row_family(row)
        if row.own or found is None or row.library in io_pools:
            continue
        lib, pool = found
        if lib.kind not in (reg.LibraryKind.PYTHON, reg.LibraryKind.FRAMEWORK) or lib.follows is not None:
            continue
        if pool == INTER_OP or lib.name in sized_by:
            continue
        count = row.count if row.count is not None else row.expected_from_env
        if count is not None:
            out.append(AtOnce(row.library, count, lib, pool, row.count is None))
    return out


def _set_along(pool: PoolRow) -> str | None:
    """The framework that sizes this copy's pool along with its own count, or None."""
    lib = reg.find(pool.library)
    return None if lib is None or lib.set_along is None else lib.set_along.framework


def blas_pools(r: Report) -> list[PoolRow]:
    return [p for p in r.pools if p.user_api == "blas"]

def inter_intra_pairs(r: Report) -> list[tuple[str, int, int]]:
    """(who, inter-op, intra-op) for frameworks whose inter-op tasks each open their own intra-op team.

    parinfo's own runtime is not among them: its inter-op tasks share the one intra-op pool and the
    native budget caps their native threads, so its defaults cannot oversubscribe this way.
    """
    pairs = []
    torch = r.frameworks.torch
    if torch is not None and torch.inter_op is not None and torch.intra_op is not None:
        pairs.append(("torch", torch.inter_op, torch.intra_op))
    return pairs

def env_values(r: Report) -> dict[str, str]:
    return {e.name: e.value for e in r.environment if e.value is not None}

def env_shown(value: str | None) -> str:
    """A variable's value for a finding: quoted, or "not set" (never None)."""
    return "not set" if value is None else repr(value)
