"""``profile()``: record fork/wait tasks, blocking waits and parallel_for chunks as a Chrome trace.

When no profile is active the pools pay one attribute read per task or chunk. Events carry the OS
thread id, start and end, so chrome://tracing or Perfetto show which work overlapped where.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any, TypedDict


class Span(TypedDict):
    """One recorded span as ``Profile.events`` gives it: times in microseconds from the profile's
    start; ``args`` the chunk's range (``begin``, ``end``) for a parallel_for chunk."""

    name: str
    cat: str  # task, wait or chunk
    tid: int
    thread: str
    start_us: float
    end_us: float
    args: dict[str, int]


class _TraceEvent(TypedDict):
    name: str
    ph: str
    pid: int
    tid: int
    args: Mapping[str, int | str]


class TraceEvent(_TraceEvent, total=False):
    """One event of the Chrome Trace Event Format: a complete span ("X", with its category, start and
    duration in microseconds) or a thread's or the process's name ("M")."""

    cat: str
    ts: float
    dur: float


class ChromeTrace(TypedDict):
    """A Chrome Trace Event Format document (what chrome://tracing and Perfetto open)."""

    traceEvents: list[TraceEvent]
    displayTimeUnit: str


def now() -> int:
    return time.perf_counter_ns()


class Recorders:
    """The active profiles; the pools test ``active`` for truth before timing anything."""

    def __init__(self) -> None:
        self.active: tuple[Profile, ...] = ()
        self._lock = threading.Lock()

    def add(self, p: Profile) -> None:
        with self._lock:
            self.active = (*self.active, p)

    def remove(self, p: Profile) -> None:
        with self._lock:
            self.active = tuple(q for q in self.active if q is not p)

    def record(self, name: str, cat: str, t0: int, t1: int,
               args: dict[str, int] | None = None) -> None:
        """Add one finished span to every active profile (called by pool code only when active)."""
        ev = (name, cat, t0, t1, threading.get_native_id(), threading.current_thread().name, args)
        for p in self.active:
            p._events.append(ev)

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()



class Profile:
    """Context manager recording parinfo's parallel work; see ``export_chrome_trace``."""

    def __init__(self, recorders: Recorders) -> None:
        self._recorders = recorders
        self._events: list[tuple[Any, ...]] = []
        self._t0 = 0
        self._t1: int | None = None

    def __enter__(self) -> Profile:
        self._t0 = now()
        self._recorders.add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._t1 = now()
        self._recorders.remove(self)

    @property
    def events(self) -> list[Span]:
        """Recorded spans: name, cat (task|wait|chunk), tid, thread, start_us, end_us, args."""
        out: list[Span] = []
        for name, cat, t0, t1, tid, tname, args in list(self._events):
            out.append({"name": name, "cat": cat, "tid": tid, "thread": tname,
                        "start_us": (t0 - self._t0) / 1e3, "end_us": (t1 - self._t0) / 1e3,
                        "args": dict(args or {})})
        out.sort(key=lambda e: e["start_us"])
        return out

    def chrome_trace(self) -> ChromeTrace:
        """The trace as a Chrome Trace Event Format document (complete "X" events + thread names)."""
        pid = os.getpid()
        evs: list[TraceEvent] = []
        names: dict[int, str] = {}
        for e in self.events:
            names.setdefault(e["tid"], e["thread"])
            evs.append({"name": e["name"], "cat": e["cat"], "ph": "X", "pid": pid, "tid": e["tid"],
                        "ts": round(e["start_us"], 3),
                        "dur": round(max(0.0, e["end_us"] - e["start_us"]), 3),
                        "args": e["args"]})
        meta: list[TraceEvent] = [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": n}}
                                  for tid, n in names.items()]
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                     "args": {"name": "parinfo runtime"}})
        return {"traceEvents": meta + evs, "displayTimeUnit": "ms"}

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> None:
        """Write the trace as JSON that chrome://tracing and Perfetto open, to a new file at ``path``
        (:func:`parinfo.safe_file.create_at`: a link or FIFO another user left there is replaced)."""
        import json

        import parinfo.safe_file as safe_file

        with os.fdopen(safe_file.create_at(os.fspath(path)), "w", encoding="utf-8") as fh:
            json.dump(self.chrome_trace(), fh)


def task_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__

