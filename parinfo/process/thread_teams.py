"""The team each Python thread gets from each pool: the report's ``teams`` section.

A count read through a library's getter is the calling thread's; for a pool whose limit holds per
calling thread (OpenMP runtimes, torch's intra-op count, MKL's local call, numba) another thread may
get another team. Reading a thread's own count means running code in it, which a report never does,
so each cell says how its count is known (:class:`Why`): read here (the thread that asked), the
process's one count (a pool with one count for the process: every thread gets what is read here),
set in that thread by parinfo (:func:`parinfo.thread_limits`, ``worker_initializer``,
``limit_new_threads``: read back there when set), or predicted from the registry's measured scope
facts (:class:`~parinfo.process.library_parts.ScopeFacts`): the default a thread that set none gets.
A limit a thread set in itself by other means (threadpoolctl inside that thread) is not seen from
another thread: ``exact`` is False on every predicted cell, and
:func:`parinfo.process.scope_probe.read_in_workers` reads an executor's threads in them.

Pure over the report's settings and pool rows (:func:`build`); :func:`python_threads` reads this
process's live Python threads and which of them run a thread pool's tasks.
"""
from __future__ import annotations

import enum
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import field

from parinfo.process import libraries as reg
from parinfo.process.library_parts import Scope, ScopeFacts
from parinfo.process.pools import PoolRow
from parinfo.process.setter import Outcome
from parinfo.process.setting_row import SettingRow
from parinfo.records.convert import OMIT_NONE, REQUIRED
from parinfo.records.record import record
from parinfo.records.source import Kind, Source, unknown
from parinfo.records.unknown import Unknown

#: How parinfo's limits name the threads they were put in (``ThreadLimited.how``), as a report says it.
LIMITED_BY = {"thread_limits": "parinfo.thread_limits", "worker": "parinfo.worker_initializer",
              "new thread": "parinfo.limit_new_threads (or a profile's threads: every)",
              "limit_new_threads": "parinfo.limit_new_threads"}


class Why(str, enum.Enum):
    """How a cell's count is known."""

    HERE = "read here"  # read in the thread that asked for the report
    PROCESS = "one count for the process"  # the pool holds one count: what is read here holds everywhere
    SET_IN_THREAD = "set in that thread"  # parinfo set it there, and read it back there
    DEFAULT = "default of a thread that set none"  # predicted from the scope facts
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


@record
class TeamCell:
    """The team one thread gets from one pool: ``pool`` (the settings row's library), ``filepath``
    (which copy), ``count`` (None: unknown, ``source`` says why), ``why`` and ``source`` (the
    evidence, in words), ``exact``: False when predicted, not read in or for that thread."""

    pool: str = field(metadata=REQUIRED)
    count: int | None
    why: Why
    exact: bool
    source: Source
    filepath: str | None = field(default=None, metadata=OMIT_NONE)


@record
class ThreadTeam:
    """One Python thread: its name and native id, ``here`` for the thread that asked, ``worker``:
    what runs tasks in it (``concurrent.futures``, ``multiprocessing.pool``, parinfo's limit), or
    None; ``limited_by``: parinfo's call that set its limits, or None; one cell per pool."""

    name: str = field(metadata=REQUIRED)
    native_id: int | None
    here: bool = False
    worker: str | None = field(default=None, metadata=OMIT_NONE)
    limited_by: str | None = field(default=None, metadata=OMIT_NONE)
    cells: list[TeamCell] = field(default_factory=list)

    def team(self, pool: str, filepath: str | None = None) -> int | None:
        """The count this thread gets from ``pool`` (that copy, when ``filepath``), or None."""
        return next((c.count for c in self.cells if c.pool == pool and filepath in (None, c.filepath)), None)


@record
class Column:
    """One pool the matrix has a column for: its settings row's library and copy, the scope facts
    of that copy, and ``shared``: one pool of threads serves every calling thread."""

    pool: str = field(metadata=REQUIRED)
    filepath: str | None = field(default=None, metadata=OMIT_NONE)
    scope: str = "process"
    shared: bool = False

    @property
    def per_thread(self) -> bool:
        """Whether a limit on it holds for the calling thread alone."""
        return self.scope == str(Scope.THREAD)


@record
class ThreadTeams:
    """The ``teams`` section: the pools with measured scope facts (``columns``) and each live
    Python thread's team from each (``threads``, the thread that asked first)."""

    columns: list[Column] = field(default_factory=list)
    threads: list[ThreadTeam] = field(default_factory=list)

    @property
    def here(self) -> ThreadTeam | None:
        """The thread that asked."""
        return next((t for t in self.threads if t.here), None)

    @property
    def workers(self) -> list[ThreadTeam]:
        """The threads that run a thread pool's tasks."""
        return [t for t in self.threads if t.worker is not None and not t.here]

    def label(self, col: Column) -> str:
        """A column's name: its pool, with its file where the pool has several copies."""
        if sum(c.pool == col.pool for c in self.columns) < 2 or not col.filepath:
            return col.pool
        return f"{col.pool} ({col.filepath.rsplit('/', 1)[-1]})"

    def matrix(self) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
        """The text matrix thread x pool: a header, then a row per thread; a count predicted (not
        read in or for that thread) ends with ``*``, an unknown one is ``?``."""
        head = ("thread", *(self.label(c) for c in self.columns))
        rows = []
        for t in self.threads:
            who = t.name + (" (here)" if t.here else f" [{t.worker}]" if t.worker else "")
            rows.append((who, *(_cell_text(c) for c in t.cells)))
        return head, rows


