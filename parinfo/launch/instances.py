"""Run N pinned instances of a command, each with its own CPUs and counts, as one job.

Each instance gets PARINFO_INSTANCE=i and PARINFO_INSTANCES=N, stdin from /dev/null (N copies cannot
share a terminal) and its own process group, so signals reach it only through this launcher:
- SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to every instance; Ctrl-C (SIGINT)
  escalates: passed on, then SIGTERM, then SIGKILL (:class:`_Interrupts`);
- job control works on the whole job: ^Z (SIGTSTP) stops the instances, then the launcher; SIGCONT
  resumes them all;
- if the launcher dies, even by SIGKILL, the kernel sends every instance SIGTERM (a parent-death
  signal), and :mod:`parinfo.launch.reaping` ends every process they started, then as when they
  have all exited.
Their output is relayed with ``[i] `` before every line; a partial line (a progress bar, a prompt)
is passed on at once, not held until its newline; once every instance has exited, for DRAIN_S at
most. With a log directory, each instance's output (stdout and stderr, as it came, without the
prefix) is also written to ``instance-I.log`` there (made through :mod:`parinfo.safe_file`). A log
or an output that cannot be written is a warning: the exit status is always the instances'.
With the plan's ``memory``, each instance's memory is bound to the NUMA nodes of its own CPUs.

Once an instance has run for :data:`parinfo.launch.verify.CHECK_AFTER_S`, its CPUs, memory
policy, variables and pool counts are read back from outside and shown as one table on stderr, with
one line per instance that did not get its plan (parinfo.launch.verify).
"""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from parinfo.launch.child import Relay, check_cpus, child_environ, exit_status, not_started, spawn
from parinfo.launch.reaping import Leader, Reaper

if TYPE_CHECKING:  # pragma: no cover
    from parinfo.launch.verify import Check
    from parinfo.profiles.plan import InstancePlan, Plan

#: What an instance receives when the launcher dies.
PARENT_DEATH_SIGNAL = signal.SIGTERM


def run_instances(plan: Plan, command: Sequence[str], *, force: bool = False, log_dir: str | None = None,
                  check: bool = False) -> int:
    """Run one copy of ``command`` per ``plan.instances`` entry, each pinned and with its own counts.

    Returns 0 when all succeed, else the exit status of the first instance that failed; the others
    are left to finish. With ``check``, an instance that did not get its plan makes it
    EXIT_CHECK_FAILED when all succeeded. ``log_dir``: see the module's note.
    """
    import subprocess

    from parinfo.launch.verify import EXIT_CHECK_FAILED, checks_for
    from parinfo.profiles.memory import binding, hold

    command = list(command)
    n = len(plan.instances)
    children = [child_environ(plan, os.environ, force=force, instance=inst, instances=n)
                for inst in plan.instances]
    bindings = [binding(plan.memory, inst.nodes, f"instance {inst.index}") for inst in plan.instances]
    logs = _open_logs(log_dir, plan.instances)
    for inst, child in zip(plan.instances, children, strict=True):
        if child.cpus is not None:
            check_cpus(child.cpus, f"instance {inst.index} of profile {plan.name}")
    seen: set[str] = set()
    for child in children:
        for line in child.messages(plan.name):
            if line not in seen:
                seen.add(line)
                print(line, file=sys.stderr)
    sys.stderr.flush()
    sys.stdout.flush()
    procs: list[tuple[int, Leader]] = []
    expected = []
    send = _sender(procs)
    reaper = Reaper.start()
    preexec = reaper.preexec(_parent_death_hook(os.getpid()))
    try:
        with _Interrupts(send, reaper, len(plan.instances)) as interrupts, Relay(interrupts), _JobControl(send):
            for inst, child, bind in zip(plan.instances, children, bindings, strict=True):
                try:
                    with hold(bind, command) as (argv, note):
                        if note:
                            print(note, file=sys.stderr, flush=True)
                        proc = spawn(argv, child, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True, preexec_fn=preexec)
                except (OSError, subprocess.SubprocessError) as exc:
                    send(signal.SIGTERM)
                    for _, started in procs:
                        started.wait()  # not reaped: finish reaps it once its group is ended
                    if isinstance(exc, OSError):
                        return not_started(command, exc)
                    raise
                leader = Leader(proc)
                procs.append((inst.index, leader))
                reaper.watch(leader)
                expected.append(checks_for(plan, child, bind, inst))
            status, problems = _supervise(procs, expected, logs, reaper.finish, reaper.reap)
            if check and problems and not status:
                return EXIT_CHECK_FAILED
            return status
    finally:
        for _, leader in procs:
            if leader.poll() is None:  # only after an unexpected error: leave no orphans
                leader.kill()
                leader.wait()
        reaper.finish()  # reaps the instances, once their groups are ended
        for log in logs.values():
            log.close()


