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
from parinfo.profiles.applied import Applied, AtImport, Done, Drift, Reason, Skipped, Where
from parinfo.profiles.plan import Plan
from parinfo.records.source import profile as profile_source
from parinfo.runtime.state import RUNTIME
from parinfo.safe_text import escape_controls


def _plan_of(profile: Any) -> Plan:
    if isinstance(profile, Plan):
        return profile
    from parinfo.profiles.loading import resolve_profile

    return resolve_profile(profile)


#: What a step of apply() did: settings made and settings left out, in the order they happened.
Steps = list[Done | Skipped]


def apply(profile: Any, *, force: bool = False, reached_threads: Collection[int] = ()) -> Applied:
    """Apply ``profile`` (a shipped name, a path, a dict or a resolved Plan) to this process.

    Variables the user set to other values are kept unless ``force``. Returns an :class:`Applied`
    record: the plan, each setting made (``applied``) or left out with its reason (``skipped``),
    each count read back that is not in force (``not_in_force``), where per-thread limits reached
    (``threads``) and what is set when a framework not imported yet is imported (``at_import``:
    torch's counts, the moment ``import torch`` finishes); ``str()`` of any of them is its line.
    Limits that hold per thread (OpenMP's, torch's intra-op count) reach the calling thread:
    ``threads`` says which threads each one reaches and ``not_in_force`` names the threads it does
    not. ``reached_threads`` are native ids of threads where the caller has put the same per-thread
    limits in force itself (parinfo.fleet does so in each executor thread of a Dask worker): they
    are reported as reached.
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
    steps = _not_preloaded(plan, env)
    kept = {name: os.environ[name] for name, value in env.items()
            if not force and _users(name) and os.environ[name] != value}
    counts = _library_counts(plan, kept)
    steps += _configure(plan, intra, inter, counts, kept)

    pools = setter.native_pools()  # read once: the steps below and the check at the end use it
    steps += _variables(plan, env, kept, _loaded(pools))
    per_thread: list[tuple[NativePool, str, int]] = []
    pool_steps, expected_pools = _pool_steps(plan, pools, kept, per_thread)
    module_steps, module_drifts = _modules(plan, counts)
    steps += pool_steps + module_steps
    torch_steps, torch_want, later = _torch(plan, counts, inter, kept)
    steps += torch_steps + _affinity(cpus) + _memory(plan, plan.instances[0].nodes if plan.instances
                                                      else plan.memory_nodes)

    steps += _new_threads(plan, counts)
    drifts = _verify(intra, inter, pools, expected_pools, torch_want, cpus, kept)
    from parinfo.profiles.thread_reach import reach

    threads, missing = reach(per_thread, torch_want[0], reached=frozenset(reached_threads),
                             pool_reached=_workers_reached())
    return Applied(plan, tuple(s for s in steps if isinstance(s, Done)),
                   tuple(s for s in steps if isinstance(s, Skipped)), (*drifts, *module_drifts, *missing),
                   tuple(threads),
                   later)


def _new_threads(plan: Plan, counts: dict[str, int | None]) -> Steps:
    """``threads: every``: the per-thread counts go into each thread started from now on (and an
    earlier profile's stop); the calling thread and the process-wide pools have them already."""
    from parinfo.runtime.thread_limits import profile_new_threads

    every = None
    if plan.every_thread:  # ``counts`` is by record name; the start hook's by profile key
        every = {rec.profile_key: n for name, n in counts.items()
                 if n is not None and (rec := reg.find(name)) is not None and rec.profile_key}
    if profile_new_threads(every) is None or not every:
        return []
    return [Done(", ".join(sorted(every)), "every", Where.NEW_THREADS, via="threading.setprofile")]


def _variables(plan: Plan, env: dict[str, str], kept: dict[str, str], loaded: frozenset[str]) -> Steps:
    """Set the plan's variables, but those the user set (``kept``), for libraries loaded later."""
    steps: Steps = []
    for name, value in env.items():
        if name in kept:
            steps.append(Skipped(name, Where.VARIABLE, Reason.USER_SET, value, variable=name,
                                 user_value=kept[name]))
            continue
        before = os.environ.get(name)
        overrides = before is not None and before != value and _users(name)
        os.environ[name] = value
        # a second apply() must not take it for the user's; a library loaded later reads it
        RUNTIME.note_env_set(name, value, plan.name, loaded)
        steps.append(Done(name, value, Where.VARIABLE, profile_source(plan.name, name),
                          overrode=before if overrides else None))
    return steps


def _not_preloaded(plan: Plan, env: dict[str, str]) -> Steps:
    """A running process keeps the allocator and OpenMP runtime it started with: the plan's preloads
    and their variables are left out (a library loaded later must not read settings meant for
    another), each skipped with the command that launches with it."""
    for var in plan.preload_variables:
        env.pop(var, None)
    return [Skipped(pre.key, Where.PRELOAD, Reason.NOT_PRELOADABLE, pre.choice, path=pre.path,
                    variables=pre.variables, launch=_launch_command(plan))
            for pre in plan.preload if pre.path is not None]


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


def _configure(plan: Plan, intra: int, inter: int, counts: dict[str, int | None], kept: dict[str, str]) -> Steps:
    """The runtime's counts, and the push of each library's count into its loaded pools (once)."""
    intra_var, inter_var = reg.RUNTIME_VARS
    steps: Steps = []
    kwargs: dict[str, int] = {}
    if intra_var in kept:
        steps.append(Skipped("intra_op", Where.RUNTIME, Reason.USER_SET, intra, variable=intra_var))
    else:
        kwargs["intra_op"] = intra
    state = RUNTIME.snapshot().inter_op
    if inter_var in kept:
        steps.append(Skipped("inter_op", Where.RUNTIME, Reason.USER_SET, inter, variable=inter_var))
    elif state is not None and state.locked and state.count == inter:
        steps.append(Done("inter_op", inter, Where.RUNTIME, state.source, already=True))
    else:
        kwargs["inter_op"] = inter
    source = profile_source(plan.name)
    try:
        RUNTIME.configure(**kwargs, libraries=counts, source=source)
    except RuntimeError as exc:
        raise ApplyError(f"cannot apply profile {plan.name}: {exc}") from None
    return steps + [Done(k, v, Where.RUNTIME, source) for k, v in kwargs.items()]


def _workers_reached() -> frozenset[int]:
    """Native ids of parinfo's pool workers that took the push's per-thread limits in their own
    thread (the push asks each one; workers started later take them before their first job)."""
    import threading

    push = RUNTIME.limits.push_record()
    ran = set(push.workers.ran) if push is not None and push.workers is not None else set()
    return frozenset(t.native_id for t in threading.enumerate() if t.name in ran and t.native_id is not None)


def _pool_steps(plan: Plan, pools: list[NativePool], kept: dict[str, str],
                per_thread: list[tuple[NativePool, str, int]]) -> tuple[Steps, list[tuple[str, str, int]]]:
    """What the push did to each loaded native pool, and (filepath, name, count) to check.

    Pools whose limit holds in the calling thread only go to ``per_thread`` as (pool, name, count).
    """
    push = RUNTIME.limits.push_record()
    pushed = {row.filepath: row for row in push.pools} if push is not None else {}
    steps: Steps = []
    expected: list[tuple[str, str, int]] = []
    for pool in pools:
        rec, row = pool.record, pushed.get(pool.path)
        var = _count_var(rec)
        if rec.profile_key is None:
            continue
        if row is None:
            if var in kept:
                steps.append(Skipped(pool.name, Where.POOL, Reason.USER_VALUE_INVALID, library=rec.name,
                                     variable=var, user_value=kept[var], now=pool.get()))
            continue
        n = row.num_threads
        if n is None:
            continue
        if row.error:
            steps.append(Skipped(pool.name, Where.POOL, Reason.REFUSED, n, library=rec.name, error=row.error))
            continue
        if var in kept:
            steps.append(Skipped(pool.name, Where.POOL, Reason.USER_SET, n, library=rec.name, variable=var, now=n))
        else:
            steps.append(Done(pool.name, n, Where.POOL, profile_source(plan.name, rec.profile_key),
                              library=rec.name, per_thread=pool.per_thread))
        if pool.per_thread:
            per_thread.append((pool, pool.name, n))
        expected.append((pool.path, pool.name, n))
    return steps, expected


def _modules(plan: Plan, counts: dict[str, int | None]) -> tuple[Steps, list[Drift]]:
    """Give each imported Python-module library that has a profile key its count, the way it takes
    one now (:meth:`reg.Library.uptake`): its setter (read back: a Drift when it did not take it),
    its variable when its pool or object is made (set by :func:`_variables`), or, for a pool
    already started or a count only code sets, the line that would do it. Libraries imported later
    read the variables :func:`_variables` set."""
    from parinfo.process.library_parts import Takes

    steps: Steps = []
    drifts: list[Drift] = []
    for rec in reg.python_libraries():
        n = counts.get(rec.name)
        module = sys.modules.get(rec.module or "")
        if n is None or module is None:
            continue
        how = rec.uptake(module, n)
        source = profile_source(plan.name, rec.profile_key or "")
        if how.takes is Takes.SETTER:
            done = setter.set_module(rec, n)
            if done is None:
                continue
            if done.error:
                steps.append(Skipped(rec.name, Where.MODULE, Reason.REFUSED, n, library=rec.name,
                                     via=rec.set_call(), now=done.now, error=done.error))
                continue
            steps.append(Done(rec.name, n, Where.MODULE, source, library=rec.name, via=rec.set_call()))
            RUNTIME.note_framework_set(rec.name, n, source)  # a report names the profile while it holds
            if done.now is not None and done.now != n:
                drifts.append(Drift(rec.name, Where.MODULE, n, done.now, library=rec.name))
        elif how.takes is Takes.AT_USE:
            steps.append(Done(rec.name, n, Where.AT_USE, source, library=rec.name,
                              via=rec.profile_var or "", when=how.when))
        else:
            reason = Reason.STARTED if how.takes is Takes.STARTED else Reason.IN_CODE
            steps.append(Skipped(rec.name, Where.MODULE, reason, n, library=rec.name, now=how.now, code=how.code))
    return steps, drifts


def _torch(plan: Plan, counts: dict[str, int | None], inter: int,
           kept: dict[str, str]) -> tuple[Steps, tuple[int | None, int | None], tuple[AtImport, ...]]:
    """Set torch's counts: now when torch is imported (the push gave it its intra-op count; its
    inter-op count is set here), else the moment it is imported. Return the steps, the counts to
    verify now and what waits for the import."""
    from parinfo.process.provenance import TORCH_KEYS, TORCH_ROWS
    from parinfo.profiles import at_import as later

    rec = reg.family(reg.Torch)
    first = _count_var(rec)  # torch's intra-op default reads it first
    want_intra = counts.get(rec.name)
    imported = rec.is_loaded()
    steps: Steps = []
    users = kept.get(first or "")
    if want_intra is None:
        steps.append(Skipped("intra_op", Where.FRAMEWORK, Reason.USER_VALUE_INVALID, library=rec.name,
                             variable=first, user_value=users))
    elif first in kept:
        steps.append(Skipped("intra_op", Where.FRAMEWORK, Reason.USER_SET, want_intra, library=rec.name,
                             via=rec.set_call(), variable=first, user_value=users, at_import=not imported))
    elif imported:
        source = later.source(plan.name, TORCH_KEYS[0])
        steps.append(Done("intra_op", want_intra, Where.FRAMEWORK, source, library=rec.name, via=rec.set_call()))
        RUNTIME.note_framework_set(TORCH_ROWS[0], want_intra, source)
    if not imported:
        return steps, (None, None), (later.torch_when_imported(plan.name, want_intra if first not in kept else None,
                                                               inter),)
    sized = setter.set_torch(inter=inter)[0]
    if sized.error:
        steps.append(Skipped("inter_op", Where.FRAMEWORK, Reason.REFUSED, inter, library=rec.name, now=sized.now,
                             error=sized.error))
    else:
        source = later.source(plan.name, TORCH_KEYS[1])
        steps.append(Done("inter_op", inter, Where.FRAMEWORK, source, library=rec.name, via=rec.interop_call()))
        RUNTIME.note_framework_set(TORCH_ROWS[1], inter, source)
    return steps, (want_intra, inter), ()


def _affinity(cpus: tuple[int, ...] | None) -> Steps:
    """Pin every thread of the process to ``cpus``."""
    if not cpus:
        return []
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
        return [Skipped("affinity", Where.AFFINITY, Reason.REFUSED, cpus, error=", ".join(failed[:3]))]
    return [Done("affinity", cpus, Where.AFFINITY, threads=len(tids) - len(failed))]


def _memory(plan: Plan, nodes: tuple[int, ...]) -> Steps:
    """The plan's ``memory`` for the calling thread: the kernel keeps the policy per thread, so it
    reaches this thread and what it starts from now on, and the step says how many it does not."""
    from parinfo.profiles.memory import binding

    bind = binding(plan.memory, nodes, "this process")
    if bind is None:
        return []
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = 1
    return [bind.in_this_thread(threads)]


def _verify(intra: int, inter: int, loaded: list[NativePool], pools: list[tuple[str, str, int]],
            torch_want: tuple[int | None, int | None], cpus: tuple[int, ...] | None,
            kept: dict[str, str]) -> list[Drift]:
    """Read every count back; one Drift for each that is not what the plan asked for."""
    bad: list[Drift] = []
    state = RUNTIME.snapshot()
    for key, want, var in zip(("intra_op", "inter_op"), (intra, inter), reg.RUNTIME_VARS, strict=True):
        got = getattr(state, key)
        if var not in kept and got is not None and got.count != want:
            bad.append(Drift(key, Where.RUNTIME, want, got.count, source=got.source))
    if pools:
        now = {pool.path: pool.get() for pool in loaded}
        bad += [Drift(name, Where.POOL, want, now[path]) for path, name, want in pools
                if path in now and now[path] != want]
    now_counts = setter.torch_counts()
    torch = reg.family(reg.Torch).name
    for key, wanted, got in zip(("intra_op", "inter_op"), torch_want, now_counts, strict=True):
        if wanted is not None and got != wanted:
            bad.append(Drift(key, Where.FRAMEWORK, wanted, got, library=torch))
    if cpus:
        mine = tuple(sorted(os.sched_getaffinity(0)))
        if mine != tuple(sorted(cpus)):
            bad.append(Drift("affinity", Where.AFFINITY, cpus, mine))
    return bad
