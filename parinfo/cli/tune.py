"""`parinfo tune`: measure a workload's thread-count curve, show it, and write the winning profile."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import typer

from parinfo.cli import values
from parinfo.safe_text import plural
from parinfo.tuning.workloads import BUILTIN, described

if TYPE_CHECKING:  # pragma: no cover
    from rich.progress import TaskID
    from rich.table import Table

    from parinfo.tuning.result import TuneResult
    from parinfo.tuning.search import Point
    from parinfo.tuning.sweep import ProgressInfo

_WORKLOADS = described()


def tune(
    command: list[str] | None = typer.Argument(
        None, metavar="[WORKLOAD | -- COMMAND ...]",
        help=f"A built-in workload ({_WORKLOADS}), or after -- a command timed as a whole process."),
    workload: str | None = typer.Option(None, "--workload", "-w", help=f"Built-in workload: {_WORKLOADS}."),
    stmt: str | None = typer.Option(None, "--stmt", "-s", help="Python statement to time (timeit-style)."),
    setup: str | None = typer.Option(None, "--setup", help="Run once before timing --stmt."),
    module: str | None = typer.Option(None, "--module", "-m",
                                      help="Time pkg.module:function (called with no arguments)."),
    objective: str = typer.Option("latency", "--objective", "-o", metavar="[latency|throughput]",
                                  help="latency: fastest single call; throughput: most requests per second."),
    framework: str = typer.Option("numpy", "--framework", metavar="[numpy|torch]",
                                  help="The library the built-in workloads use."),
    size: int = typer.Option(1024, "--size", parser=values.whole("--size"), help="Matrix size of the matmul workload."),
    min_threads: int = typer.Option(1, "--min", parser=values.whole("--min"), help="Fewest intra-op threads to try."),
    max_threads: int | None = typer.Option(
        None, "--max", parser=values.whole("--max"),
        help="Most intra-op threads (throughput: most inter x intra); default the usable CPUs."),
    min_inter: int = typer.Option(1, "--min-inter", parser=values.whole("--min-inter"),
                                  help="Fewest inter-op threads (latency) / concurrent requests (throughput)."),
    max_inter: int | None = typer.Option(None, "--max-inter", parser=values.whole("--max-inter"),
                                         help="Most inter-op threads / concurrent requests. Latency "
                                              "searches inter-op with intra-op (2-D) for work that may "
                                              "fork (ensemble, torch code); give it to search any."),
    repeats: int = typer.Option(5, "--repeats", "-r", parser=values.whole("--repeats"),
                                help="Timed samples per point (the median is used)."),
    warmup: int = typer.Option(1, "--warmup", parser=values.whole("--warmup"), help="Untimed warm-up calls per point."),
    min_time: float = typer.Option(0.05, "--min-time", parser=values.seconds("--min-time", 0, 86400),
                                   help="Seconds one sample should last (calls are batched)."),
    timeout: float = typer.Option(600.0, "--timeout", parser=values.seconds("--timeout", 0, 86400),
                                  help="Seconds one point may take before the tune stops."),
    in_process: bool = typer.Option(False, "--in-process",
                                    help="Measure in this process through the runtime and threadpoolctl."),
    exhaustive: bool = typer.Option(False, "--exhaustive", help="Measure every candidate (no adaptive skipping)."),
    confirm: bool = typer.Option(True, "--confirm/--no-confirm",
                                 help="Measure points within the noise of the best once more before picking."),
    write: str | None = typer.Option(None, "--write",
                                     help="Write a profile with the winning counts to this YAML file."),
    name: str | None = typer.Option(None, "--name", help="Profile name for --write (default tuned-WORKLOAD)."),
    plot: str | None = typer.Option(None, "--plot", help="Save the curve as FILE.svg or FILE.png (needs matplotlib)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    noise_check: bool = typer.Option(True, "--noise-check/--no-noise-check",
                                     help="Look for other busy processes before measuring."),
    allocator: str | None = typer.Option(
        None, "--allocator", metavar="default,jemalloc,tcmalloc",
        help="Also measure these allocators (preloaded) at the best counts; write the winner when it beats "
             "default beyond the noise."),
    openmp: str | None = typer.Option(
        None, "--openmp", metavar="default,intel,gnu,llvm",
        help="Also measure these OpenMP runtimes (preloaded) at the best counts, after --allocator; write "
             "the winner when it beats default beyond the noise."),
) -> None:
    """Measure how a workload's time depends on its thread counts and pick the best counts.

    Exit codes: 0 done; 2 bad input; 1 when the timed statement or function raises or exits (its own
    traceback is shown); 130 on an interrupt; a failing command's own exit code, 128+N when signal N
    killed it (the end of its output is shown).
    """
    workload, args = _workload_and_command(command, workload)
    _check_outputs(plot, name, write)
    result = _measure(as_json, workload=workload, objective=objective, framework=framework, size=size,
                      stmt=stmt, setup=setup, module=module, command=args or None,
                      min_threads=min_threads, max_threads=max_threads, min_inter=min_inter,
                      max_inter=max_inter, repeats=repeats, warmup=warmup, min_time=min_time,
                      timeout=timeout, in_process=in_process, exhaustive=exhaustive,
                      confirm=confirm, check_noise=noise_check, allocator=allocator, openmp=openmp)
    _publish(result, write, name, plot, as_json)


def _workload_and_command(command: list[str] | None, workload: str | None) -> tuple[str | None, list[str]]:
    """The built-in workload (a lone argument that names one, or --workload) and the command to time."""
    from parinfo.errors import UsageError
    from parinfo.machine.checks import shown

    args = list(command or [])
    if len(args) == 1 and args[0] in BUILTIN:
        if workload is not None:
            raise UsageError(f"workload given twice: {args[0]} and --workload {shown(workload)}")
        workload, args = args[0], []
    return workload, args


def _check_outputs(plot: str | None, name: str | None, write: str | None) -> None:
    """Refuse, before measuring, a plot path, profile name or --write folder that cannot be used."""
    import os

    from parinfo.errors import UsageError
    from parinfo.machine.checks import shown
    from parinfo.tuning.plot import check_plot_path
    from parinfo.tuning.writers import check_name

    if plot:
        check_plot_path(plot)
    if name is not None:
        check_name(name)
    if write and not os.path.isdir(os.path.dirname(os.path.abspath(write))):
        raise UsageError(f"--write {shown(write)}: folder {shown(os.path.dirname(os.path.abspath(write)))} "
                         f"does not exist")


def _measure(as_json: bool, **fields: Any) -> TuneResult:
    """Run the sweep the options (``fields``) describe, with a progress bar on a terminal; a workload
    that fails ends the command with its output and exit code."""
    from parinfo.tuning.measure import WorkloadFailed
    from parinfo.tuning.options import TuneOptions
    from parinfo.tuning.sweep import run

    bar = _Bar() if sys.stderr.isatty() and not as_json else None
    try:
        options = TuneOptions(**fields)
        return run(options, progress=bar)
    except WorkloadFailed as exc:
        if bar:
            bar.close()
        sys.stdout.flush()
        if exc.output:
            sys.stderr.write(exc.output if exc.output.endswith("\n") else exc.output + "\n")
        print(f"parinfo: {exc}", file=sys.stderr)
        raise typer.Exit(exc.exit_code) from None
    finally:
        if bar:
            bar.close()


def _publish(result: TuneResult, write: str | None, name: str | None, plot: str | None, as_json: bool) -> None:
    """Write the profile and the plot asked for, then show the result (JSON, or the table)."""
    if write:
        result.write_profile(write, name)
    if plot:
        result.plot(plot)
    if as_json:
        import json

        print(json.dumps(result.to_dict(), indent=2))
        return
    _render(result, write, plot)


class _Bar:
    """A rich progress bar on stderr (only used on a terminal)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
        )

        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("candidates"),
                                 console=Console(stderr=True), transient=True)
        self.task: TaskID | None = None
        self.closed = False

    def __call__(self, event: str, info: ProgressInfo) -> None:
        if event == "start":
            self.progress.start()
            self.task = self.progress.add_task("tuning", total=info["candidates"])
        elif event in ("measuring", "confirming") and self.task is not None:
            self.progress.update(self.task, description=f"{event} {info['label']}")
        elif event == "measured" and self.task is not None:
            self.progress.advance(self.task)
        elif event == "done":
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.progress.stop()


