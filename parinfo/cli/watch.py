"""`parinfo watch`: live evidence of where a process's CPU time goes, one sample per interval.

The command itself, from option values to output and exit code (:func:`run`). Its options are
declared once, as the fields of :class:`WatchArgs`: from them come the typer command
(parinfo.cli._app) and the options of the ``%parinfo_watch`` magic (parinfo.cli.magics), which takes
some of them. typer is imported by what prints, not by the declaration or the rendering, so the
magic never loads it.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

from parinfo.cli import values
from parinfo.cli.options import Flag, Value

if TYPE_CHECKING:
    from parinfo.watching.model import Sample, ThrottleUse
    from parinfo.watching.sample import Sampler


#: The last line of a live (terminal) frame; never in --json, --once, --samples or piped output.
STOP_HINT = "(Ctrl-C stops)"
#: The most samples ``--samples`` asks for.
MAX_SAMPLES = 10_000


class WatchArgs(NamedTuple):
    """``parinfo watch``'s options: each field's value, and in its annotation the option that sets it."""

    pid: Annotated[int | None, Value(
        "--pid", metavar="PID", convert=values.pid,
        help="The process to watch (default: the CPU cgroup parinfo runs in: its own CPU time and its "
             "processes' threads, parinfo's own left out).")] = None
    children: Annotated[bool, Flag("--children", help="With --pid: watch its whole process tree.")] = False
    attach: Annotated[bool, Flag(
        "--attach",
        help="With --pid: also read each sample's counts in force inside the process (CPython 3.14+, "
             "sys.remote_exec; with --children, each such process of the tree), with their sources "
             "(docs/process.md).")] = False
    timeout: Annotated[float | None, Value(
        "--timeout", metavar="S", convert=values.attach_timeout,
        help="With --attach: seconds each sample's attaches may take together (default 5).")] = None
    interval: Annotated[float, Value(
        "--interval", metavar="SECONDS", convert=values.watch_interval, help="Seconds between samples.")] = 1.0
    once: Annotated[bool, Flag("--once", help="Print one sample (after one interval) and exit.")] = False
    samples: Annotated[int | None, Value(
        "--samples", "-n", metavar="N", convert=values.whole("--samples", 1, MAX_SAMPLES),
        help="Print N samples, each titled 'sample n of N', and exit (default: until Ctrl-C, or the "
             "process's end).")] = None
    json_out: Annotated[bool, Flag(
        "--json", help="One JSON object per interval (the default when not on a terminal, but for --once and "
                       "--samples).")] = False
    serve: Annotated[str | None, Value(
        "--serve", metavar="HOST:PORT",
        help="Serve Prometheus metrics on HOST:PORT (default host 127.0.0.1; one sample per scrape) until "
             "SIGINT or SIGTERM, instead of printing samples. Needs prometheus_client (the metrics extra of "
             "parinfo).")] = None
    otlp: Annotated[str | None, Value(
        "--otlp", metavar="URL",
        help="Send each sample to an OpenTelemetry collector at URL (OTLP/HTTP, e.g. http://127.0.0.1:4318; "
             "semantic-convention names, docs/metrics.md) instead of printing it. Needs the otel extra of "
             "parinfo.")] = None


def _pct(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:.0f}%"


def render_sample(s: Sample, title: str) -> str:
    """A sample for people: a few aligned lines, thread groups busiest first, the verdict last."""
    from parinfo.safe_text import escape_controls, plural

    quota = "no quota" if s.quota is None else f"quota {plural(s.quota, 'CPU', 'g')}"
    rate = s.involuntary / s.interval if s.interval else 0
    procs = plural(s.processes, "process")
    head = (f"{title}: {procs}, {plural(s.threads, 'thread')}; "
            f"usable CPUs {s.usable_cpus}, {quota}; every {s.interval:g} s")
    use = (f"  CPU use       {s.cpu_percent:.0f}% of one CPU; {plural(s.runnable, 'thread', '.1f')} wanting a CPU "
           f"on average, {s.running_now} running now; {rate:.0f} involuntary switches/s")
    lines = [head, use]
    t = s.throttling
    if t is not None:
        lines.append(f"  throttling    {t.percent_periods:.0f}% of periods ({t.throttled} of {t.periods}), "
                     f"{t.throttled_usec / 1000:.0f} ms held back ({t.percent_time:.0f}% of the interval) "
                     f"under {plural(t.quota, 'CPU', 'g')} at {t.cgroup}")
    elif s.throttling_since_start is not None:
        c = s.throttling_since_start
        lines.append(f"  throttling    no period of this interval read yet; since the cgroup began {c.throttled} of "
                     f"{c.periods} periods throttled, under {plural(c.quota, 'CPU', 'g')} at {c.cgroup}")
    else:
        lines.append(f"  throttling    {s.throttling_unknown or 'none: no CPU quota applies'}")
    if s.run_queue_wait_percent is not None:
        lines.append(waiting_line(s.run_queue_wait_percent, t))
    lines.append(f"  CPU pressure  machine {_pct(s.pressure_some)}, cgroup {_pct(s.pressure_cgroup_some)} "
                 f"(share of the interval some task waited for a CPU)")
    if s.groups:
        width = max(len(g.name) for g in s.groups[:12])
        lines.append("  thread groups")
        for g in s.groups[:12]:
            lines.append(f"    {g.name.ljust(width)}  {g.threads:3d} thread{'s' if g.threads != 1 else ' '}  "
                         f"{g.cpu_percent:5.0f}% CPU  {g.runnable:4.1f} wanting a CPU  "
                         f"{g.involuntary} involuntary")
        if len(s.groups) > 12:
            lines.append(f"    ... and {len(s.groups) - 12} more groups")
    lines += _inside_lines(s)
    lines.append(f"  verdict       {s.verdict}")
    return "\n".join(escape_controls(line) for line in lines)


def waiting_line(wait: float, t: ThrottleUse | None) -> str:
    """Throttled told apart from contended: the threads' run-queue wait (schedstat) and the quota's
    throttled time, two numbers, and what is left of the wait once the throttled time is taken out."""
    held = 0.0 if t is None else t.percent_time
    return (f"  waiting       run queue {wait:.0f}% (threads runnable, not on a CPU, summed); throttled {held:.0f}% "
            f"(the quota held them back); contended {max(0.0, wait - held):.0f}%")


def _inside_lines(s: Sample) -> list[str]:
    """``watch --attach``: each process's counts in force read inside it, with their sources, or why
    they were not read this time."""
    if s.inside is None:
        return []
    from collections import Counter

    from parinfo.diagnostics.wording import show_value

    lines = []
    for p in s.inside:
        lines.append(f"  {'counts inside' if p is s.inside[0] else '':13} pid {p.pid}: "
                     + (f"attached ({p.how})" if p.attached else p.how))
        libs = Counter(c.library for c in p.counts)
        names = [c.library + (f" [{c.owner}]" if libs[c.library] > 1 and c.owner else "") for c in p.counts]
        width = max((len(n) for n in names), default=0)
        for name, c in zip(names, p.counts, strict=True):
            lines.append(f"    {name.ljust(width)}  {show_value(c.count):>3}  {c.source}")
        if p.attached and not p.counts:
            lines.append("    none: no thread pool is loaded")
    return lines


def serve_until_stopped(collector: Any, address: str, what: str, ends: Callable[[], str | None] | None = None) -> None:
    """Serve ``collector``'s metrics on ``address`` until SIGINT or SIGTERM, or until ``ends`` (asked
    every 0.5 s) returns the line that says why there is nothing left to serve; then stop the server,
    say so in one line and return (``watch --serve`` and ``host --serve``; ``what`` names what is served)."""
    import signal
    import threading

    import typer

    from parinfo.safe_text import escape_controls
    from parinfo.watching.metrics import serve

    server, url = serve(collector, address)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    typer.echo(f"parinfo: serving metrics of {escape_controls(what)} on {url} (Ctrl-C or SIGTERM stops)", err=True)
    why = None
    try:
        while not stop.wait(0.5):
            why = ends() if ends is not None else None
            if why is not None:
                break
    finally:
        server.shutdown()
        server.server_close()
    typer.echo(why or "parinfo: metrics server stopped", err=True)


def attach_budget(pid: int | None, attach: bool, timeout: float | None, serve: str | None,
                  otlp: str | None = None) -> float | None:
    """The seconds each sample's attaches may take (None: no --attach); option mixes that make no
    sense raise UsageError."""
    import os

    from parinfo.errors import UsageError

    if not attach:
        if timeout is not None:
            raise UsageError("--timeout applies to --attach only (parinfo watch --pid PID --attach --timeout S)")
        return None
    if pid is None:
        raise UsageError("--attach needs --pid PID (the running Python 3.14+ process to read from inside)")
    if pid == os.getpid():
        raise UsageError("--attach reads another process: parinfo's own counts need no attach")
    if serve is not None:
        raise UsageError("--attach reads the counts of each printed sample; --serve serves metrics read from "
                         "outside: pick one")
    if otlp is not None:
        raise UsageError("--attach reads the counts of each printed sample; --otlp sends metrics read from "
                         "outside: pick one")
    from parinfo.outside.attach import DEFAULT_TIMEOUT

    return DEFAULT_TIMEOUT if timeout is None else timeout


def check_tree(a: WatchArgs) -> None:
    """``--children`` names a process tree: UsageError without ``--pid``."""
    from parinfo.errors import UsageError

    if a.children and a.pid is None:
        raise UsageError("--children needs --pid PID (the process whose tree to watch)")


def sample_count(a: WatchArgs) -> int | None:
    """How many samples to print (None: until stopped); option mixes that make no sense raise UsageError."""
    from parinfo.errors import UsageError

    if a.samples is None:
        return 1 if a.once else None
    if a.once:
        raise UsageError(f"--once prints one sample and --samples {a.samples} prints {a.samples}: pick one")
    if a.serve is not None:
        raise UsageError("--samples counts printed samples; --serve serves metrics until stopped: pick one")
    return a.samples


def check_outputs(a: WatchArgs) -> str | None:
    """Refuse ``--otlp`` beside another output (``--serve``, ``--json``) and check its URL, the extra
    and the collector (UsageError each, before anything is read); the endpoint, or None."""
    from parinfo.errors import UsageError

    if a.serve is not None:
        from parinfo.watching.metrics import check_serve

        check_serve(a.serve)
    if a.otlp is None:
        return None
    if a.serve is not None or a.json_out:
        other = "--serve" if a.serve is not None else "--json"
        raise UsageError(f"--otlp sends each sample instead of printing it: it takes no {other}")
    from parinfo.watching.otlp import check_otlp

    return check_otlp(a.otlp)


def _print_samples(a: WatchArgs, sampler: Sampler, seconds: float, count: int | None, title: str) -> int:
    """Print each sample (JSON, a redrawn screen, or text) until ``count`` are printed or the process
    ends; how many were printed."""
    import json

    import typer

    from parinfo.records.convert import dump
    from parinfo.watching.sample import samples

    endless = count is None
    live = not a.json_out and sys.stdout.isatty() and endless
    got = 0
    for sample in samples(sampler, seconds, count):
        got += 1
        if a.json_out or (endless and not sys.stdout.isatty()):
            typer.echo(json.dumps(dump(sample)))
        elif live:  # the screen is redrawn each time: the line that says how to stop stays, once
            typer.echo("\x1b[H\x1b[2J" + render_sample(sample, title) + "\n" + STOP_HINT, nl=True)
        else:
            named = title if a.samples is None else f"{title}, sample {got} of {a.samples}"
            typer.echo(render_sample(sample, named))
        sys.stdout.flush()
    return got


def _send_samples(sampler: Sampler, seconds: float, count: int | None, url: str, title: str) -> int:
    """``watch --otlp``: send each sample (with the watched process's pools and findings) to ``url``
    until ``count`` are sent or the process ends; how many were sent. KeyboardInterrupt on SIGINT or SIGTERM."""
    from parinfo.cli.otlp import exporting
    from parinfo.process.tasks import NotAProcess, ProcessGone
    from parinfo.watching.otel_watch import watch_points
    from parinfo.watching.sample import samples
    from parinfo.watching.target_report import TargetReport

    reports = TargetReport(sampler.pid)
    got = 0
    with exporting(url, title) as send:
        for sample in samples(sampler, seconds, count):
            try:
                report = reports.get()
            except (ProcessGone, NotAProcess):
                report = None  # it ended after the sample: the sample goes without its pools
            assert sampler.last is not None  # the reading that ended the sample
            send(watch_points(sample, sampler.last, report, sampler.children))
            got += 1
    return got


def run(a: WatchArgs) -> int:
    """Print a sample every interval (or serve or send them) until stopped, the process's end or the count asked;
    the exit code. Bad values raise UsageError; a process gone before its first sample, ProcessGone."""
    import typer

    from parinfo.watching.sample import Sampler, check_interval

    check_tree(a)
    budget = attach_budget(a.pid, a.attach, a.timeout, a.serve, a.otlp)
    seconds = check_interval(a.interval)
    count = sample_count(a)
    otlp = check_outputs(a)  # bad input is refused before anything is read
    pid = a.pid
    sampler = Sampler(pid, children=a.children, attach=budget)
    if a.serve is not None:
        from parinfo.watching.metrics import WatchCollector

        collector = WatchCollector(sampler)
        serve_until_stopped(collector, a.serve, f"pid {pid}" if pid else "this container",
                            ends=lambda: f"parinfo: pid {pid} exited; metrics server stopped"
                            if collector.exited() else None)
        return 0
    title = "container (parinfo's cgroup)" if pid is None else f"pid {pid}"
    try:
        if otlp is not None:
            got = _send_samples(sampler, seconds, count, otlp, title)
        else:
            got = _print_samples(a, sampler, seconds, count, title)
    except KeyboardInterrupt:
        return 0
    if pid is None or got == count:
        return 0
    if not got:  # it ended before a whole interval could be measured
        from parinfo.process.tasks import gone

        raise gone(pid)
    typer.echo(f"parinfo: pid {pid} exited; watch ended", err=True)
    return 0
