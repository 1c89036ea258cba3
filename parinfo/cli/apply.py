"""`parinfo apply PROFILE [-- COMMAND ...]`: show a profile's plan for this machine, or run under it."""
from __future__ import annotations

from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from parinfo.cli.launch import ApplyArgs
    from parinfo.profiles.plan import Plan


def apply_cmd(a: ApplyArgs) -> int:
    """Show what PROFILE means on this machine (every setting, its value and why), or run COMMAND under it."""
    from parinfo.errors import UsageError
    from parinfo.profiles.loading import resolve_profile

    if a.json_out and a.export:
        raise UsageError("--json and --export cannot be used together (pick one output format)")
    if a.instances is not None and a.instances < 1:
        raise UsageError(f"--instances {a.instances}: must be 1 or more")
    if not a.command and (a.instance_index is not None or a.log_dir is not None or a.check):
        raise UsageError("--instance-index, --log-dir and --check apply to a launch: give the command after --, "
                         f"e.g. parinfo apply {a.profile} --check -- python serve.py")
    if a.command:
        if a.json_out or a.export:
            raise UsageError("--json and --export print the plan; they cannot be used with a command")
        from parinfo.cli.launch import launch

        return launch(a.profile, a.command, force=a.force, instances=a.instances, instance_index=a.instance_index,
                      log_dir=a.log_dir, check=a.check)
    plan = resolve_profile(a.profile, instances=a.instances)
    if a.json_out:
        import json

        from parinfo.records.convert import dump

        typer.echo(json.dumps(dump(plan), indent=2))
    elif a.export:
        typer.echo(export_lines(plan, force=a.force), nl=False)
    else:
        _print_plan(plan, a.profile, a.instances)
    return 0


def export_lines(plan: Plan, *, force: bool = False, environ: dict[str, str] | None = None) -> str:
    """Shell lines that set the plan's variables, safe to ``eval`` whatever the profile's name, path
    or values hold: values are quoted, comments escaped (no newline can end one early).
    Variables already set elsewhere are kept (as comments) unless ``force``."""
    import os
    import shlex

    from parinfo.machine.cpulist import format_cpu_list
    from parinfo.process.libraries import role_var
    from parinfo.profiles.finding import command_word

    env = os.environ if environ is None else environ
    name = command_word(plan.origin) or "FILE"  # a profile given as data: written to a FILE first
    lines = [_comment(f"parinfo profile {plan.name} ({plan.origin})")]
    for var, value in plan.env.items():
        user = env.get(var)
        if user is not None and user != value and not force:
            lines.append(_comment(f"{var} kept: already set to {shlex.quote(user)} (profile: "
                                  f"{shlex.quote(value)}; --force overrides)"))
            continue
        lines.append(_export(var, value))
    lines.append(_export(role_var('profile'), plan.name))
    ours = plan.preload_paths
    if ours and _unsafe(":".join(ours)):
        lines.append(_comment(f"LD_PRELOAD left out: a path holds a control character ({':'.join(ours)})"))
    elif ours:
        from parinfo.process.preload import MARK_VAR, PRELOAD_VAR

        first = shlex.quote(":".join(ours))
        lines.append(_comment(f"{PRELOAD_VAR}: the profile's libraries first, your own entries after them"))
        lines.append(f"export {PRELOAD_VAR}={first}${{{PRELOAD_VAR}:+:${PRELOAD_VAR}}}")
        lines.append(f"export {MARK_VAR}={first}")
    if plan.affinity is not None:
        cpus = format_cpu_list(plan.affinity)
        lines.append(_comment(f"affinity {cpus}: start the program with taskset -c {cpus}, or with "
                              f"parinfo apply {name} -- COMMAND"))
    if len(plan.instances) > 1:
        lines.append(_comment(f"{len(plan.instances)} instances: launch them with parinfo apply {name} -- COMMAND"))
    if plan.memory != "none":
        lines.append(_comment(f"memory {plan.memory}: no variable sets it; parinfo apply {name} -- COMMAND does "
                              "(or parinfo.apply(), for the calling thread)"))
    lines.append(_comment(f"inter-op counts without a variable (torch) are set only by parinfo apply {name} -- "
                          f"COMMAND or parinfo.apply()"))
    return "\n".join(lines) + "\n"


def _unsafe(text: str) -> bool:
    """Whether ``text`` holds a character that is not shown as itself (a control, a bidi override)."""
    from parinfo.safe_text import escape_controls

    return escape_controls(text) != text


