"""OS-level names for parinfo's pool threads, so /proc/PID/task/*/comm, ``ps -L`` and ``top -H``
tell them apart from the process's other threads.

The kernel keeps at most 15 characters of a thread's name. A Python name longer than that keeps
its trailing worker number and loses letters of the word before it:
``parinfo-interop-3`` -> ``parinfo-inter-3``, ``parinfo-intra-12`` -> ``parinfo-intr-12``.
"""
from __future__ import annotations

import ctypes
import functools
import re
import sys
from typing import Any

COMM_MAX = 15  # TASK_COMM_LEN - 1
_PR_SET_NAME = 15
_NUMBER = re.compile(r"^(.*?)(-\d+)$")


@functools.cache
def _prctl() -> Any:
    """libc's prctl, looked up on first use."""
    return ctypes.CDLL(None, use_errno=True).prctl


def os_name(name: str) -> str:
    """The name the OS shows for a thread named ``name`` (at most 15 characters, number kept)."""
    if len(name) <= COMM_MAX:
        return name
    m = _NUMBER.match(name)
    if m is None or len(m.group(2)) >= COMM_MAX:
        return name[:COMM_MAX]
    return m.group(1)[:COMM_MAX - len(m.group(2))] + m.group(2)


def set_os_name(name: str) -> bool:
    """Give the calling thread ``os_name(name)`` at OS level (prctl PR_SET_NAME); False where the
    platform has no prctl (the Python name still holds)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return int(_prctl()(_PR_SET_NAME, ctypes.c_char_p(os_name(name).encode("ascii", "replace")), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False
