"""The typer application behind ``parinfo``: the command line's grammar, built from the command modules.

Registration flows one way: the command modules define plain functions (their options declared as
typer defaults) and import nothing from here; this module registers them, in the order ``--help``
lists them. ``show`` and ``apply``, which ``main()`` also runs without loading the framework, and
``watch``, whose options the ``%parinfo_watch`` magic shares, declare their options once, as the
fields of a record (parinfo.cli.options): their typer commands are built from it here.
Command modules import heavy libraries inside the command functions, never at module level.
"""
from __future__ import annotations

import typer

from parinfo.cli import apply, fleet, host, k8s, launch, profiles, show, tune, watch
from parinfo.cli.options import typer_command

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


def _show(a: show.ShowArgs) -> int:
    """Show the CPUs, backends, native pools, thread counts with their sources, and what is wrong."""
    return show.run(a)


def _watch(a: watch.WatchArgs) -> int:
    """Watch CPU use per thread group, runnable threads, throttling and CPU pressure, with a verdict."""
    return watch.run(a)


app.command("show")(typer_command(show.ShowArgs, _show))
app.command()(profiles.profiles)
app.command("apply", context_settings={"allow_extra_args": True})(typer_command(launch.ApplyArgs, apply.apply_cmd))
app.command(no_args_is_help=False)(tune.tune)
app.command("watch")(typer_command(watch.WatchArgs, _watch))
app.command()(host.host)

fleet_app = typer.Typer(help="Inspect and apply across every worker of a Dask or Ray cluster.", no_args_is_help=True)
fleet_app.command("show")(fleet.show)
fleet_app.command("apply")(fleet.apply)
fleet_app.command("env")(fleet.env)
app.add_typer(fleet_app, name="fleet")

k8s_app = typer.Typer(help="What a Kubernetes Deployment needs to run with a profile's counts.", no_args_is_help=True)
k8s_app.command("snippet")(k8s.snippet)
app.add_typer(k8s_app, name="k8s")
