"""The typer application behind ``parinfo``: the command line's grammar, built from the command modules.

Registration flows one way: the command modules define plain functions (their options declared as
typer defaults) and import nothing from here; this module registers them, in the order ``--help``
lists them. ``show``'s options are declared here rather than in parinfo.cli.show, which stays free
of typer so that ``main()`` can run a plain ``parinfo show`` without loading the framework.
Command modules import heavy libraries inside the command functions, never at module level.
"""
from __future__ import annotations

from typing import Optional

import typer

from parinfo.cli import apply, fleet, host, profiles, show, tune, values, watch

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


@app.command("show")
def _show(
    imports: Optional[list[str]] = typer.Option(
        None, "--import", "-i", metavar="MOD[,MOD]",
        help="Import these modules first so their native pools load (default: numpy if installed; "
             "'none' for nothing). torch is never imported unless named here, with --torch or with "
             "--format torch."),
    torch: bool = typer.Option(False, "--torch", help="Import torch and report its pools and counts."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON (schema_version 2)."),
    fmt: show.Format = typer.Option(show.Format.rich, "--format", "-f",
                                    help="rich (tables), json, or torch (torch.__config__.parallel_info() "
                                         "style: imports torch, whose own lines come first)."),
    check: Optional[str] = typer.Option(
        None, "--check", metavar="[=LEVEL]",
        help="Exit 1 when a finding at LEVEL or above exists: warning (the default of a bare --check), "
             "error, or info."),
    pid: int | None = typer.Option(
        None, "--pid", metavar="PID", parser=values.pid,
        help="Report on another process, read from /proc (same user or root): its CPUs, loaded runtimes, "
             "launch environment, threads and throttling."),
    children: bool = typer.Option(False, "--children",
                                  help="With --pid: sum the whole process tree (e.g. gunicorn and its workers)."),
    attach: bool = typer.Option(False, "--attach",
                                help="With --pid: read a running CPython 3.14+ process from inside (sys.remote_exec): "
                                     "every count in force with its source, as its own parinfo.inspect() gives "
                                     "them; with --children, each such process of the tree. Imports, sets and "
                                     "leaves nothing there (docs/process.md)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", metavar="S", parser=values.attach_timeout,
                                            help="With --attach: seconds to wait for the process (with --children: "
                                                 "for all the tree's processes together; default 5)."),
) -> None:
    """Show the CPUs, backends, native pools, thread counts with their sources, and what is wrong."""
    code = show.run(show.ShowArgs(imports=imports, torch=torch, json_out=json_out, fmt=fmt, check=check, pid=pid,
                                  children=children, attach=attach, timeout=timeout))
    if code:
        raise typer.Exit(code)


app.command()(profiles.profiles)
app.command("apply", context_settings={"allow_extra_args": True})(apply.apply_cmd)
app.command(no_args_is_help=False)(tune.tune)
app.command()(watch.watch)
app.command()(host.host)

fleet_app = typer.Typer(help="Inspect and apply across every worker of a Dask or Ray cluster.", no_args_is_help=True)
fleet_app.command("show")(fleet.show)
fleet_app.command("apply")(fleet.apply)
fleet_app.command("env")(fleet.env)
app.add_typer(fleet_app, name="fleet")
