"""parinfo's start-up hook for Python programs launched by ``parinfo apply PROFILE -- COMMAND``.

The launcher puts this file's directory first on PYTHONPATH, so Python's ``site`` imports it at
interpreter start. It sets the counts that have no environment variable (torch's intra-op and
inter-op counts) the moment ``import torch`` finishes, before user code can run an op, and checks
what is in force; the program's own first ``torch.set_num_interop_threads`` call then keeps working
(see _guard_interop). It never imports torch itself, never imports parinfo (the child's interpreter may
not have it), and then runs any other ``sitecustomize`` that was on the path, as if it were absent.

Its instructions come from the private variable ``_PARINFO_HOOK`` written by parinfo.profiles.child:
``1 intra=N|- inter=N|- watch=NAME,NAME`` then the library registry's facts the hook needs
(``parinfo.process.libraries.hook_facts``: each pool's variables, parinfo's runtime variables, the
verify variable, torch's setters), so this file keeps no table of its own. Without that variable
the hook only chains. torch's counts are set through parinfo's one setting module
(parinfo/process/setter.py), loaded by path: it imports the standard library only.
Checks: right after torch's import (torch's counts), and at exit (a watched variable the program
changed, parinfo's runtime counts when it was used); the verify variable set to ``full`` adds the
native pools (threadpoolctl) at exit, ``off`` turns checking off.

Its type hints are quoted and its typing names imported for type checkers only: every launched
program runs this file, so it neither imports typing nor needs a recent interpreter to do so.
"""
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing into every launched program
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from importlib.abc import Loader as _Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any
else:
    _Loader = object  # a loader is whatever has exec_module; the ABC's own methods must not shadow the wrapped ones

_HERE = os.path.dirname(os.path.abspath(__file__))
_SPEC_VAR = "_PARINFO_HOOK"


