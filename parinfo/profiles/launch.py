"""Put a resolved Plan in force in a launched program, or across N pinned instances.

One process: the environment is built (the plan's variables, never overriding what the user set
unless ``force``), the CPU affinity is applied, and the command replaces this process (exec), so its
exit code and signals need no relaying. Python children also get a start-up hook (parinfo/profiles/hook/)
that sets torch's counts as soon as torch is imported and reports counts that are not in force.

Instances (N pinned children, each with its own counts) are run by
:mod:`parinfo.profiles.instances`.

This module is on the start-up path of ``parinfo apply P -- CMD``: it imports only os, sys and
signal at module level; subprocess and selectors are loaded for instances only.
"""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from parinfo.errors import ApplyError, UsageError
from parinfo.machine.cpulist import format_cpu_list
from parinfo.process import libraries as reg
from parinfo.safe_text import shorten

if TYPE_CHECKING:  # pragma: no cover
    import subprocess

    from parinfo.profiles.plan import InstancePlan, Plan

HOOK_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hook")
HOOK_VAR = "_PARINFO_HOOK"
# torch's intra-op default reads these; when the user's own value stays in force, torch follows it.
TORCH_INTRA_VARS = reg.library("torch").count_vars
FORWARDED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126


@dataclass(frozen=True)
class ChildEnv:
    """The environment of one launched process and what was decided on the way.

    ``kept`` and ``overridden`` hold (name, user value, plan value) for variables the user had set
    to another value; ``torch_intra`` is None when torch is left to the user's own variable.
    """

    env: dict[str, str]
    kept: tuple[tuple[str, str, str], ...]
    overridden: tuple[tuple[str, str, str], ...]
    torch_intra: int | None
    torch_inter: int
    cpus: tuple[int, ...] | None

    def messages(self, profile: str) -> list[str]:
        """One line per variable kept from (or overriding) the user's environment."""
        lines = [f"parinfo: keeping {n}={u!r} from your environment{_invalid_note(n, u)}; "
                 f"profile {profile} sets {p!r} (--force overrides)" for n, u, p in self.kept]
        lines += [f"parinfo: overriding {n}={u!r} from your environment with profile {profile}'s {p!r} "
                  f"(--force)" for n, u, p in self.overridden]
        return lines


def _invalid_note(name: str, value: str) -> str:
    from parinfo.process.variables import validate

    problem = validate(name, value)
    return f" (invalid: {problem}, so libraries ignore it)" if problem else ""


def _torch_counts(plan: Plan, instance: InstancePlan | None) -> tuple[int, int]:
    if instance is not None:
        return instance.intra_op, instance.inter_op
    torch = plan.libraries.get("torch")
    return (torch.value if torch is not None else plan.intra_op.value), plan.inter_op.value


