"""What a process made by ``os.fork()`` on a pool worker does once the task or chunk returns.

In such a child the worker thread is the only thread, and the pool it served does not exist there:
going back to its queue would block forever. Instead the child exits normally, as a script that
reaches its end: atexit handlers run, stdout and stderr are flushed, and the status is 0.
"""
from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn


def exit_forked_child() -> NoReturn:
    """Finish the process like a normal interpreter exit, from a pool worker of a forked child."""
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(0)