def _table(result: TuneResult) -> Table:
    """The measured points as a table, best in bold."""
    from rich.table import Table
    from rich.text import Text

    from parinfo.tuning.plot import TITLE_CHARS, shorten

    title = (f"{shorten(result.workload, TITLE_CHARS)}: {result.objective}, "
             f"{plural(result.machine.usable_cpus, 'usable CPU')}")
    table = Table(title=Text(title), title_justify="left")
    table.add_column("inter x intra" if result.pairs else "threads", justify="right")
    table.add_column(f"median ms ({result.unit.split(' ', 1)[1]})", justify="right")
    table.add_column("spread", justify="right")
    table.add_column("min ms", justify="right")
    table.add_column("max ms", justify="right")
    if result.concurrent:
        table.add_column("requests/s", justify="right")
    table.add_column("order", justify="right")
    table.add_column("note")
    for p, s in result.measured:
        notes = ["best"] if p == result.best else (["noisy"] if result.is_noisy(s) else [])
        if p in result.search.confirmed:
            notes.append("measured twice")
        row = [result.label(p), f"{s.median * 1e3:.4g}", f"{s.spread:.0%}", f"{s.min * 1e3:.4g}",
               f"{s.max * 1e3:.4g}"]
        if result.concurrent:
            row.append(f"{1 / s.median:.4g}")
        row += [str(result.search.order.index(p) + 1), ", ".join(notes)]
        table.add_row(*row, style="bold" if p == result.best else None)
    return table