def child_environ(plan: Plan, base: Mapping[str, str], *, force: bool = False,
                  instance: InstancePlan | None = None, instances: int = 0) -> ChildEnv:
    """The environment for a process launched under ``plan`` (or one of its instances).

    ``base`` is the launching environment: a variable already set there to another value is kept
    unless ``force`` (one set by an enclosing ``parinfo apply`` is not the user's, and is replaced).
    PARINFO_PROFILE (and PARINFO_INSTANCE/PARINFO_INSTANCES for an instance) are always set; the
    start-up hook's directory is put first on PYTHONPATH. An instance's ``env`` is laid over the
    plan's; its ``intra_op``/``inter_op`` give PARINFO_NUM_THREADS/PARINFO_NUM_INTEROP_THREADS and
    torch's counts.
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
    env["PARINFO_PROFILE"] = plan.name
    if instance is not None:
        env["PARINFO_INSTANCE"] = str(instance.index)
        env["PARINFO_INSTANCES"] = str(instances)
    intra, inter = _torch_counts(plan, instance)
    users_own = {n for n, _, _ in kept} | {n for n in TORCH_INTRA_VARS
                                            if n in base and n not in wanted and n not in from_parinfo}
    torch_intra = None if users_own.intersection(TORCH_INTRA_VARS) else intra
    env[HOOK_VAR] = f"1 intra={torch_intra or '-'} inter={inter} watch={','.join(watch)} {reg.hook_facts()}"
    user_path = base.get("PYTHONPATH", "")
    paths = [p for p in user_path.split(os.pathsep) if p != HOOK_DIR] if user_path else []  # "" means cwd
    env["PYTHONPATH"] = os.pathsep.join([HOOK_DIR, *paths])
    cpus = instance.cpus if instance is not None else plan.affinity
    return ChildEnv(env, tuple(kept), tuple(overridden), torch_intra, inter,
                    tuple(cpus) if cpus else None)


def _set_by_outer_launch(base: Mapping[str, str]) -> frozenset[str]:
    """Variables an enclosing ``parinfo apply`` set (its hook's watch list): not the user's choice,
    so a nested launch replaces them without comment."""
    for field in base.get(HOOK_VAR, "").split()[1:]:
        if field.startswith("watch="):
            return frozenset(n for n in field[len("watch="):].split(",") if n)
    return frozenset()


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


def run_plan(plan: Plan, command: Sequence[str], *, force: bool = False, replace: bool = True) -> int:
    """Run ``command`` (no shell) with ``plan`` in force; return the exit code to exit with.

    One process with ``replace`` (the default, what ``parinfo apply P -- CMD`` does): this process
    becomes the command (exec), so the return happens only when it cannot start: 127 when the
    command is not found, 126 when it cannot be executed. With ``replace=False`` the command runs
    as a child; signals sent to this process are relayed and its exit status is returned.
    With ``plan.instances``: see :func:`run_instances`.
    """
    command = list(command)
    if not command:
        raise UsageError("no command to run: give it after --, e.g. parinfo apply latency -- python train.py")
    if not command[0] or "\0" in "".join(command):
        raise UsageError("the command after -- has an empty name or a NUL character: give a program to run, "
                         "e.g. parinfo apply latency -- python train.py")
    if plan.instances:
        from parinfo.profiles.instances import run_instances

        return run_instances(plan, command, force=force)
    child = child_environ(plan, os.environ, force=force)
    if child.cpus is not None:
        check_cpus(child.cpus, f"profile {plan.name}'s affinity")
    for line in child.messages(plan.name):
        print(line, file=sys.stderr)
    if replace:
        return _exec(command, child)
    return _run_child(command, child)


def _exec(command: list[str], child: ChildEnv) -> int:
    before = os.sched_getaffinity(0)
    if child.cpus is not None:
        os.sched_setaffinity(0, child.cpus)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    # Python ignores SIGPIPE and SIGXFSZ; ignored signals survive exec, so give the command defaults.
    saved = {s: signal.signal(s, signal.SIG_DFL) for s in (signal.SIGPIPE, signal.SIGXFSZ)}
    try:
        os.execvpe(command[0], command, child.env)
    except OSError as exc:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        os.sched_setaffinity(0, before)
        return not_started(command, exc)
    raise AssertionError("unreachable")  # pragma: no cover


def spawn(command: list[str], child: ChildEnv, **kw: Any) -> subprocess.Popen:
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

    def __init__(self, send) -> None:
        self.send = send
        self.saved: dict[int, Any] = {}  # what signal.signal returned: a handler, SIG_DFL or None

    def __enter__(self) -> Relay:
        for name in FORWARDED_SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None:
                self.saved[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.send(signum)

    def __exit__(self, *exc) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)


def _terminal_already_signals_child() -> bool:
    """True when a terminal's ^C/^\\ reaches our children directly (same foreground process group)."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def _run_child(command: list[str], child: ChildEnv) -> int:
    try:
        proc = spawn(command, child)
    except OSError as exc:
        return not_started(command, exc)
    from_terminal = _terminal_already_signals_child()

    def send(signum: int) -> None:
        if from_terminal and signum in (signal.SIGINT, signal.SIGQUIT):
            return  # the terminal sent it to the child too; a second copy would interrupt its clean-up
        try:
            proc.send_signal(signum)
        except OSError:
            pass

    with Relay(send):
        return exit_status(proc.wait())
