"""The N pinned instances' output relayed to this process's streams, and their read-back.

Their output is relayed with ``[i] `` before every line; a partial line (a progress bar, a prompt)
is passed on at once, not held until its newline; once every instance has exited, for DRAIN_S at
most. With a log directory, each instance's output (stdout and stderr, as it came, without the
prefix) is also written to ``instance-I.log`` there (made through :mod:`parinfo.safe_file`). A log
or an output that cannot be written is a warning: the exit status is always the instances'.

Once an instance has run for :data:`parinfo.launch.verify.CHECK_AFTER_S`, its CPUs, memory
policy, variables and pool counts are read back from outside and shown as one table on stderr, with
one line per instance that did not get its plan (parinfo.launch.verify). The instances are started,
signalled and ended by :mod:`parinfo.launch.instances`.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from parinfo.launch.child import exit_status

if TYPE_CHECKING:  # pragma: no cover
    import selectors

    from parinfo.launch.reaping import Leader
    from parinfo.launch.verify import Check
    from parinfo.profiles.plan import InstancePlan


class Log:
    """One instance's log file, written without a buffer; the first write that fails (a full disk)
    is said once as a warning, and the log is left: the terminal still gets the output, and the
    exit status stays the instances'."""

    def __init__(self, fd: int, shown: str) -> None:
        self.fd: int | None = fd
        self.shown = shown

    def write(self, data: bytes) -> str | None:
        """Write ``data``; a warning line the first time that fails, else None."""
        if self.fd is None:
            return None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as exc:
            self.close()
            return (f"parinfo: warning: cannot write {self.shown}: {exc.strerror or exc}; this log stops here, "
                    "the terminal still gets the output")
        return None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def open_logs(log_dir: str | None, instances: Sequence[InstancePlan]) -> dict[int, Log]:
    """One new file per instance under ``log_dir`` (made if missing), instance-I.log, through
    parinfo.safe_file: no link another user made is followed, and the folder must be one no other
    user can write. A folder that cannot be made or written, or is not safe, is a usage error before
    anything starts."""
    if log_dir is None:
        return {}
    import parinfo.safe_file as safe_file
    from parinfo.errors import UsageError
    from parinfo.safe_text import shorten

    logs: dict[int, Log] = {}
    shown = shorten(log_dir, 300)
    try:
        folder = safe_file.writable_dir(log_dir)
        try:
            for inst in instances:
                name = f"instance-{inst.index}.log"
                logs[inst.index] = Log(safe_file.create(folder, name), f"{shown}/{name}")
        finally:
            os.close(folder)
    except OSError as exc:
        for log in logs.values():
            log.close()
        fix = ("give a folder that no other user can write, e.g. one you make with mkdir -m 700"
               if isinstance(exc, safe_file.Unsafe) else "give a directory you may write to")
        raise UsageError(f"--log-dir {shown}: cannot write a log there: {exc.strerror or exc} ({fix})") from None
    return logs


