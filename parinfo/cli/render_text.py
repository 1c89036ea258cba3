"""The report for people: aligned sections, styled through rich on a terminal, plain text elsewhere.

The rows come from parinfo.diagnostics.sections (the same rows the HTML report shows); this module
only aligns them and turns their tones into styles. Each line is a list of (text, style) spans. On
a terminal they go through rich, which honours NO_COLOR; written to a pipe or a file they are joined
as plain text without loading rich at all, which keeps ``parinfo show`` fast. Sections are aligned
lines rather than tables: they read better in a terminal and in a log file alike.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from parinfo.diagnostics.findings import Severity
from parinfo.diagnostics.sections import Section, sections, title

if TYPE_CHECKING:
    from rich.console import Console

    from parinfo.diagnostics.model import Report

#: The rich style of each tone of parinfo.diagnostics.sections, and of each finding's severity.
_STYLE = {"": "", "strong": "bold", "dim": "dim", "warning": "yellow", "good": "green"}
_SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
Span = tuple[str, str]  # (text, rich style; "" for none)
Line = list[Span]


def _line(text: str, style: str = "") -> Line:
    return [(text, style)]


def _aligned(rows: Iterable[tuple[str, ...]], indent: int = 2) -> list[str]:
    """Rows of plain cells -> lines with every column but the last padded to its widest cell."""
    rows = list(rows)
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows if len(r) > i) for i in range(max(map(len, rows)) - 1)]
    lines = []
    for row in rows:
        cells = [c.ljust(widths[i]) if i < len(row) - 1 else c for i, c in enumerate(row)]
        lines.append(" " * indent + "   ".join(cells).rstrip())
    return lines


def section_lines(section: Section) -> list[Line]:
    """A section as lines: a blank line, its title, its aligned rows (each with the lines under it),
    then its notes."""
    header = [section.columns] if section.columns else []
    aligned = _aligned([*header, *(row.cells for row in section.rows)])
    lines = [[], _line(section.title, "bold"), *(_line(text) for text in aligned[:len(header)])]
    for text, row in zip(aligned[len(header):], section.rows, strict=True):
        lines.append(_line(text, _STYLE[row.tone]))
        lines += [_line(f"      {detail}", "dim") for detail in row.details]
    lines += [_line(f"  {note.text}", _STYLE[note.tone]) for note in section.notes]
    return lines


def _findings(r: Report) -> list[Line]:
    if not r.findings:
        return [[], _line("Findings", "bold"), _line("  nothing wrong found", _STYLE["good"])]
    width = max(len(f.severity) for f in r.findings)
    lines: list[Line] = [[], _line("Findings", "bold")]
    for f in r.findings:
        pad = " " * (width + 4)
        lines.append([("  ", ""), (f.severity.ljust(width), _SEVERITY_STYLE[f.severity]), ("  ", ""),
                      (f.id, "bold"), (f": {f.message}", "")])
        lines.append(_line(f"{pad}why: {f.why}", "dim"))
        lines.append(_line(f"{pad}fix: {f.fix}"))
    return lines


def render_lines(report: Report) -> list[Line]:
    """The report as lines of styled spans."""
    lines = [[(text, _STYLE[tone]) for text, tone in title(report)]]
    for section in sections(report):
        lines.extend(section_lines(section))
    return lines + _findings(report)


def render(report: Report, console: Console | None = None) -> None:
    """Print the report for people: through rich on a terminal (or the given console), else plain."""
    import sys

    lines = _safe_lines(report)
    if console is None and not sys.stdout.isatty():
        sys.stdout.write(_joined(lines))
        return
    from rich.console import Console
    from rich.text import Text

    console = console or Console(highlight=False, emoji=False)
    console.print(Text("\n").join(Text.assemble(*line) for line in lines), soft_wrap=True)


def _safe_lines(report: Report) -> list[Line]:
    from parinfo.safe_text import escape_controls

    # Values come from outside (environment, thread names, file paths): never print a control raw.
    return [[(escape_controls(text), style) for text, style in line] for line in render_lines(report)]


def _joined(lines: list[Line]) -> str:
    return "\n".join("".join(text for text, _ in line) for line in lines) + "\n"


def plain_text(report: Report) -> str:
    """The report as plain text (what ``parinfo show`` writes to a pipe), controls escaped."""
    return _joined(_safe_lines(report))