def _cell_text(cell: TeamCell) -> str:
    if cell.count is None:
        return "?"
    return f"{cell.count}{'' if cell.exact else '*'}"


#: The legend under the matrix.
LEGEND = ("* predicted from the measured scope (docs/scope.md): the default a thread that set none gets; "
          "? not readable from this thread")


@record(frozen=True)
class PyThread:
    """A live Python thread as :func:`build` takes it: name, native id, what runs tasks in it,
    and (for the thread parinfo limited) how and each count it set there."""

    name: str
    native_id: int | None
    worker: str | None = None
    limited_how: str | None = None
    limits: tuple[Outcome, ...] = ()


def _family(row: SettingRow) -> tuple[reg.Library | None, bool]:
    """The registry record of a settings row and whether the row is its main count (torch's
    "torch intra-op" row is torch's main count; "torch inter-op" is another pool)."""
    lib = reg.find(row.library)
    if lib is not None:
        return lib, True
    name, _, pool = row.library.partition(" ")
    lib = reg.find(name)
    return lib, lib is not None and pool == "intra-op"


def columns(settings: Sequence[SettingRow], pools: Sequence[PoolRow]) -> list[tuple[SettingRow, ScopeFacts]]:
    """The settings rows of pools whose scope is measured, with the facts of that copy's layer."""
    layers = {p.filepath: p.threading_layer for p in pools}
    out = []
    for row in settings:
        lib, main = _family(row)
        if row.own or lib is None or not main:
            continue
        facts = lib.scope_facts(layers.get(row.filepath))
        if facts is not None:
            out.append((row, facts))
    return out


def _source(row: SettingRow) -> Source:
    return row.source if row.source is not None else unknown("no source read")


_CHOSEN = (Kind.RUN_TIME, Kind.EXPLICIT, Kind.FRAMEWORK, Kind.PROFILE)


def _torch_row(settings: Sequence[SettingRow]) -> SettingRow | None:
    """torch's intra-op row: its count decides the team of every thread's first torch op, on its
    own OpenMP runtime too."""
    torch = reg.family(reg.Torch)
    return next((r for r in settings if _family(r) == (torch, True)), None)


def follows(row: SettingRow) -> bool:
    """Whether ``row`` is a copy torch ships and sets along with its intra-op count (its OpenMP
    runtime, its MKL), whose count in a thread is torch's there."""
    lib = _family(row)[0]
    along = None if lib is None else lib.set_along
    return (along is not None and along.framework == reg.family(reg.Torch).name
            and "/torch/lib/" in (row.filepath or ""))


_NOT_READ = Unknown("torch's own record was not read")

_READ_IN_WORKERS = "not readable from this thread (scope_probe.read_in_workers reads it in an executor's threads)"


def _torch_unknown(decider: SettingRow, last: int | Unknown | None, torch_set: bool) -> Source | None:
    """Why torch's count in another thread cannot be told, or None when its default can be: torch
    gives a thread, at its first torch op, the last torch.set_num_threads count, else its default."""
    default = decider.expected_from_env
    if isinstance(last, Unknown):
        if _source(decider).kind in _CHOSEN or torch_set:
            would = "" if default is None else f"{default} (its default) or "
            return unknown(f"torch gives a thread, at its first torch op, the count last set by torch.set_num_threads "
                           f"in any thread, else its default: {would}the count set ({last}); {_READ_IN_WORKERS}")
        return None
    if last is not None and last != default:
        return unknown(f"torch.set_num_threads({last}) was called in this process: a thread whose first torch op "
                       f"came after it has {last}, one that ran torch ops before keeps its earlier count; "
                       f"{_READ_IN_WORKERS}")
    return None


def _has_global_call(row: SettingRow, facts: ScopeFacts) -> bool:
    """Whether the family has, beside its per-thread call, one that sets every thread's count (MKL's
    mkl_set_num_threads beside its local call)."""
    lib = _family(row)[0]
    return lib is not None and any(f.reaches_running for f in lib.scopes if f.layer in ("", facts.layer))


