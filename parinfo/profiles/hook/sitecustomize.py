"""parinfo's start-up hook for Python programs launched by ``parinfo apply PROFILE -- COMMAND``.

The launcher puts this file's directory first on PYTHONPATH, so Python's ``site`` imports it at
interpreter start. It sets the counts that have no environment variable (torch's intra-op and
inter-op counts) the moment ``import torch`` finishes, before user code can run an op, and checks
what is in force; the program's own first ``torch.set_num_interop_threads`` call then keeps working.
The watch on ``import torch`` is ``_parinfo_import_watch.py`` beside this file, which
``parinfo.apply()`` uses in a running process too. It never imports torch itself, never imports
parinfo at start-up (the child's interpreter may not have it), and then runs any other ``sitecustomize`` that
was on the path, as if it were absent.

Its instructions come from the private variable ``_PARINFO_HOOK`` written by parinfo.launch.child:
``1 intra=N|- inter=N|- watch=NAME,NAME`` then the library registry's facts the hook needs
(``parinfo.process.libraries.hook_facts``: each pool's variables, parinfo's runtime variables, the
verify variable, torch's setters), so this file keeps no table of its own. Without that variable
the hook only chains. torch's counts are set through parinfo's one setting module
(parinfo/process/setter.py); both are loaded by path and import the standard library only.
Checks: right after torch's import (torch's counts), and at exit (a watched variable the program
changed, parinfo's runtime counts when it was used); the verify variable set to ``full`` adds the
native pools (threadpoolctl) at exit, ``off`` turns checking off. When the private variable
``_PARINFO_HOOK_REPORT`` names a folder (``parinfo tune`` sets it for each trial), the hook also
writes there at exit, as ``PID.json``, what it reads back: torch's counts (when torch was imported),
parinfo's runtime counts (when the program used the runtime), and for each file the launch preloaded
(PARINFO_PRELOAD) whether the process has it mapped (/proc/self/maps).
With ``every=KEY:N,...`` (a profile's ``threads: every``) the hook puts those counts into every thread
the program starts, at the thread's start (parinfo/runtime/thread_start.py, loaded by path); the
first such thread imports parinfo's ``thread_limits`` to set them, and where parinfo cannot be
imported the hook says so once and the threads keep the environment's counts.

Its type hints are quoted and its typing names imported for type checkers only: every launched
program runs this file, so it neither imports typing nor needs a recent interpreter to do so.
"""
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing into every launched program
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from types import ModuleType

_HERE = os.path.dirname(os.path.abspath(__file__))
_SPEC_VAR = "_PARINFO_HOOK"
_REPORT_VAR = "_PARINFO_HOOK_REPORT"
_MAX_MAPS_BYTES = 16 << 20  # /proc/self/maps read for the report


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
                 undo: "tuple[str, ...]", torch: "_TorchFacts", profile_var: "str" = "",
                 preload_var: "str" = "", every: "dict[str, int] | None" = None) -> "None":
        self.intra, self.inter, self.watch, self.orders = intra, inter, watch, orders
        self.runtime_vars, self.verify_var, self.undo, self.torch = runtime_vars, verify_var, undo, torch
        self.profile_var, self.preload_var = profile_var, preload_var
        self.every = every or {}


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
        profile_var=fields.get("profile", ""), preload_var=fields.get("preload", ""),
        every={k: int(n) for k, _, n in (p.partition(":") for p in names("every")) if n.isdigit() and int(n) > 0})


