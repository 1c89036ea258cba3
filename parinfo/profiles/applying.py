"""Put a profile in force in this process: ``parinfo.apply(profile)``.

Order matters: the profile is resolved first (a bad profile changes nothing), then the runtime's
counts are set (the runtime refuses when it is too late, and then nothing else is changed either),
then variables for libraries not yet loaded, the limits of native pools already loaded, torch's
counts (now when torch is imported, else at its import: parinfo.profiles.at_import), the CPU
affinity, and the memory policy (of the calling thread: the kernel keeps it per thread). Last, every
count is read back and any that is not in force is reported.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Collection
from typing import Any

from parinfo.errors import ApplyError
from parinfo.process import libraries as reg, setter
from parinfo.process.setter import NativePool
from parinfo.profiles.plan import Plan
from parinfo.records.convert import dump
from parinfo.records.source import profile as profile_source
from parinfo.runtime.state import RUNTIME
from parinfo.safe_text import escape_controls, plural


def _plan_of(profile: Any) -> Plan:
    if isinstance(profile, Plan):
        return profile
    from parinfo.profiles.loading import resolve_profile

    return resolve_profile(profile)


def apply(profile: Any, *, force: bool = False, reached_threads: Collection[int] = ()) -> dict[str, Any]:
    """Apply ``profile`` (a shipped name, a path, a dict or a resolved Plan) to this process.

    Variables the user set to other values are kept unless ``force``. Returns ``{"plan": ...,
    "applied": [...], "skipped": [...], "not_in_force": [...], "threads": [...], "at_import": [...]}``
    (lists of one-line strings). ``at_import`` says what is set when a framework not imported yet is
    imported (torch's counts, the moment ``import torch`` finishes); what will not reach it is in
    ``skipped``. Limits that hold per thread (OpenMP's, torch's intra-op count) reach the
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
            raise ApplyError(f"profile {escape_controls(plan.name)} runs {len(plan.instances)} pinned instances; a "
                             f"running process is one instance (launch them with: {_launch_command(plan)})")
        only = plan.instances[0]
        intra, inter, cpus = only.intra_op, only.inter_op, only.cpus
        env.update(only.env)
    applied: list[str] = []
    skipped: list[str] = []
    _not_preloaded(plan, env, skipped)

    kept = {name: os.environ[name] for name, value in env.items()
            if not force and _users(name) and os.environ[name] != value}
    counts = _library_counts(plan, kept)
    _configure(plan, intra, inter, counts, kept, applied, skipped)

    pools = setter.native_pools()  # read once: the lines below and the check at the end use it
    loaded = _loaded(pools)
    for name, value in env.items():
        if name in kept:
            skipped.append(f"{name}: kept {kept[name]!r} set by the user over the profile's {value!r} "
                           f"(force=True overrides)")
            continue
        before = os.environ.get(name)
        overrides = before is not None and before != value and _users(name)
        os.environ[name] = value
        # a second apply() must not take it for the user's; a library loaded later reads it
        RUNTIME.note_env_set(name, value, plan.name, loaded)
        if overrides:
            applied.append(f"{name}={value} (overrode the user's {before!r}, force=True)")
        else:
            applied.append(f"{name}={value}")

    per_thread: list[tuple[NativePool, str, int]] = []
    expected_pools = _pool_lines(pools, kept, applied, skipped, per_thread)
    _modules(counts, applied)
    at_import: list[str] = []
    torch_want = _torch(plan, counts, inter, kept, applied, skipped, at_import)
    _affinity(cpus, applied, skipped)
    _memory(plan, plan.instances[0].nodes if plan.instances else plan.memory_nodes, applied, skipped)

    not_in_force = _verify(intra, inter, pools, expected_pools, torch_want, cpus, kept)
    from parinfo.profiles.thread_reach import reach

    threads, missing = reach(per_thread, torch_want[0], reached=frozenset(reached_threads),
                             pool_reached=_workers_reached())
    return {"plan": dump(plan), "applied": applied, "skipped": skipped,
            "not_in_force": not_in_force + missing, "threads": threads, "at_import": at_import}


def _not_preloaded(plan: Plan, env: dict[str, str], skipped: list[str]) -> None:
    """A running process keeps the allocator and OpenMP runtime it started with: the plan's preloads
    and their variables are left out (a library loaded later must not read settings meant for
    another), each with one line in ``skipped`` saying how to get it."""
    for var in plan.preload_variables:
        env.pop(var, None)
    for pre in plan.preload:
        if pre.path is None:
            continue
        also = f" (nor {', '.join(pre.variables)})" if pre.variables else ""
        skipped.append(f"{pre.key} {pre.choice} not preloaded{also}: a running process cannot change its "
                       f"{'malloc' if pre.key == 'allocator' else 'OpenMP runtime'}; launch the program with "
                       f"`{_launch_command(plan)}` to preload {pre.path}")


def _launch_command(plan: Plan) -> str:
    """The command that launches a program under ``plan``'s profile, naming the profile the way
    the command line finds it: a shipped one by name, one read from a file by that file's path."""
    from parinfo.profiles.finding import command_word

    word = command_word(plan.origin)
    if word is None:
        return "parinfo apply FILE -- COMMAND, with the profile written to FILE"
    return escape_controls(f"parinfo apply {word} -- COMMAND")


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


def _loaded(pools: list[NativePool]) -> frozenset[str]:
    """What has read its variables already: the library files of the loaded pools, and the Python
    modules of the registry that are imported."""
    modules = {rec.module for rec in reg.records() if rec.module and rec.module in sys.modules}
    return frozenset({pool.path for pool in pools} | modules)


def _users(name: str) -> bool:
    """Whether variable ``name`` is set, by the user rather than by an earlier apply()."""
    current = os.environ.get(name)
    return current is not None and RUNTIME.env_set().get(name) != current


def _count_var(rec: reg.Library) -> str | None:
    """The variable whose value, set by the user, a profile keeps for ``rec``'s count."""
    return rec.profile_var or (rec.precedence[0] if rec.precedence else None)


def _library_counts(plan: Plan, kept: dict[str, str]) -> dict[str, int | None]:
    """Record name -> the count the profile puts in force for each library it has a key for: the
    user's count where the user's variable is kept, None where that value is no valid count (the
    library is then left as it is)."""
    from parinfo.process.variables import count_from_env

    out: dict[str, int | None] = {}
    for rec in reg.records():
        if rec.profile_key is None or rec.profile_key not in plan.libraries:
            continue
        var = _count_var(rec)
        out[rec.name] = count_from_env(var, kept) if var in kept else plan.libraries[rec.profile_key].value
    return out


def _configure(plan: Plan, intra: int, inter: int, counts: dict[str, int | None], kept: dict[str, str],
               applied: list[str], skipped: list[str]) -> None:
    """The runtime's counts, and the push of each library's count into its loaded pools (once)."""
    intra_var, inter_var = reg.RUNTIME_VARS
    kwargs: dict[str, int] = {}
    if intra_var in kept:
        skipped.append(f"runtime intra-op: {intra_var} set by the user stays in force")
    else:
        kwargs["intra_op"] = intra
    state = RUNTIME.snapshot().inter_op
    if inter_var in kept:
        skipped.append(f"runtime inter-op: {inter_var} set by the user stays in force")
    elif state is not None and state.locked and state.count == inter:
        applied.append(f"runtime inter-op count {inter} (already in force, from {state.source})")
    else:
        kwargs["inter_op"] = inter
    try:
        RUNTIME.configure(**kwargs, libraries=counts, source=profile_source(plan.name))
    except RuntimeError as exc:
        raise ApplyError(f"cannot apply profile {plan.name}: {exc}") from None
    applied += [f"runtime {k.replace('_', '-')} count {v}" for k, v in kwargs.items()]


def _workers_reached() -> frozenset[int]:
    """Native ids of parinfo's pool workers that took the push's per-thread limits in their own
    thread (the push asks each one; workers started later take them before their first job)."""
    import threading

    push = RUNTIME.limits.push_record()
    ran = set(push.workers.ran) if push is not None and push.workers is not None else set()
    return frozenset(t.native_id for t in threading.enumerate() if t.name in ran and t.native_id is not None)


def _pool_lines(pools: list[NativePool], kept: dict[str, str], applied: list[str], skipped: list[str],
                per_thread: list[tuple[NativePool, str, int]]) -> list[tuple[str, str, int]]:
    """Say what the push did to each loaded native pool; return (filepath, name, count) to check.

    Pools whose limit holds in the calling thread only go to ``per_thread`` as (pool, name, count).
    """
    push = RUNTIME.limits.push_record()
    pushed = {row.filepath: row for row in push.pools} if push is not None else {}
    expected: list[tuple[str, str, int]] = []
    for pool in pools:
        rec, row = pool.record, pushed.get(pool.path)
        var = _count_var(rec)
        if rec.profile_key is None:
            continue
        if row is None:
            if var in kept:
                skipped.append(f"{pool.name}: left at {pool.get()} ({var}={kept[var]!r} set by "
                               f"the user is not a valid count)")
            continue
        n = row.num_threads
        if n is None:
            continue
        if row.error:
            skipped.append(f"{pool.name}: could not set {plural(n, 'thread')} ({row.error})")
            continue
        scope = " in this thread" if pool.per_thread else ""
        if var in kept:
            skipped.append(f"{pool.name}: kept at {n} from {var} set by the user")
        else:
            applied.append(f"{pool.name} limited to {n}{scope}")
        if scope:
            per_thread.append((pool, pool.name, n))
        expected.append((pool.path, pool.name, n))
    return expected


def _modules(counts: dict[str, int | None], applied: list[str]) -> None:
    """Set the count of each imported Python-module library (numexpr...) that has a profile key."""
    for rec in reg.python_libraries():
        n = counts.get(rec.name)
        if n is None:
            continue
        done = setter.set_module(rec, n)
        if done is not None and not done.error:
            applied.append(rec.set_call(n))


def _torch(plan: Plan, counts: dict[str, int | None], inter: int, kept: dict[str, str], applied: list[str],
           skipped: list[str], at_import: list[str]) -> tuple[int | None, int | None]:
    """Set torch's counts: now when torch is imported (the push gave it its intra-op count; its
    inter-op count is set here), else the moment it is imported. Return the counts to verify now."""
    from parinfo.process.provenance import TORCH_KEYS, TORCH_ROWS
    from parinfo.profiles import at_import as later

    rec = reg.family(reg.Torch)
    first = _count_var(rec)  # torch's intra-op default reads it first
    want_intra = counts.get(rec.name)
    imported = rec.is_loaded()
    if want_intra is None:
        skipped.append(f"torch intra-op: {first}={kept.get(first or '')!r} set by the user is "
                       f"not a valid count; torch's count left as it is")
    elif first in kept:
        skipped.append(f"{setter.torch_call(want_intra)} from {first} set by the user" if imported else
                       f"torch intra-op: at import torch follows {first}={kept[first or '']!r} set by the user")
    elif imported:
        applied.append(setter.torch_call(want_intra))
        RUNTIME.note_framework_set(TORCH_ROWS[0], want_intra,
                                   later.source(plan.name, TORCH_KEYS[0]))
    if not imported:
        at_import.append(later.torch_when_imported(plan.name, want_intra if first not in kept else None, inter))
        return None, None
    sized = setter.set_torch(inter=inter)[0]
    if sized.error:
        skipped.append(f"torch inter-op stays {sized.now}: {sized.error}")
    else:
        applied.append(rec.interop_call(inter))
        RUNTIME.note_framework_set(TORCH_ROWS[1], inter, later.source(plan.name, TORCH_KEYS[1]))
    return want_intra, inter


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
        applied.append(f"affinity {format_cpu_list(cpus)} for {plural(len(tids) - len(failed), 'thread')}")


def _memory(plan: Plan, nodes: tuple[int, ...], applied: list[str], skipped: list[str]) -> None:
    """The plan's ``memory`` for the calling thread: the kernel keeps the policy per thread, so it
    reaches this thread and what it starts from now on, and the line says so."""
    from parinfo.profiles.memory import binding

    bind = binding(plan.memory, nodes, "this process")
    if bind is None:
        return
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = 1
    done, not_done = bind.in_this_thread(threads)
    if done:
        applied.append(done)
    if not_done:
        skipped.append(not_done)


def _verify(intra: int, inter: int, loaded: list[NativePool], pools: list[tuple[str, str, int]],
            torch_want: tuple[int | None, int | None], cpus: tuple[int, ...] | None, kept: dict[str, str]) -> list[str]:
    """Read every count back; one line for each that is not what the plan asked for."""
    bad: list[str] = []
    state = RUNTIME.snapshot()
    for key, want, var in zip(("intra_op", "inter_op"), (intra, inter), reg.RUNTIME_VARS, strict=True):
        got = getattr(state, key)
        if var not in kept and got is not None and got.count != want:
            bad.append(f"runtime {key.replace('_', '-')} count is {got.count} (from {got.source}), not {want}")
    if pools:
        now = {pool.path: pool.get() for pool in loaded}
        for path, name, want in pools:
            if path in now and now[path] != want:
                bad.append(f"{name} runs {plural(now[path], 'thread')}, not {want}")
    want_intra, want_inter = torch_want
    now_intra, now_inter = setter.torch_counts()
    if want_intra is not None and now_intra != want_intra:
        bad.append(f"torch intra-op count is {now_intra}, not {want_intra}")
    if want_inter is not None and now_inter != want_inter:
        bad.append(f"torch inter-op count is {now_inter}, not {want_inter} "
                   f"(set once, before torch's inter-op pool starts)")
    if cpus:
        mine = tuple(sorted(os.sched_getaffinity(0)))
        if mine != tuple(sorted(cpus)):
            bad.append(f"affinity is {list(mine)}, not {list(cpus)}")
    return bad
