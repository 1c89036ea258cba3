"""TorchScript callables forked on torch's own inter-op pool.

``torch.jit.fork`` called from Python runs its callable at once and returns a finished future
(torch 2.x); only a fork made inside TorchScript reaches torch's inter-op pool. So for each
scripted callable parinfo compiles, once, a one-line scripted launcher from the callable's schema,
``launch(x: Tensor, ...) -> Future[Tensor]: return fork(target, x, ...)``: calling it forks inside
TorchScript and the task runs on torch's pool without the GIL. A signature the launcher cannot
spell (a class type, a keyword-only argument, a default it cannot write) keeps the task on
parinfo's own pool, where the scripted call also runs without the GIL.
"""
from __future__ import annotations

import collections
import math
import sys
import threading
from collections.abc import Mapping
from typing import Any

from parinfo.process import setter
from parinfo.records.source import Kind, Source
from parinfo.runtime.native import NativeLimits
from parinfo.runtime.settings import RuntimeSettings
from parinfo.runtime.snapshot import TorchPool

_CACHE_SIZE = 256  # launchers kept (each holds its target alive): the first compiled go first


class _Param:
    __slots__ = ("annotation", "default", "name")

    def __init__(self, name: str, annotation: str, default: str | None) -> None:
        self.name, self.annotation, self.default = name, annotation, default


def _default_source(value: Any) -> str | None:
    """A TorchScript literal for a schema default, or None when we cannot write it (the
    parameter is then required: a call that leaves it out runs on parinfo's pool)."""
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return None


class _Launcher:
    """A scripted ``launch(...)`` that forks one callable inside TorchScript."""

    __slots__ = ("call", "params", "required")

    def __init__(self, call: Any, params: list[_Param]) -> None:
        self.call = call
        self.params = [p.name for p in params]
        self.required = {p.name for p in params if p.default is None}

    def binds(self, args: tuple[Any, ...], kwargs: Mapping[str, object]) -> bool:
        """Whether this call fills every parameter the launcher requires, and only its parameters."""
        if len(args) > len(self.params):
            return False
        given = set(self.params[:len(args)])
        if any(k not in self.params or k in given for k in kwargs):
            return False
        return self.required <= given | kwargs.keys()


def _signature(schema: Any, skip_self: bool) -> tuple[list[_Param], str] | None:
    """The launcher's parameters and its future's value type, or None if it cannot be spelled."""
    arguments = list(schema.arguments)[1 if skip_self else 0:]
    params = []
    for a in arguments:
        annotation = a.type.annotation_str
        if a.kwarg_only or "__torch__" in annotation or not a.name.isidentifier():
            return None
        default = _default_source(a.default_value) if a.has_default_value() else None
        params.append(_Param(a.name, annotation, default))
    returns = [r.type.annotation_str for r in schema.returns]
    if any("__torch__" in r for r in returns):
        return None
    value = "None" if not returns else returns[0] if len(returns) == 1 else f"Tuple[{', '.join(returns)}]"
    return params, value


def _source(params: list[_Param], value: str, target: str, method: bool) -> str:
    """``def launch(...) -> Future[value]: return torch.jit.fork(target, ...)``."""
    head = ["self"] if method else []
    decl = ", ".join(head + [p.name + ": " + p.annotation + ("" if p.default is None else " = " + p.default)
                             for p in params])
    call = ", ".join([target] + [p.name for p in params])
    return f"def launch({decl}) -> Future[{value}]:\n    return torch.jit.fork({call})\n"


