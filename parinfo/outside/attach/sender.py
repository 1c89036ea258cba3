"""Handing the script to the target: ``sys.remote_exec(pid, path)`` (PEP 768), made from parinfo's own
interpreter when it can make the call (CPython 3.14+, of the target's version), else from the
target's own interpreter (``/proc/PID/exe``) run as a short helper, when that file is reachable, is
the very file the target runs, looks like a Python interpreter and is trusted (owned by root or by
parinfo's user, writable by nobody else; root runs another user's interpreter only as that user).

The call writes the script's path into the target's memory with a debugger's rights: the kernel
decides (same user or CAP_SYS_PTRACE, Yama's ptrace_scope), parinfo never asks for more, and a
refusal says which rule refused (:meth:`parinfo.machine.procfs.Proc.attach_refusal`). Every way it
fails is one :class:`AttachError` line.
"""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from typing import NamedTuple

from parinfo.errors import UsageError
from parinfo.machine.procfs import Proc, exited_during_read
from parinfo.records.unknown import Unknown
from parinfo.safe_text import escape_controls

#: The first Python that has sys.remote_exec.
MIN_VERSION = (3, 14)

# The helper run under the target's interpreter (-I -S: nothing from the environment or site).
_HELPER = """import sys
if not hasattr(sys, "remote_exec"):
    print("version", sys.version.split()[0])
else:
    try:
        sys.remote_exec(int(sys.argv[1]), sys.argv[2])
    except BaseException as exc:
        print("error", type(exc).__name__, getattr(exc, "errno", None) or 0, str(exc).replace(chr(10), " ")[:300])
    else:
        print("ok")
"""


NOT_PYTHON = "not a Python interpreter parinfo can run"


class AttachError(UsageError):
    """Attaching cannot work for this process: one line saying why (exit code 2)."""


def can_call_here() -> bool:
    """Whether parinfo's own interpreter can make the call."""
    return sys.implementation.name == "cpython" and sys.version_info[:2] >= MIN_VERSION \
        and hasattr(sys, "remote_exec")


def _version(v: tuple[int, ...] | list[int]) -> str:
    return ".".join(str(p) for p in v)


def _final(proc: Proc, kind: str, number: int, message: str) -> AttachError | None:
    """The one line for a failure of the call that another interpreter would not change, or None
    when the target's own interpreter may succeed where this one failed."""
    pid = proc.label
    if kind in ("PermissionError",) or number in (errno.EPERM, errno.EACCES):
        return AttachError(f"cannot attach to pid {pid}: {proc.attach_refusal()}")
    if kind == "ProcessLookupError" or number == errno.ESRCH or not proc.exists():
        return AttachError(str(exited_during_read(proc.pid or 0)))
    if "not enabled in the remote process" in message:
        return AttachError(f"pid {pid}'s Python has remote debugging turned off (started with "
                           "PYTHON_DISABLE_REMOTE_DEBUG set or -X disable-remote-debug, or built without it): attach "
                           "cannot run anything there")
    if "running interpreter" in message or "main thread" in message:
        return AttachError(f"pid {pid} has no running Python interpreter now (starting up or shutting down): "
                           "try again")
    return None


class NotPython(Unknown):
    """The target's program is no Python interpreter: no other interpreter would do better."""


class Interpreter(NamedTuple):
    """A target's interpreter, and whose rights it runs with (None: parinfo's own)."""

    path: str
    uid: int | None = None
    gid: int | None = None