def _export(name: str, value: str) -> str:
    """``export NAME='value'``; a value with a control character (which no checked profile holds)
    is left out, said in a comment, so what is eval'ed is always what a person reads."""
    import shlex

    if _unsafe(name) or _unsafe(value):
        return _comment(f"{name} left out: its value holds a control character ({value})")
    return f"export {name}={shlex.quote(value)}"


def _comment(text: str) -> str:
    """A shell comment line: control characters (a newline above all) escaped."""
    from parinfo.safe_text import escape_controls

    return "# " + escape_controls(text)


def _print_plan(plan: Plan, given: str, instances: int | None = None) -> None:
    """The plan as a table, and the line that says nothing was applied and how to apply it (with the
    profile as the user named it: a name, or a path, and ``--instances N`` when it was given)."""
    from rich import box
    from rich.console import Console
    from rich.markup import escape as escape_markup
    from rich.table import Table

    from parinfo.machine.cpulist import format_cpu_list
    from parinfo.safe_text import escape_controls

    def escape(text: str) -> str:
        return escape_markup(escape_controls(text))

    console = Console()
    console.print(f"[bold]profile {escape(plan.name)}[/bold]  [dim]{escape(plan.origin)}[/dim]", soft_wrap=True)
    if plan.description:
        console.print(escape(plan.description), soft_wrap=True)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    # a value (a path, MALLOC_CONF) is never broken, and a reason only at spaces, so both can be
    # copied: the table is as wide as its longest value and word need (_wide_enough)
    table.add_column("setting", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column("why")
    table.add_row("intra_op", str(plan.intra_op.value), escape(plan.intra_op.why))
    table.add_row("inter_op", str(plan.inter_op.value), escape(plan.inter_op.why))
    for lib, setting in plan.libraries.items():
        table.add_row(f"libraries.{lib}", str(setting.value), escape(setting.why))
    table.add_section()
    for name, value in plan.env.items():
        table.add_row(name, escape(value), escape(plan.env_why.get(name, "")))
    for pre in plan.preload:
        table.add_row(pre.key, escape(pre.choice), escape(f"{pre.path}: {pre.why}" if pre.path else pre.why))
    table.add_section()
    if plan.affinity is not None:
        affinity = format_cpu_list(plan.affinity)
    else:
        affinity = "per instance" if plan.instances else "inherited"  # each instance is pinned: rows below
    table.add_row("affinity", affinity, escape(plan.affinity_why))
    memory = plan.memory
    if plan.memory_nodes:
        memory += f" {format_cpu_list(plan.memory_nodes)}"
    table.add_row("memory", memory, escape(plan.memory_why))
    for inst in plan.instances:
        nodes = f", NUMA node {format_cpu_list(inst.nodes)}" if inst.nodes else ""
        table.add_row(f"instance {inst.index}", format_cpu_list(inst.cpus),
                      f"intra_op {inst.intra_op}, inter_op {inst.inter_op}{nodes}")
    _wide_enough(console, table).print(table)
    for note in plan.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", soft_wrap=True)
    import shlex

    run = f"parinfo apply {shlex.quote(given)}" + (f" --instances {instances}" if instances is not None else "")
    # a running process is one instance: parinfo.apply() refuses a plan of several
    inproc = ("" if len(plan.instances) > 1 else
              f", or call parinfo.apply(\"{escape(given)}\") at the top of a Python program")
    console.print(f"[dim]nothing applied: this is the plan. Run a program under it with `{escape(run)} -- "
                  f"COMMAND`{inproc}[/dim]", soft_wrap=True)


def _wide_enough(console: Console, table: Table) -> Console:
    """``console``, or one wider when ``table`` needs more columns to break no value and no word
    (each column at least as wide as its longest cell, or its longest word where it wraps): a line
    that runs past the terminal's width can still be copied whole; a folded path cannot."""
    from rich.cells import cell_len
    from rich.console import Console
    from rich.padding import Padding
    from rich.text import Text

    widths = []
    for column in table.columns:
        plain = [Text.from_markup(c).plain if isinstance(c, str) else "" for c in column.cells]
        parts = plain if column.no_wrap else [w for p in plain for w in p.split()]
        widths.append(max([cell_len(p) for p in parts] + [cell_len(str(column.header))]))
    _, right, _, left = Padding.unpack(table.padding)
    pads = (left + right) * len(widths) - (0 if table.pad_edge else left + right)
    dividers = (len(widths) - 1 + (2 if table.show_edge else 0)) if table.box else 0
    need = sum(widths) + pads + dividers
    return console if need <= console.width else Console(width=need)
