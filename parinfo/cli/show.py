"""`parinfo show`: what this process's parallelism really is, and why."""
from __future__ import annotations

import enum
from typing import Optional

import typer

from parinfo.cli._app import app
from parinfo.errors import UsageError


class Format(str, enum.Enum):
    rich = "rich"
    json = "json"
    torch = "torch"


def parse_modules(value: Optional[list[str]]) -> Optional[list[str]]:
    """``--import a,b --import c`` -> [a, b, c]; raise UsageError on an empty or malformed name."""
    if value is None:
        return None
    mods: list[str] = []
    for chunk in value:
        for name in chunk.split(","):
            name = name.strip()
            if name.lower() in ("", "none"):
                continue
            if not all(part.isidentifier() for part in name.split(".")):
                raise UsageError(f"--import: {name!r} is not a module name (use e.g. --import numpy,scipy)")
            mods.append(name)
    return mods


@app.command()
def show(
    imports: Optional[list[str]] = typer.Option(
        None, "--import", "-i", metavar="MOD[,MOD]",
        help="Import these modules first so their native pools load (default: numpy if installed; "
             "'none' for nothing). torch is never imported unless named here or with --torch."),
    torch: bool = typer.Option(False, "--torch", help="Import torch and report its pools and counts."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON (schema_version 1)."),
    fmt: Format = typer.Option(Format.rich, "--format", "-f",
                               help="rich (tables), json, or torch (torch.__config__.parallel_info() style)."),
    check: Optional[str] = typer.Option(
        None, "--check", metavar="[=LEVEL]",
        help="Exit 1 when a finding at LEVEL or above exists: warning (the default of a bare --check), "
             "error, or info."),
    pid: int | None = typer.Option(
        None, "--pid", metavar="PID",
        help="Report on another process, read from /proc (same user or root): its CPUs, loaded runtimes, "
             "launch environment, threads and throttling."),
    children: bool = typer.Option(False, "--children",
                                  help="With --pid: sum the whole process tree (e.g. gunicorn and its workers)."),
) -> None:
    """Show the CPUs, backends, native pools, thread counts with their sources, and what is wrong."""
    from parinfo.diagnostics.report import inspect

    level = check_level(check)
    if json_out and fmt is Format.torch:
        raise UsageError("--json and --format torch ask for two formats: pick one")
    if pid is not None or children:
        outside_conflicts(pid, children, imports is not None or torch, fmt is Format.torch)
        report = inspect(pid=pid, children=children)
    else:
        from parinfo.process.probing import default_modules

        modules = parse_modules(imports)
        report = inspect(default_modules() if modules is None else modules, torch=torch)
    if json_out or fmt is Format.json:
        import json

        typer.echo(json.dumps(report.to_dict(), indent=2, default=str))
    elif fmt is Format.torch:
        from parinfo.cli.torch_block import torch_block
        from parinfo.safe_text import escape_controls

        text = "\n".join(escape_controls(line, keep="\t") for line in torch_block(report).split("\n"))
        typer.echo(text, nl=False)
    else:
        from parinfo.cli.render_text import render

        render(report)
    if level is not None and report.problems(level):
        raise typer.Exit(1)


def outside_conflicts(pid: int | None, children: bool, probes: bool, torch_format: bool) -> None:
    """Refuse option mixes that make no sense for a process read from outside."""
    if pid is None:
        raise UsageError("--children needs --pid PID (the process whose tree to sum)")
    if probes:
        raise UsageError("--import and --torch load modules into parinfo itself; with --pid the other process "
                         "is read from outside and nothing is imported into it")
    if torch_format:
        raise UsageError("--format torch shows counts in force, which cannot be read from outside: use rich or json")


def check_level(value: str | None) -> str | None:
    """The severity ``--check`` fails on; a bare ``--check`` arrives as "warning" (see normalise_check)."""
    from parinfo.diagnostics.findings import SEVERITIES

    if value is None:
        return None
    if value not in SEVERITIES:
        raise UsageError(f"--check={value}: not a level; use --check (warning), --check=error or --check=info")
    return value


def normalise_check(args: list[str]) -> list[str]:
    """A bare ``--check`` means ``--check=warning``: the CLI framework has no optional option values."""
    return ["--check=warning" if a == "--check" else a for a in args]
