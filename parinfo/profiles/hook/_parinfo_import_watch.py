"""Set torch's thread counts the moment ``import torch`` finishes, before any op can run.

One mechanism for both places that need it: the start-up hook of a program launched by ``parinfo
apply PROFILE -- COMMAND`` (sitecustomize.py beside this file), and ``parinfo.apply()`` called in a
running process before torch is imported (parinfo.profiles.at_import). A finder placed first on
``sys.meta_path`` wraps torch's loader so a callback runs once torch's module has executed; the
callback sets the counts through parinfo's one setting module (passed in: the hook loads it by
path), reads them back, and keeps the program's own first ``torch.set_num_interop_threads`` call
working (:func:`guard_interop`).

Both callers load this file by path under the name ``_parinfo_import_watch``: a launched program's
interpreter may not have parinfo, so it imports the standard library only, never torch, and its
type hints are quoted (every launched program runs it, on whatever interpreter it has).
"""
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing into every launched program
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.abc import Loader as _Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any
else:
    _Loader = object  # a loader is whatever has exec_module; the ABC's own methods must not shadow the wrapped ones

#: What :func:`set_torch` put in force, kept for parinfo's reports in this process (they name the
#: profile as the source while the count holds): {"torch intra-op" | "torch inter-op": (count,
#: profile, who set it)}.
SET = {}  # type: dict[str, tuple[int, str, str]]

# torch's refusal of a second set_num_interop_threads call (and of one after its pool started).
INTEROP_REFUSED = "cannot set number of interop threads"
# The name torch's c10 thread pool gives its threads (the inter-op pool's, and in a build whose
# intra-op backend is not OpenMP, the intra-op pool's too).
POOL_THREAD = "PTThreadPool"


def say(text: "str") -> "None":
    """One line on stderr, ``parinfo: TEXT``; a closed stderr must not break the program."""
    try:
        sys.stderr.write("parinfo: " + text + "\n")
        sys.stderr.flush()
    except Exception:
        pass


class _AfterExec(_Loader):
    """Wraps a loader so ``after(module)`` runs once the module has executed."""

    def __init__(self, loader: "_Loader", after: "Callable[[ModuleType], None]") -> "None":
        self._loader = loader
        self._after = after

    def __getattr__(self, name: "str") -> "Any":
        return getattr(self._loader, name)

    def create_module(self, spec: "ModuleSpec") -> "ModuleType | None":
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: "ModuleType") -> "None":
        # The module keeps its real loader: importlib.resources and friends look at it.
        module.__loader__ = self._loader
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self._loader
        self._loader.exec_module(module)
        self._after(module)


class ImportWatcher:
    """A sys.meta_path finder that fires once, when the import of module ``name`` has finished.

    :meth:`cancel` takes it off ``sys.meta_path`` before it fired (a later apply() replaces it).
    """

    def __init__(self, name: "str", callback: "Callable[[ModuleType], None]") -> "None":
        self.name = name
        self._callback = callback
        self._busy = False

    def find_spec(self, fullname: "str", path: "Sequence[str] | None" = None,
                  target: "ModuleType | None" = None) -> "ModuleSpec | None":
        if fullname != self.name or self._busy:
            return None
        self._busy = True
        try:
            spec = None  # type: ModuleSpec | None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _AfterExec(spec.loader, self._fire)
        return spec

    def cancel(self) -> "None":
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

    def _fire(self, module: "ModuleType") -> "None":
        self.cancel()
        self._callback(module)


def watch(name: "str", callback: "Callable[[ModuleType], None]") -> "ImportWatcher":
    """Call ``callback(module)`` once ``import NAME`` has finished; returns the installed watcher."""
    watcher = ImportWatcher(name, callback)
    sys.meta_path.insert(0, watcher)
    return watcher