def _best_line(result: TuneResult) -> str:
    b, bs = result.best, result.best_stats
    intra = plural(b.intra, "intra-op thread")
    what = (f"{plural(b.inter, 'concurrent request' if result.concurrent else 'inter-op thread')} x {intra}"
            if result.pairs else intra)
    return (f"[bold]Best:[/] {what}: {bs.median * 1e3:.4g} ms {result.unit.split(' ', 1)[1]}"
            + (f", {1 / bs.median:.4g} requests/s" if result.concurrent else "")
            + f" (measured {len(result.search.stats)} of {len(result.search.candidates)} candidates "
              f"in {result.total_time_s:.1f} s)")


def _render(result: TuneResult, write: str | None, plot: str | None) -> None:
    """The human report: table, skipped points, text plot, notes, the pick, files written."""
    from rich.console import Console
    from rich.markup import escape

    from parinfo.tuning.choices import TITLES

    con = Console(highlight=False)
    table = _table(result)
    if not con.is_terminal:  # piped: as wide as the table needs, so no header is cut
        con = Console(highlight=False, width=max(con.width, Console(width=1000).measure(table).maximum))
    con.print(table)
    by_reason: dict[str, list[Point]] = {}
    for p, r in result.skipped:
        by_reason.setdefault(r, []).append(p)
    if by_reason:
        con.print(f"Skipped {len(result.search.skipped)} of {len(result.search.candidates)} candidates:")
        for reason, pts in by_reason.items():
            con.print(f"  {', '.join(result.label(p) for p in pts)}: {escape(reason)}", soft_wrap=True)
    con.print()
    con.print(escape(result.text_plot()), soft_wrap=True)
    con.print()
    for note in result.noise:
        con.print(f"[yellow]noise:[/] {escape(note)}", soft_wrap=True)
    for note in result.notes:
        con.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    con.print(_best_line(result), soft_wrap=True)
    for cs in result.choices:
        with_ = "".join(f", {k} {v}" for k, v in cs.fixed.items())
        timed = ", ".join(f"{w} {s.median * 1e3:.4g} ms ({s.spread:.0%})" for w, s in cs.stats.items())
        con.print(escape(f"{TITLES[cs.key]} at {result.label(cs.point)}{with_}: {timed}"), soft_wrap=True)
        con.print(("[bold]" if cs.written else "") + escape(f"  {cs.why}") + ("[/]" if cs.written else ""),
                  soft_wrap=True)
    if write:
        con.print(escape(f"Wrote profile {write} (use: parinfo apply {write})"), soft_wrap=True)
    if plot:
        con.print(escape(f"Wrote plot {plot}"), soft_wrap=True)
