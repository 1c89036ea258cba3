"""The script parinfo's attach runs inside another Python process (``sys.remote_exec``): a small runner
(:func:`parinfo.outside.attach.script`) executes this module's code in a fresh namespace, compiled by
parinfo when the target is its very version and build, else from this source, then calls
``main(DATA)``, whose DATA (a Python literal parinfo writes) says where to answer and what to read.
parinfo itself never imports this module.

It runs on the target's main thread, between two bytecodes of whatever that thread was doing, so:

- it imports nothing: every module it uses is taken from ``sys.modules`` (a module still being
  imported is left alone), and of a module only what its ``__dict__`` holds (no lazy attribute);
- it calls only getters (the C getters the library registry names, through the ctypes the process
  already imported, on copies already loaded; torch's and Python-module libraries' getters), never
  a setter; it starts no thread and takes no lock the main thread could hold (the thread lists are
  copied without the lock ``threading.enumerate()`` takes);
- it prints nothing and raises nothing (a part that fails is named in the answer);
- it writes only into the FIFO parinfo holds open, without ever blocking: when that FIFO is gone
  or nobody reads it (parinfo timed out, or has exited), it returns at once and leaves no trace.
"""
# The names below live only in the fresh namespace CPython runs the script in.
# Type hints: those of a def are quoted (before Python 3.14 a def evaluates them; a string is a
# constant), those of a local variable are never evaluated; the names they use are imported for
# type checkers only, under a guard that never runs (the script imports nothing, not even typing).
TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from _ctypes import CFuncPtr
    from collections.abc import Callable
    from ctypes import CDLL
    from types import ModuleType
    from typing import Any, Literal, TypedDict

    class _Native(TypedDict):
        """One library's C getters (parinfo.process.libraries.NativeReads.to_data)."""

        count: str
        affixes: list[list[str]]  # [prefix, suffix] pairs
        version: str
        version_buffer: bool
        version_after: str
        layer: str
        layer_codes: dict[str, str]
        openmp_count: str
        architecture: str

    class _Torch(TypedDict):
        module: str
        calls: dict[str, str]  # key in the answer: dotted getter under the module

    class _Data(TypedDict):
        """What parinfo.outside.attach.script_data writes (a Python literal: lists, never tuples)."""

        fifo: str
        token: str
        cap: int
        max_items: int
        max_text: int
        machine: list[int]
        env_names: list[str]
        env_prefixes: list[str]
        modules: list[str]
        pools: list[list[str]]  # [file, library] pairs
        native: dict[str, _Native]
        skip_native: bool
        torch: _Torch
        # [name, module, getter, facts, guard, pool getters], a list each; guard: None, ["fact", dotted]
        # or ["thread", prefix]
        python_libs: list[tuple[str, str, str, list[str], list[str] | None, list[str]]]

_S_IFMT, _S_IFIFO = 0o170000, 0o010000


def _ready(module: "ModuleType | None") -> "ModuleType | None":
    """The module when it is fully imported, else None (one half-imported is never touched)."""
    if module is None or getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module


def _in_module(obj: "object", part: "str", module_type: "type[ModuleType]") -> "object":
    """What module ``obj``'s ``__dict__`` holds under ``part``, or, for a module object that stands in
    for another (torch's backends wrap theirs), what the wrapped module's holds; never through a
    ``__getattr__``, which may import."""
    found = vars(obj).get(part)
    if found is None and type(obj) is not module_type:
        for inner in list(vars(obj).values()):
            if type(inner) is module_type and part in vars(inner):
                return vars(inner)[part]
    return found


def _member(obj: "object", dotted: "str", modules: "dict[str, ModuleType]", qualname: "str | None") -> "object":
    """``obj.a.b`` for ``dotted`` "a.b" (``obj`` is the module named ``qualname``): of a module only an
    imported submodule or what its ``__dict__`` holds, so that nothing loads on access; None when a
    part is missing."""
    module_type = type(modules["sys"])
    for part in dotted.split("."):
        if isinstance(obj, module_type):
            qualname = qualname + "." + part if qualname else None
            sub = _ready(modules.get(qualname)) if qualname else None
            obj = sub if sub is not None else _in_module(obj, part, module_type)
        else:
            qualname, obj = None, getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _plain(value: "object") -> "object":
    """``value`` when it is JSON-ready data (str, bool, int, float, None), else None."""
    return value if value is None or type(value) in (str, bool, int, float) else None