class _Interrupts:
    """What Ctrl-C (SIGINT) does, more each time, said in one line on stderr: the first is passed
    on to the instances, the second sends them SIGTERM, the third, or KILL_AFTER_S seconds after
    the second, SIGKILL to every process they started. Other signals are passed on as they come.
    While installed it owns SIGALRM (the timer of that last step)."""

    KILL_AFTER_S = 5.0
    STEPS = ((signal.SIGINT, "SIGINT passed on to {n}; Ctrl-C again sends SIGTERM"),
             (signal.SIGTERM, "SIGTERM sent to {n}; Ctrl-C again, or {s:g} s, sends SIGKILL"),
             (signal.SIGKILL, "SIGKILL sent to {n} and every process they started"))

    def __init__(self, send: Callable[[int], None], reaper: Reaper, count: int) -> None:
        self.send = send
        self.reaper = reaper
        self.what = "the instance" if count == 1 else f"the {count} instances"
        self.seen = 0
        self.saved_alarm: Any = None

    def __enter__(self) -> _Interrupts:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.saved_alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.saved_alarm)
            self.saved_alarm = None

    def __call__(self, signum: int) -> None:
        if signum != signal.SIGINT:
            self.send(signum)
            return
        self._step("Ctrl-C")

    def _step(self, why: str) -> None:
        sig, words = self.STEPS[min(self.seen, len(self.STEPS) - 1)]
        self.seen += 1
        if sig == signal.SIGKILL:
            self.reaper.kill(sig)
        else:
            self.send(sig)
        if sig == signal.SIGTERM and hasattr(signal, "setitimer"):
            self.saved_alarm = signal.signal(signal.SIGALRM, self._late)
            signal.setitimer(signal.ITIMER_REAL, self.KILL_AFTER_S)
        start = "\n" if why == "Ctrl-C" and sys.stderr.isatty() else ""  # after the terminal's ^C
        _write(sys.stderr, f"{start}parinfo: {why}: {words.format(n=self.what, s=self.KILL_AFTER_S)}\n".encode())

    def _late(self, signum: int, frame: Any) -> None:
        if self.seen < len(self.STEPS):
            self.seen = len(self.STEPS) - 1
            self._step(f"{self.KILL_AFTER_S:g} s after SIGTERM")


class _Log:
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


def _open_logs(log_dir: str | None, instances: Sequence[InstancePlan]) -> dict[int, _Log]:
    """One new file per instance under ``log_dir`` (made if missing), instance-I.log, through
    parinfo.safe_file: no link another user made is followed, and the folder must be one no other
    user can write. A folder that cannot be made or written, or is not safe, is a usage error before
    anything starts."""
    if log_dir is None:
        return {}
    import parinfo.safe_file as safe_file
    from parinfo.errors import UsageError
    from parinfo.safe_text import shorten

    logs: dict[int, _Log] = {}
    shown = shorten(log_dir, 300)
    try:
        folder = safe_file.writable_dir(log_dir)
        try:
            for inst in instances:
                name = f"instance-{inst.index}.log"
                logs[inst.index] = _Log(safe_file.create(folder, name), f"{shown}/{name}")
        finally:
            os.close(folder)
    except OSError as exc:
        for log in logs.values():
            log.close()
        fix = ("give a folder that no other user can write, e.g. one you make with mkdir -m 700"
               if isinstance(exc, safe_file.Unsafe) else "give a directory you may write to")
        raise UsageError(f"--log-dir {shown}: cannot write a log there: {exc.strerror or exc} ({fix})") from None
    return logs


def _sender(procs: list[tuple[int, Leader]]) -> Callable[[int], None]:
    def send(signum: int) -> None:
        for _, leader in procs:
            if leader.poll() is None:
                try:
                    os.killpg(leader.pid, signum)
                except OSError:
                    pass
    return send


