"""One process launched under a resolved Plan: its environment, its CPUs, its start and its signals.

:func:`child_environ` builds the environment (the plan's variables, never overriding what the user
set unless ``force``; the start-up hook of parinfo/profiles/hook/ that sets torch's counts as soon as
torch is imported and reports counts that are not in force). :func:`spawn` starts a child pinned to
its CPUs, :class:`Relay` forwards signals while it runs, :func:`exit_status` and :func:`not_started`
say how it ended or why it could not start. Shared by the one-process launch
(:mod:`parinfo.launch.run`) and the N pinned instances (:mod:`parinfo.launch.instances`).

On the start-up path of ``parinfo apply P -- CMD``: only os, sys and signal at module level;
subprocess is loaded by :func:`spawn` only.
"""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from parinfo.errors import ApplyError, UsageError
from parinfo.machine.cpulist import format_cpu_list
from parinfo.process import libraries as reg, preload as pre
from parinfo.records.record import record
from parinfo.safe_text import shorten

if TYPE_CHECKING:  # pragma: no cover
    import subprocess
    from types import FrameType

    from parinfo.profiles.plan import InstancePlan, Plan

#: The start-up hook's folder, put first on a launched program's PYTHONPATH. It stays beside the
#: profiles (parinfo/profiles/hook/): its import watch serves ``parinfo.apply()`` in a running process too.
HOOK_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "profiles", "hook")
HOOK_VAR = pre.HOOK_VAR
#: The folder where the start-up hook writes, at exit, what it reads back (``PID.json``), when set.
REPORT_VAR = "_PARINFO_HOOK_REPORT"
# torch's intra-op default reads these; when the user's own value stays in force, torch follows it.
TORCH_INTRA_VARS = reg.family(reg.Torch).count_vars
FORWARDED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126


@record(frozen=True)
class ChildEnv:
    """The environment of one launched process and what was decided on the way.

    ``kept`` and ``overridden`` hold (name, user value, plan value) for variables the user had set
    to another value; ``torch_intra`` is None when torch is left to the user's own variable;
    ``preloaded`` the files parinfo put first in LD_PRELOAD and ``preload_after`` the user's own
    LD_PRELOAD entries, kept after them.
    """

    env: dict[str, str]
    kept: tuple[tuple[str, str, str], ...]
    overridden: tuple[tuple[str, str, str], ...]
    torch_intra: int | None
    torch_inter: int
    cpus: tuple[int, ...] | None
    preloaded: tuple[str, ...] = ()
    preload_after: tuple[str, ...] = ()

    def messages(self, profile: str) -> list[str]:
        """One line per variable kept from (or overriding) the user's environment, and one when the
        user's own LD_PRELOAD entries stay after the profile's."""
        lines = [f"parinfo: keeping {n}={u!r} from your environment{_invalid_note(n, u)}; "
                 f"profile {profile} sets {p!r} (--force overrides)" for n, u, p in self.kept]
        lines += [f"parinfo: overriding {n}={u!r} from your environment with profile {profile}'s {p!r} "
                  f"(--force)" for n, u, p in self.overridden]
        if self.preload_after:
            mallocs = [p for p in self.preloaded if pre.allocator_of_file(os.path.realpath(p))]
            unused = [p for p in self.preload_after if mallocs and pre.allocator_of_file(os.path.realpath(p))]
            note = (f" (the first malloc loaded serves the program: {' '.join(unused)} is loaded but its malloc "
                    f"is not used)" if unused else "")
            lines.append(f"parinfo: {pre.PRELOAD_VAR}: preloading {' '.join(self.preloaded)} (profile {profile}) "
                         f"before your own {' '.join(self.preload_after)}, which stay after them{note}")
        return lines


def _invalid_note(name: str, value: str) -> str:
    from parinfo.process.variables import validate

    problem = validate(name, value)
    return f" (invalid: {problem}, so libraries ignore it)" if problem else ""


