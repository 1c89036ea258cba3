"""Put a profile in force in this process: ``parinfo.apply(profile)``.

Order matters: the profile is resolved first (a bad profile changes nothing), then the runtime's
counts are set (the runtime refuses when it is too late, and then nothing else is changed either),
then variables for libraries not yet loaded, the limits of native pools already loaded, torch's
counts when torch is imported, and the CPU affinity. Last, every count is read back and any that
is not in force is reported.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Collection
from typing import Any

from parinfo.errors import ApplyError
from parinfo.process import libraries as reg
from parinfo.profiles.plan import Plan

# Variables this module set, so that a second apply() does not mistake them for the user's.
_ours: dict[str, str] = {}


def _plan_of(profile: Any) -> Plan:
    if isinstance(profile, Plan):
        return profile
    from parinfo.profiles.language import resolve_profile

    return resolve_profile(profile)


def apply(profile: Any, *, force: bool = False, reached_threads: Collection[int] = ()) -> dict:
    """Apply ``profile`` (a shipped name, a path, a dict or a resolved Plan) to this process.

    Variables the user set to other values are kept unless ``force``. Returns ``{"plan": ...,
    "applied": [...], "skipped": [...], "not_in_force": [...], "threads": [...]}`` (lists of
    one-line strings). Limits that hold per thread (OpenMP's, torch's intra-op count) reach the
    calling thread: ``threads`` says which threads each one reaches and ``not_in_force`` names the
    threads it does not, with what to do there. ``reached_threads`` are native ids of threads where
    the caller has put the same per-thread limits in force itself (parinfo.fleet does so in each
    executor thread of a Dask worker): they are reported as reached.
    Raises ProfileError for a bad profile and ApplyError when the runtime says it is too late;
    in both cases nothing has been changed.
    """
    plan = _plan_of(profile)
    _check_plan(plan)
    intra, inter = plan.intra_op.value, plan.inter_op.value
    cpus = plan.affinity
    env = dict(plan.env)
    if plan.instances:
        if len(plan.instances) > 1:
            raise ApplyError(f"profile {plan.name} runs {len(plan.instances)} pinned instances; a running process "
                             f"is one instance (launch them with: parinfo apply {plan.name} -- COMMAND)")
        only = plan.instances[0]
        intra, inter, cpus = only.intra_op, only.inter_op, only.cpus
        env.update(only.env)
    applied: list[str] = []
    skipped: list[str] = []

    kept = {name: os.environ[name] for name, value in env.items()
            if not force and _users(name) and os.environ[name] != value}
    _configure(plan, intra, inter, kept, applied, skipped)

    for name, value in env.items():
        if name in kept:
            skipped.append(f"{name}: kept {kept[name]!r} set by the user over the profile's {value!r} "
                           f"(force=True overrides)")
            continue
        before = os.environ.get(name)
        overrides = before is not None and before != value and _users(name)
        os.environ[name] = value
        _ours[name] = value
        if overrides:
            applied.append(f"{name}={value} (overrode the user's {before!r}, force=True)")
        else:
            applied.append(f"{name}={value}")

    per_thread: list[tuple[Any, str, int]] = []
    expected_pools = _limit_pools(plan, kept, applied, skipped, per_thread)
    _modules(plan, kept, applied)
    torch_want = _torch(plan, inter, kept, applied, skipped)
    _affinity(cpus, applied, skipped)

    not_in_force = _verify(intra, inter, expected_pools, torch_want, cpus, kept)
    from parinfo.profiles.thread_reach import reach

    pool_reached = _limit_pool_workers(per_thread)
    threads, missing = reach(per_thread, torch_want[0], reached=frozenset(reached_threads),
                             pool_reached=pool_reached)
    return {"plan": plan.to_dict(), "applied": applied, "skipped": skipped,
            "not_in_force": not_in_force + missing, "threads": threads}


def _check_plan(plan: Plan) -> None:
    """Refuse, before anything is changed, a plan this process cannot put in force as a whole
    (a hand-built Plan can hold what a validated profile cannot)."""
    from parinfo.errors import ProfileError

    envs = [plan.env, *(i.env for i in plan.instances)]
    for env in envs:
        for name, value in env.items():
            if not isinstance(name, str) or not name or "=" in name or "\0" in name:
                raise ProfileError(f"profile {plan.name}: {name!r} is not a variable name", fix="fix the plan's env")
            if not isinstance(value, str) or "\0" in value:
                raise ProfileError(f"profile {plan.name}: {name}={value!r} is not a value a variable can hold",
                                   fix="give text without NUL characters")
    counts = [plan.intra_op.value, plan.inter_op.value, *(s.value for s in plan.libraries.values())]
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in counts):
        raise ProfileError(f"profile {plan.name}: every count must be a whole number of 1 or more",
                           fix="fix the plan's counts")


def _users(name: str) -> bool:
    """Whether variable ``name`` is set, by the user rather than by an earlier apply()."""
    current = os.environ.get(name)
    return current is not None and _ours.get(name) != current


def _configure(plan: Plan, intra: int, inter: int, kept: dict[str, str], applied: list[str],
               skipped: list[str]) -> None:
    from parinfo import runtime

    kwargs: dict[str, int] = {}
    if "PARINFO_NUM_THREADS" in kept:
        skipped.append("runtime intra-op: PARINFO_NUM_THREADS set by the user stays in force")
    else:
        kwargs["intra_op"] = intra
    state = runtime.info()["inter_op"]
    if "PARINFO_NUM_INTEROP_THREADS" in kept:
        skipped.append("runtime inter-op: PARINFO_NUM_INTEROP_THREADS set by the user stays in force")
    elif state.get("locked") and state.get("count") == inter:
        applied.append(f"runtime inter-op count {inter} (already in force, from {state.get('source')})")
    else:
        kwargs["inter_op"] = inter
    if not kwargs:
        return
    try:
        runtime.configure(**kwargs, source=f"profile {plan.name}")
    except RuntimeError as exc:
        raise ApplyError(f"cannot apply profile {plan.name}: {exc}") from None
    applied += [f"runtime {k.replace('_', '-')} count {v}" for k, v in kwargs.items()]


def _limit_pool_workers(per_thread: list[tuple[Any, str, int]]) -> frozenset[int]:
    """Put the per-thread limits into every worker of parinfo's pools, each in its own thread (and
    into workers started later); the native ids of the workers that did so now."""
    if not per_thread:
        return frozenset()
    import threading

    from parinfo import runtime

    limits = [(lib, n) for lib, _, n in per_thread]

    def limit_this_thread() -> None:
        for lib, n in limits:
            lib.set_num_threads(n)

    ran = set(runtime.on_every_worker("parinfo.apply", limit_this_thread)["ran"])
    return frozenset(t.native_id for t in threading.enumerate() if t.name in ran and t.native_id is not None)


def _pool_name(lib: Any) -> str:
    where = os.path.basename(getattr(lib, "filepath", "") or "") or "?"
    return f"{lib.internal_api} pool ({where})"


def _limit_pools(plan: Plan, kept: dict[str, str], applied: list[str], skipped: list[str],
                 per_thread: list[tuple[Any, str, int]]) -> list[tuple[str, str, int]]:
    """Set a limit that stays on every loaded native pool; return (filepath, name, count) to check.

    Pools whose limit holds in the calling thread only go to ``per_thread`` as (controller, name, count).
    """
    from parinfo.process.tpc import threadpoolctl
    from parinfo.process.variables import count_from_env

    expected: list[tuple[str, str, int]] = []
    for lib in threadpoolctl().ThreadpoolController().lib_controllers:
        rec = reg.by_internal_api(lib.internal_api)
        if rec is None or rec.profile_key is None or rec.profile_var is None:
            continue
        key, var = rec.profile_key, rec.profile_var
        n = plan.libraries[key].value
        if var in kept:
            # The runtime's push may have changed this pool: give it back the user's count.
            users = count_from_env(var, kept)
            if users is None:
                skipped.append(f"{_pool_name(lib)}: left at {lib.num_threads} ({var}={kept[var]!r} set by "
                               f"the user is not a valid count)")
                continue
            n = users
            skipped.append(f"{_pool_name(lib)}: kept at {n} from {var} set by the user")
        try:
            lib.set_num_threads(n)
        except Exception as exc:
            skipped.append(f"{_pool_name(lib)}: could not set {n} threads ({exc})")
            continue
        scope = " in this thread" if rec.scope == "thread" else ""
        if var not in kept:
            applied.append(f"{_pool_name(lib)} limited to {n}{scope}")
        if scope:
            per_thread.append((lib, _pool_name(lib), n))
        expected.append((lib.filepath, _pool_name(lib), n))
    return expected


def _modules(plan: Plan, kept: dict[str, str], applied: list[str]) -> None:
    """Set the count of each imported Python-module library (numexpr...) that has a profile key."""
    for rec in reg.python_libraries():
        module = sys.modules.get(rec.module or "")
        if (module is None or rec.profile_key not in plan.libraries or rec.profile_var in kept
                or not rec.setter):
            continue
        n = plan.libraries[rec.profile_key].value
        try:
            getattr(module, rec.setter)(n)
            applied.append(f"{rec.module}.{rec.setter}({n})")
        except Exception:
            pass


def _torch(plan: Plan, inter: int, kept: dict[str, str], applied: list[str],
           skipped: list[str]) -> tuple[int | None, int | None]:
    """Set torch's counts when torch is imported; return the counts to verify."""
    torch = sys.modules.get("torch")
    if torch is None:
        skipped.append("torch not imported: at import its intra-op count follows MKL_NUM_THREADS; "
                       "its inter-op count is left to torch (import torch before apply() to set it)")
        return None, None
    want_intra: int | None = plan.libraries["torch"].value
    how = f"torch.set_num_threads({want_intra})"
    first = reg.library("torch").precedence[0]  # torch's intra-op default reads it first
    if first in kept:
        # the user's value stays in force.
        from parinfo.process.variables import count_from_env

        user = count_from_env(first, kept)
        if user is None:
            skipped.append(f"torch intra-op: {first}={kept[first]!r} set by the user is "
                           f"not a valid count; torch's count left as it is")
            want_intra = None
        else:
            want_intra = user
            how = f"torch.set_num_threads({user}) from {first} set by the user"
    if want_intra is not None:
        try:
            torch.set_num_threads(want_intra)
            (skipped if first in kept else applied).append(how)
        except RuntimeError as exc:
            skipped.append(f"torch.set_num_threads({want_intra}) failed: {exc}")
    want_inter: int | None = inter
    try:
        if torch.get_num_interop_threads() != inter:
            torch.set_num_interop_threads(inter)
        applied.append(f"torch.set_num_interop_threads({inter})")
    except RuntimeError as exc:
        skipped.append(f"torch inter-op stays {torch.get_num_interop_threads()}: {str(exc).strip()}")
    return want_intra, want_inter


