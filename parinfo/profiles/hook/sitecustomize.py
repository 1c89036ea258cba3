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
"""
import os
import sys
from types import SimpleNamespace

_HERE = os.path.dirname(os.path.abspath(__file__))
_SPEC_VAR = "_PARINFO_HOOK"


def _say(text):
    try:
        sys.stderr.write("parinfo: " + text + "\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr must not break the program
        pass


def _parse(spec):
    """``1 intra=2 inter=1 watch=A,B pool.X=V,W runtime=... verify=... undo=... torch=...`` -> the
    instructions as a namespace; None when not understood."""
    parts = spec.split()
    if not parts or parts[0] != "1":
        return None
    fields = dict(p.split("=", 1) for p in parts[1:] if "=" in p)

    def count(key):
        value = fields.get(key, "-")
        return int(value) if value.isdigit() and int(value) > 0 else None

    def names(key):
        return tuple(n for n in fields.get(key, "").split(",") if n)

    torch = names("torch")
    if len(torch) != 4 or len(names("runtime")) != 2:
        return None
    return SimpleNamespace(
        intra=count("intra"), inter=count("inter"), watch=list(names("watch")),
        orders={k[len("pool."):]: names(k) for k in fields if k.startswith("pool.")},
        runtime_vars=names("runtime"), verify_var=fields.get("verify", ""), undo=names("undo"),
        torch=SimpleNamespace(name="torch", setter=torch[0], getter=torch[1], interop_setter=torch[2],
                              interop_getter=torch[3], scope="thread"))


def _setter():
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


class _AfterExec:
    """Wraps a loader so ``after(module)`` runs once the module has executed."""

    def __init__(self, loader, after):
        self._loader = loader
        self._after = after

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        # The module keeps its real loader: importlib.resources and friends look at it.
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._after(module)


class _TorchWatcher:
    """A sys.meta_path finder that fires once, when ``import torch`` has finished."""

    def __init__(self, callback):
        self._callback = callback
        self._busy = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" or self._busy:
            return None
        self._busy = True
        try:
            spec = None
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

    def _fire(self, module):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        self._callback(module)


def _profile():
    return os.environ.get("PARINFO_PROFILE") or "?"


# torch's refusal of a second set_num_interop_threads call (and of one after its pool started).
_INTEROP_REFUSED = "cannot set number of interop threads"
# The name torch's c10 thread pool gives its threads (the inter-op pool's, and in a build whose
# intra-op backend is not OpenMP, the intra-op pool's too).
_POOL_THREAD = "PTThreadPool"


def _interop_pool_started(torch):
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


def _guard_interop(torch, inter, rec):
    """Keep torch.set_num_interop_threads working for the program after the hook's own call.

    torch accepts one call per process and the hook has made it, so the program's first call would
    raise where it succeeds without parinfo. That call is answered instead: the profile's count stays
    in force (torch cannot change it) and one stderr line says so when the program asked for another.
    A call torch would refuse without parinfo too (a second one, one after the pool started, a bad
    argument) raises as it would without parinfo.
    """
    real = getattr(torch, rec.interop_setter)
    answered = []  # type: list[int]

    def guarded(nthreads):
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


def _set_torch(torch, intra, inter, rec):
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


def _expected_pool_count(order, env):
    """The count a native pool reads from the launch environment (``order``: its variables, first
    wins), or None when none applies."""
    for name in order:
        value = env.get(name, "").split(",")[0].strip()
        if value.isdigit() and int(value) > 0:
            return name, int(value)
    return None


class _ExitCheck:
    """Checks at exit what the program may have undone; cheap unless PARINFO_VERIFY=full."""

    def __init__(self, facts, full):
        self.start = {n: os.environ.get(n) for n in facts.watch}
        names = [n for order in facts.orders.values() for n in order] + list(facts.runtime_vars)
        self.launch = {n: os.environ.get(n) for n in names}
        self.facts = facts
        self.full = full

    def __call__(self):
        try:
            self._environment()
            self._runtime()
            if self.full:
                self._pools()
        except Exception as exc:
            _say("could not verify the thread counts (%s: %s)" % (type(exc).__name__, exc))

    def _environment(self):
        for name, start in self.start.items():
            now = os.environ.get(name)
            if now != start:
                _say("not in force: the program changed %s from %r to %r (profile %s); libraries "
                     "loaded after the change read the new value" % (name, start, now, _profile()))

    def _runtime(self):
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

    def _pools(self):
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


def _install(spec):
    facts = _parse(spec)
    if facts is None:
        _say("ignoring %s=%r: not understood by this start-up hook" % (_SPEC_VAR, spec))
        return
    verify = os.environ.get(facts.verify_var, "").strip().lower() if facts.verify_var else ""
    if facts.intra is not None or facts.inter is not None:
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, facts.torch.setter):
            _set_torch(torch, facts.intra, facts.inter, facts.torch)
        else:
            sys.meta_path.insert(0, _TorchWatcher(lambda mod: _set_torch(mod, facts.intra, facts.inter, facts.torch)))
    if verify not in ("off", "0", "no", "false"):
        import atexit

        atexit.register(_ExitCheck(facts, full=verify == "full"))


def _chain():
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


def _main():
    spec = os.environ.get(_SPEC_VAR)
    if spec:
        try:
            _install(spec)
        except Exception as exc:
            _say("start-up hook failed (%s: %s)" % (type(exc).__name__, exc))
    _chain()


_main()
