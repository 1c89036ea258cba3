"""One attach at a time to a process, across every parinfo process of the machine.

``sys.remote_exec`` keeps one pending script per thread: a second request made before the target
ran the first overwrites it, and the first attach then waits for an answer that never comes. So an
attach takes an exclusive ``flock`` on a descriptor of the target's ``/proc/PID/mem`` for its whole
round trip: only a user allowed to attach to the process (the kernel's ptrace check) can open that
file, so nobody else can hold the turn to stall an attach, and taking a free lock costs a few
microseconds. An attach whose deadline passes while another holds the turn says so.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from parinfo.machine.procfs import Proc
from parinfo.outside.attach.sender import AttachError

__all__ = ["PENDING", "turn"]

#: The words of the refusal when another attach keeps the turn past the deadline.
PENDING = "another attach to this process is pending"
#: The longest sleep between two tries to take the turn (seconds).
_MAX_WAIT = 0.02


@contextlib.contextmanager
def turn(proc: Proc, deadline: float) -> Iterator[None]:
    """Hold process ``proc``'s attach turn for the block, waiting for it until ``deadline``
    (monotonic seconds); :class:`AttachError` when it is still held then. A process whose memory
    file cannot be opened (not permitted, gone) is attached to without a turn: the call itself then
    says why it cannot be made."""
    try:
        fd = os.open(proc.path("mem"), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        yield
        return
    try:
        wait = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            except OSError:  # no locks on this file system: attach without a turn
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise AttachError(f"cannot attach to pid {proc.pid}: {PENDING} (sys.remote_exec holds one "
                                  "request at a time); try again, or give more time with --timeout")
            time.sleep(min(wait, left))
            wait = min(wait * 2, _MAX_WAIT)
        yield
    finally:
        os.close(fd)  # releases the turn