def _default(row: SettingRow, facts: ScopeFacts, torch: SettingRow | None, last: int | Unknown | None,
             torch_set: bool) -> tuple[int | None, Source]:
    """The count a thread that set none gets, and its words. For torch and the copies it sets along
    (its OpenMP runtime, MKL), what :func:`_torch_unknown` says; ``last``: torch's own record of its
    last count, ``torch_set``: parinfo set torch's count in some thread."""
    follows_torch = torch is not None and (row is torch or follows(row))
    decider = torch if follows_torch and torch is not None else row
    here = _source(decider)
    if follows_torch:
        why = _torch_unknown(decider, last, torch_set)
        if why is not None:
            return None, why
    elif here.kind in _CHOSEN and _has_global_call(row, facts):
        return None, unknown(f"a thread that set no count of its own gets {row.library}'s process-wide count, which "
                             f"its getter here does not tell apart from this thread's own (set at run time); "
                             f"{_READ_IN_WORKERS}")
    if decider.expected_from_env is None:
        return None, unknown("no default known for a thread that set none")
    n = decider.expected_from_env
    chosen = here.kind in _CHOSEN
    words = (here.text if not chosen and decider.count == n
             else f"{(decider.variable and 'env ' + decider.variable) or 'the library default'} ({n})")
    if follows_torch and last is None:
        words += " (torch.set_num_threads was never called: read in torch's own record)"
    return n, Source(Kind.LIBRARY_DEFAULT if decider.variable is None else Kind.VARIABLE, decider.variable or "",
                     f"predicted: a thread that set none gets {words}; a limit it set itself is not seen here")


def _set_there(row: SettingRow, thread: PyThread) -> Outcome | None:
    """The per-thread count parinfo set in ``thread`` for ``row``'s pool (that copy), if any."""
    lib = reg.family(reg.Torch) if follows(row) else _family(row)[0]
    name = row.library if lib is None else lib.name
    return next((o for o in thread.limits if o.per_thread and not o.error and o.now is not None
                 and o.library == name and o.target in (row.filepath, "intra-op", str(lib and lib.module))), None)


def _cell(row: SettingRow, facts: ScopeFacts, thread: PyThread, here: bool, torch: SettingRow | None,
          last: int | Unknown | None, torch_set: bool) -> TeamCell:
    if here:
        return TeamCell(row.library, row.count, Why.HERE, row.count is not None, _source(row), row.filepath)
    if facts.reaches_running:
        src = _source(row)
        return TeamCell(row.library, row.count, Why.PROCESS, row.count is not None,
                        src.with_text(f"one count for the process: {src.text}"), row.filepath)
    done = _set_there(row, thread)
    if done is not None:
        call = LIMITED_BY.get(thread.limited_how or "", "parinfo")
        return TeamCell(row.library, done.now, Why.SET_IN_THREAD, True,
                        Source(Kind.EXPLICIT, call, f"set in that thread by {call} ({done.now})"), row.filepath)
    n, src = _default(row, facts, torch, last, torch_set)
    return TeamCell(row.library, n, Why.DEFAULT if n is not None else Why.UNKNOWN, False, src, row.filepath)


def build(settings: Sequence[SettingRow], pools: Sequence[PoolRow], threads: Sequence[PyThread],
          here_id: int | None, torch_last: int | Unknown | None = _NOT_READ) -> ThreadTeams:
    """The matrix of ``threads`` x pools with measured scope facts, from the report's rows (read in
    the thread whose native id is ``here_id``); ``torch_last``: torch's record of its last
    torch.set_num_threads count (None: never called), when read."""
    cols = columns(settings, pools)
    torch = _torch_row(settings)
    torch_name = reg.family(reg.Torch).name
    torch_set = any(o.library == torch_name for t in threads for o in t.limits if not o.error)
    ordered = sorted(threads, key=lambda t: t.native_id != here_id)
    teams = [ThreadTeam(t.name, t.native_id, t.native_id == here_id, t.worker, _limited_words(t.limited_how),
                        [_cell(r, f, t, t.native_id == here_id, torch, torch_last, torch_set) for r, f in cols])
             for t in ordered]
    return ThreadTeams([Column(r.library, r.filepath, str(f.scope), f.shared_pool) for r, f in cols], teams)


def _limited_words(how: str | None) -> str | None:
    return None if how is None else LIMITED_BY.get(how, how)


def _executor_workers() -> set[int]:
    """The native ids of concurrent.futures' thread-pool workers (its module's registry of them)."""
    module = sys.modules.get("concurrent.futures.thread")
    queues = getattr(module, "_threads_queues", None)
    try:
        return {t.native_id for t in list(queues or ()) if getattr(t, "native_id", None) is not None}
    except Exception:  # a registry of another shape: none known
        return set()


def _worker_of(thread: threading.Thread, executor: set[int]) -> str | None:
    if thread.native_id in executor:
        return "concurrent.futures"
    target = getattr(thread, "_target", None)
    if getattr(target, "__module__", None) == "multiprocessing.pool":
        return "multiprocessing.pool"
    return None


def python_threads(limited: Mapping[int, tuple[str, tuple[Outcome, ...]]] | None = None) -> list[PyThread]:
    """This process's live Python threads; ``limited``: by native id, how parinfo limited a thread
    and what it set there (such a thread counts as a worker: it was given a limit to call pools)."""
    limited = limited or {}
    executor = _executor_workers()
    out = []
    for t in threading.enumerate():
        how, limits = limited.get(t.native_id or -1, (None, ()))
        worker = _worker_of(t, executor) or ("parinfo limit" if how in ("worker", "new thread") else None)
        out.append(PyThread(t.name, t.native_id, worker, how, limits))
    return out