def _load(name: "str", path: "str") -> "ModuleType":
    """A module of parinfo's loaded by path as ``name`` (this interpreter may not have parinfo)."""
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError("parinfo's module is missing beside this hook: " + path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it runs
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _setter() -> "ModuleType":
    """parinfo's one module that sets counts."""
    return _load("_parinfo_setter", os.path.join(os.path.dirname(os.path.dirname(_HERE)), "process", "setter.py"))


def _thread_start() -> "ModuleType":
    """parinfo's hook that runs a function at the start of every new thread."""
    return _load("_parinfo_thread_start",
                 os.path.join(os.path.dirname(os.path.dirname(_HERE)), "runtime", "thread_start.py"))


class _EveryThread:
    """``threads: every``: the counts (by profile key) set in each new thread at its start, through
    parinfo's thread_limits, imported by the first thread that starts (not at start-up)."""

    def __init__(self, counts: "dict[str, int]") -> "None":
        self.counts = counts
        self.limit_here: Callable[..., object] | None = None  # not evaluated: a local annotation
        self.failed = False

    def __call__(self) -> "None":
        if self.failed:
            return
        if self.limit_here is None:
            try:
                from parinfo.runtime.thread_limits import limit_here
            except ImportError as exc:
                self.failed = True
                _say("threads: every needs parinfo importable in this program (%s); new threads keep the "
                     "counts of the environment" % exc)
                return
            self.limit_here = limit_here
        self.limit_here(self.counts, "new thread", process_wide=False)


def _watch() -> "ModuleType":
    """The watch-on-import mechanism beside this hook (``parinfo.apply()`` uses it in-process too)."""
    return _load("_parinfo_import_watch", os.path.join(_HERE, "_parinfo_import_watch.py"))


#: The variable that names the profile, from the instructions (the registry's, via hook_facts).
_PROFILE_VAR: "list[str]" = []


def _profile() -> "str":
    return (os.environ.get(_PROFILE_VAR[0]) if _PROFILE_VAR else None) or "?"


# Who set torch's inter-op count, and what else a program that wants its own count can do.
_HOW = ("the start-up hook", "run without parinfo apply")


def _set_torch(torch: "ModuleType", intra: "int | None", inter: "int | None", rec: "_TorchFacts") -> "None":
    """Set torch's counts and check them; one line on stderr per count not in force."""
    try:
        names = (rec.setter, rec.getter, rec.interop_setter, rec.interop_getter)
        _watch().set_torch(torch, intra, inter, names, _setter(), _profile(), _HOW)
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


def _mapped(preloaded: "list[str]") -> "dict[str, bool | None]":
    """For each preloaded file, whether this process has it mapped (None: unknown)."""
    try:
        with open("/proc/self/maps", "rb") as fh:
            text = fh.read(_MAX_MAPS_BYTES).decode("utf-8", "replace")
    except OSError:
        return dict.fromkeys(preloaded)
    files = set()
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/"):
            files.add(fields[5])
    real = set(os.path.realpath(f) for f in files)
    return {p: os.path.realpath(p) in real for p in preloaded}


class _Report:
    """At exit, what is in force in this process, written as ``FOLDER/PID.json`` for the launcher."""

    def __init__(self, folder: "str", facts: "_Facts") -> "None":
        self.folder, self.facts = folder, facts

    def __call__(self) -> "None":
        try:
            self._write()
        except Exception as exc:
            _say("could not write the report of the counts in force (%s: %s)" % (type(exc).__name__, exc))

    def _write(self) -> "None":
        import json

        report = {}  # type: dict[str, object]
        rec = self.facts.torch
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, rec.getter):
            intra, inter = _setter().torch_counts(_setter().ByName(
                "torch", rec.setter, rec.getter, rec.interop_setter, rec.interop_getter))
            report["torch"] = {"intra_op": intra, "inter_op": inter}
        state = sys.modules.get("parinfo.runtime.state")
        runtime = getattr(state, "RUNTIME", None)
        if runtime is not None:
            data = runtime.info()
            report["parinfo"] = {k: (data.get(k) or {}).get("count") for k in ("intra_op", "inter_op")}
        mark = os.environ.get(self.facts.preload_var, "") if self.facts.preload_var else ""
        preloaded = [p for p in mark.split(":") if p][:64]
        if preloaded:
            report["preloaded"] = _mapped(preloaded)
        path = os.path.join(self.folder, "%d.json" % os.getpid())
        # parinfo is not imported here (start-up cost): safe_file.create's moves, by hand. The
        # program may have left a link or a FIFO at the name; it is replaced, never written through.
        try:
            os.unlink(path + ".part")
        except FileNotFoundError:
            pass
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        with os.fdopen(os.open(path + ".part", flags, 0o600), "w") as fh:
            json.dump(report, fh)
        os.replace(path + ".part", path)


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
            _watch().watch("torch", lambda mod: _set_torch(mod, facts.intra, facts.inter, facts.torch))
    if facts.every:
        _thread_start().START_HOOK.add(_EveryThread(facts.every))
    report = os.environ.get(_REPORT_VAR)
    # verify: the registry's words (auto, full, off); any other is invalid there, and checks as auto.
    if verify != "off" or report:
        import atexit

        if verify != "off":
            atexit.register(_ExitCheck(facts, full=verify == "full"))
        if report:
            atexit.register(_Report(report, facts))


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
