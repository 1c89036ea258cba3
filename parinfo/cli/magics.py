"""IPython magics, loaded by ``%load_ext parinfo``: ``%parinfo`` shows the report (HTML in a notebook,
the text report in a terminal shell) and ``%parinfo_watch`` a few live samples, updated in place in
a notebook.

Both take the options of the matching command (``parinfo show``, ``parinfo watch``), parsed here.
Bad input is one line, as on the command line: IPython's UsageError, which it prints without a
traceback and which marks the cell failed. ``%parinfo`` imports nothing into the kernel unless asked
(``--import``, ``--torch``): the report is of the kernel as it is.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

from parinfo.cli import values

if TYPE_CHECKING:
    from parinfo.cli.show import ShowArgs

MAGICS = ("parinfo", "parinfo_watch")
#: The options of ``parinfo show`` that ``%parinfo`` takes (the others ask for an exit code or a
#: process to attach to, which a notebook cell has no use for).
SHOW_OPTIONS = ("pid", "children", "json_out", "fmt", "imports", "torch")
_WATCH_USAGE = "%parinfo_watch [--samples N] [--interval SECONDS] [--pid PID [--children]] [--json]"


class _Parser(argparse.ArgumentParser):
    """argparse that raises parinfo's UsageError (one line, with the usage) instead of exiting."""

    def __init__(self, prog: str, usage: str | None = None) -> None:
        super().__init__(prog=prog, usage=usage, add_help=False, allow_abbrev=False)

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


def show_args(line: str) -> ShowArgs:
    """The options of ``%parinfo``: those of ``parinfo show`` named in :data:`SHOW_OPTIONS`, from its
    one declaration (:class:`~parinfo.cli.show.ShowArgs`)."""
    from parinfo.cli.options import add_arguments, from_namespace
    from parinfo.cli.show import ShowArgs

    p = _Parser("%parinfo")
    add_arguments(p, ShowArgs, SHOW_OPTIONS)
    return from_namespace(ShowArgs, p.parse_args(_split(line)))


def _display(bundle: dict[str, Any], handle: Any = None) -> Any:
    """Show a MIME bundle (a new display, or an update of ``handle``, IPython's DisplayHandle); the
    handle to update it."""
    from IPython.display import DisplayHandle, display

    if handle is None:
        show: Callable[..., DisplayHandle | None] = display  # IPython leaves display unannotated
        return show(bundle, raw=True, display_id=True)
    handle.update(bundle, raw=True)
    return handle


def _text(text: str) -> dict[str, Any]:
    from parinfo.diagnostics.html import preformatted

    return {"text/plain": text, "text/html": preformatted(text)}


def report_bundle(line: str) -> dict[str, Any]:
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
        from parinfo.cli.torch_block import torch_block
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

    %parinfo_watch [--samples N] [--interval SECONDS] [--pid PID [--children]] [--json]
    """
    with _one_line_errors("parinfo_watch"):
        _watch(line)


def _watch(line: str) -> None:
    import json
    import os

    from parinfo.cli.watch import render_sample
    from parinfo.convert import dump
    from parinfo.errors import UsageError
    from parinfo.process.tasks import gone
    from parinfo.watching.sample import Sampler, check_interval, samples

    p = _Parser("%parinfo_watch", _WATCH_USAGE)
    p.add_argument("--samples", "-n", type=values.whole("--samples", 1, 10_000), default=3, metavar="N")
    p.add_argument("--interval", type=values.seconds("--interval"), default=1.0, metavar="SECONDS")
    p.add_argument("--pid", type=values.pid, metavar="PID")
    p.add_argument("--children", action="store_true")
    p.add_argument("--json", dest="json_out", action="store_true")
    a = p.parse_args(_split(line))
    seconds = check_interval(a.interval)
    if a.children and a.pid is None:
        raise UsageError("--children needs --pid PID (the process whose tree to watch)")
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
