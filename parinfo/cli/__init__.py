"""The ``parinfo`` command line: a thin typer layer over the library.

Each sub-command lives in its own module and registers itself on ``app``; command modules import
heavy libraries inside the command functions, never at module level, so ``parinfo show`` stays fast.
Errors are mapped to exit codes here and only here: a ParinfoError (bad input) prints one line on
stderr and exits 2.
"""
from __future__ import annotations

import sys

import typer

app = typer.Typer(
    name="parinfo",
    help="Show, explain and set how a process uses its CPU threads.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# Registration order is the order in --help.
from parinfo.cli import show as _show  # noqa: E402,F401
from parinfo.cli import profiles as _profiles  # noqa: E402,F401
from parinfo.cli import apply as _apply  # noqa: E402,F401
from parinfo.cli import tune as _tune  # noqa: E402,F401


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``parinfo`` script and ``python -m parinfo``.

    Usage errors (unknown option, bad choice) are click's: one message, exit 2. A ParinfoError from the
    library (bad profile, bad value) is turned into one line here, also exit 2.
    """
    from parinfo.errors import ParinfoError

    try:
        app(args=argv, prog_name="parinfo")
    except ParinfoError as exc:
        print(f"parinfo: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