class Prefixed:
    """One instance's pipe relayed to one of our streams with ``[i] `` before every line.

    Whole lines go out as they arrive. A partial line (a progress bar, a prompt) is held at most
    HOLD_S seconds or HOLD_BYTES bytes for its end, then passed on as it is; if another instance then
    writes to the same stream, the open line is ended first, so every line names one instance.
    Work is linear in the bytes relayed: the held part is bounded, never re-copied as it grows.
    """

    HOLD_S = 0.05
    HOLD_BYTES = 1 << 16

    def __init__(self, prefix: bytes, out: Any, owners: dict[int, Prefixed | None],
                 log: Log | None = None, warned: set[int] | None = None) -> None:
        self.prefix = prefix
        self.out = out
        self.log = log  # the instance's log file: its bytes as they come, unprefixed
        self.owners = owners  # id(stream) -> the relay whose line is open there
        self.warned = set() if warned is None else warned  # id(stream) of streams said to be unwritable
        self.at_line_start = True
        self.held = bytearray()
        self.held_since: float | None = None

    def feed(self, data: bytes, now: float) -> None:
        """Take bytes read from the pipe: pass on every whole line, hold a short partial one."""
        if self.log is not None:
            warning = self.log.write(data)
            if warning:
                _say(self.owners, [warning])
        self.held += data
        cut = self.held.rfind(b"\n")
        if cut >= 0:
            self._emit(bytes(self.held[:cut + 1]))
            del self.held[:cut + 1]
            self.held_since = None
        if len(self.held) >= self.HOLD_BYTES:
            self.flush()
        elif self.held and self.held_since is None:
            self.held_since = now

    def due(self) -> float | None:
        """When the held partial line must go out, or None when nothing is held."""
        return None if self.held_since is None else self.held_since + self.HOLD_S

    def flush(self) -> None:
        if self.held:
            self._emit(bytes(self.held))
            self.held.clear()
        self.held_since = None

    def close(self) -> None:
        self.flush()
        if not self.at_line_start:
            self._emit(b"\n")

    def _emit(self, data: bytes) -> None:
        parts = []
        owner = self.owners.get(id(self.out))
        if owner is not None and owner is not self:
            parts.append(b"\n")
            owner.at_line_start = True
        if self.at_line_start:
            parts.append(self.prefix)
        ends = data.endswith(b"\n")
        body = data[:-1] if ends else data
        parts.append(body.replace(b"\n", b"\n" + self.prefix))
        if ends:
            parts.append(b"\n")
        self.at_line_start = ends
        self.owners[id(self.out)] = None if ends else self
        why = write_now(self.out, b"".join(parts))
        if why and self.out is not sys.stderr and id(self.out) not in self.warned:
            self.warned.add(id(self.out))  # keep draining the pipes, so the instances never block
            write_now(sys.stderr, f"parinfo: warning: cannot write the output: {why}; the instances run on, and "
                                  "parinfo exits with their status\n".encode())


#: How long output is still relayed once every instance has exited: a process that outlived its
#: instance (and holds its pipe) is ended meanwhile, but must never keep the launch waiting.
DRAIN_S = 2.0


def supervise(procs: list[tuple[int, Leader]], expected: list[list[Check]],
              logs: dict[int, Log], all_exited: Callable[[], None] = lambda: None,
              every_second: Callable[[], None] = lambda: None) -> tuple[int, list[str]]:
    """Relay prefixed output until every instance has exited, reading each back CHECK_AFTER_S
    after the start and calling ``every_second`` meanwhile; then call ``all_exited`` and relay what
    is left in the pipes for at most DRAIN_S. The first failure's status and the lines of instances
    that did not get their plan. The instances are not reaped here (:class:`Leader`)."""
    import selectors
    import time

    from parinfo.launch.verify import CHECK_AFTER_S

    sel = selectors.DefaultSelector()
    owners: dict[int, Prefixed | None] = {}
    warned: set[int] = set()
    relays: list[Prefixed] = []
    check_at: float | None = time.monotonic() + CHECK_AFTER_S
    problems: list[str] = []
    exact = _register(sel, procs, logs, owners, warned, relays)
    first_failure = 0
    running = {leader.pid for _, leader in procs}

    def exited(leader: Leader) -> None:
        nonlocal first_failure
        returncode = leader.poll()
        if leader.pid in running and returncode is not None:
            running.discard(leader.pid)
            status = exit_status(returncode)
            if status and not first_failure:
                first_failure = status

    drain_until: float | None = None
    tick_at = time.monotonic() + 1.0
    while sel.get_map():
        now = time.monotonic()
        if now >= tick_at:
            every_second()
            tick_at = now + 1.0
        if drain_until is None and not running:
            all_exited()
            now = time.monotonic()
            drain_until = now + DRAIN_S
        if drain_until is not None and now >= drain_until:
            break
        if check_at is not None and now >= check_at:
            check_at = None
            problems = _verify(procs, expected, owners)
        idle = _idle(exact, now, (check_at, drain_until, tick_at))
        for key, _ in sel.select(_timeout(relays, now, idle)):
            _ready(sel, key, exited)
        now = time.monotonic()
        for relay in relays:
            due = relay.due()
            if due is not None and due <= now:
                relay.flush()
        if not exact:
            for _, leader in procs:
                exited(leader)
    _close_left(sel)
    for _, leader in procs:  # output closed before exit: wait in start order
        leader.wait()
        exited(leader)
    return first_failure, problems


