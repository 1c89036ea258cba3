"""The interpreter's own parallelism: a free-threaded CPython build, the GIL, and who turned it on.

On a free-threaded build (``Py_GIL_DISABLED``, 3.13t/3.14t) Python threads run at once, so N
threads calling a library whose limit holds per calling thread (an OpenMP runtime, torch) may start
N teams. The GIL can still be on: asked with ``-X gil=1`` or the interpreter's variable (``-X gil``
wins), or turned on for the rest of the process by importing an extension module that does not
declare ``Py_mod_gil``, which CPython says in a RuntimeWarning naming the module.

:func:`interpreter_facts` reads the facts; its sources (``sysconfig``'s variable, ``sys``'s
``_is_gil_enabled`` and ``_xoptions``, the environment, the warning seen) can be given, which is how
the free-threaded cases are tested on a build that has none. :func:`watch_gil_warning` notes the
module named in that warning as it is shown: it wraps the warnings module's display step and calls
the original unchanged, so what the user sees (filters, ``showwarning`` replacements, once-only
rules) is what it was.
"""
from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from parinfo.process import libraries as reg
from parinfo.records.record import record
from parinfo.records.source import Kind, Source, unknown

if TYPE_CHECKING:
    from parinfo.process.pools import PoolRow

# CPython's words: "The global interpreter lock (GIL) has been enabled to load module 'NAME', which
# has not declared that it can run safely without the GIL."
_REENABLED = re.compile(r"GIL\) has been enabled to load module '([^']+)'")

_seen: dict[str, str] = {}  # "module" -> the module named by the first such warning shown


@record
class InterpreterFacts:
    """The interpreter's GIL facts: the ``python`` entry of the report's ``backend`` section.

    - ``free_threaded_build``: True on a free-threaded build (``Py_GIL_DISABLED`` is 1), False on a
      default build, None when sysconfig cannot say.
    - ``gil_enabled``: whether the GIL is on now (``sys._is_gil_enabled()``, 3.13+); on a default
      build it is always on; None when unknown. ``gil_source`` says how it was found.
    - ``gil_requested``: "0" or "1" when the command line (``-X gil``) or the variable asked, else
      None; ``gil_requested_by`` names which ("-X gil=0 (command line)", "env NAME=0").
    - ``gil_reenabled_by``: the module whose import turned the GIL back on, from CPython's warning
      when parinfo saw it shown; None otherwise.
    - ``python_threads``: live Python threads now; ``per_thread_pool`` and ``per_thread_threads``:
      the widest pool whose limit holds per calling thread; ``threads_at_once``: their product, only
      while the GIL is off (with the GIL on, one Python thread runs at a time).
    """

    free_threaded_build: bool | None = None
    gil_enabled: bool | None = None
    gil_source: Source | None = None
    gil_requested: str | None = None
    gil_requested_by: str | None = None
    gil_reenabled_by: str | None = None
    python_threads: int | None = None
    per_thread_pool: str | None = None
    per_thread_threads: int | None = None
    threads_at_once: int | None = None

    @property
    def gil_off(self) -> bool:
        """True when Python threads run at once now (a free-threaded build with the GIL off)."""
        return self.free_threaded_build is True and self.gil_enabled is False


def _build_flag(config_var: Callable[[str], Any] | None) -> bool | None:
    """Whether this is a free-threaded build (``config_var`` stands for sysconfig's getter)."""
    if config_var is None:
        if sys.version_info < (3, 13):
            return False  # free threading came with 3.13 (and sysconfig costs 1 ms of `parinfo show`)
        import sysconfig

        config_var = sysconfig.get_config_var
    try:
        value = config_var("Py_GIL_DISABLED")
    except Exception:
        return None
    if value is None:
        return False  # builds before 3.13 do not define it: never free-threaded
    try:
        return bool(int(value))
    except (TypeError, ValueError):
        return None


