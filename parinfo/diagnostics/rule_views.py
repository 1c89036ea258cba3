"""What the rules ask of a report, over its sections: the counts in force, the OpenMP runtimes and
BLAS pools loaded, the variables set, and how a finding shows a variable's value.
"""
from __future__ import annotations

from parinfo.diagnostics.model import Report
from parinfo.process import libraries as reg
from parinfo.process.pools import PoolRow
from parinfo.process.serving import bypassed_by_parinfo


def counts_in_force(r: Report) -> list[tuple[str, int]]:
    """Every thread count in force: (who, count), for pools that can be busy at once (not an I/O
    pool, whose threads wait on I/O)."""
    io_pools = reg.io_rows()
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
