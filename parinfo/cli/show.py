"""`parinfo show`: what this process's parallelism really is, and why.

The command itself, from option values to output and exit code (:func:`run`), without the CLI
framework. Its options are declared once, as the fields of :class:`ShowArgs`; from them come the
typer command (parinfo.cli._app: help, mistakes, every spelling) and the plain reading
(:func:`plain_args`) that ``main()`` runs a plain ``parinfo show`` through, so the commonest command
never pays for loading typer. Both call the same :func:`run`.
"""
from __future__ import annotations

import enum
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, NamedTuple

from parinfo.cli import values
from parinfo.cli.options import Choice, Flag, Many, Value, plain
from parinfo.errors import UsageError

if TYPE_CHECKING:
    from parinfo.diagnostics.model import Report


class Format(str, enum.Enum):
    rich = "rich"
    json = "json"
    torch = "torch"


#: The value of a bare ``--check``.
CHECK_BARE = "warning"


class ShowArgs(NamedTuple):
    """``parinfo show``'s options: each field's value, and in its annotation the option that sets it.
    (A NamedTuple: it is defined on every ``parinfo show``, and a frozen dataclass costs several times
    as much to define.)"""

    imports: Annotated[list[str] | None, Many(
        "--import", "-i", metavar="MOD[,MOD]",
        help="Import these modules first so their native pools load (default: numpy if installed; "
             "'none' for nothing). torch is never imported unless named here, with --torch or with "
             "--format torch.")] = None
    torch: Annotated[bool, Flag("--torch", help="Import torch and report its pools and counts.")] = False
    json_out: Annotated[bool, Flag("--json", help="Print the report as JSON (schema_version 2).")] = False
    fmt: Annotated[Format, Choice(
        "--format", "-f",
        help="rich (tables), json, or torch (torch.__config__.parallel_info() style: imports torch, whose "
             "own lines come first).")] = Format.rich
    check: Annotated[str | None, Value(
        "--check", metavar="[=LEVEL]", bare=CHECK_BARE,
        help="Exit 1 when a finding at LEVEL or above exists: warning (the default of a bare --check), "
             "error, or info.")] = None
    pid: Annotated[int | None, Value(
        "--pid", metavar="PID", convert=values.pid,
        help="Report on another process, read from /proc (same user or root): its CPUs, loaded runtimes, "
             "launch environment, threads and throttling.")] = None
    children: Annotated[bool, Flag(
        "--children", help="With --pid: sum the whole process tree (e.g. gunicorn and its workers).")] = False
    attach: Annotated[bool, Flag(
        "--attach", help="With --pid: read a running CPython 3.14+ process from inside (sys.remote_exec): every "
                         "count in force with its source, as its own parinfo.inspect() gives them; with "
                         "--children, each such process of the tree. Imports, sets and leaves nothing there "
                         "(docs/process.md).")] = False
    timeout: Annotated[float | None, Value(
        "--timeout", metavar="S", convert=values.attach_timeout,
        help="With --attach: seconds to wait for the process (with --children: for all the tree's "
             "processes together; default 5).")] = None


def plain_args(args: Sequence[str]) -> ShowArgs | None:
    """The option values of a plain ``show [OPTION]...`` command line, read as typer reads them; None
    for any other command line, which typer then parses (see parinfo.cli.options.plain)."""
    if not args or args[0] != "show":
        return None
    return plain(ShowArgs, args[1:])


def run(a: ShowArgs) -> int:
    """Print the report in the format asked; the exit code: 1 when ``--check`` finds a problem at its
    level, else 0. Bad values raise UsageError."""
    level = check_level(a.check)
    if a.fmt is Format.torch and a.pid is None:
        a = a._replace(torch=True)  # torch's block is what the format asks for: its lines need torch
    report = gather(a)
    if a.json_out or a.fmt is Format.json:
        from parinfo.records.convert import dumps

        _echo(dumps(report.to_dict(), indent=2, default=str))
    elif a.fmt is Format.torch:
        from parinfo.diagnostics.torch_block import torch_block
        from parinfo.safe_text import escape_controls

        _echo("\n".join(escape_controls(line, keep="\t") for line in torch_block(report).split("\n")), nl=False)
    else:
        from parinfo.cli.render_text import render

        render(report)
    return 1 if level is not None and report.problems(level) else 0