def _affinity(cpus: tuple[int, ...] | None, applied: list[str], skipped: list[str]) -> None:
    if not cpus:
        return
    from parinfo.machine.cpulist import format_cpu_list

    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    failed = []
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:
            continue  # the thread ended meanwhile
        except OSError as exc:
            failed.append(f"{tid} ({exc.strerror})")
    if failed and len(failed) == len(tids):
        skipped.append(f"affinity {format_cpu_list(cpus)} not set: {', '.join(failed[:3])}")
    else:
        applied.append(f"affinity {format_cpu_list(cpus)} for {len(tids) - len(failed)} thread(s)")


def _verify(intra: int, inter: int, pools: list[tuple[str, str, int]], torch_want: tuple[int | None, int | None],
            cpus: tuple[int, ...] | None, kept: dict[str, str]) -> list[str]:
    """Read every count back; one line for each that is not what the plan asked for."""
    from parinfo import runtime

    bad: list[str] = []
    state = runtime.info()
    for key, want, var in (("intra_op", intra, "PARINFO_NUM_THREADS"),
                           ("inter_op", inter, "PARINFO_NUM_INTEROP_THREADS")):
        got = state[key]
        if var not in kept and got["count"] != want:
            bad.append(f"runtime {key.replace('_', '-')} count is {got['count']} (from {got['source']}), not {want}")
    if pools:
        from parinfo.process.tpc import threadpoolctl

        now = {p.get("filepath"): p.get("num_threads") for p in threadpoolctl().threadpool_info()}
        for path, name, want in pools:
            if path in now and now[path] != want:
                bad.append(f"{name} runs {now[path]} threads, not {want}")
    torch = sys.modules.get("torch")
    want_intra, want_inter = torch_want
    if torch is not None:
        if want_intra is not None and torch.get_num_threads() != want_intra:
            bad.append(f"torch intra-op count is {torch.get_num_threads()}, not {want_intra}")
        if want_inter is not None and torch.get_num_interop_threads() != want_inter:
            bad.append(f"torch inter-op count is {torch.get_num_interop_threads()}, not {want_inter} "
                       f"(set once, before torch's inter-op pool starts)")
    if cpus:
        mine = tuple(sorted(os.sched_getaffinity(0)))
        if mine != tuple(sorted(cpus)):
            bad.append(f"affinity is {list(mine)}, not {list(cpus)}")
    return bad