def _requested(xoptions: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(value, who) of the GIL request: ``-X gil`` first, then the interpreter's variable."""
    x = xoptions.get("gil")
    if x is not None and x is not True:
        return str(x), f"-X gil={x} (command line)"
    var = reg.role_var("gil")
    raw = environ.get(var)
    if raw is not None:
        return raw.strip(), f"env {var}={raw}"
    return None, None


def interpreter_facts(*, config_var: Callable[[str], Any] | None = None,
                      is_gil_enabled: Callable[[], bool] | bool | None = True,
                      xoptions: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
                      reenabled_by: str | bool | None = True, python_threads: int | None = None,
                      pools: list[PoolRow] | None = None, torch_intra: int | None = None) -> InterpreterFacts:
    """The interpreter's GIL facts; every source can be given (tests), else it is this process's.

    ``config_var`` stands for ``sysconfig.get_config_var``; ``is_gil_enabled`` for
    ``sys._is_gil_enabled`` (None: the interpreter has none; True: look it up); ``xoptions`` for
    ``sys._xoptions``; ``reenabled_by`` for the module named by the warning (True: what
    :func:`watch_gil_warning` saw); ``pools`` are the report's pool rows and ``torch_intra`` torch's
    intra-op count, whose limits hold per calling thread.
    """
    build = _build_flag(config_var)
    if is_gil_enabled is True:
        is_gil_enabled = getattr(sys, "_is_gil_enabled", None)
    if callable(is_gil_enabled):
        try:
            gil: bool | None = bool(is_gil_enabled())
            source = Source(Kind.GETTER, "sys._is_gil_enabled()", "sys._is_gil_enabled()")
        except Exception as exc:
            gil, source = None, unknown(f"sys._is_gil_enabled() failed: {exc}")
    elif build is False:
        gil, source = True, Source(Kind.LIBRARY_DEFAULT, "default build", "a default build always holds the GIL")
    else:
        gil, source = None, unknown("this interpreter has no sys._is_gil_enabled()")
    value, who = _requested(sys._xoptions if xoptions is None else xoptions,
                            os.environ if environ is None else environ)
    module = _seen.get("module") if reenabled_by is True else reenabled_by or None
    facts = InterpreterFacts(build, gil, source, value, who, module if isinstance(module, str) else None)
    facts.python_threads = threading.active_count() if python_threads is None else python_threads
    name, widest = _widest_per_thread(pools or [], torch_intra)
    if name is not None:
        facts.per_thread_pool, facts.per_thread_threads = name, widest
    if facts.gil_off:
        facts.threads_at_once = facts.python_threads * max(1, widest)
    return facts


def _widest_per_thread(pools: list[PoolRow], torch_intra: int | None) -> tuple[str | None, int]:
    """The pool with the most threads among those whose limit holds per calling thread (OpenMP
    runtimes, BLAS built on one, torch): (name, count), or (None, 1)."""
    best: tuple[str | None, int] = (None, 1)
    for row in pools:
        record = reg.find(row.library)
        n = row.num_threads
        if record is None or n is None or row.duplicate_of:
            continue
        if record.per_thread_in(row.threading_layer) and n > best[1]:
            best = (row.library, n)
    if isinstance(torch_intra, int) and torch_intra > best[1]:
        best = ("torch intra-op", torch_intra)
    return best


def note_warning(message: Any, category: Any) -> None:
    """Remember the module a GIL re-enabling RuntimeWarning names (the first one)."""
    if isinstance(category, type) and issubclass(category, RuntimeWarning) and "module" not in _seen:
        m = _REENABLED.search(str(message))
        if m is not None:
            _seen["module"] = m.group(1)


def watch_gil_warning(module: Any = None) -> bool:
    """Note the module named by CPython's GIL re-enabling warning when it is shown from now on.

    Wraps ``warnings._showwarnmsg`` (the step every shown warning goes through, from Python and
    from C) with a function that notes the warning and calls the original with the same message:
    filters, ``showwarning`` replacements and once-only rules act as before. Only on a
    free-threaded build (elsewhere the warning never comes) and once. ``module`` stands for the
    warnings module (tests). Returns True when the watch is in place.
    """
    import warnings

    mod: Any = warnings if module is None else module
    show = getattr(mod, "_showwarnmsg", None)
    if show is None:
        return False
    if getattr(show, "_parinfo_watch", False):
        return True
    if module is None and _build_flag(None) is not True:
        return False

    def _showwarnmsg(msg: Any) -> Any:
        try:
            note_warning(getattr(msg, "message", ""), getattr(msg, "category", None))
        except Exception:  # noting must never change what the user sees
            pass
        return show(msg)

    _showwarnmsg._parinfo_watch = True  # type: ignore[attr-defined]
    mod._showwarnmsg = _showwarnmsg
    return True
