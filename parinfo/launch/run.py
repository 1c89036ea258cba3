"""Put a resolved Plan in force in a launched program, or across N pinned instances.

One process: the environment is built (:func:`parinfo.launch.child.child_environ`), the CPU
affinity is applied, and the command replaces this process (exec), so its exit code and signals need
no relaying. Instances (N pinned children, each with its own counts) are run by
:mod:`parinfo.launch.instances`.

This module is on the start-up path of ``parinfo apply P -- CMD``: it imports only os, sys, signal
and contextlib at module level (and parinfo's own small modules); subprocess, selectors and ctypes
(for the memory policy) are loaded when needed.
"""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from parinfo.errors import UsageError
from parinfo.launch.child import ChildEnv, Relay, check_cpus, child_environ, exit_status, not_started, spawn
from parinfo.launch.instances import run_instances
from parinfo.safe_text import plural

if TYPE_CHECKING:  # pragma: no cover
    import subprocess

    from parinfo.launch.verify import Check
    from parinfo.profiles.memory import Binding
    from parinfo.profiles.plan import Plan


def run_plan(plan: Plan, command: Sequence[str], *, force: bool = False, replace: bool = True,
             instance_index: int | None = None, log_dir: str | None = None, check: bool = False) -> int:
    """Run ``command`` (no shell) with ``plan`` in force; return the exit code to exit with.

    One process with ``replace`` (the default, what ``parinfo apply P -- CMD`` does): this process
    becomes the command (exec), so the return happens only when it cannot start: 127 when the
    command is not found, 126 when it cannot be executed. With ``replace=False`` the command runs
    as a child; signals sent to this process are relayed and its exit status is returned.
    With ``check``, the one program runs as a child (as with ``replace=False``) and is read back
    after it started. With ``plan.instances``: see :func:`run_instances` (``log_dir``, ``check``),
    or, with ``instance_index`` K, instance K alone, started as one process is (for a scheduler that
    starts each instance itself).
    """
    command = list(command)
    if not command:
        raise UsageError("no command to run: give it after --, e.g. parinfo apply latency -- python train.py")
    if not command[0] or "\0" in "".join(command):
        raise UsageError("the command after -- has an empty name or a NUL character: give a program to run, "
                         "e.g. parinfo apply latency -- python train.py")
    if instance_index is not None and (log_dir is not None or check):
        raise UsageError("--log-dir and --check apply to programs that parinfo starts and watches; "
                         "--instance-index starts one instance in place of parinfo: redirect its output yourself, "
                         "and run parinfo show --check inside it")
    if not plan.instances and log_dir is not None:
        raise UsageError("--log-dir writes one log per instance; this profile runs one program: redirect its "
                         "output yourself (> FILE 2>&1)")
    if instance_index is not None:
        return _one_instance(plan, command, instance_index, force=force, replace=replace)
    if plan.instances:
        return run_instances(plan, command, force=force, log_dir=log_dir, check=check)
    child = child_environ(plan, os.environ, force=force)
    if child.cpus is not None:
        check_cpus(child.cpus, f"profile {plan.name}'s affinity")
    for line in child.messages(plan.name):
        print(line, file=sys.stderr)
    bind = _binding(plan.memory, plan.memory_nodes, f"profile {plan.name}'s program")
    if check:
        from parinfo.launch.verify import checks_for

        return _run_child(command, child, bind, checks_for(plan, child, bind))
    if replace:
        return _exec(command, child, bind)
    return _run_child(command, child, bind)


def _one_instance(plan: Plan, command: list[str], index: int, *, force: bool, replace: bool) -> int:
    """Instance ``index`` of the plan's layout alone, with its CPUs, counts, memory and
    PARINFO_INSTANCE, as :func:`run_plan` runs one process."""
    n = len(plan.instances)
    if not plan.instances:
        raise UsageError(f"--instance-index {index}: profile {plan.name} runs one process, not instances "
                         "(give the profile an 'instances' key, or add --instances N)")
    if not 0 <= index < n:
        raise UsageError(f"--instance-index {index}: profile {plan.name} lays out {plural(n, 'instance')} here, "
                         f"numbered 0-{n - 1}")
    inst = plan.instances[index]
    child = child_environ(plan, os.environ, force=force, instance=inst, instances=n)
    if child.cpus is not None:
        check_cpus(child.cpus, f"instance {index} of profile {plan.name}")
    for line in child.messages(plan.name):
        print(line, file=sys.stderr)
    bind = _binding(plan.memory, inst.nodes, f"instance {index}")
    if replace:
        return _exec(command, child, bind)
    return _run_child(command, child, bind)


def _binding(mode: str, nodes: tuple[int, ...], what: str) -> Binding | None:
    """The program's memory binding (the module that makes it is loaded only when there is one)."""
    if mode == "none":
        return None
    from parinfo.profiles.memory import binding

    return binding(mode, nodes, what)


def _hold(bind: Binding | None, command: list[str]) -> AbstractContextManager[tuple[list[str], str | None]]:
    if bind is None:
        return nullcontext((command, None))
    from parinfo.profiles.memory import hold

    return hold(bind, command)


def _exec(command: list[str], child: ChildEnv, bind: Binding | None) -> int:
    with _hold(bind, command) as (argv, note):
        if note:
            print(note, file=sys.stderr)
        return _exec_now(argv, child)


def _exec_now(command: list[str], child: ChildEnv) -> int:
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


def _terminal_already_signals_child() -> bool:
    """True when a terminal's ^C/^\\ reaches our children directly (same foreground process group)."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def _run_child(command: list[str], child: ChildEnv, bind: Binding | None,
               checks: list[Check] | None = None) -> int:
    try:
        with _hold(bind, command) as (argv, note):
            if note:
                print(note, file=sys.stderr)
            proc = spawn(argv, child)
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
        if checks is None:
            return exit_status(proc.wait())
        return _watched(proc, checks)


def _watched(proc: subprocess.Popen[bytes], checks: list[Check]) -> int:
    """Wait for the program, reading it back CHECK_AFTER_S after its start (``--check``): its exit
    status, or EXIT_CHECK_FAILED when it succeeded but did not get its plan."""
    import subprocess

    from parinfo.launch.verify import CHECK_AFTER_S, EXIT_CHECK_FAILED, problems, read_instance, report
    from parinfo.safe_text import escape_controls

    try:
        return exit_status(proc.wait(timeout=CHECK_AFTER_S))
    except subprocess.TimeoutExpired:
        pass
    rows = [read_instance(None, proc.pid, checks)]
    for line in report(rows, [c.column for c in checks]):
        print(escape_controls(line), file=sys.stderr, flush=True)
    status = exit_status(proc.wait())
    return EXIT_CHECK_FAILED if problems(rows) and not status else status
