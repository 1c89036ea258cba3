"""Attach: read a running Python 3.14+ process from inside, through ``sys.remote_exec`` (PEP 768).

:func:`attach` runs :mod:`parinfo.outside.attach.in_target` on the target's main thread at its next
bytecode: a script that imports nothing, sets nothing, starts no thread, prints nothing, and answers
through a private FIFO (:mod:`parinfo.outside.attach.channel`) with the facts only the inside knows:
each loaded pool's count through the library's own getter, torch's counts, the environment now,
the Python threads, parinfo's runtime when it runs there. The report is then built outside by
parinfo's usual code (:mod:`parinfo.diagnostics.attached`).

Bounded in time (``timeout``, :data:`DEFAULT_TIMEOUT` seconds by default): a main thread that runs
no Python code meanwhile (a long C call: a sleep, a lock, I/O) never runs the script in time; the
request is then withdrawn (its path replaced by /dev/null, which runs nothing), the channel removed,
and a script that still runs later finds nobody and does nothing. The process's identity (pid and
start time) is checked before and after. Attaches to one process take turns (one pending script per
thread is all ``sys.remote_exec`` keeps). When no answer comes, the line says what was observed:
the process exited or started another program, the script began but was slow, it was read but
never answered, or nothing was seen of it (the main thread in C, or an audit hook refused it).
Every way it cannot work is one :class:`AttachError` line.
"""
from __future__ import annotations

import functools
import marshal
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from parinfo.errors import UsageError
from parinfo.machine.procfs import Proc, exited_during_read
from parinfo.outside.attach import sender
from parinfo.outside.attach.channel import Channel
from parinfo.outside.attach.result import MAX_ITEMS, MAX_TEXT, Answer, BadAnswer, parse
from parinfo.outside.attach.sender import AttachError, send
from parinfo.outside.attach.turn import turn
from parinfo.process import libraries as reg
from parinfo.process.outer import FRAMEWORK_MODULES
from parinfo.records.record import record

__all__ = ["DEFAULT_TIMEOUT", "MAX_TIMEOUT", "Answer", "AttachError", "Attached", "attach", "script_data"]

#: Seconds an attach waits for the target by default, and the most it may be given.
DEFAULT_TIMEOUT = 5.0
MAX_TIMEOUT = 600.0
#: Seconds the script file outlives a withdrawn request: a target that copied the old path just
#: before it was replaced still finds the script (which then finds nobody and does nothing).
_GRACE = 0.2
#: Modules whose presence the script reports (what the report's rules and rows ask about).
_MODULES_ASKED = ("parinfo", *FRAMEWORK_MODULES)


@record(frozen=True)
class Attached:
    """An attach's answer (:class:`~parinfo.outside.attach.result.Answer`), how the call was made
    (``means``, in words) and how long the round trip took (``seconds``)."""

    answer: Answer
    means: str
    seconds: float


def script_data(fifo: str, token: str, cap: int, pools: list[tuple[str, str]], skip_native: bool,
                machine: tuple[int, int]) -> dict[str, Any]:
    """The script's DATA: where to answer, and what to read, taken from the library registry.

    ``pools`` are (file, library) pairs of the runtimes mapped into the target; ``skip_native``
    (Intel's and LLVM's OpenMP runtimes both loaded) leaves every native getter and torch uncalled,
    as parinfo's own report does in such a process; ``machine`` is (usable physical cores, usable
    CPUs) of the target as read outside, with which parinfo's runtime there shows the counts it has
    not resolved yet without resolving them.
    """
    from parinfo.process.torch_config import TORCH_CALLS

    torch = reg.family(reg.Torch)
    return {
        "fifo": fifo, "token": token, "cap": cap, "max_items": MAX_ITEMS, "max_text": MAX_TEXT,
        "machine": [int(machine[0]), int(machine[1])],
        "env_names": sorted(reg.THREAD_VARS), "env_prefixes": list(reg.THREAD_PREFIXES),
        "modules": sorted({*_MODULES_ASKED, *(r.module for r in reg.records() if r.module),
                           *(m for v in reg.THREAD_VARS.values() for m, _ in v.set_on_import)}),
        "pools": [list(p) for p in pools],
        "native": {r.name: r.native.to_data() for r in reg.records() if r.native is not None},
        "skip_native": skip_native,
        "torch": {"module": torch.module, "calls": dict(TORCH_CALLS)},
        "python_libs": [_python_lib(r) for r in reg.python_libraries()],
    }


def _python_lib(rec: Any) -> list[Any]:
    """What the script asks of one Python-module library: [name, module, getter, facts, guard,
    the getters of its other pools] (in_target's ``python_libs``)."""
    getter, guard = rec.attach_getter()
    return [rec.name, rec.module, getter, list(rec.module_facts), None if guard is None else list(guard),
            [p.calls.getter for p in rec.pools if p.calls is not None]]


@functools.cache
def _source() -> str:
    return (Path(__file__).with_name("in_target.py")).read_text(encoding="utf-8")


@functools.cache
def _compiled() -> bytes:
    """The script compiled by this interpreter, marshalled (what a target of this very version runs
    instead of compiling the source: 2 ms less of its main thread)."""
    return marshal.dumps(compile(_source(), _NAME, "exec"))


