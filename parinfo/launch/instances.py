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
With the plan's ``memory``, each instance's memory is bound to the NUMA nodes of its own CPUs.
Their output, their logs and their read-back, until every instance has exited, are
:mod:`parinfo.launch.relay`'s.
"""
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from parinfo.launch.child import Relay, check_cpus, child_environ, not_started, spawn
from parinfo.launch.reaping import Leader, Reaper
from parinfo.launch.relay import open_logs, supervise, write_now

if TYPE_CHECKING:  # pragma: no cover
    from parinfo.profiles.plan import Plan

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
    logs = open_logs(log_dir, plan.instances)
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
            status, problems = supervise(procs, expected, logs, reaper.finish, reaper.reap)
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
        write_now(sys.stderr, f"{start}parinfo: {why}: {words.format(n=self.what, s=self.KILL_AFTER_S)}\n".encode())

    def _late(self, signum: int, frame: Any) -> None:
        if self.seen < len(self.STEPS):
            self.seen = len(self.STEPS) - 1
            self._step(f"{self.KILL_AFTER_S:g} s after SIGTERM")

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