def _say(text: "str") -> "None":
    try:
        sys.stderr.write("parinfo: " + text + "\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr must not break the program
        pass


class _TorchFacts:
    """torch's registry record as the setter module reads it: the names of its setters and getters."""

    def __init__(self, setter: "str", getter: "str", interop_setter: "str", interop_getter: "str") -> "None":
        self.name = "torch"
        self.setter, self.getter = setter, getter
        self.interop_setter, self.interop_getter = interop_setter, interop_getter
        self.scope = "thread"


class _Facts:
    """The hook's instructions: torch's counts to set (None: leave it), the variables to watch, each
    pool's count variables (first wins), parinfo's runtime variables, the verify variable, the
    variables threadpoolctl's import sets, and torch's record."""

    def __init__(self, intra: "int | None", inter: "int | None", watch: "list[str]",
                 orders: "dict[str, tuple[str, ...]]", runtime_vars: "tuple[str, ...]", verify_var: "str",
                 undo: "tuple[str, ...]", torch: "_TorchFacts", profile_var: "str" = "") -> "None":
        self.intra, self.inter, self.watch, self.orders = intra, inter, watch, orders
        self.runtime_vars, self.verify_var, self.undo, self.torch = runtime_vars, verify_var, undo, torch
        self.profile_var = profile_var


def _parse(spec: "str") -> "_Facts | None":
    """``1 intra=2 inter=1 watch=A,B pool.X=V,W runtime=... verify=... undo=... torch=...`` -> the
    instructions; None when not understood."""
    parts = spec.split()
    if not parts or parts[0] != "1":
        return None
    fields = dict(p.split("=", 1) for p in parts[1:] if "=" in p)

    def count(key: "str") -> "int | None":
        value = fields.get(key, "-")
        return int(value) if value.isdigit() and int(value) > 0 else None

    def names(key: "str") -> "tuple[str, ...]":
        return tuple(n for n in fields.get(key, "").split(",") if n)

    torch = names("torch")
    if len(torch) != 4 or len(names("runtime")) != 2:
        return None
    return _Facts(
        intra=count("intra"), inter=count("inter"), watch=list(names("watch")),
        orders={k[len("pool."):]: names(k) for k in fields if k.startswith("pool.")},
        runtime_vars=names("runtime"), verify_var=fields.get("verify", ""), undo=names("undo"),
        torch=_TorchFacts(setter=torch[0], getter=torch[1], interop_setter=torch[2], interop_getter=torch[3]),
        profile_var=fields.get("profile", ""))


def _setter() -> "ModuleType":
    """parinfo's one module that sets counts, loaded by path (this interpreter may not have parinfo)."""
    loaded = sys.modules.get("_parinfo_setter")
    if loaded is not None:
        return loaded
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "process", "setter.py")
    spec = importlib.util.spec_from_file_location("_parinfo_setter", path)
    if spec is None or spec.loader is None:
        raise ImportError("parinfo's setter module is missing beside this hook: " + path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["_parinfo_setter"] = module  # dataclasses look their module up while it runs
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["_parinfo_setter"]
        raise
    return module


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


class _TorchWatcher:
    """A sys.meta_path finder that fires once, when ``import torch`` has finished."""

    def __init__(self, callback: "Callable[[ModuleType], None]") -> "None":
        self._callback = callback
        self._busy = False

    def find_spec(self, fullname: "str", path: "Sequence[str] | None" = None,
                  target: "ModuleType | None" = None) -> "ModuleSpec | None":
        if fullname != "torch" or self._busy:
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

    def _fire(self, module: "ModuleType") -> "None":
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        self._callback(module)


#: The variable that names the profile, from the instructions (the registry's, via hook_facts).
_PROFILE_VAR: "list[str]" = []


def _profile() -> "str":
    return (os.environ.get(_PROFILE_VAR[0]) if _PROFILE_VAR else None) or "?"


# torch's refusal of a second set_num_interop_threads call (and of one after its pool started).
_INTEROP_REFUSED = "cannot set number of interop threads"
# The name torch's c10 thread pool gives its threads (the inter-op pool's, and in a build whose
# intra-op backend is not OpenMP, the intra-op pool's too).
_POOL_THREAD = "PTThreadPool"


def _interop_pool_started(torch: "ModuleType") -> "bool | None":
    """Whether torch's inter-op pool has started (its threads exist); None when it cannot be told."""
    try:
        if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
            return None  # the intra-op pool's threads carry the same name
        for tid in os.listdir("/proc/self/task"):
            with open(os.path.join("/proc/self/task", tid, "comm")) as f:
                if f.read().strip() == _POOL_THREAD:
                    return True
        return False
    except (OSError, RuntimeError, AttributeError, TypeError):
        return None


def _guard_interop(torch: "ModuleType", inter: "int", rec: "_TorchFacts") -> "None":
    """Keep torch.set_num_interop_threads working for the program after the hook's own call.

    torch accepts one call per process and the hook has made it, so the program's first call would
    raise where it succeeds without parinfo. That call is answered instead: the profile's count stays
    in force (torch cannot change it) and one stderr line says so when the program asked for another.
    A call torch would refuse without parinfo too (a second one, one after the pool started, a bad
    argument) raises as it would without parinfo.
    """
    real = getattr(torch, rec.interop_setter)
    answered = []  # type: list[int]

    def guarded(nthreads: "Any") -> "Any":
        if answered:
            return real(nthreads)
        try:
            return real(nthreads)
        except RuntimeError as exc:
            if _INTEROP_REFUSED not in str(exc) or _interop_pool_started(torch):
                raise
        answered.append(nthreads)
        if nthreads != inter:
            _say("torch inter-op threads stay " + str(inter) + " (profile " + _profile() + "), not the "
                 + repr(nthreads) + " this program asked for: the start-up hook set them when torch was "
                 "imported and torch accepts one " + rec.interop_setter + " call per process; to use the "
                 "program's count, set inter_op in the profile or run without parinfo apply")
        return None

    guarded.__name__ = getattr(real, "__name__", rec.interop_setter)
    guarded.__qualname__ = guarded.__name__
    guarded.__doc__ = getattr(real, "__doc__", None)
    guarded.__wrapped__ = real  # type: ignore[attr-defined]
    setattr(torch, rec.interop_setter, guarded)


def _set_torch(torch: "ModuleType", intra: "int | None", inter: "int | None", rec: "_TorchFacts") -> "None":
    """Set torch's counts and check them; one line on stderr per count not in force."""
    try:
        setter = _setter()
        rec = setter.ByName(rec.name, rec.setter, rec.getter, rec.interop_setter, rec.interop_getter, rec.scope)
        if inter is not None:
            sized = setter.set_torch(inter=inter, record=rec, torch=torch, inter_if_changed=False)[0]
            if sized.error:
                _say("not in force: torch inter-op threads = %s, profile %s wants %d (torch: %s)"
                     % (sized.now, _profile(), inter, sized.error))
                inter = None
            else:
                _guard_interop(torch, inter, rec)
        if intra is not None:
            setter.set_torch(intra=intra, record=rec, torch=torch)
        for what, want, got in zip(("intra-op", "inter-op"), (intra, inter), setter.torch_counts(rec)):
            if want is not None and got != want:
                _say("not in force: torch %s threads = %s, profile %s wants %d" % (what, got, _profile(), want))
    except Exception as exc:  # never break the user's import of torch
        _say("could not set torch's thread counts (%s: %s)" % (type(exc).__name__, exc))


def _expected_pool_count(order: "Sequence[str]", env: "Mapping[str, str]") -> "tuple[str, int] | None":
    """The count a native pool reads from the launch environment (``order``: its variables, first
    wins), or None when none applies."""
    for name in order:
        value = env.get(name, "").split(",")[0].strip()
        if value.isdigit() and int(value) > 0:
            return name, int(value)
    return None


class _ExitCheck:
    """Checks at exit what the program may have undone; cheap unless PARINFO_VERIFY=full."""

    def __init__(self, facts: "_Facts", full: "bool") -> "None":
        self.start = {n: os.environ.get(n) for n in facts.watch}
        names = [n for order in facts.orders.values() for n in order] + list(facts.runtime_vars)
        self.launch = {n: os.environ.get(n) for n in names}
        self.facts = facts
        self.full = full

    def __call__(self) -> "None":
        try:
            self._environment()
            self._runtime()
            if self.full:
                self._pools()
        except Exception as exc:
            _say("could not verify the thread counts (%s: %s)" % (type(exc).__name__, exc))

    def _environment(self) -> "None":
        for name, start in self.start.items():
            now = os.environ.get(name)
            if now != start:
                _say("not in force: the program changed %s from %r to %r (profile %s); libraries "
                     "loaded after the change read the new value" % (name, start, now, _profile()))

    def _runtime(self) -> "None":
        state = sys.modules.get("parinfo.runtime.state")  # the program used parinfo's runtime
        runtime = getattr(state, "RUNTIME", None)
        if runtime is None:
            return
        data = runtime.info()
        for key, var in zip(("intra_op", "inter_op"), self.facts.runtime_vars):
            want = self.launch.get(var)
            row = data.get(key) or {}
            got, source = row.get("count"), row.get("source") or {}
            # an explicit call outranks the profile by the rules: only another source is a failure
            if want and want.isdigit() and got != int(want) and source.get("kind") != "explicit call":
                _say("not in force: parinfo %s threads = %s (%s), profile %s wants %s"
                     % (key.replace("_", "-"), got, source.get("text", "unknown"), _profile(), want))

    def _pools(self) -> "None":
        try:
            threadpoolctl = _setter().import_threadpoolctl(self.facts.undo)
        except ImportError:
            _say("native pools not verified: unknown (threadpoolctl is not installed here)")
            return
        env = {n: v for n, v in self.launch.items() if v is not None}
        for pool in threadpoolctl.threadpool_info():
            expected = _expected_pool_count(self.facts.orders.get(pool.get("internal_api"), ()), env)
            if expected is not None and pool.get("num_threads") != expected[1]:
                _say("not in force: %s (%s) uses %s threads, %s=%d (profile %s)"
                     % (pool.get("internal_api"), pool.get("filepath"), pool.get("num_threads"),
                        expected[0], expected[1], _profile()))


def _install(spec: "str") -> "None":
    facts = _parse(spec)
    if facts is None:
        _say("ignoring %s=%r: not understood by this start-up hook" % (_SPEC_VAR, spec))
        return
    _PROFILE_VAR[:] = [facts.profile_var] if facts.profile_var else []
    verify = os.environ.get(facts.verify_var, "").strip().lower() if facts.verify_var else ""
    if facts.intra is not None or facts.inter is not None:
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, facts.torch.setter):
            _set_torch(torch, facts.intra, facts.inter, facts.torch)
        else:
            sys.meta_path.insert(0, _TorchWatcher(lambda mod: _set_torch(mod, facts.intra, facts.inter, facts.torch)))
    if verify != "off":  # the registry's words: auto, full, off; any other is invalid there, and checks as auto
        import atexit

        atexit.register(_ExitCheck(facts, full=verify == "full"))


def _chain() -> "None":
    """Run the sitecustomize that would have run without this hook, if there is one."""
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    sys.path[:] = rest
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # what site.py itself does with a failing sitecustomize
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                         % (type(exc).__name__, exc))


def _main() -> "None":
    spec = os.environ.get(_SPEC_VAR)
    if spec:
        try:
            _install(spec)
        except Exception as exc:
            _say("start-up hook failed (%s: %s)" % (type(exc).__name__, exc))
    _chain()


_main()
