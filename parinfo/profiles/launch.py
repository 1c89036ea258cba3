"""Put a resolved Plan in force in a launched program, or across N pinned instances.

One process: the environment is built (:func:`parinfo.profiles.child.child_environ`), the CPU
affinity is applied, and the command replaces this process (exec), so its exit code and signals need
no relaying. Instances (N pinned children, each with its own counts) are run by
:mod:`parinfo.profiles.instances`.

This module is on the start-up path of ``parinfo apply P -- CMD``: it imports only os, sys and
signal at module level; subprocess and selectors are loaded for instances only.
"""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from parinfo.errors import UsageError
from parinfo.profiles.child import ChildEnv, Relay, check_cpus, child_environ, exit_status, not_started, spawn
from parinfo.profiles.instances import run_instances

if TYPE_CHECKING:  # pragma: no cover
    from parinfo.profiles.plan import Plan


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