def _parent_death_hook(parent: int) -> Callable[[], None] | None:
    """A preexec function that asks the kernel to send PARENT_DEATH_SIGNAL when we die (Linux), and
    ends the child at once if we are already gone; None where prctl is not available."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, int(PARENT_DEATH_SIGNAL), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), PARENT_DEATH_SIGNAL)
    return hook


class _JobControl:
    """While installed: ^Z stops the instances and then this process; SIGCONT resumes them.

    The instances sit in their own sessions, where the kernel discards a terminal stop signal
    (their process groups are orphaned), so they are stopped with SIGSTOP, which cannot be.
    """

    def __init__(self, send: Callable[[int], None]) -> None:
        self.send = send
        self.saved: dict[int, Any] = {}

    def __enter__(self) -> _JobControl:
        self.saved[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, self._stop)
        self.saved[signal.SIGCONT] = signal.signal(signal.SIGCONT, self._cont)
        return self

    def _stop(self, signum: int, frame: Any) -> None:
        self.send(signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stops here; the shell's SIGCONT resumes us
        signal.signal(signal.SIGTSTP, self._stop)
        self.send(signal.SIGCONT)

    def _cont(self, signum: int, frame: Any) -> None:
        self.send(signal.SIGCONT)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)


class _Prefixed:
    """One instance's pipe relayed to one of our streams with ``[i] `` before every line.

    Whole lines go out as they arrive. A partial line (a progress bar, a prompt) is held at most
    HOLD_S seconds or HOLD_BYTES bytes for its end, then passed on as it is; if another instance then
    writes to the same stream, the open line is ended first, so every line names one instance.
    Work is linear in the bytes relayed: the held part is bounded, never re-copied as it grows.
    """

    HOLD_S = 0.05
    HOLD_BYTES = 1 << 16

    def __init__(self, prefix: bytes, out: Any, owners: dict[int, _Prefixed | None],
                 log: _Log | None = None, warned: set[int] | None = None) -> None:
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
        why = _write(self.out, b"".join(parts))
        if why and self.out is not sys.stderr and id(self.out) not in self.warned:
            self.warned.add(id(self.out))  # keep draining the pipes, so the instances never block
            _write(sys.stderr, f"parinfo: warning: cannot write the output: {why}; the instances run on, and "
                               "parinfo exits with their status\n".encode())


#: How long output is still relayed once every instance has exited: a process that outlived its
#: instance (and holds its pipe) is ended meanwhile, but must never keep the launch waiting.
DRAIN_S = 2.0


def _supervise(procs: list[tuple[int, Leader]], expected: list[list[Check]],
               logs: dict[int, _Log], all_exited: Callable[[], None] = lambda: None,
               every_second: Callable[[], None] = lambda: None) -> tuple[int, list[str]]:
    """Relay prefixed output until every instance has exited, reading each back CHECK_AFTER_S
    after the start and calling ``every_second`` meanwhile; then call ``all_exited`` and relay what
    is left in the pipes for at most DRAIN_S. The first failure's status and the lines of instances
    that did not get their plan. The instances are not reaped here (:class:`Leader`)."""
    import selectors
    import time

    from parinfo.launch.verify import CHECK_AFTER_S

    sel = selectors.DefaultSelector()
    owners: dict[int, _Prefixed | None] = {}
    warned: set[int] = set()
    relays: list[_Prefixed] = []
    exact = True  # every exit is seen through a pidfd; else poll every 50 ms
    check_at: float | None = time.monotonic() + CHECK_AFTER_S
    problems: list[str] = []
    for index, leader in procs:
        prefix = f"[{index}] ".encode()
        for pipe, out in ((leader.proc.stdout, sys.stdout), (leader.proc.stderr, sys.stderr)):
            assert pipe is not None
            os.set_blocking(pipe.fileno(), False)
            relays.append(_Prefixed(prefix, out, owners, logs.get(index), warned))
            sel.register(pipe, selectors.EVENT_READ, ("out", relays[-1], pipe))
        pidfd = _pidfd(leader.pid)  # readable once it has exited; reaps nothing
        if pidfd is None:
            exact = False
        else:
            sel.register(pidfd, selectors.EVENT_READ, ("exit", leader, None))
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
        idle = None if exact else 0.05
        for at in (check_at, drain_until, tick_at):
            if at is not None:
                idle = max(0.0, at - now) if idle is None else min(idle, max(0.0, at - now))
        for key, _ in sel.select(_timeout(relays, now, idle)):
            kind, target, pipe = key.data
            if kind == "exit":
                sel.unregister(key.fd)
                os.close(key.fd)
                target.wait()
                exited(target)
                continue
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if data:
                target.feed(data, time.monotonic())
            else:
                sel.unregister(key.fileobj)
                target.close()
                pipe.close()
        now = time.monotonic()
        for relay in relays:
            due = relay.due()
            if due is not None and due <= now:
                relay.flush()
        if not exact:
            for _, leader in procs:
                exited(leader)
    for key in list(sel.get_map().values()):  # pipes still held open once the bound is over
        sel.unregister(key.fileobj)
        kind, target, pipe = key.data
        if kind == "out":
            target.close()
            pipe.close()
    sel.close()
    for _, leader in procs:  # output closed before exit: wait in start order
        leader.wait()
        exited(leader)
    return first_failure, problems


def _verify(procs: list[tuple[int, Leader]], expected: list[list[Check]],
            owners: dict[int, _Prefixed | None]) -> list[str]:
    """Read every instance still running and print the table and the lines of those that did not
    get their plan (nothing when every instance has ended: there is nothing left to read)."""
    from parinfo.launch.verify import Row, problems, read_instance, report

    rows = [read_instance(index, leader.pid, checks) if leader.poll() is None else Row(index, leader.pid, ended=True)
            for (index, leader), checks in zip(procs, expected, strict=True)]
    lines = report(rows, [c.column for c in expected[0]])
    if lines:
        _say(owners, lines)
    return problems(rows)


def _say(owners: dict[int, _Prefixed | None], lines: list[str]) -> None:
    """Lines of parinfo's own on stderr, after ending a partial line an instance left open there."""
    from parinfo.safe_text import escape_controls

    data = "".join(escape_controls(line) + "\n" for line in lines).encode("utf-8", "replace")
    owner = owners.get(id(sys.stderr))
    if owner is not None:
        data = b"\n" + data
        owner.at_line_start = True
        owners[id(sys.stderr)] = None
    _write(sys.stderr, data)


def _timeout(relays: list[_Prefixed], now: float, idle: float | None) -> float | None:
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


def _write(stream: Any, data: bytes) -> str | None:
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
