"""`parinfo host`: every process of the machine (or of one cgroup) against its CPUs, refreshed like
`parinfo watch`."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional

import typer

from parinfo.cli import values

if TYPE_CHECKING:  # pragma: no cover
    from parinfo.host.model import HostReport
    from parinfo.host.scanner import Scanner


def host(
    json_out: bool = typer.Option(
        False, "--json",
        help="Print JSON: one object per interval (the default when not on a terminal, but for --once)."),
    cgroup: Optional[str] = typer.Option(
        None, "--cgroup", metavar="PATH",
        help="Only processes in this cgroup and below (as /proc/PID/cgroup names it, or its "
             "/sys/fs/cgroup directory)."),
    user: Optional[str] = typer.Option(None, "--user", metavar="NAME",
                                       help="Only processes of this user (name or uid)."),
    interval: float = typer.Option(1.0, "--interval", metavar="SECONDS", parser=values.seconds("--interval"),
                                   help="Seconds between scans (CPU use, throttling and pressure are "
                                        "counted over it)."),
    once: bool = typer.Option(False, "--once", help="Scan twice, one interval apart, print the report and exit."),
    all_processes: bool = typer.Option(False, "--all", help="List every process, not only those with native pools."),
    check: Optional[str] = typer.Option(
        None, "--check", metavar="[=LEVEL]",
        help="With --once: exit 1 when a finding at LEVEL or above exists: warning (bare --check), error, or info."),
    attach: bool = typer.Option(
        False, "--attach",
        help="Read each CPython 3.14+ process with native pools from inside (sys.remote_exec): its counts in "
             "force, marked attached, with the source its own report gives (docs/process.md)."),
    timeout: Optional[float] = typer.Option(
        None, "--timeout", metavar="S", parser=values.attach_timeout,
        help="With --attach: seconds all attaches of one scan may take together (default 5; 2 at most each)."),
    serve: Optional[str] = typer.Option(
        None, "--serve", metavar="HOST:PORT",
        help="Serve Prometheus metrics on HOST:PORT (default host 127.0.0.1; one scan per scrape) until "
             "SIGINT or SIGTERM, instead of printing reports. Needs prometheus_client (the metrics extra of parinfo)."),
    otlp: Optional[str] = typer.Option(
        None, "--otlp", metavar="URL",
        help="Send each scan to an OpenTelemetry collector at URL (OTLP/HTTP, e.g. http://127.0.0.1:4318; "
             "semantic-convention names, docs/metrics.md) instead of printing it. Needs the otel extra of parinfo."),
) -> None:
    """Every process's pools and threads against its cgroup's CPUs, families of workers, and oversubscription."""
    from parinfo.cli.show import check_level
    from parinfo.host.scanner import Scanner, check_interval

    level = check_level(check)
    seconds = check_interval(interval)
    _check_modes(level, seconds, interval, once, serve, json_out, all_processes, timeout, attach)
    where = _check_otlp(otlp, serve, json_out, all_processes, level)
    scanner = Scanner(cgroup=cgroup, user=user, attach=_attach_budget(attach, timeout))
    if where is not None:
        _send_until_stopped(scanner, seconds, once, where)
        return
    if serve is not None:
        from parinfo.cli.watch import serve_until_stopped
        from parinfo.host.metrics import HostCollector

        scope = ", ".join(f"{k} {v}" for k, v in (("cgroup", cgroup), ("user", user)) if v)
        serve_until_stopped(HostCollector(scanner), serve, f"this host{' (' + scope + ')' if scope else ''}")
        return
    report = _report_until_stopped(scanner, seconds, json_out, once, all_processes)
    if report is not None and level is not None and report.problems(level):
        raise typer.Exit(1)


def _check_modes(level: str | None, seconds: float, interval: float, once: bool, serve: str | None,
                 json_out: bool, all_processes: bool, timeout: float | None, attach: bool) -> None:
    """Refuse options that do not go together, before anything is read."""
    from parinfo.errors import UsageError

    if level is not None and not once:
        raise UsageError("--check needs --once (a refreshing report has no exit status to give)")
    if serve is not None:
        if once or level is not None or json_out or all_processes:
            raise UsageError("--serve serves metrics until stopped: it takes no --once, --check, --json or --all")
        from parinfo.watching.metrics import check_serve

        check_serve(serve)  # bad input is refused before anything is read
    elif not once and seconds < 0.05:
        raise UsageError(f"--interval {interval:g}: a refreshing report needs at least 0.05 s between scans")
    if timeout is not None and not attach:
        raise UsageError("--timeout applies to --attach only (parinfo host --attach --timeout S)")


def _check_otlp(otlp: str | None, serve: str | None, json_out: bool, all_processes: bool,
                level: str | None) -> str | None:
    """Refuse ``--otlp`` beside another output, and check its URL, the extra and the collector
    (UsageError each, before anything is read); the endpoint, or None."""
    if otlp is None:
        return None
    from parinfo.errors import UsageError
    from parinfo.watching.otlp import check_otlp

    if serve is not None or json_out or all_processes or level is not None:
        raise UsageError("--otlp sends each scan instead of printing it: it takes no --serve, --json, --all or --check")
    return check_otlp(otlp)


def _send_until_stopped(scanner: Scanner, seconds: float, once: bool, url: str) -> None:
    """``host --otlp``: send a scan every ``seconds`` (counted against the previous one) to ``url``,
    until SIGINT or SIGTERM, or once."""
    import time

    from parinfo.cli.otlp import exporting
    from parinfo.host.otel import host_points

    scope = ", ".join(f"{k} {v}" for k, v in (("cgroup", scanner.cgroup_given), ("user", scanner.user)) if v)
    try:
        with exporting(url, f"this host{' (' + scope + ')' if scope else ''}", "scan") as send:
            scanner.scan(attach=False)  # a first reading, to count CPU use over the interval: never sent
            while True:
                time.sleep(seconds)
                send(host_points(scanner.scan(), scanner.counters))
                if once:
                    return
    except KeyboardInterrupt:
        return


def _attach_budget(attach: bool, timeout: float | None) -> float | None:
    """The seconds all attaches of one scan may take together (None: no attach)."""
    if not attach:
        return None
    from parinfo.outside.attach import DEFAULT_TIMEOUT

    return DEFAULT_TIMEOUT if timeout is None else timeout


def _report_until_stopped(scanner: Scanner, seconds: float, json_out: bool, once: bool,
                          all_processes: bool) -> HostReport | None:
    """Scan every ``seconds`` and print each report (JSON, a redrawn screen, or tables) until
    interrupted, or once; the last report (None when interrupted)."""
    import time

    from parinfo.cli.watch import STOP_HINT
    from parinfo.records.convert import dumps

    live = not json_out and sys.stdout.isatty() and not once
    as_json = json_out or (not once and not sys.stdout.isatty())
    try:
        scanner.scan(attach=False)  # a first reading, to count CPU use over the interval: never shown
        while True:
            time.sleep(seconds)
            report = scanner.scan()
            if as_json:
                typer.echo(dumps(report.to_dict(), default=str, indent=2 if once else None))
            elif live:  # the screen is redrawn each time: the line that says how to stop stays, once
                typer.echo("\x1b[H\x1b[2J" + report.table(all_processes=all_processes) + "\n" + STOP_HINT)
            else:
                typer.echo(report.table(all_processes=all_processes))
            sys.stdout.flush()
            if once:
                return report
    except KeyboardInterrupt:
        return None
