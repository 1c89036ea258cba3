"""The fast path of ``parinfo apply PROFILE [--force] [--instances N] -- COMMAND [ARGS...]``.

Launching a command is the one CLI path whose cost every launched program pays, and loading the
CLI framework costs far more than the launch itself. ``entry()`` recognises exactly this form and
runs it with the same steps and error handling as the full command (resolve the profile, then
parinfo.launch.run_plan); any other argument list, help included, goes to the full CLI unchanged.
"""
from __future__ import annotations

import sys
from typing import Sequence


def parse_apply_command(argv: Sequence[str]) -> tuple[str, bool, int | None, list[str]] | None:
    """``(profile, force, instances, command)`` when argv is a plain ``apply ... -- COMMAND``, else None.

    Only ``--force`` and ``--instances N`` (or ``--instances=N``, N a positive integer) may appear
    before ``--``; anything else (other options, a bad N, no command) is left to the full CLI so
    that its help and error messages stay the only ones.
    """
    argv = list(argv)
    if len(argv) < 4 or argv[0] != "apply" or "--" not in argv:
        return None
    split = argv.index("--")
    head, command = argv[1:split], argv[split + 1:]
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
            if not value.isdigit() or int(value) < 1 or instances is not None:
                return None
            instances = int(value)
        elif arg.startswith("-") or profile is not None:
            return None
        else:
            profile = arg
        i += 1
    if profile is None:
        return None
    return profile, force, instances, command


def run_apply_command(argv: Sequence[str]) -> int | None:
    """Run a plain ``apply ... -- COMMAND``; None when argv is another form (for the full CLI)."""
    parsed = parse_apply_command(argv)
    if parsed is None:
        return None
    profile, force, instances, command = parsed
    from parinfo.errors import ParinfoError

    try:
        from parinfo.launch import run_plan
        from parinfo.profiles import resolve_profile

        plan = resolve_profile(profile, instances=instances)
        return run_plan(plan, command, force=force)
    except ParinfoError as exc:
        print(f"parinfo: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def entry() -> None:
    """Console entry point: the fast path when it applies, else the full CLI."""
    code = run_apply_command(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from parinfo.cli import main

    main()