def _quote(text: "str", out: "list[str]") -> "None":
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        out.append('"' + text + '"')
        return
    parts = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            parts.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            parts.append(ch)
        elif code > 0xFFFF:
            code -= 0x10000
            parts.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            parts.append(f"\\u{code:04x}")
    parts.append('"')
    out.append("".join(parts))


def _encode(value: "Any", out: "list[str]", depth: "int") -> "None":
    """JSON text of ``value`` into ``out`` (ASCII only; a float that is not finite is null).

    ``value`` is any object, told apart by its exact type (``kind``, which a type checker does not
    follow, hence Any): one of another type, a subclass included, is null."""
    kind = type(value)
    if depth > 12:
        out.append("null")
    elif value is None or value is True or value is False:
        out.append("null" if value is None else "true" if value else "false")
    elif kind is int:
        out.append(str(value))
    elif kind is float:
        out.append(repr(value) if value - value == 0 else "null")
    elif kind is str:
        _quote(value, out)
    elif kind in (list, tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _encode(item, out, depth + 1)
        out.append("]")
    elif kind is dict:
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            if i:
                out.append(",")
            _quote(str(key), out)
            out.append(":")
            _encode(item, out, depth + 1)
        out.append("}")
    else:
        out.append("null")


def _why(exc: "BaseException") -> "str":
    return (type(exc).__name__ + ": " + str(exc))[:300]


def _python(sys: "ModuleType") -> "dict[str, object]":
    gil = getattr(sys, "_is_gil_enabled", None)
    x_gil = sys._xoptions.get("gil")
    return {"version": sys.version.split()[0], "version_info": list(sys.version_info[:3]),
            "executable": sys.executable, "implementation": sys.implementation.name, "platform": sys.platform,
            "abiflags": getattr(sys, "abiflags", ""), "gil_enabled": bool(gil()) if gil is not None else None,
            "x_gil": x_gil if isinstance(x_gil, str) else None}


def _environ(modules: "dict[str, ModuleType]", posix: "ModuleType", data: "_Data") -> "dict[str, str]":
    os = _ready(modules.get("os"))
    items: list[tuple[str, str]]
    if os is not None:
        items = list(os.environ.items())
    else:  # no os module: nothing in Python can have changed the environment since launch
        items = [(k.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape"))
                 for k, v in posix.environ.items()]
    names, prefixes = set(data["env_names"]), tuple(data["env_prefixes"])
    found: dict[str, str] = {}
    for key, value in items:
        if (key in names or key.startswith(prefixes)) and len(found) < data["max_items"]:
            found[key] = value[:data["max_text"]]
    return found


def _threads(modules: "dict[str, ModuleType]", data: "_Data") -> "tuple[int | None, list[list[object]] | None]":
    """(python threads now, [[native id, name, daemon]...] or None when threading is not imported)."""
    threading = _ready(modules.get("threading"))
    if threading is None:
        thread = modules.get("_thread")
        return (1 + thread._count() if thread is not None else None), None
    # what threading.enumerate() lists, copied without its lock: the main thread may hold it now
    active, limbo = vars(threading)["_active"].copy(), vars(threading)["_limbo"].copy()
    rows: list[list[object]] = []
    for t in list(active.values())[:data["max_items"]]:
        rows.append([_plain(getattr(t, "native_id", None)), str(getattr(t, "_name", ""))[:data["max_text"]],
                     bool(getattr(t, "_daemonic", False))])
    return len(active) + len(limbo), rows


def _symbol(ctypes: "ModuleType", dll: "CDLL", name: "str", restype: "type[Any] | None") -> "CFuncPtr | None":
    try:
        fn: CFuncPtr = getattr(dll, name)
    except AttributeError:
        return None
    fn.restype, fn.argtypes = restype, ()
    return fn


def _text(raw: "object") -> "str | None":
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else None


def _pool(ctypes: "ModuleType", posix: "ModuleType", path: "str", spec: "_Native") -> "dict[str, object]":
    """What one loaded library says of itself through its own getters."""
    try:
        dll: CDLL = ctypes.CDLL(path, mode=posix.RTLD_NOLOAD)
    except OSError as exc:
        return {"path": path, "why": "not loaded any more (" + _why(exc) + ")"}
    count: CFuncPtr | None
    prefix, suffix, count = "", "", None
    for prefix, suffix in spec["affixes"]:
        count = _symbol(ctypes, dll, prefix + spec["count"] + suffix, ctypes.c_int)
        if count is not None:
            break
    if count is None:
        return {"path": path, "why": "exports no " + spec["count"]}
    row: dict[str, object] = {"path": path}

    def named(key: "Literal['layer', 'version', 'architecture']", restype: "type[Any] | None") -> "CFuncPtr | None":
        return _symbol(ctypes, dll, prefix + spec[key] + suffix, restype) if spec[key] else None

    layer = named("layer", ctypes.c_int)
    if layer is not None:
        row["layer"] = spec["layer_codes"].get(str(layer()), "unknown")
    if row.get("layer") == "openmp" and spec["openmp_count"]:
        count = _symbol(ctypes, dll, spec["openmp_count"], ctypes.c_int) or count
    row["count"] = count()
    version = named("version", None if spec["version_buffer"] else ctypes.c_char_p)
    if version is not None:
        if spec["version_buffer"]:
            buffer = ctypes.create_string_buffer(256)
            version.argtypes = (ctypes.c_char_p, ctypes.c_int)
            version(buffer, 256)
            words = (_text(buffer.value) or "").split()
        else:
            words = (_text(version()) or "").split()
        after = spec["version_after"]
        if after:
            words = words[words.index(after) + 1:][:1] if after in words else []
        row["version"] = " ".join(words)[:200] or None
    arch = named("architecture", ctypes.c_char_p)
    if arch is not None:
        row["architecture"] = (_text(arch()) or "").strip()[:100] or None
    return row


def _pools(modules: "dict[str, ModuleType]", posix: "ModuleType", data: "_Data",
           errors: "dict[str, str]") -> "list[dict[str, object]]":
    ctypes = _ready(modules.get("ctypes"))
    if ctypes is None:
        errors["pools"] = "ctypes is not imported in the process, and attach imports nothing there"
        return []
    rows: list[dict[str, object]] = []
    for path, library in data["pools"]:
        spec = data["native"].get(library)
        if spec is None:
            continue
        try:
            rows.append(_pool(ctypes, posix, path, spec))
        except Exception as exc:
            rows.append({"path": path, "why": _why(exc)})
    return rows


def _torch(modules: "dict[str, ModuleType]", data: "_Data") -> "dict[str, object] | None":
    spec = data["torch"]
    torch = _ready(modules.get(spec["module"]))
    if torch is None:
        return None
    out: dict[str, object] = {"version": str(vars(torch).get("__version__"))}
    for key, dotted in spec["calls"].items():
        fn = _member(torch, dotted, modules, spec["module"])
        out[key] = _plain(fn()) if callable(fn) else None
    return out


def _started(guard: "list[str] | None", module: "ModuleType", module_name: "str", modules: "dict[str, ModuleType]",
             posix: "ModuleType", data: "_Data") -> "bool":
    """Whether a getter that would start its library's pool may be called: no guard, or its module's
    fact is true (numba's layer launched), or a thread with the guard's name prefix runs (Polars'
    pool started: its threads are there)."""
    if guard is None:
        return True
    kind, what = guard
    if kind == "fact":
        return bool(_member(module, what, modules, module_name))
    for tid in posix.listdir("/proc/self/task")[:data["max_items"]]:
        try:
            fd = posix.open("/proc/self/task/" + tid + "/comm", posix.O_RDONLY)
        except OSError:
            continue  # the thread ended
        try:
            if posix.read(fd, 64).decode("utf-8", "replace").startswith(what):
                return True
        finally:
            posix.close(fd)
    return False


def _python_libraries(modules: "dict[str, ModuleType]", posix: "ModuleType",
                      data: "_Data") -> "list[dict[str, object]]":
    """Each imported library's file, count and facts, each asked on its own: a getter that raises
    (cv2.getNumThreads() with OPENCV_FOR_THREADS_NUM=x raises cv2.error) leaves that count None with
    ``why``, and every other library is still read."""
    rows: list[dict[str, object]] = []
    for name, module_name, getter, facts, guard, pool_getters in data["python_libs"]:
        module = _ready(modules.get(module_name))
        if module is None:
            continue
        fn = vars(module).get(getter) if getter else None
        row: dict[str, object] = {"name": name, "file": _plain(vars(module).get("__file__")), "count": None}
        try:
            if callable(fn) and _started(guard, module, module_name, modules, posix, data):
                row["count"] = _plain(fn())
        except Exception as exc:
            row["why"] = module_name + "." + getter + "() raised " + _why(exc)
        counts: dict[str, object] = {}
        for other in pool_getters:
            call = vars(module).get(other)
            try:
                counts[other] = _plain(call()) if callable(call) else None
            except Exception:  # that pool's count is not known; the others are
                counts[other] = None
        row["pools"] = counts
        found: dict[str, object] = {}
        for fact in facts:
            try:
                found[fact] = _plain(_member(module, fact, modules, module_name))
            except Exception:  # a property that raises: that fact is not known, the others are
                found[fact] = None
        row["facts"] = found
        rows.append(row)
    return rows


def _parinfo(modules: "dict[str, ModuleType]", data: "_Data") -> "dict[str, object]":
    state = _ready(modules.get("parinfo.runtime.state"))
    version = _ready(modules.get("parinfo.version"))
    out: dict[str, object] = {"version": _plain(vars(version).get("__version__")) if version is not None else None}
    runtime = vars(state).get("RUNTIME") if state is not None else None
    read = getattr(runtime, "attach_state", None)
    out["state"] = read(machine=tuple(data["machine"])) if callable(read) else None
    out["runtime_loaded"] = runtime is not None
    return out


def _gather(sys: "ModuleType", modules: "dict[str, ModuleType]", posix: "ModuleType",
            data: "_Data") -> "dict[str, object]":
    errors: dict[str, str] = {}
    out: dict[str, object] = {"token": data["token"], "pid": posix.getpid(), "errors": errors}
    parts: tuple[tuple[str, Callable[[], object]], ...] = (
        ("python", lambda: _python(sys)), ("environ", lambda: _environ(modules, posix, data)),
        ("modules", lambda: [m for m in data["modules"] if _ready(modules.get(m)) is not None]),
        ("threads", lambda: _threads(modules, data)),
        ("pools", lambda: [] if data["skip_native"] else _pools(modules, posix, data, errors)),
        ("torch", lambda: None if data["skip_native"] else _torch(modules, data)),
        ("python_libs", lambda: _python_libraries(modules, posix, data)),
        ("parinfo", lambda: _parinfo(modules, data) if "parinfo" in modules else None))
    for key, read in parts:
        try:
            out[key] = read()
        except Exception as exc:
            out[key] = None
            errors[key] = _why(exc)
    return out


def _write(posix: "ModuleType", modules: "dict[str, ModuleType]", fd: "int", body: "bytes") -> "None":
    """Write ``body`` without ever blocking the thread: what does not fit now is dropped (parinfo
    then says the answer was cut short). SIGPIPE, when the process has not left it ignored, is held
    back for the write and a pending one taken off, so a reader that has just gone ends nothing."""
    # the _signal module or None; Any, as a type checker cannot tell from ``held`` that it is not None
    signal: Any = modules.get("_signal")
    held = signal is not None and signal.getsignal(signal.SIGPIPE) != signal.SIG_IGN
    if held:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPIPE})
    try:
        view = memoryview(body)
        while view:
            view = view[posix.write(fd, view):]
    except OSError:
        if held:
            signal.sigtimedwait({signal.SIGPIPE}, 0)
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def main(data: "_Data") -> "None":
    """Answer parinfo through its FIFO, or do nothing when parinfo is not there to read."""
    sys = __import__("sys")
    modules: dict[str, ModuleType] = sys.modules
    posix = modules["posix"]
    try:
        fd: int = posix.open(data["fifo"], posix.O_WRONLY | posix.O_NONBLOCK | posix.O_CLOEXEC | posix.O_NOFOLLOW)
    except OSError:  # gone (timed out, exited) or nobody reading: a late run leaves no trace
        return
    try:
        if posix.fstat(fd).st_mode & _S_IFMT != _S_IFIFO:
            return
        _write(posix, modules, fd, b" ")  # JSON's leading blank: tells parinfo the script has begun
        out: list[str] = []
        _encode(_gather(sys, modules, posix, data), out, 0)
        body = "".join(out).encode("ascii")
        if len(body) >= data["cap"]:  # the blank sent first takes one byte
            out = []
            _encode({"token": data["token"], "pid": posix.getpid(), "too_big": len(body)}, out, 0)
            body = "".join(out).encode("ascii")
        _write(posix, modules, fd, body)
    except Exception:
        pass
    finally:
        posix.close(fd)
