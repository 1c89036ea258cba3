"""IPython magics, loaded by ``%load_ext parinfo``: ``%parinfo`` shows the report (HTML in a notebook,
the text report in a terminal shell) and ``%parinfo_watch`` a few live samples, updated in place in
a notebook.

Both take some options of the matching command (``parinfo show``, ``parinfo watch``), read here
from that command's one declaration (:class:`~parinfo.cli.show.ShowArgs`,
:class:`~parinfo.cli.watch.WatchArgs`), with the same spellings and checks.
Bad input is one line, as on the command line: IPython's UsageError, which it prints without a
traceback and which marks the cell failed. ``%parinfo`` imports nothing into the kernel unless asked
(``--import``, ``--torch``): the report is of the kernel as it is.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict

if TYPE_CHECKING:
    from parinfo.cli.options import Args
    from parinfo.cli.show import ShowArgs
    from parinfo.cli.watch import WatchArgs

MAGICS = ("parinfo", "parinfo_watch")
#: The options of ``parinfo show`` that ``%parinfo`` takes (the others ask for an exit code or a
#: process to attach to, which a notebook cell has no use for).
SHOW_OPTIONS = ("pid", "children", "json_out", "fmt", "imports", "torch")
#: The options of ``parinfo watch`` that ``%parinfo_watch`` takes (the others print without end,
#: serve metrics or attach, which a cell has no use for).
WATCH_OPTIONS = ("samples", "interval", "pid", "children", "json_out")
#: Where ``%parinfo_watch``'s default differs from the command's: a cell shows a few samples and ends.
WATCH_DEFAULTS = {"samples": 3}


class _Parser(argparse.ArgumentParser):
    """argparse that raises parinfo's UsageError (one line, with the usage) instead of exiting."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog=prog, add_help=False, allow_abbrev=False)

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # Before Python 3.13, argparse drops a "--" given as an option's value (--pid=--) and skips
        # the option's type and choices, leaving []: check it as the command line does.
        if arg_strings == ["--"] and action.option_strings and action.nargs in (None, "?"):
            value = self._get_value(action, "--")
            self._check_value(action, value)
            return value
        return super()._get_values(action, arg_strings)

    def error(self, message: str) -> NoReturn:
        from parinfo.errors import UsageError
        from parinfo.safe_text import shorten

        usage = " ".join(self.format_usage().split()).removeprefix("usage: ")
        raise UsageError(f"{shorten(message, 200)}; usage: {usage}")


def _split(line: str) -> list[str]:
    import shlex

    from parinfo.errors import UsageError

    try:
        return shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"cannot read the options ({exc})") from None


def _options(prog: str, cls: type[Args], names: Sequence[str], line: str,
             defaults: Mapping[str, Any] | None = None) -> Args:
    """The options of magic ``prog`` in ``line``: those of the command whose declaration is ``cls``
    named by ``names``, defaulted as declared but for ``defaults``; the usage line comes from them."""
    from parinfo.cli.options import add_arguments, from_namespace

    p = _Parser(prog)
    add_arguments(p, cls, names, defaults)
    return from_namespace(cls, p.parse_args(_split(line)))


def show_args(line: str) -> ShowArgs:
    """The options of ``%parinfo``: those of ``parinfo show`` named in :data:`SHOW_OPTIONS`, from its
    one declaration (:class:`~parinfo.cli.show.ShowArgs`)."""
    from parinfo.cli.show import ShowArgs

    return _options("%parinfo", ShowArgs, SHOW_OPTIONS, line)


def watch_args(line: str) -> WatchArgs:
    """The options of ``%parinfo_watch``: those of ``parinfo watch`` named in :data:`WATCH_OPTIONS`,
    from its one declaration (:class:`~parinfo.cli.watch.WatchArgs`), 3 samples unless asked."""
    from parinfo.cli.watch import WatchArgs

    return _options("%parinfo_watch", WatchArgs, WATCH_OPTIONS, line, WATCH_DEFAULTS)


#: A MIME bundle as IPython displays it: the report as text, as HTML, or as JSON (``show --json``'s
#: payload, read back as a JSON value) with its text.
MimeBundle = TypedDict("MimeBundle", {"text/plain": str, "text/html": str, "application/json": object},
                       total=False)