def _interpreter(proc: Proc) -> Interpreter | Unknown:
    """The target's interpreter and how to run it, or why parinfo will not run it."""
    exe = proc.exe()
    if isinstance(exe, Unknown):
        return Unknown(f"its interpreter cannot be read ({escape_controls(exe.why)})")
    shown = escape_controls(exe)
    try:
        linked, found = os.stat(proc.path("exe")), os.stat(exe)
    except OSError:
        return Unknown(f"its interpreter {shown} is not reachable from here (deleted, or in another mount namespace)")
    if (linked.st_dev, linked.st_ino) != (found.st_dev, found.st_ino):
        return Unknown(f"{shown} is not the file the process runs (replaced since, or in another mount namespace)")
    if not os.path.basename(exe).startswith("python"):
        return NotPython(f"its program {shown} is {NOT_PYTHON}")
    if found.st_mode & 0o022:
        return Unknown(f"its interpreter {shown} is writable by other users: parinfo will not run it")
    if found.st_uid in (0, os.geteuid()):
        return Interpreter(exe)
    if os.geteuid() == 0:  # run it with its owner's rights, never root's
        return Interpreter(exe, found.st_uid, found.st_gid)
    return Unknown(f"its interpreter {shown} belongs to uid {found.st_uid}: parinfo runs no other user's program")


def _through_target(proc: Proc, path: str, deadline: float, earlier: str) -> str:
    """Make the call from the target's own interpreter; how it was made, in words."""
    pid = proc.label
    found = _interpreter(proc)
    if isinstance(found, NotPython):
        raise AttachError(f"pid {pid} runs {escape_controls(str(proc.exe()))}, {NOT_PYTHON}: no Python runtime to "
                          "attach to")
    if isinstance(found, Unknown):
        raise AttachError(f"cannot attach to pid {pid}: {earlier}, and {found.why}: run parinfo on Python "
                          f"{_version(MIN_VERSION)} or newer, the target's version")
    shown = escape_controls(found.path)
    left = max(0.5, deadline - time.monotonic())
    try:
        done = subprocess.run([found.path, "-I", "-S", "-c", _HELPER, pid, path], capture_output=True, env={},
                              timeout=left, user=found.uid, group=found.gid,
                              extra_groups=None if found.uid is None else [])
    except subprocess.TimeoutExpired:
        raise AttachError(f"cannot attach to pid {pid}: its interpreter {shown} did not answer within {left:.1f} s"
                          ) from None
    except OSError as exc:
        raise AttachError(f"cannot attach to pid {pid}: cannot run its interpreter {shown}: "
                          f"{exc.strerror or exc}") from None
    words = done.stdout[:2000].decode("utf-8", "replace").strip().split(" ", 3)
    if words[:1] == ["ok"]:
        return f"sys.remote_exec from the process's own interpreter {shown}"
    if words[:1] == ["version"] and len(words) == 2:
        raise AttachError(f"pid {pid} runs Python {escape_controls(words[1])} ({shown}): "
                          f"attach needs Python "
                          f"{_version(MIN_VERSION)} or newer (sys.remote_exec)")
    if words[:1] == ["error"] and len(words) == 4:
        number = int(words[2]) if words[2].isdigit() else 0
        failed = _final(proc, words[1], number, words[3])
        raise failed or AttachError(f"cannot attach to pid {pid}: {escape_controls(words[1])}: "
                                    f"{escape_controls(words[3])}")
    raise AttachError(f"cannot attach to pid {pid}: its interpreter {shown} ended with code "
                      f"{done.returncode} and no answer")


def send(proc: Proc, path: str, deadline: float) -> str:
    """Ask process ``proc`` to run the script at ``path`` (as it sees it) at its next chance; how
    the call was made, in words. Raises :class:`AttachError` with the one line that says why not."""
    if not can_call_here():
        return _through_target(proc, path, deadline, f"parinfo runs on Python {_version(sys.version_info[:3])}, "
                                                     f"without sys.remote_exec")
    try:
        sys.remote_exec(proc.pid or os.getpid(), path)  # type: ignore[attr-defined]
    except Exception as exc:
        number = getattr(exc, "errno", None) or 0
        failed = _final(proc, type(exc).__name__, number, str(exc))
        if failed is not None:
            raise failed from None
        # another version or build, no PyRuntime here, or this interpreter's own remote debugging off
        return _through_target(proc, path, deadline, str(exc).strip().rstrip("."))
    return f"sys.remote_exec from parinfo's Python {_version(sys.version_info[:3])}"