def _register(sel: selectors.BaseSelector, procs: list[tuple[int, Leader]], logs: dict[int, Log],
              owners: dict[int, Prefixed | None], warned: set[int], relays: list[Prefixed]) -> bool:
    """Watch each instance's output pipes (a relay each, added to ``relays``) and, through a pidfd,
    its exit; False when some exit cannot be seen that way (then exits are polled every 50 ms)."""
    import selectors

    exact = True
    for index, leader in procs:
        prefix = f"[{index}] ".encode()
        for pipe, out in ((leader.proc.stdout, sys.stdout), (leader.proc.stderr, sys.stderr)):
            assert pipe is not None
            os.set_blocking(pipe.fileno(), False)
            relays.append(Prefixed(prefix, out, owners, logs.get(index), warned))
            sel.register(pipe, selectors.EVENT_READ, ("out", relays[-1], pipe))
        pidfd = _pidfd(leader.pid)  # readable once it has exited; reaps nothing
        if pidfd is None:
            exact = False
        else:
            sel.register(pidfd, selectors.EVENT_READ, ("exit", leader, None))
    return exact


def _idle(exact: bool, now: float, deadlines: tuple[float | None, ...]) -> float | None:
    """How long the loop may wait for output: until the nearest deadline (None: no bound; 50 ms at
    most when exits are polled)."""
    idle = None if exact else 0.05
    for at in deadlines:
        if at is not None:
            idle = max(0.0, at - now) if idle is None else min(idle, max(0.0, at - now))
    return idle


def _ready(sel: selectors.BaseSelector, key: selectors.SelectorKey, exited: Callable[[Leader], None]) -> None:
    """Handle one ready file: an instance's exit (its pidfd), or output to relay (an end of file
    closes the pipe and its relay)."""
    import time

    kind, target, pipe = key.data
    if kind == "exit":
        sel.unregister(key.fd)
        os.close(key.fd)
        target.wait()
        exited(target)
        return
    try:
        data = os.read(key.fd, 65536)
    except BlockingIOError:
        return
    if data:
        target.feed(data, time.monotonic())
    else:
        sel.unregister(key.fileobj)
        target.close()
        pipe.close()


def _close_left(sel: selectors.BaseSelector) -> None:
    """Close the pipes still held open once the drain's bound is over, then the selector."""
    for key in list(sel.get_map().values()):
        sel.unregister(key.fileobj)
        kind, target, pipe = key.data
        if kind == "out":
            target.close()
            pipe.close()
    sel.close()


def _verify(procs: list[tuple[int, Leader]], expected: list[list[Check]],
            owners: dict[int, Prefixed | None]) -> list[str]:
    """Read every instance still running and print the table and the lines of those that did not
    get their plan (nothing when every instance has ended: there is nothing left to read)."""
    from parinfo.launch.verify import Row, problems, read_instance, report

    rows = [read_instance(index, leader.pid, checks) if leader.poll() is None else Row(index, leader.pid, ended=True)
            for (index, leader), checks in zip(procs, expected, strict=True)]
    lines = report(rows, [c.column for c in expected[0]])
    if lines:
        _say(owners, lines)
    return problems(rows)


def _say(owners: dict[int, Prefixed | None], lines: list[str]) -> None:
    """Lines of parinfo's own on stderr, after ending a partial line an instance left open there."""
    from parinfo.safe_text import escape_controls

    data = "".join(escape_controls(line) + "\n" for line in lines).encode("utf-8", "replace")
    owner = owners.get(id(sys.stderr))
    if owner is not None:
        data = b"\n" + data
        owner.at_line_start = True
        owners[id(sys.stderr)] = None
    write_now(sys.stderr, data)


def _timeout(relays: list[Prefixed], now: float, idle: float | None) -> float | None:
    """How long select may wait: until the first held partial line is due, else ``idle``."""
    dues = [d for d in (r.due() for r in relays) if d is not None]
    if not dues:
        return idle
    wait = max(0.0, min(dues) - now)
    return wait if idle is None else min(wait, idle)


def _pidfd(pid: int) -> int | None:
    opener: Callable[[int], int] | None = getattr(os, "pidfd_open", None)  # Linux 5.3+ and Python 3.9+
    if opener is None:
        return None
    try:
        return opener(pid)
    except OSError:
        return None


def write_now(stream: Any, data: bytes) -> str | None:
    """Write ``data`` to ``stream`` unbuffered (nothing is left behind to fail again at exit); why
    it could not, or None."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        fd = None
    try:
        if fd is None:
            stream.buffer.write(data)
            stream.buffer.flush()
            return None
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BlockingIOError:
        return None  # a non-blocking terminal that is full: this piece is dropped, the rest goes on
    except (OSError, ValueError, AttributeError) as exc:
        return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return None