def _display(bundle: MimeBundle, handle: Any = None) -> Any:
    """Show a MIME bundle (a new display, or an update of ``handle``, IPython's DisplayHandle); the
    handle to update it."""
    from IPython.display import DisplayHandle, display

    if handle is None:
        show: Callable[..., DisplayHandle | None] = display  # IPython leaves display unannotated
        return show(bundle, raw=True, display_id=True)
    handle.update(bundle, raw=True)
    return handle


def _text(text: str) -> MimeBundle:
    from parinfo.diagnostics.html import preformatted

    return {"text/plain": text, "text/html": preformatted(text)}


def report_bundle(line: str) -> MimeBundle:
    """The MIME bundle ``%parinfo line`` displays: JSON, the torch-style block, or the report as text
    and HTML."""
    import json

    from parinfo.cli.show import Format, gather

    a = show_args(line)
    report = gather(a, default_imports=[])
    if a.json_out or a.fmt is Format.json:
        payload = json.loads(json.dumps(report.to_dict(), default=str))
        return {"application/json": payload, "text/plain": json.dumps(payload, indent=2)}
    if a.fmt is Format.torch:
        from parinfo.diagnostics.torch_block import torch_block
        from parinfo.safe_text import escape_controls

        return _text("\n".join(escape_controls(line, keep="\t") for line in torch_block(report).split("\n")))
    from parinfo.cli.render_text import plain_text

    return {"text/plain": plain_text(report), "text/html": report._repr_html_()}


def parinfo_magic(line: str = "") -> None:
    """Show this kernel's thread report: its CPUs, native pools and counts with their sources, and
    what is wrong (as ``parinfo show``; HTML in a notebook).

    %parinfo [--pid PID] [--children] [--json] [--format {rich,json,torch}] [--import MOD[,MOD]] [--torch]

    --pid PID reads another process from outside; --import loads modules into the kernel first so
    their pools show (nothing is imported otherwise).
    """
    with _one_line_errors("parinfo"):
        _display(report_bundle(line))


def parinfo_watch_magic(line: str = "") -> None:
    """Watch this kernel (or another process) for a few samples: CPU use per thread group, runnable
    threads, throttling and CPU pressure, with a verdict (as ``parinfo watch``), updated in place.

    %parinfo_watch [--samples N] [--interval SECONDS] [--pid PID] [--children] [--json]
    """
    with _one_line_errors("parinfo_watch"):
        _watch(line)


def _watch(line: str) -> None:
    import json
    import os

    from parinfo.cli.watch import check_tree, render_sample
    from parinfo.process.tasks import gone
    from parinfo.records.convert import dump
    from parinfo.watching.sample import Sampler, check_interval, samples

    a = watch_args(line)
    seconds = check_interval(a.interval)
    check_tree(a)
    pid = os.getpid() if a.pid is None else a.pid
    title = f"this process (pid {pid})" if a.pid is None else f"pid {pid}"
    sampler = Sampler(pid, children=a.children)
    handle = None
    for n, sample in enumerate(samples(sampler, seconds, a.samples), 1):
        text = (json.dumps(dump(sample)) if a.json_out
                else render_sample(sample, f"{title}, sample {n} of {a.samples}"))
        handle = _display(_text(text), handle)
    if handle is None:  # it ended before a whole interval could be measured
        raise gone(pid)


@contextmanager
def _one_line_errors(magic: str) -> Iterator[None]:
    """Turn parinfo's errors into IPython's UsageError: one line, no traceback, the cell failed."""
    from parinfo.errors import ParinfoError

    try:
        yield
    except ParinfoError as exc:
        from IPython.core.error import UsageError

        raise UsageError(f"%{magic}: {exc}") from None


def load(ipython: Any) -> None:
    """Register the magics on an IPython shell."""
    ipython.register_magic_function(parinfo_magic, "line", "parinfo")
    ipython.register_magic_function(parinfo_watch_magic, "line", "parinfo_watch")


def unload(ipython: Any) -> None:
    """Remove the magics from an IPython shell (``%unload_ext parinfo``)."""
    line_magics = ipython.magics_manager.magics["line"]
    for name in MAGICS:
        line_magics.pop(name, None)
