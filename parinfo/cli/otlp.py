"""``--otlp URL`` of ``parinfo watch`` and ``parinfo host``: one OTLP/HTTP request per sample (or
scan) instead of printing it, until the count asked, the process's end, SIGINT or SIGTERM.

A request is sent when its sample is made, so nothing waits in a buffer: SIGINT or SIGTERM that
comes while a request is on its way lets it finish, then stops (the "flush" at shutdown), and the
exporter's connection is closed. A failed request is one warning line and the next sample is sent
as it comes (:class:`parinfo.watching.otlp.OtlpExport`).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parinfo.watching.otlp import Point


@contextmanager
def exporting(url: str, what: str, each: str = "sample") -> Iterator[Callable[[list[Point]], None]]:
    """Send each list of points given to the function yielded to ``url``; SIGINT and SIGTERM raise
    KeyboardInterrupt, once a request on its way is sent (``what`` names what is sent, ``each`` what
    one request holds)."""
    import signal

    import typer

    from parinfo.machine.checks import shown
    from parinfo.safe_text import escape_controls
    from parinfo.watching.otlp import OtlpExport

    export = OtlpExport(url)
    state = {"sending": False, "stop": False}

    def stop(*_: Any) -> None:
        if state["sending"]:
            state["stop"] = True
        else:
            raise KeyboardInterrupt

    def send(points: list[Point]) -> None:
        state["sending"] = True
        try:
            line = export.send(points)
        finally:
            state["sending"] = False
        if line is not None:
            typer.echo(escape_controls(line), err=True)
        if state["stop"]:
            raise KeyboardInterrupt

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    typer.echo(f"parinfo: sending metrics of {escape_controls(what)} to {shown(url)} over OTLP/HTTP, one request "
               f"per {each} (Ctrl-C or SIGTERM stops)", err=True)
    try:
        yield send
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        export.close()