def _torch_counts(plan: Plan, instance: InstancePlan | None) -> tuple[int, int]:
    if instance is not None:
        return instance.intra_op, instance.inter_op
    torch = plan.libraries.get(str(reg.family(reg.Torch).profile_key))
    return (torch.value if torch is not None else plan.intra_op.value), plan.inter_op.value


def _every_thread(plan: Plan, env: Mapping[str, str], kept: set[str], torch_intra: int | None) -> dict[str, int]:
    """``threads: every``: the count for each profile key that the start-up hook puts into every
    thread the program starts: what the child's variables say (an instance's own), the plan's where
    a library has none; a library whose variable the user kept is left to it, and torch to its own."""
    torch_key = str(reg.family(reg.Torch).profile_key)
    out = {}
    for key, setting in plan.libraries.items():
        names = reg.LIBRARY_VARS.get(key, ())
        if kept.intersection(names):
            continue
        given = [env[n] for n in names if env.get(n, "").isdigit() and int(env[n]) > 0]
        out[key] = int(given[0]) if given else setting.value
    if torch_intra is None:
        out.pop(torch_key, None)
    else:
        out[torch_key] = torch_intra
    return out


def child_environ(plan: Plan, base: Mapping[str, str], *, force: bool = False,
                  instance: InstancePlan | None = None, instances: int = 0, report: str | None = None) -> ChildEnv:
    """The environment for a process launched under ``plan`` (or one of its instances).

    ``base`` is the launching environment: a variable already set there to another value is kept
    unless ``force`` (one set by an enclosing ``parinfo apply`` is not the user's, and is replaced).
    PARINFO_PROFILE (and PARINFO_INSTANCE/PARINFO_INSTANCES for an instance) are always set; the
    start-up hook's directory is put first on PYTHONPATH. The plan's preloaded libraries go first in
    LD_PRELOAD, before the user's own entries, and PARINFO_PRELOAD lists them. An instance's ``env`` is laid over the
    plan's; its ``intra_op``/``inter_op`` give PARINFO_NUM_THREADS/PARINFO_NUM_INTEROP_THREADS and
    torch's counts. With ``report`` (a folder), the hook writes there at exit what it reads back.
    """
    wanted = dict(plan.env)
    if instance is not None:
        # The instance's own fields decide parinfo's counts unless its env says otherwise.
        wanted[reg.RUNTIME_VARS[0]] = str(instance.intra_op)
        wanted[reg.RUNTIME_VARS[1]] = str(instance.inter_op)
        wanted.update(instance.env)
    env = dict(base)
    from_parinfo = _set_by_outer_launch(base)
    kept: list[tuple[str, str, str]] = []
    overridden: list[tuple[str, str, str]] = []
    watch: list[str] = []
    for name, value in wanted.items():
        value = str(value)
        user = base.get(name)
        if user is not None and user != value and name not in from_parinfo:
            if not force:
                kept.append((name, user, value))
                continue
            overridden.append((name, user, value))
        env[name] = value
        watch.append(name)
    env[reg.role_var("profile")] = plan.name
    if instance is not None:
        env[reg.role_var("instance")] = str(instance.index)
        env[reg.role_var("instances")] = str(instances)
    intra, inter = _torch_counts(plan, instance)
    users_own = {n for n, _, _ in kept} | {n for n in TORCH_INTRA_VARS
                                            if n in base and n not in wanted and n not in from_parinfo}
    torch_intra = None if users_own.intersection(TORCH_INTRA_VARS) else intra
    env[HOOK_VAR] = f"1 intra={torch_intra or '-'} inter={inter} watch={','.join(watch)} {reg.hook_facts()}"
    if plan.every_thread:
        every = _every_thread(plan, env, {n for n, _, _ in kept}, torch_intra)
        env[HOOK_VAR] += " every=" + ",".join(f"{key}:{n}" for key, n in every.items())
    env.pop(REPORT_VAR, None)  # an enclosing launch's folder is not this one's
    if report is not None:
        env[REPORT_VAR] = report
    user_path = base.get("PYTHONPATH", "")
    paths = [p for p in user_path.split(os.pathsep) if p != HOOK_DIR] if user_path else []  # "" means cwd
    env["PYTHONPATH"] = os.pathsep.join([HOOK_DIR, *paths])
    cpus = instance.cpus if instance is not None else plan.affinity
    ours = plan.preload_paths
    after: list[str] = []
    if ours:
        env[pre.PRELOAD_VAR], after = pre.compose_preload(ours, base)
        env[pre.MARK_VAR] = ":".join(ours)
    _no_nul(env, plan.name)
    return ChildEnv(env, tuple(kept), tuple(overridden), torch_intra, inter,
                    tuple(cpus) if cpus else None, tuple(ours), tuple(after))