def interop_pool_started(torch: "ModuleType") -> "bool | None":
    """Whether torch's inter-op pool has started (its threads exist); None when it cannot be told."""
    try:
        if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
            return None  # the intra-op pool's threads carry the same name
        for tid in os.listdir("/proc/self/task"):
            with open(os.path.join("/proc/self/task", tid, "comm")) as f:
                if f.read().strip() == POOL_THREAD:
                    return True
        return False
    except (OSError, RuntimeError, AttributeError, TypeError):
        return None


def guard_interop(torch: "ModuleType", inter: "int", interop_setter: "str", profile: "str",
                  how: "Sequence[str]") -> "None":
    """Keep torch.set_num_interop_threads working for the program after parinfo's own call.

    torch accepts one call per process and parinfo has made it, so the program's first call would
    raise where it succeeds without parinfo. That call is answered instead: the profile's count stays
    in force (torch cannot change it) and one stderr line says so when the program asked for another.
    A call torch would refuse without parinfo too (a second one, one after the pool started, a bad
    argument) raises as it would without parinfo. ``how`` is (what set the count, what else the
program can do to use its own count), for that line.
    """
    real = getattr(torch, interop_setter)
    answered = []  # type: list[int]

    def guarded(nthreads: "Any") -> "Any":
        if answered:
            return real(nthreads)
        try:
            return real(nthreads)
        except RuntimeError as exc:
            if INTEROP_REFUSED not in str(exc) or interop_pool_started(torch):
                raise
        answered.append(nthreads)
        if nthreads != inter:
            say("torch inter-op threads stay " + str(inter) + " (profile " + profile + "), not the "
                + repr(nthreads) + " this program asked for: " + how[0] + " set them when torch was "
                "imported and torch accepts one " + interop_setter + " call per process; to use the "
                "program's count, set inter_op in the profile or " + how[1])
        return None

    guarded.__name__ = getattr(real, "__name__", interop_setter)
    guarded.__qualname__ = guarded.__name__
    guarded.__doc__ = getattr(real, "__doc__", None)
    guarded.__wrapped__ = real  # type: ignore[attr-defined]
    setattr(torch, interop_setter, guarded)


def set_torch(torch: "ModuleType", intra: "int | None", inter: "int | None", names: "Sequence[str]",
              setter: "ModuleType", profile: "str", how: "Sequence[str]") -> "tuple[int | None, int | None]":
    """Set torch's counts (each when not None) through ``setter`` (parinfo.process.setter), read them
    back, and say one stderr line per count not in force. ``names`` are torch's setter, getter,
    inter-op setter and inter-op getter (the library registry's); ``how`` is for
    :func:`guard_interop`. Returns (intra-op, inter-op): each count now in force as asked, None
    where it was not asked or is not in force; those in force are recorded in :data:`SET`. Never
    raises: a failure here must not break the program's ``import torch``."""
    try:
        rec = setter.ByName("torch", *names)
        if inter is not None:
            sized = setter.set_torch(inter=inter, record=rec, torch=torch, inter_if_changed=False)[0]
            if sized.error:
                say("not in force: torch inter-op threads = %s, profile %s wants %d (torch: %s)"
                    % (sized.now, profile, inter, sized.error))
                inter = None
            else:
                guard_interop(torch, inter, rec.interop_setter, profile, how)
        if intra is not None:
            setter.set_torch(intra=intra, record=rec, torch=torch)
        done = []  # type: list[int | None]
        for what, want, got in zip(("intra-op", "inter-op"), (intra, inter), setter.torch_counts(rec)):
            if want is not None and got != want:
                say("not in force: torch %s threads = %s, profile %s wants %d" % (what, got, profile, want))
            if want is not None and got == want:
                SET["torch " + what] = (want, profile, how[0])
                done.append(want)
            else:
                done.append(None)
        return done[0], done[1]
    except Exception as exc:  # never break the user's import of torch
        say("could not set torch's thread counts (%s: %s)" % (type(exc).__name__, exc))
        return None, None
