"""The one ``Runtime`` of a process: every piece of state parinfo's runtime holds, in one object.

``Runtime`` owns the counts and their rules (``settings``), the native push and lane budget
(``limits``), the task ledger, the two pools, the adaptive call sites, the trace recorders, the
functions every worker runs (``setup``), torch's forks and the variables ``apply`` set. The
public functions of :mod:`parinfo.runtime` are thin calls on the process's instance; after an
``os.fork`` one method, :meth:`Runtime.after_fork_in_child`, gives the child fresh pools and locks.
"""
from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from parinfo.process.setter import TORCH
from parinfo.records.convert import dump
from parinfo.records.source import Kind, Source
from parinfo.runtime import workers
from parinfo.runtime.adaptive import Adaptive
from parinfo.runtime.follow import BudgetFollower
from parinfo.runtime.future import Future, TaskLedger
from parinfo.runtime.native import NativeLimits
from parinfo.runtime.settings import EXPLICIT, RuntimeSettings, check_count
from parinfo.runtime.snapshot import PoolCount, RuntimeSection
from parinfo.runtime.torchfork import TorchForks
from parinfo.runtime.tracing import Profile, Recorders
from parinfo.runtime.workers import WorkerSetup

if TYPE_CHECKING:
    from parinfo.process.provenance import SetByApply
    from parinfo.runtime.interop import InteropPool
    from parinfo.runtime.intraop import IntraopPool

# How long a push waits for busy pool workers; they take the count before their next job anyway.
PUSH_WAIT_S = 2.0


class AppliedVar(TypedDict):
    """A variable ``parinfo.apply`` set in this process, as :meth:`Runtime.attach_state` says it."""

    value: str
    profile: str
    loaded: list[str]


class _AttachState(TypedDict):
    info: Mapping[str, object]  # Runtime.info(), passed on as it is
    applied: dict[str, AppliedVar] | None
    gil_reenabled_by: str | None


class AttachState(_AttachState, total=False):
    """What parinfo's attach reads of the runtime (:meth:`Runtime.attach_state`); ``busy`` says why
    ``applied`` is None."""

    busy: str


