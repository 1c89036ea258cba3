"""The report as HTML for notebooks (``Report._repr_html_``): the rows of
:mod:`parinfo.diagnostics.sections` as one table per section, and the findings grouped by severity
with their fix.

Self-contained: inline styles only, no stylesheet, script, font or image, nothing fetched. Colours
are few and readable on light and dark notebook themes alike; everything else inherits the
notebook's own colours. Every value is escaped (controls as in the text report, then HTML).
"""
from __future__ import annotations

import html
from typing import TYPE_CHECKING

from parinfo.diagnostics.findings import Severity
from parinfo.diagnostics.sections import Row, Section, Span, findings_by_severity, sections, title
from parinfo.safe_text import escape_controls

if TYPE_CHECKING:
    from parinfo.diagnostics.findings import Finding
    from parinfo.diagnostics.sections import Report

# Mid-tone colours: readable on a white page and on a dark one.
_TONE = {"": "", "strong": "font-weight:bold", "dim": "opacity:0.7", "warning": "color:#c27c0e",
         "good": "color:#2f9e44"}
_SEVERITY = {Severity.ERROR: "color:#e03131;font-weight:bold", Severity.WARNING: "color:#c27c0e",
             Severity.INFO: "color:#1c7ed6"}
_BOX = "font-family:inherit;font-size:inherit;line-height:1.45;color:inherit;max-width:100%;overflow-x:auto"
_TABLE = "border-collapse:collapse;margin:0.2em 0 0.6em 0;color:inherit;background:transparent"
_CAPTION = "text-align:left;font-weight:bold;padding:0.4em 0 0.2em 0;color:inherit"
_CELL = ("text-align:left;vertical-align:top;padding:0.15em 1.2em 0.15em 0;"
         "border-bottom:1px solid rgba(128,128,128,0.25)")
_DETAIL = "text-align:left;padding:0 0 0.15em 2em;opacity:0.7;border:none;font-size:0.9em;word-break:break-all"


def esc(text: object, keep: str = "") -> str:
    """``text`` safe inside HTML, text or attribute: controls (but those in ``keep``) escaped as in
    the text report, then ``& < > " '``."""
    return html.escape(escape_controls(str(text), keep=keep), quote=True)


def _styled(text: str, style: str, tag: str = "span") -> str:
    return f'<{tag} style="{style}">{esc(text)}</{tag}>' if style else esc(text)


def _spans(spans: list[Span]) -> str:
    return "".join(_styled(text, _TONE[tone]) for text, tone in spans)


def _row(row: Row, width: int) -> str:
    cells = list(row.cells) + [""] * (width - len(row.cells))
    first, rest = cells[0], cells[1:]
    style = f' style="{_TONE[row.tone]}"' if row.tone else ""
    out = [f'<tr data-tone="{esc(row.tone)}"{style}>',
           f'<th scope="row" style="{_CELL};font-weight:inherit">{esc(first)}</th>',
           *(f'<td style="{_CELL}">{esc(cell)}</td>' for cell in rest), "</tr>"]
    out += [f'<tr data-detail=""><td colspan="{width}" style="{_DETAIL}">{esc(d)}</td></tr>' for d in row.details]
    return "".join(out)


def section_html(section: Section) -> str:
    """One section: a table whose caption is its title, its rows, then its notes."""
    width = max([len(section.columns), *(len(r.cells) for r in section.rows), 1])
    head = ""
    if section.columns:
        head = "<thead><tr>" + "".join(f'<th scope="col" style="{_CELL};font-weight:bold">{esc(c)}</th>'
                                       for c in section.columns) + "</tr></thead>"
    body = "".join(_row(r, width) for r in section.rows)
    notes = "".join(f'<tr data-note=""><td colspan="{width}" style="{_DETAIL};padding-left:0;'
                    f'{_TONE[n.tone]}">{esc(n.text)}</td></tr>' for n in section.notes)
    return (f'<table data-section="{esc(section.key)}" style="{_TABLE}">'
            f'<caption style="{_CAPTION}">{esc(section.title)}</caption>{head}'
            f"<tbody>{body}{notes}</tbody></table>")


def _finding(f: Finding) -> str:
    return (f'<li data-finding="{esc(f.id)}" style="margin:0.2em 0">'
            f'<span style="font-weight:bold">{esc(f.id)}</span>: {esc(f.message)}'
            f'<div style="opacity:0.7">why: {esc(f.why)}</div>'
            f'<div>fix: <code style="color:inherit;background:transparent">{esc(f.fix)}</code></div></li>')


def findings_html(findings: list[Finding]) -> str:
    """The findings, worst severity first, each with why it matters and its fix."""
    parts = [f'<div data-findings="" style="margin-top:0.4em"><div style="{_CAPTION}">Findings</div>']
    if not findings:
        parts.append(f'<div style="{_TONE["good"]}">nothing wrong found</div>')
    for severity, group in findings_by_severity(findings):
        parts.append(f'<div data-severity="{esc(severity)}">'
                     f'<div style="{_SEVERITY[severity]}">{esc(severity)} ({len(group)})</div>'
                     f'<ul style="margin:0.1em 0 0.4em 0;padding-left:1.4em">{"".join(map(_finding, group))}</ul>'
                     "</div>")
    parts.append("</div>")
    return "".join(parts)


def report_html(report: Report) -> str:
    """The whole report as one self-contained HTML fragment."""
    return (f'<div class="parinfo-report" style="{_BOX}">'
            f"<div>{_spans(title(report))}</div>"
            + "".join(section_html(s) for s in sections(report))
            + findings_html(report.findings) + "</div>")


def preformatted(text: str) -> str:
    """Text shown as it is, in the notebook's fixed-width font (a live sample, a host table)."""
    shown = esc(text, keep="\n\t")
    return f'<pre style="color:inherit;background:transparent;white-space:pre;overflow-x:auto">{shown}</pre>'
