"""The user's own code in a tune: compiling, running and importing it, and its tracebacks.

Errors in the user's code come back as :class:`UserCodeError` carrying their traceback with parinfo's
frames removed; a module or function that is not there is :class:`WorkloadUsageError` (bad input).
"""
from __future__ import annotations

import linecache
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


RAISED = "the workload raised (its traceback is above)"


class UserCodeError(Exception):
    """The user's statement, setup or function raised or exited.

    ``text`` is their traceback without parinfo's frames; ``summary`` the one line said after it.
    """

    def __init__(self, text: str, summary: str = RAISED) -> None:
        super().__init__(text)
        self.text = text
        self.summary = summary


def user_error(exc: BaseException) -> UserCodeError:
    """The UserCodeError for an exception the user's code let out (SystemExit included: timed code
    that exits would end the tune silently, with the exit's own code)."""
    if isinstance(exc, SystemExit):
        return UserCodeError(user_traceback(exc), f"the workload called sys.exit({exc.code!r}): timed code "
                                                  f"must return, not exit the process")
    return UserCodeError(user_traceback(exc))


class WorkloadUsageError(Exception):
    """The workload cannot be built as asked (module or function not found): bad input, one line."""


def _register_source(name: str, src: str) -> None:
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)


def user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` starting at the user's first frame (parinfo's own frames dropped)."""
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_PKG_DIR + os.sep):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def compile_user(src: str, name: str) -> Any:
    """Compile a --stmt/--setup text; raises SyntaxError for the caller to turn into one line."""
    return compile(src, name, "exec")


def build_stmt(stmt_src: str, setup_src: str = "pass") -> Callable[[], Any]:
    """Run the setup once in a fresh namespace; return a callable that runs the statement there."""
    _register_source("<setup>", setup_src)
    _register_source("<stmt>", stmt_src)
    setup = compile_user(setup_src, "<setup>")
    stmt = compile_user(stmt_src, "<stmt>")
    ns: dict[str, object] = {"__name__": "__parinfo_tune__"}  # the user's namespace: parinfo reads nothing in it
    try:
        exec(setup, ns)  # the user's own code, run on their request
    except (Exception, SystemExit) as exc:
        raise user_error(exc) from None

    def call() -> None:
        exec(stmt, ns)

    return call


def build_module(target: str) -> Callable[[], Any]:
    """Import ``pkg.module`` (the current directory on the path) and return its ``function``."""
    import importlib

    mod_name, _, func_name = target.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as exc:
        if exc.name and (mod_name == exc.name or mod_name.startswith(exc.name + ".")):
            raise WorkloadUsageError(
                f"--module {target}: no module named {exc.name!r} (run from the directory that holds it, "
                f"or put it on PYTHONPATH)") from None
        raise user_error(exc) from None
    except (Exception, SystemExit) as exc:
        raise user_error(exc) from None
    func: object = getattr(mod, func_name, None)
    if func is None:
        raise WorkloadUsageError(f"--module {target}: module {mod_name!r} has no attribute {func_name!r}")
    if not callable(func):
        raise WorkloadUsageError(f"--module {target}: {func_name!r} is not callable")
    return func
