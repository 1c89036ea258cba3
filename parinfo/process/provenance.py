"""Where each library's thread count came from: which variable, which default, or a call at run time.

Each library has its own rule (measured, see docs/process.md), so each is modelled on its own:

- OpenBLAS: OPENBLAS_NUM_THREADS > GOTO_NUM_THREADS > OMP_NUM_THREADS > CPUs in affinity; a
  variable's request is capped at the CPUs in affinity.
- OpenMP runtimes (libgomp, libiomp, libomp): OMP_NUM_THREADS (first element of a list) > CPUs in
  affinity; no cap (libgomp takes 8 on 2 CPUs).
- MKL: MKL_NUM_THREADS > OMP_NUM_THREADS > physical cores in affinity; requests capped at the
  physical cores unless MKL_DYNAMIC=FALSE.
- torch intra-op: like MKL when torch has MKL (MKL_NUM_THREADS > OMP_NUM_THREADS > physical cores in
  affinity, same cap); OMP_NUM_THREADS > physical cores otherwise.
- torch inter-op: no variable; std::thread::hardware_concurrency() (ignores affinity and quota).
- BLIS: BLIS_NUM_THREADS > OMP_NUM_THREADS > 1.
- numexpr: NUMEXPR_NUM_THREADS > OMP_NUM_THREADS > min(cores, NUMEXPR_MAX_THREADS, 16).

Libraries read their variables when they load, so the launch environment predicts them; when the
count in force matches the environment of now instead, the variable was set after launch but before
the library loaded. A count that no prediction explains was set at run time by an API call.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping
from typing import NamedTuple

from parinfo.process.variables import count_from_env, is_false

RUNTIME = "set at run time (API call)"


class _Prediction(NamedTuple):
    count: int | None
    kind: str  # env | default | unknown
    variable: str | None
    phrase: str


def _affinity_cpus(facts) -> tuple[int, str]:
    n = len(facts.affinity) or facts.logical_cpus or 1
    return n, f"{n} CPU{'s' if n != 1 else ''} in affinity"


def _physical_in_affinity(facts) -> tuple[int, str]:
    aff = set(facts.affinity)
    if facts.core_siblings:
        n = max(1, sum(1 for core in facts.core_siblings if aff & set(core)))
    elif facts.physical_cores and facts.logical_cpus:
        per_core = max(1, facts.logical_cpus // facts.physical_cores)
        n = max(1, min(facts.physical_cores, math.ceil(len(aff) / per_core)))
    else:
        n, _ = _affinity_cpus(facts)
        return n, f"{n} CPUs in affinity (physical cores unknown)"
    return n, f"{n} physical core{'s' if n != 1 else ''} in affinity"


def _physical_cap(facts) -> tuple[int | None, str]:
    n = facts.physical_cores
    return n, f"{n} physical core{'s' if n != 1 else ''} (MKL_DYNAMIC is not FALSE)"


class Model(NamedTuple):
    """How one library decides its count: variables read in order, the default, and a cap on requests."""

    precedence: tuple[str, ...]
    default: Callable[[object, dict], tuple[int | None, str]]
    cap: Callable[[object, Mapping[str, str]], tuple[int | None, str]] | None = None


def _mkl_cap(facts, env: Mapping[str, str]) -> tuple[int | None, str]:
    if is_false(env.get("MKL_DYNAMIC")):
        return None, ""
    return _physical_cap(facts)


def _numexpr_default(facts, ctx: dict) -> tuple[int | None, str]:
    ncores = ctx.get("numexpr_ncores") or facts.logical_cpus or 1
    limit = ctx.get("numexpr_max_threads") or ncores
    n = min(ncores, limit)
    phrase = f"{n} (cores detected by numexpr: {ncores}, NUMEXPR_MAX_THREADS limit: {limit})"
    if ctx.get("numexpr_safe_limit") and n > 16:
        n, phrase = 16, f"16 (numexpr's safe limit; {ncores} cores detected)"
    return n, phrase


MODELS: dict[str, Model] = {
    "openblas": Model(("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"),
                      lambda f, c: _affinity_cpus(f), lambda f, e: _affinity_cpus(f)),
    "libgomp": Model(("OMP_NUM_THREADS",), lambda f, c: _affinity_cpus(f)),
    "libiomp": Model(("OMP_NUM_THREADS",), lambda f, c: _affinity_cpus(f)),
    "libomp": Model(("OMP_NUM_THREADS",), lambda f, c: _affinity_cpus(f)),
    "mkl": Model(("MKL_NUM_THREADS", "OMP_NUM_THREADS"), lambda f, c: _physical_in_affinity(f), _mkl_cap),
    "blis": Model(("BLIS_NUM_THREADS", "OMP_NUM_THREADS"),
                  lambda f, c: (1, "1 (BLIS runs single-threaded unless asked)")),
    "flexiblas": Model((), lambda f, c: (None, "decided by FlexiBLAS's backend")),
    "tbb": Model((), lambda f, c: (_affinity_cpus(f)[0], _affinity_cpus(f)[1] + " (TBB reads no count variable)")),
    "torch intra-op": Model(("MKL_NUM_THREADS", "OMP_NUM_THREADS"),
                            lambda f, c: _physical_in_affinity(f), _mkl_cap),
    "torch intra-op (no MKL)": Model(("OMP_NUM_THREADS",), lambda f, c: _physical_in_affinity(f)),
    "torch inter-op": Model((), lambda f, c: (
        c.get("hardware_concurrency") or f.logical_cpus,
        f"{c.get('hardware_concurrency') or f.logical_cpus} logical CPUs "
        "(std::thread::hardware_concurrency; ignores affinity and quota)")),
    "numexpr": Model(("NUMEXPR_NUM_THREADS", "OMP_NUM_THREADS"), _numexpr_default),
}


def predict(model: Model, env: Mapping[str, str], facts, ctx: dict | None = None) -> _Prediction:
    """The count ``model`` takes from environment ``env`` on a machine with ``facts``.

    Invalid values are skipped, as the libraries skip them.
    """
    ctx = ctx or {}
    for var in model.precedence:
        n = count_from_env(var, env)  # type: ignore[arg-type]
        if n is None:
            continue
        phrase = f"env {var}={env[var]}"
        if model.cap is not None:
            cap, why = model.cap(facts, env)
            if cap is not None and n > cap:
                n, phrase = cap, f"{phrase}, capped at {why}"
        return _Prediction(n, "env", var, phrase)
    n, why = model.default(facts, ctx)
    if n is None:
        return _Prediction(None, "unknown", None, f"unknown ({why})")
    return _Prediction(n, "default", None, f"default: {why}")


def _changes(model: Model, env: Mapping[str, str], launch: Mapping[str, str]) -> list[str]:
    out = []
    for var in model.precedence + (("MKL_DYNAMIC",) if model.cap is _mkl_cap else ()):
        if env.get(var) != launch.get(var):
            out.append(f"{var}={launch.get(var, '(unset)')} at launch, now {env.get(var, '(unset)')}")
    return out


def explain(library: str, count: int | None, model: Model, environ: Mapping[str, str],
            launch_environ: Mapping[str, str] | str, facts, ctx: dict | None = None,
            runtime_phrase: str = RUNTIME, extra_match: tuple[int | None, str, str] | None = None) -> dict:
    """One provenance row: ``count`` in force for ``library`` and the source that decided it.

    ``extra_match`` is (count, kind, phrase): another explanation tried before run time (e.g. torch
    setting its own OpenMP runtime's count).
    """
    launch_known = not isinstance(launch_environ, str)
    launch_pred = predict(model, launch_environ if launch_known else environ, facts, ctx)
    now_pred = predict(model, environ, facts, ctx)
    changes = _changes(model, environ, launch_environ) if launch_known else []
    notes = []
    if not launch_known:
        notes.append(f"launch environment {launch_environ}; predicted from the environment now")
    expected = launch_pred.count
    if count is None:
        kind, variable = "unknown", launch_pred.variable
        source = "unknown (not readable without changing it)"
        if launch_pred.count is not None:
            source += f"; would be {launch_pred.count} by {launch_pred.phrase}"
    elif launch_pred.count is None:  # no model predicts this library's count
        kind, variable, source = "unknown", None, launch_pred.phrase
    elif count == launch_pred.count:
        kind, variable, source = launch_pred.kind, launch_pred.variable, launch_pred.phrase
        if changes and now_pred.count != count:
            notes.append("changed after launch, after this library read it (ignored): " + "; ".join(changes))
    elif count == now_pred.count:
        kind, variable, expected = now_pred.kind, now_pred.variable, now_pred.count
        source = now_pred.phrase + " (set after launch, before this library loaded)"
    elif extra_match is not None and extra_match[0] == count:
        kind, variable, source = extra_match[1], None, extra_match[2]
    else:
        kind, variable, source = "runtime", None, runtime_phrase
        if changes:
            notes.append("; ".join(changes))
    return {
        "library": library,
        "count": count,
        "source": source,
        "kind": kind,
        "variable": variable,
        "expected_from_env": expected,
        "precedence": list(model.precedence),
        "note": "; ".join(notes) or None,
    }


def _numexpr_row(environ, launch_environ, facts) -> dict | None:
    ne = sys.modules.get("numexpr")
    if ne is None:
        return None
    getter = getattr(ne, "get_num_threads", None)
    try:
        count = getter() if callable(getter) else getattr(ne, "nthreads", None)
    except Exception:  # a half-initialised module
        count = None
    env = environ if isinstance(launch_environ, str) else launch_environ
    ctx = {
        "numexpr_ncores": getattr(ne, "ncores", None),
        "numexpr_max_threads": getattr(ne, "MAX_THREADS", None),
        "numexpr_safe_limit": not env.get("NUMEXPR_MAX_THREADS") and not env.get("OMP_NUM_THREADS"),
    }
    row = explain("numexpr", count if isinstance(count, int) else None, MODELS["numexpr"], environ,
                  launch_environ, facts, ctx, runtime_phrase="set at run time (numexpr.set_num_threads)")
    row.update(owner="numexpr", filepath=getattr(ne, "__file__", None))
    return row


def library_settings(pools: list[dict], torch: dict | None, environ: Mapping[str, str],
                     launch_environ: Mapping[str, str] | str | None, facts) -> list[dict]:
    """For each library in force, the count and the source that decided it.

    ``pools``: :func:`parinfo.process.pools.native_pools`; ``torch``: :func:`parinfo.process.frameworks.torch_info`
    or None; ``environ``: the environment now; ``launch_environ``: the launch environment
    (:func:`parinfo.process.environment.launch_environment`), "unknown (reason)", or None to read it here; ``facts``: a
    :class:`parinfo.machine.topology.MachineFacts`. One row per pool row, then torch's intra-op and inter-op
    rows when torch is given, then numexpr when it is imported. Keys:

    - ``library``: the pool's library (openblas, libgomp, mkl, tbb...), "torch intra-op",
      "torch inter-op" or "numexpr".
    - ``owner`` / ``filepath``: which copy (from the pool row), so duplicates can be told apart.
    - ``count``: the count in force (int), or None when it cannot be read.
    - ``source``: one phrase: "env OPENBLAS_NUM_THREADS=1", "env OMP_NUM_THREADS=8, capped at 2 CPUs
      in affinity", "default: 2 CPUs in affinity", "set at run time (API call)", "unknown (...)".
    - ``kind``: env, default, runtime, framework (set by another library, e.g. torch on its libgomp)
      or unknown.
    - ``variable``: the variable that decided it, or None.
    - ``expected_from_env``: the count the environment (and default) predicts, or None.
    - ``precedence``: the variables this library reads, first wins.
    - ``note``: extra remarks (a variable changed after launch and ignored...), or None.
    """
    if launch_environ is None:
        from parinfo.process.environment import launch_environment

        launch_environ = launch_environment()
    rows = []
    torch_intra = torch.get("intra_op") if torch else None
    for pool in pools:
        library = pool["library"]
        model = MODELS.get(library)
        if model is None:
            model = Model((), lambda f, c: (None, f"parinfo has no model for {library}"))
        extra = None
        if library in ("libgomp", "libiomp", "libomp") and pool.get("owner") == "torch" and torch_intra:
            extra = (torch_intra, "framework",
                     f"set by torch to its intra-op count ({torch_intra}) when it initialised")
        if library == "mkl" and pool.get("owner") == "torch" and torch_intra:
            extra = (torch_intra, "framework", f"set by torch to its intra-op count ({torch_intra})")
        row = explain(library, pool.get("num_threads"), model, environ, launch_environ, facts,
                      extra_match=extra)
        row["owner"] = pool.get("owner")
        row["filepath"] = pool.get("filepath")
        rows.append(row)
    if torch:
        intra_model = MODELS["torch intra-op" if torch.get("mkl_available") else "torch intra-op (no MKL)"]
        row = explain("torch intra-op", torch.get("intra_op"), intra_model, environ, launch_environ, facts,
                      runtime_phrase="set at run time (torch.set_num_threads)")
        row.update(owner="torch", filepath=None)
        rows.append(row)
        ctx = {"hardware_concurrency": torch.get("hardware_concurrency")}
        row = explain("torch inter-op", torch.get("inter_op"), MODELS["torch inter-op"], environ,
                      launch_environ, facts, ctx,
                      runtime_phrase="set at run time (torch.set_num_interop_threads)")
        row.update(owner="torch", filepath=None)
        rows.append(row)
    ne = _numexpr_row(environ, launch_environ, facts)
    if ne is not None:
        rows.append(ne)
    return rows
