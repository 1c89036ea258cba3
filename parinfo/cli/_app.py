"""The typer application behind ``parinfo``: every sub-command registers itself on ``app``.

Command modules import heavy libraries inside the command functions, never at module level, so
``parinfo show`` stays fast.
"""
from __future__ import annotations

import typer

app = typer.Typer(
    name="parinfo",
    help="Show, explain and set how a process uses its CPU threads.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)



def _print_version(value: bool) -> None:
    if value:
        from parinfo.version import __version__

        typer.echo(f"parinfo {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", help="Print parinfo's version and exit.",
                                       is_eager=True, callback=_print_version)) -> None:
    """Show, explain and set how a process uses its CPU threads."""


# Registration order is the order in --help, so the imports are not sorted.
# isort: off
from parinfo.cli import show as _show  # noqa: E402,F401
from parinfo.cli import profiles as _profiles  # noqa: E402,F401
from parinfo.cli import apply as _apply  # noqa: E402,F401
from parinfo.cli import tune as _tune  # noqa: E402,F401
from parinfo.cli import watch as _watch  # noqa: E402,F401
from parinfo.cli import fleet as _fleet  # noqa: E402,F401
# isort: on