class Runtime:
    """parinfo's runtime in one process: counts, pools, budget, ledger and what they learned.

    The two pools (and ``fork``) are built at their first use, without starting a thread: a process
    that only reports on itself, as ``parinfo show`` does, never loads their modules."""

    intra: IntraopPool
    inter: InteropPool
    #: ``fork(fn, /, *args, **kwargs)``: the inter-op pool's (see :meth:`InteropPool.fork`)
    fork: Callable[..., Any]

    def __init__(self) -> None:
        self.settings = RuntimeSettings()
        self.limits = NativeLimits(self.settings)
        self.ledger = TaskLedger()
        self.adaptive = Adaptive()
        self.recorders = Recorders()
        self.setup = WorkerSetup()
        self.torch_forks = TorchForks(self.settings, self.limits)
        self.follow = BudgetFollower(self.settings, self.limits, self._push_defaults)
        self._pools_lock = threading.Lock()
        self._env_lock = threading.Lock()
        self._env_set: dict[str, SetByApply] = {}  # variables parinfo.apply() set in this process
        self._framework_set: dict[str, tuple[int, Source]] = {}  # framework counts parinfo.apply() set

    def __getattr__(self, name: str) -> Any:
        # Called only for an attribute not set yet: the pools and ``fork`` before their first use.
        if name in ("intra", "inter", "fork"):
            self._build_pools()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _build_pools(self) -> None:
        """Make both pools (no thread starts) and ``fork``, once; afterwards they are plain attributes."""
        from parinfo.runtime.interop import InteropPool
        from parinfo.runtime.intraop import IntraopPool

        with self._pools_lock:
            if "inter" in self.__dict__:
                return
            self.intra = IntraopPool(self.settings, self.limits, self.adaptive, self.recorders, self.setup,
                                     self.follow)
            inter = InteropPool(self.settings, self.limits, self.adaptive, self.ledger, self.recorders,
                                self.setup, self.torch_forks, self.follow)
            self.fork = inter.fork
            self.inter = inter  # last: its presence says the pools are built

    def _built_pools(self) -> tuple[IntraopPool, InteropPool] | tuple[()]:
        """Both pools when they are built, else (): asking about them builds nothing."""
        if "inter" not in self.__dict__:
            return ()
        return self.intra, self.inter

    # counts --------------------------------------------------------------------------------
    def set_num_threads(self, n: int) -> None:
        """Set the intra-op count: threads per parallel region, and the count pushed into native pools.

        The rule: the count is process-wide (not per calling thread), may be changed any time from any
        thread, and applies to parallel regions that start after the call; regions already running
        keep their count. The count then goes into the loaded native pools (OpenBLAS, MKL, OpenMP
        runtimes, through threadpoolctl) and into torch when torch is imported. An explicit call takes
        precedence over a profile. ``n`` must be a positive int (TypeError/ValueError otherwise);
        counts above the usable CPUs are allowed.
        """
        self._set_intra(check_count(n, "set_num_threads"), EXPLICIT)

    def get_num_threads(self) -> int:
        """The intra-op count now in force (resolved from the environment on first use)."""
        return self.settings.intra()[0]

    def set_num_interop_threads(self, n: int) -> None:
        """Set the inter-op pool size, once, before the first ``fork``.

        A second call, or a call after parallel work started, raises RuntimeError("Error: cannot set
        number of interop threads after parallel work has started or set_num_interop_threads called").
        """
        self.settings.set_inter(check_count(n, "set_num_interop_threads"), EXPLICIT)

    def get_num_interop_threads(self) -> int:
        """The inter-op pool size; reading it never starts the pool."""
        return self.settings.inter()[0]

    def configure(self, *, intra_op: int | None = None, inter_op: int | None = None,
                  libraries: dict[str, int | None] | None = None, source: Source | str) -> None:
        """Set counts on behalf of ``source``, with the setters' rules: a :class:`~parinfo.Source`, or
        the words naming a profile or whoever configures on its behalf (``"profile latency"``), which
        become a profile source shown in those words.

        Both values are checked before either is applied. The inter-op count follows the set-once
        rule; an intra-op count from a profile does not replace one set by an explicit call.
        ``libraries`` (record name -> count, from a profile's ``libraries``; None leaves that library
        alone) go into the native pools and torch with the push, each pool once, in place of the
        intra-op count.
        """
        if isinstance(source, str) and source.strip():
            source = Source(Kind.PROFILE, source, source)
        if not isinstance(source, Source):
            raise TypeError("configure() expects source to be a non-empty str or a parinfo.Source")
        if intra_op is not None:
            check_count(intra_op, "configure intra_op")
        if inter_op is not None:
            check_count(inter_op, "configure inter_op")
            self.settings.check_inter_settable()
        if inter_op is not None:
            self.settings.set_inter(inter_op, source)
        if intra_op is not None or libraries:
            self._set_intra(intra_op, source, libraries)

    def _set_intra(self, n: int | None, source: Source, libraries: dict[str, int | None] | None = None) -> None:
        """Record ``n`` (None: keep the count) and push it, with ``libraries`` over it per library.
        An intra-op count an explicit call outranks is not taken, but the libraries' counts still are."""
        taken = n is not None and self.settings.set_intra(n, source)
        if taken or libraries:
            limits = self.limits
            limits.push(n if taken and n is not None else self.settings.intra()[0], source, libraries)
            # OpenMP limits (and torch's, in its OpenMP build) hold per thread: each worker sets its own
            reach = self.on_every_worker("parinfo.intra_op", limits.sync_worker, timeout=PUSH_WAIT_S)
            if reach["ran"] or reach["pending"]:
                limits.note_workers(reach)

    def _push_defaults(self, n: int, source: Source, libraries: dict[str, int | None]) -> None:
        """Push the defaults that follow the usable CPUs (``follow``): ``libraries`` per record,
        None where someone chose the count. Busy workers take them before their next job."""
        self.limits.push(n, source, libraries, follow=True)
        reach = self.on_every_worker("parinfo.intra_op", self.limits.sync_worker, timeout=0)
        if reach["ran"] or reach["pending"]:
            self.limits.note_workers(reach)

    def refresh(self) -> dict[str, Any]:
        """Re-read affinity, cpuset and CPU quota now; when the usable CPUs changed, the counts
        nobody chose follow them (as they do at most a second after a change while parallel_for
        and fork are in use). Counts set by a call, a profile or a variable stay. Returns what
        following did (``info()["follow"]``); with PARINFO_FOLLOW_QUOTA=0 it changes nothing."""
        return dict(dump(self.follow.refresh()))

    def set_adaptive(self, on: bool) -> None:
        """Switch adaptive decisions on or off for this process (PARINFO_ADAPTIVE=0 starts it off)."""
        self.adaptive.set_enabled(on)

    # work ----------------------------------------------------------------------------------
    def wait(self, fut: Any) -> Any:
        """The task's value; re-raises its exception. An unstarted task runs on this thread."""
        if isinstance(fut, Future):
            return fut.result()
        torch = sys.modules.get(TORCH)
        if torch is not None and isinstance(fut, torch._C.Future):  # from fork of a TorchScript callable
            if not fut.done():  # this thread blocks: its idle OpenMP team must not spin on the task's CPUs
                self.limits.release_teams()
            return fut.wait()  # torch.jit.wait here can wait forever under no_grad (torch 2.13)
        raise TypeError(f"wait() expects a parinfo Future (or a torch.jit.Future), but got {type(fut).__name__}")

    def parallel_for(self, begin: int, end: int, grain_size: int, fn: Callable[[int, int], Any]) -> None:
        """Call ``fn(start, stop)`` on chunks covering ``[begin, end)``, in parallel on the intra-op pool.

        At most ``get_num_threads()`` chunks, each at least ``grain_size`` long (the last may be
        shorter); the caller runs chunks too. The first exception a chunk raises is re-raised here
        with its traceback, and chunks not started by then are skipped. Chunks see a copy of the
        caller's contextvars; nested calls inside a region run inline.
        """
        self.intra.region(begin, end, grain_size, fn, False)

    def parallel_reduce(self, begin: int, end: int, grain_size: int, ident: Any,
                        fn: Callable[[int, int, Any], Any], combine: Callable[[Any, Any], Any]) -> Any:
        """Reduce ``[begin, end)``: each chunk computes ``fn(start, stop, ident)``; the partial results
        are folded left to right with ``combine``, starting from ``ident`` (torch's signature)."""
        parts = self.intra.region(begin, end, grain_size, lambda a, b: fn(a, b, ident), True, fn)
        return functools.reduce(combine, parts or (), ident)

    def in_parallel_region(self) -> bool:
        """True while this thread runs a chunk of a parallel region."""
        return self.intra.regions.guard.active

    def get_thread_num(self) -> int:
        """The index of the running chunk in its region (0 outside regions): distinct and below
        ``get_num_threads()`` for chunks that run at the same time. When the runtime cuts a region
        finer than one chunk per thread, it numbers the threads of the region instead (the caller 0)."""
        return self.intra.regions.guard.chunk

    def on_every_worker(self, key: str, fn: Callable[[], Any], timeout: float = 5.0) -> workers.Reach:
        """Run ``fn()`` once on every live worker of both pools, and first on every worker started
        later (see :func:`parinfo.runtime.workers.on_every_worker`)."""
        return workers.on_every_worker(self.setup, self._built_pools(), key, fn, timeout)

    def profile(self) -> Profile:
        """``with parinfo.profile() as prof: ...`` then ``prof.export_chrome_trace("parallel.json")``."""
        return Profile(self.recorders)

    # what apply() set ----------------------------------------------------------------------
    def note_env_set(self, name: str, value: str, profile: str = "", loaded: frozenset[str] = frozenset()) -> None:
        """Remember that ``parinfo.apply`` (of ``profile``) set variable ``name`` to ``value`` in this
        process while ``loaded`` (library files and modules) were loaded."""
        from parinfo.process.provenance import SetByApply

        with self._env_lock:
            self._env_set[name] = SetByApply(value, profile, loaded)

    def env_set(self) -> dict[str, str]:
        """The variables ``parinfo.apply`` set in this process: {name: value it set}."""
        with self._env_lock:
            return {name: found.value for name, found in self._env_set.items()}

    def applied_env(self) -> dict[str, SetByApply]:
        """The variables ``parinfo.apply`` set in this process, each with what was loaded then."""
        with self._env_lock:
            return dict(self._env_set)

    def note_framework_set(self, row: str, count: int, source: Source) -> None:
        """Remember that ``parinfo.apply`` set a framework's count (``row``: "torch inter-op"...) to
        ``count`` for ``source`` (a profile): a report shows that source while the count is still
        ``count``."""
        with self._env_lock:
            self._framework_set[row] = (count, source)

    def framework_set(self) -> dict[str, tuple[int, Source]]:
        """The framework counts ``parinfo.apply`` set in this process: {row: (count, source)}."""
        with self._env_lock:
            return dict(self._framework_set)

    # state ---------------------------------------------------------------------------------
    def snapshot(self, machine: tuple[int, int] | None = None) -> RuntimeSection:
        """The runtime's state now, as a record; starts no pool and imports nothing heavy. With
        ``machine`` ((usable physical cores, usable CPUs) read elsewhere) it resolves nothing: a
        count not resolved yet is shown as it would resolve now, and not kept
        (:meth:`RuntimeSettings.peek`)."""
        settings = self.settings
        if machine is None:
            (backend, backend_source), (intra, intra_src), (inter, inter_src) = \
                settings.backend(), settings.intra(), settings.inter()
        else:
            (backend, backend_source), (intra, intra_src), (inter, inter_src) = settings.peek(machine)
        ceiling = settings.ceiling
        pools = self._built_pools()
        return RuntimeSection(
            backend=backend,
            backend_source=backend_source,
            intra_op=PoolCount(intra, intra_src, settings.intra_outranked() or None,
                               capped_to=ceiling if intra > ceiling else None),
            inter_op=PoolCount(inter, inter_src, locked=settings.inter_locked(),
                               capped_to=ceiling if inter > ceiling else None),
            pool_ceiling=ceiling,
            intra_pool_started=any(pool.started() for pool in pools[:1]),
            inter_pool_started=any(pool.started() for pool in pools[1:]),
            pool_threads=sum(pool.alive_threads() for pool in pools),
            native_push=self.limits.push_record(),
            budget=self.limits.state(),
            adaptive=self.adaptive.state(),
            torch_pool=self.torch_forks.pool,  # torch's inter-op pool as parinfo's first scripted fork found it
            follow=self.follow.state(),
        )

    def info(self, machine: tuple[int, int] | None = None) -> dict[str, Any]:
        """The runtime's state as plain JSON-ready data (:meth:`snapshot`'s JSON form)."""
        return dict(dump(self.snapshot(machine)))

    def attach_state(self, machine: tuple[int, int]) -> AttachState:
        """What parinfo's attach reads of this runtime from a script it runs on the main thread of
        this process (:mod:`parinfo.outside.attach`), as plain data: ``info`` (:meth:`info` with
        ``machine``, the machine's numbers as parinfo read them outside: nothing is resolved or kept
        behind the process's back); ``applied`` (:meth:`applied_env`, each with ``value``,
        ``profile`` and the sorted ``loaded``); ``gil_reenabled_by`` (the module CPython's warning
        named, as the interpreter facts saw it). A lock the main thread might hold is never waited
        for: when it is taken, ``applied`` is None and ``busy`` says so."""
        info = self.info((int(machine[0]), int(machine[1])))
        applied: dict[str, AppliedVar] | None = None
        if self._env_lock.acquire(blocking=False):
            try:
                applied = {name: {"value": found.value, "profile": found.profile, "loaded": sorted(found.loaded)}
                           for name, found in self._env_set.items()}
            finally:
                self._env_lock.release()
        interpreter = sys.modules.get("parinfo.process.interpreter")
        seen = getattr(interpreter, "_seen", None)
        gil = seen.get("module") if isinstance(seen, dict) else None
        if applied is None:
            return {"info": info, "applied": None, "busy": "the variables parinfo.apply set were being changed",
                    "gil_reenabled_by": gil}
        return {"info": info, "applied": applied, "gil_reenabled_by": gil}

    def after_fork_in_child(self) -> None:
        """In the child of an ``os.fork``: fresh locks and unstarted pools; tasks the parent's
        workers were running fail; counts, rules and what the sites learned carry over."""
        self.settings.after_fork_in_child()
        self.ledger.after_fork_in_child()
        self.limits.after_fork_in_child()
        self._pools_lock = threading.Lock()
        for pool in reversed(self._built_pools()):
            pool.after_fork_in_child()
        self.recorders.after_fork_in_child()
        self.setup.after_fork_in_child()
        self.adaptive.after_fork_in_child()
        self.follow.after_fork_in_child()
        self._env_lock = threading.Lock()


#: The process's runtime; :mod:`parinfo.runtime` exports its methods as the public functions.
RUNTIME = Runtime()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=RUNTIME.after_fork_in_child)
