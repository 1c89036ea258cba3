"""``parinfo apply PROFILE [--force] [--instances N] -- COMMAND ...``: the launch, and its plain form.

Launching is the one path whose start-up cost every launched program pays, and loading the CLI
framework costs more than the launch itself. So ``main()`` recognises exactly the plain form
(:func:`plain_launch`) and launches without loading typer; every other form (help, other options,
mistakes) goes to the typer app, whose ``apply`` command launches through the same :func:`launch`.
"""
from __future__ import annotations

from collections.abc import Sequence


def launch(profile: str, command: list[str], *, force: bool = False, instances: int | None = None) -> int:
    """Resolve ``profile`` on this machine and run ``command`` under it; the exit code to return."""
    from parinfo.profiles.launch import run_plan
    from parinfo.profiles.loading import resolve_profile

    return run_plan(resolve_profile(profile, instances=instances), command, force=force)


def plain_launch(args: Sequence[str]) -> tuple[str, list[str], bool, int | None] | None:
    """``(profile, command, force, instances)`` when ``args`` is a plain ``apply P [--force]
    [--instances N] -- COMMAND...``; None for anything else, which the full CLI then parses (so its
    help and error messages stay the only ones)."""
    args = list(args)
    if len(args) < 4 or args[0] != "apply" or "--" not in args:
        return None
    split = args.index("--")
    head, command = args[1:split], args[split + 1:]
    if not command:
        return None
    profile: str | None = None
    force = False
    instances: int | None = None
    i = 0
    while i < len(head):
        arg = head[i]
        if arg == "--force":
            force = True
        elif arg == "--instances" or arg.startswith("--instances="):
            if "=" in arg:
                value = arg.split("=", 1)[1]
            elif i + 1 < len(head):
                i += 1
                value = head[i]
            else:
                return None
            if instances is not None:
                return None
            from parinfo.checks import integer
            from parinfo.errors import UsageError

            try:
                instances = integer(value, "--instances", 1, 1_000_000)
            except UsageError:
                return None  # typer refuses it, with the same check's line
        elif arg.startswith("-") or profile is not None:
            return None
        else:
            profile = arg
        i += 1
    if profile is None:
        return None
    return profile, command, force, instances