_NAME = "<parinfo attach>"
# Runs the script: this interpreter's compiled code when the target is this very version and build
# (marshal, a built-in module every interpreter has loaded), else the source, compiled there.
_RUN = """
def _parinfo_attach(data, source, code, version):
    try:
        sys = __import__("sys")
        loads = getattr(sys.modules.get("marshal"), "loads", None)
        if code and loads is not None and (sys.hexversion, sys.abiflags) == version:
            compiled = loads(code)
        else:
            compiled = compile(source, {name!r}, "exec")
        namespace = {{}}
        exec(compiled, namespace)
        namespace["main"](data)
    except Exception:
        pass


_parinfo_attach({data!r}, {source!r}, {code!r}, {version!r})
"""


def script(data: dict[str, Any]) -> str:
    """The text sent to the target: :mod:`in_target`'s source and ``main(data)``, with the code this
    interpreter compiled when it can make the call itself (the target may be its very version)."""
    here = sender.can_call_here()
    return _RUN.format(name=_NAME, data=data, source=_source(), code=_compiled() if here else b"",
                       version=(sys.hexversion, getattr(sys, "abiflags", "")) if here else None)


def _owner(proc: Proc) -> tuple[int, int]:
    """The target's real uid and gid (who must be able to read the script)."""
    status = proc.status()
    try:
        return int(status["Uid"].split()[0]), int(status["Gid"].split()[0])
    except (KeyError, IndexError, ValueError):
        raise exited_during_read(proc.pid or 0) from None


def _withdraw(proc: Proc) -> None:
    """Replace the pending script's path with /dev/null (an empty script): a target that reaches its
    next bytecode later runs nothing of parinfo's. Best effort: a failure leaves the path, whose
    script will be gone and whose channel finds nobody."""
    try:
        send(proc, os.devnull, time.monotonic() + 2.0)
    except AttachError:
        pass


def _program(proc: Proc) -> tuple[int, int, str] | None:
    """What the process runs: its executable's (device, inode) and its name; None when unreadable."""
    try:
        st = os.stat(proc.path("exe"))
        return st.st_dev, st.st_ino, proc.stat().name
    except (OSError, UsageError):
        return None


def _ended(proc: Proc) -> bool:
    """Whether the process has exited (a zombie its parent has not reaped yet, or gone)."""
    try:
        return proc.stat().dead
    except UsageError:
        return True


def _no_answer(pid: int, proc: Proc, program: tuple[int, int, str] | None, channel: Channel, timeout: float,
               raw: bytes | None) -> UsageError:
    """Why the process gave no answer, as far as parinfo can tell from outside."""
    if not proc.same() or _ended(proc):
        return exited_during_read(pid)
    now = _program(proc)
    if program is not None and now is not None and now != program:
        return AttachError(f"pid {pid} started another program (exec) during the attach: the request went with "
                           "the interpreter it replaced")
    if raw is not None:
        return AttachError(f"pid {pid} ran the attach script, which ended without an answer (it failed inside "
                           "the process)")
    if channel.heard:
        return AttachError(f"pid {pid} began the attach script but did not finish its answer within {timeout:g} s "
                           "(its main thread is slow to run it: a busy machine, or a very large process). Try "
                           "again, or give more time with --timeout")
    if channel.script_read():
        return AttachError(f"pid {pid} read the attach script but never opened the answer channel: the script "
                           "failed inside the process")
    return AttachError(f"pid {pid} did not run the attach script within {timeout:g} s: its main thread ran no "
                       "Python code meanwhile (a long call into C: a sleep, a lock, I/O), or an audit hook in "
                       "it refused the script; the request was withdrawn. Try again, or give more time with "
                       "--timeout")


def attach(proc: Proc, pools: list[tuple[str, str]], machine: tuple[int, int], *, timeout: float = DEFAULT_TIMEOUT,
           skip_native: bool = False) -> Attached:
    """Run the script inside process ``proc`` (its handle) and return its answer. ``pools``: (file, library) of
    the runtimes in its maps; ``machine`` and ``skip_native``: see :func:`script_data`. Attaches to
    one process take turns (:mod:`~parinfo.outside.attach.turn`). Raises ProcessGone or NotAProcess
    (gone, a kernel thread, a zombie), or AttachError: one line each, saying what was observed."""
    started = time.monotonic()
    deadline = started + timeout
    pid = proc.pid or os.getpid()
    proc.check()
    uid, gid = _owner(proc)
    inner = proc.inner_pid()
    token = secrets.token_hex(16)
    if sender.can_call_here():
        _compiled()  # compiled before the turn is taken: the turn is held only for the round trip
    with turn(proc, deadline), Channel(proc, uid, gid) as channel:
        program = _program(proc)
        data = script_data(channel.fifo, token, channel.cap, pools, skip_native, machine)
        path = channel.write_script(script(data))
        means = send(proc, path, deadline)
        raw = channel.receive(deadline)
        if raw is None or not raw.strip():
            if raw is None:
                _withdraw(proc)
                time.sleep(_GRACE)
            raise _no_answer(pid, proc, program, channel, timeout, raw)
    seconds = time.monotonic() - started
    if not proc.same():
        raise exited_during_read(pid)
    try:
        answer = parse(raw, token, inner)
    except BadAnswer as exc:
        raise AttachError(f"pid {pid}'s answer cannot be read: {exc}") from None
    return Attached(answer, means, seconds)