def _no_nul(env: Mapping[str, str], profile: str) -> None:
    """Refuse a variable no program can receive (a plan made in Python, not from a checked profile)."""
    for name, value in env.items():
        if "\0" in name or "\0" in value or "=" in name:
            raise UsageError(f"profile {shorten(profile)}: variable {shorten(name)} cannot be passed to a program: "
                             "its name or value holds a NUL character (or its name an '=')")


def _set_by_outer_launch(base: Mapping[str, str]) -> frozenset[str]:
    """Variables an enclosing ``parinfo apply`` set (its hook's watch list): not the user's choice,
    so a nested launch replaces them without comment."""
    return pre.launch_marks(base).set


def check_cpus(cpus: Sequence[int], what: str) -> None:
    allowed = os.sched_getaffinity(0)
    outside = sorted(set(cpus) - allowed)
    if outside:
        raise ApplyError(f"{what} asks for CPUs {format_cpu_list(outside)} outside the CPUs this process may use "
                         f"({format_cpu_list(sorted(allowed))}); resolve the profile where it runs, or widen the "
                         f"affinity (taskset) first")


def exit_status(returncode: int) -> int:
    """A child's status as a shell reports it: the code, or 128+N when killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def not_started(command: Sequence[str], exc: OSError) -> int:
    """Say in one line why ``command`` could not start (naming the reason as ``parinfo tune`` does)
    and return the shell's code for it: 127 not found, 126 found but not runnable."""
    if isinstance(exc, FileNotFoundError):
        print(f"parinfo: error: command not found: {shorten(command[0])}", file=sys.stderr)
        return EXIT_NOT_FOUND
    reason = exc.strerror or str(exc)
    if isinstance(exc, PermissionError):
        path = command[0] if os.sep in command[0] else None
        what = ("it is a directory" if path and os.path.isdir(path)
                else "it is not executable" if path and os.path.exists(path) and not os.access(path, os.X_OK)
                else None)
        reason = "permission denied" + (f" ({what})" if what else "")
    print(f"parinfo: error: cannot run '{shorten(command[0])}': {reason}", file=sys.stderr)
    return EXIT_NOT_EXECUTABLE


def spawn(command: list[str], child: ChildEnv, **kw: Any) -> subprocess.Popen[bytes]:
    """Start one child pinned to ``child.cpus``: it inherits this process's affinity, set around Popen."""
    import subprocess

    before = os.sched_getaffinity(0)
    if child.cpus is not None:
        os.sched_setaffinity(0, child.cpus)
    try:
        return subprocess.Popen(command, env=child.env, **kw)
    finally:
        if child.cpus is not None:
            os.sched_setaffinity(0, before)


class Relay:
    """Forwards the signals this process receives to its children while installed."""

    def __init__(self, send: Callable[[int], None]) -> None:
        self.send = send
        self.saved: dict[int, Any] = {}  # what signal.signal returned: a handler, SIG_DFL or None

    def __enter__(self) -> Relay:
        for name in FORWARDED_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None:
                self.saved[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.send(signum)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)