class TorchForks:
    """Forks of TorchScript callables: torch's inter-op pool sized once by parinfo's inter-op
    count, and one cached launcher per callable."""

    def __init__(self, settings: RuntimeSettings, limits: NativeLimits) -> None:
        self.settings = settings
        self.limits = limits
        self._lock = threading.Lock()
        self._sized = False
        self._types: tuple[type, ...] | None = None
        self._holder: type | None = None  # the ScriptModule class that launcher modules are made of
        self.pool: TorchPool | None = None  # torch's inter-op pool as the first fork found it
        # id(callable) -> (callable, launcher or None when its signature cannot be launched)
        self._launchers: collections.OrderedDict[int, tuple[Any, _Launcher | None]] = collections.OrderedDict()

    def accepts(self, fn: Any) -> bool:
        """Whether ``fn`` is a TorchScript callable (only asked while torch is imported)."""
        if self._types is None:
            jit = getattr(sys.modules[setter.TORCH], "jit", None)
            self._types = tuple(t for t in (getattr(jit, "ScriptModule", None),
                                            getattr(jit, "ScriptFunction", None)) if isinstance(t, type))
        return isinstance(fn, self._types)

    def fork(self, fn: Any, args: tuple[Any, ...], kwargs: Mapping[str, object]) -> Any | None:
        """A torch future for ``fn(*args, **kwargs)`` running on torch's inter-op pool, or None
        when ``fn``'s signature (or this call's arguments) cannot go through a launcher."""
        launcher = self._launcher(fn)
        if launcher is None or not launcher.binds(args, kwargs):
            return None
        if not self._sized:
            self._size_pool()
        return launcher.call(*args, **kwargs)

    def _size_pool(self) -> None:
        """Size torch's inter-op pool to parinfo's inter-op count and give each of its threads the
        budget's native threads per lane, ``usable_cpus // threads``: the tasks of a fork/wait run
        at once, and 2 pool threads x 2 OpenMP threads on 2 CPUs made the tutorial's ensemble
        slower than 1 thread each. A pool the program started or sized itself is left alone."""
        torch = sys.modules[setter.TORCH]
        with self._lock:
            if self._sized:
                return
            self._sized = True
            n = min(self.settings.consume_inter(), self.settings.ceiling)
            sized = setter.set_torch(inter=n, torch=torch, inter_if_changed=False)[0]
            if sized.error:  # torch's pool already started or was sized by the program: keep it
                self.pool = TorchPool(sized.now, None, Source(
                    Kind.FRAMEWORK, "torch", "torch (started or sized before parinfo's first fork)"))
                return
            base = setter.torch_intra_now() or 1
            per_lane = max(1, min(base, self.settings.usable_cpus() // n))
            self.pool = TorchPool(n, per_lane, Source(Kind.RUN_TIME, "parinfo's first fork", "parinfo"))
            if per_lane < base:
                self.pool.pinned = self._pin_threads(torch, n, per_lane, base)

    def _pin_threads(self, torch: Any, n: int, per_lane: int, base: int) -> int:
        """Give each of the pool's n threads ``per_lane`` native threads; returns how many took it.

        A pool thread copies torch's intra-op count at its first op and keeps its own from then
        on; parinfo cannot call into it except through a future's callback, which runs on the
        thread that finished the task. So short tasks are forked until each thread has run one
        and, in the callback, set its count and freed its OpenMP team.
        """
        unit = torch.jit.CompilationUnit()
        unit.define("def busy(a: Tensor) -> Tensor:\n"
                    "    for _ in range(6):\n"
                    "        a = torch.tanh(a @ a)\n"
                    "    return a\n"
                    "def start(a: Tensor) -> Future[Tensor]:\n"
                    "    return torch.jit.fork(busy, a)\n", rcb={"torch": torch}.get)
        caller = threading.get_ident()
        done: set[int] = set()

        def pin(_fut: Any) -> None:
            thread_id = threading.get_ident()
            if thread_id != caller and thread_id not in done:
                setter.torch_intra(per_lane)
                self.limits.release_teams()
                done.add(thread_id)

        a = torch.rand(192, 192) / 192
        try:
            for _ in range(20):
                futs = [unit.start(a) for _ in range(n)]
                for f in [f.then(pin) for f in futs]:  # done once its callback has run
                    f.wait()
                if len(done) >= n:
                    break
        finally:
            setter.torch_intra(base)  # the caller's count, and the default new threads copy
        return len(done)

    def _launcher(self, fn: Any) -> _Launcher | None:
        key = id(fn)
        entry = self._launchers.get(key)
        if entry is not None and entry[0] is fn:
            return entry[1]
        with self._lock:
            launcher = self._compile(fn)
            self._launchers[key] = (fn, launcher)
            while len(self._launchers) > _CACHE_SIZE:
                self._launchers.popitem(last=False)
        return launcher

    def _compile(self, fn: Any) -> _Launcher | None:
        """A launcher for ``fn``, or None when TorchScript cannot express one for its signature."""
        torch = sys.modules[setter.TORCH]
        is_module = isinstance(fn, torch.jit.ScriptModule)
        try:
            schema = fn.forward.schema if is_module else fn.schema
        except (AttributeError, RuntimeError):  # a module without a scripted forward
            return None
        sig = _signature(schema, skip_self=is_module)
        if sig is None:
            return None
        params, value = sig
        try:
            if is_module:
                holder = self._holder_class(torch)(fn, _source(params, value, "self.target", True))
                return _Launcher(holder.launch, params)
            unit = torch.jit.CompilationUnit()
            unit.define(_source(params, value, "target", False), rcb={"torch": torch, "target": fn}.get)
            return _Launcher(unit.launch, params)
        except RuntimeError:  # a type TorchScript cannot name from source: parinfo's pool runs it
            return None

    def _holder_class(self, torch: Any) -> type:
        """A ScriptModule class whose instances hold a target module and a launcher for it."""
        if self._holder is None:
            class LaunchHolder(torch.jit.ScriptModule):  # type: ignore[misc, unused-ignore]  # Any base: --strict
                def __init__(self, target: Any, src: str) -> None:
                    super().__init__()
                    self.target = target
                    torch = sys.modules[setter.TORCH]  # noqa: F841 -- define() resolves names in this frame
                    self.define(src)

            self._holder = LaunchHolder
        return self._holder