def gather(a: ShowArgs, default_imports: list[str] | None = None) -> Report:
    """The report the options ask for: of process ``--pid`` read from outside, or of this one after
    importing ``--import`` (else ``default_imports``; None: what ``parinfo show`` probes by default).
    Option mixes that make no sense raise UsageError."""
    from parinfo.diagnostics.report import inspect

    if a.json_out and a.fmt is Format.torch:
        raise UsageError("--json and --format torch ask for two formats: pick one")
    if a.attach or a.timeout is not None:
        attach_conflicts(a)
        return inspect(pid=a.pid, attach=True, timeout=a.timeout, children=a.children)
    if a.pid is not None or a.children:
        outside_conflicts(a.pid, a.children, a.imports is not None or a.torch, a.fmt is Format.torch)
        return inspect(pid=a.pid, children=a.children)
    modules = parse_modules(a.imports)
    if modules is None and default_imports is None:
        from parinfo.process.probing import default_modules

        modules = default_modules()
    return inspect(default_imports if modules is None else modules, torch=a.torch)


def _echo(text: str, nl: bool = True) -> None:
    """Write ``text`` to standard output as typer's echo does: flushed, and as UTF-8 with unencodable
    characters replaced when the stream claims ASCII (PYTHONIOENCODING=ascii), so no value can fail
    the write. Its other duty, dropping ANSI styles off a terminal, finds nothing here: JSON escapes
    ESC, and the torch block has its control characters escaped."""
    import codecs

    out = text + "\n" if nl else text
    stream = sys.stdout
    encoding, errors = getattr(stream, "encoding", None), getattr(stream, "errors", None)
    buffer = getattr(stream, "buffer", None)
    if buffer is not None and (encoding is None or errors is None or codecs.lookup(encoding).name == "ascii"):
        stream.flush()
        buffer.write(out.encode("utf-8", "replace"))
        buffer.flush()
        return
    stream.write(out)
    stream.flush()


def parse_modules(value: list[str] | None) -> list[str] | None:
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
                from parinfo.machine.checks import shown

                raise UsageError(f"--import: {shown(name)} is not a module name (use e.g. --import numpy,scipy)")
            mods.append(name)
    return mods


def outside_conflicts(pid: int | None, children: bool, probes: bool, torch_format: bool) -> None:
    """Refuse option mixes that make no sense for a process read from outside."""
    if pid is None:
        raise UsageError("--children needs --pid PID (the process whose tree to sum)")
    if probes:
        raise UsageError("--import and --torch load modules into parinfo itself; with --pid the other process "
                         "is read from outside and nothing is imported into it")
    if torch_format:
        raise UsageError("--format torch shows counts in force, which cannot be read from outside: use rich or json")


def attach_conflicts(a: ShowArgs) -> None:
    """Refuse option mixes that make no sense with --attach."""
    if not a.attach:
        raise UsageError("--timeout applies to --attach only (parinfo show --pid PID --attach --timeout S)")
    if a.pid is None:
        raise UsageError("--attach needs --pid PID (the running Python 3.14+ process to read from inside)")
    if a.imports is not None or a.torch:
        raise UsageError("--import and --torch load modules into parinfo itself; --attach imports nothing into "
                         "the other process either")
    if a.children and a.fmt is Format.torch:
        raise UsageError("--format torch shows one process's counts; --children sums a tree: use rich or json")


def check_level(value: str | None) -> str | None:
    """The severity ``--check`` fails on; a bare ``--check`` arrives as CHECK_BARE (see normalise_check)."""
    from parinfo.diagnostics.findings import Severity

    if value is None:
        return None
    if Severity.parse(value) is None:
        from parinfo.machine.checks import shown

        raise UsageError(f"--check={shown(value)}: not a level; use --check (warning), --check=error or --check=info")
    return value


def normalise_check(args: list[str]) -> list[str]:
    """A bare ``--check`` means ``--check=warning``, for ``show``, ``host`` and ``fleet show``: the CLI
    framework has no optional option values."""
    return [f"--check={CHECK_BARE}" if a == "--check" else a for a in args]
