"""``parinfo apply PROFILE [--force] [--instances N] [...] -- COMMAND ...``: the launch, its plain form, and
``apply``'s options.

Launching is the one path whose start-up cost every launched program pays, and loading the CLI
framework costs more than the launch itself. So ``apply``'s options are declared here, free of typer,
as the fields of :class:`ApplyArgs`; ``main()`` reads a plain launch from them (:func:`plain_launch`)
and launches without loading typer. Every other form (help, the plan, mistakes) goes to the typer
command built from the same fields (parinfo.cli._app), which launches through the same :func:`launch`.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, NamedTuple

from parinfo.cli import values
from parinfo.cli.options import Argument, Flag, Rest, Value, plain


class ApplyArgs(NamedTuple):
    """``parinfo apply``'s arguments and options: each field's value, and in its annotation the
    argument or option that sets it."""

    profile: Annotated[str, Argument(
        "PROFILE", help="A shipped profile name (see `parinfo profiles`) or a .yaml path.")]
    command: Annotated[list[str] | None, Rest(
        "[-- COMMAND [ARGS]...]",
        help="Run COMMAND (no shell) with the profile in force; without it, print the plan.")] = None
    json_out: Annotated[bool, Flag("--json", help="Print the plan as JSON.")] = False
    export: Annotated[bool, Flag(
        "--export", help="Print `export NAME=value` lines, for eval \"$(parinfo apply P --export)\".")] = False
    instances: Annotated[int | None, Value(
        "--instances", metavar="N", convert=values.whole("--instances", 1),
        help="Run N pinned instances (overrides the profile's instances).")] = None
    force: Annotated[bool, Flag("--force", help="Override variables already set in the environment.")] = False
    instance_index: Annotated[int | None, Value(
        "--instance-index", metavar="K", convert=values.whole("--instance-index", 0),
        help="Start only instance K (from 0) of the profile's instances, in place of parinfo (for a scheduler "
             "that starts each instance).")] = None
    log_dir: Annotated[str | None, Value(
        "--log-dir", metavar="DIR",
        help="Also write each instance's output (stdout and stderr) to DIR/instance-I.log.")] = None
    check: Annotated[bool, Flag(
        "--check", help="Exit 3 when the program (every instance) succeeded but did not get its plan "
                        "(CPUs, memory policy, variables or counts, read back after it started).")] = False


def launch(profile: str, command: list[str], *, force: bool = False, instances: int | None = None,
           instance_index: int | None = None, log_dir: str | None = None, check: bool = False) -> int:
    """Resolve ``profile`` on this machine and run ``command`` under it; the exit code to return."""
    from parinfo.launch.run import run_plan
    from parinfo.profiles.loading import resolve_profile

    return run_plan(resolve_profile(profile, instances=instances), command, force=force,
                    instance_index=instance_index, log_dir=log_dir, check=check)


def plain_launch(args: Sequence[str]) -> ApplyArgs | None:
    """The arguments of a plain launch, ``apply P [--force] [--instances N] -- COMMAND...``; None for
    anything else (the plan, ``--json``, ``--export``, and whatever parinfo.cli.options.plain leaves
    to typer), which the full CLI then parses, so its help and error messages stay the only ones."""
    if not args or args[0] != "apply":
        return None
    given = plain(ApplyArgs, args[1:])
    if given is None or not given.command or given.json_out or given.export:
        return None
    return given
