"""The OS threads of a process now, by name where the kernel gives one."""
from __future__ import annotations

import os

from parinfo.machine.unknown import because


def live_threads(pid: int | None = None) -> dict:
    """The OS threads of process ``pid`` (default: this one).

    Read from ``/proc/<pid>/task/*/comm``; when that directory cannot be listed, psutil's thread list
    (ids only) is used. Keys:

    - ``count``: the number of threads (int), or "unknown (reason)".
    - ``threads``: [{"tid": int, "name": str}], sorted by tid; ``name`` is the kernel's thread name
      (at most 15 characters, e.g. "python", "PTThreadPool") or "unknown (reason)".
    - ``source``: "/proc/<pid>/task", "psutil", or "unknown (reason)".
    """
    proc_pid = "self" if pid is None else str(int(pid))
    task_dir = f"/proc/{proc_pid}/task"
    try:
        tids = sorted(int(t) for t in os.listdir(task_dir) if t.isdigit())
    except OSError as exc:
        return _from_psutil(pid, because(exc))
    threads = []
    for tid in tids:
        try:
            with open(f"{task_dir}/{tid}/comm", encoding="utf-8", errors="replace") as fh:
                name = fh.read().rstrip("\n")
        except FileNotFoundError:
            continue  # the thread ended while we listed
        except OSError as exc:
            name = because(exc)
        threads.append({"tid": tid, "name": name})
    return {"count": len(threads), "threads": threads, "source": task_dir}


def _from_psutil(pid: int | None, proc_reason: str) -> dict:
    try:
        import psutil

        tids = sorted(t.id for t in psutil.Process(pid).threads())
    except Exception as exc:  # NoSuchProcess, AccessDenied, no procfs
        why = because(exc)
        return {"count": why, "threads": [], "source": why}
    name = f"unknown (thread names not readable: {proc_reason})"
    return {"count": len(tids), "threads": [{"tid": t, "name": name} for t in tids], "source": "psutil"}
