"""`parinfo fleet show|apply|env`: the report and profiles across the workers of a Dask or Ray cluster.

Dask and Ray are imported inside the commands only, never when the CLI starts.
"""
from __future__ import annotations

import enum
from typing import Any, Optional

import typer

from parinfo.cli import values
from parinfo.errors import UsageError
from parinfo.fleet.connect import CONNECT_TIMEOUT_S, close_dask, connect_dask, connect_ray


class EnvFormat(str, enum.Enum):
    dask_config = "dask-config"
    ray_runtime_env = "ray-runtime-env"


def _timeout_option() -> Any:
    return typer.Option(CONNECT_TIMEOUT_S, "--timeout", metavar="SECONDS", parser=values.seconds("--timeout"),
                        help="How long reaching the cluster may take (a refused or malformed address "
                             "fails at once).")


def _ray(address: str, timeout: float) -> Any:
    import os

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # read when ray is imported
    return connect_ray(address, timeout)


def _one_target(dask: Optional[str], ray: Optional[str]) -> None:
    if (dask is None) == (ray is None):
        raise UsageError("give one cluster: --dask tcp://HOST:PORT or --ray ADDRESS")


def show(
    dask: Optional[str] = typer.Option(None, "--dask", metavar="ADDRESS",
                                       help="A Dask scheduler, e.g. tcp://127.0.0.1:8786."),
    ray: Optional[str] = typer.Option(None, "--ray", metavar="ADDRESS",
                                      help="A running Ray, e.g. 127.0.0.1:6379 or auto."),
    json_out: bool = typer.Option(False, "--json", help="Print the fleet report as JSON (schema_version 2)."),
    per_thread: bool = typer.Option(False, "--per-thread", help="Dask: also read every executor thread's counts."),
    check: Optional[str] = typer.Option(
        None, "--check", metavar="[=LEVEL]",
        help="Exit 1 when a finding at LEVEL or above exists: warning (bare --check), error, or info."),
    timeout: float = _timeout_option(),
) -> None:
    """One row per worker and per host: usable CPUs, task threads, pools, variables and who set them."""
    from parinfo.cli.show import check_level
    from parinfo.fleet import gather

    level = check_level(check)
    _one_target(dask, ray)
    if dask is not None:
        client = connect_dask(dask, timeout)
        try:
            report = gather(client, per_thread=per_thread)
        finally:
            close_dask(client)
    else:
        if per_thread:
            raise UsageError("--per-thread is for Dask: a Ray worker runs one task thread")
        ray_mod = _ray(str(ray), timeout)
        try:
            report = gather(ray_mod)
        finally:
            ray_mod.shutdown()
    if json_out:
        import json

        typer.echo(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        from parinfo.safe_text import escape_controls

        typer.echo("\n".join(escape_controls(line) for line in report.table().split("\n")))
    if level is not None and report.problems(level):
        raise typer.Exit(1)


def apply(
    profile: str = typer.Argument(..., help="A shipped profile name or a profile file."),
    dask: str = typer.Option(..., "--dask", metavar="ADDRESS", help="A Dask scheduler, e.g. tcp://127.0.0.1:8786."),
    restart: bool = typer.Option(False, "--restart", help="Also set the variables in the nanny's start-up "
                                                          "environment and restart the workers."),
    timeout: float = _timeout_option(),
) -> None:
    """Apply PROFILE on every Dask worker, now and on every worker that starts later."""
    from parinfo.fleet import apply as fleet_apply
    from parinfo.safe_text import escape_controls

    client = connect_dask(dask, timeout)
    try:
        done = fleet_apply(client, profile, restart=restart)
    finally:
        close_dask(client)
    for worker, result in sorted(done.items()):
        reached = len(result.get("threads_reached", ()))
        typer.echo(escape_controls(f"{worker}: {len(result.get('applied', ()))} settings applied, "
                                   f"{reached} of {result.get('threads', '?')} executor threads reached"))
        for line in result.get("not_in_force", ()):
            typer.echo(escape_controls(f"  not in force: {line}"))


def env(
    profile: str = typer.Argument(..., help="A shipped profile name or a profile file."),
    fmt: EnvFormat = typer.Option(..., "--format", "-f", help="dask-config (YAML) or ray-runtime-env (JSON)."),
) -> None:
    """Print the launch-time snippet that puts PROFILE in force in every worker before any import."""
    from parinfo.fleet import env as fleet_env

    if fmt is EnvFormat.dask_config:
        typer.echo(fleet_env.dask_config(profile))
    else:
        import json

        typer.echo(json.dumps(fleet_env.ray_runtime_env(profile), indent=2, sort_keys=True))
