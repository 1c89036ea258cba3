"""Reading back the HTML report (parinfo.diagnostics.html) with the standard library's parser: its
structure (tags balanced, no external asset) and its content (a table per section, the findings by
severity), as text with the HTML escapes undone."""
from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

# Tags that load or run something from elsewhere, and attributes that point elsewhere.
EXTERNAL_TAGS = {"script", "link", "style", "img", "iframe", "object", "embed", "video", "audio", "source", "base",
                 "meta", "form", "svg"}
EXTERNAL_ATTRS = {"src", "href", "srcset", "action", "data", "poster", "background"}
VOID = {"br", "hr", "wbr", "col", "img", "input", "link", "meta", "source", "area", "base", "embed", "track"}


@dataclass
class Table:
    key: str
    caption: str = ""
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)  # the cells of each row
    tones: list[str] = field(default_factory=list)  # the tone of each row
    details: list[list[str]] = field(default_factory=list)  # the lines under each row
    notes: list[str] = field(default_factory=list)

    def row(self, first: str) -> list[str]:
        (found,) = [r for r in self.rows if r[0] == first]
        return found


@dataclass
class Finding:
    id: str
    text: str


class Report(HTMLParser):
    """The parsed report: ``title``, ``tables`` (by section key, in order), ``findings`` (severity ->
    its findings, in order), and ``problems`` (structure errors and external assets)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.tables: dict[str, Table] = {}
        self.findings: dict[str, list[Finding]] = {}
        self.problems: list[str] = []
        self.text = ""
        self._stack: list[str] = []
        self._table: Table | None = None
        self._where = ""  # caption, th-col, cell, detail, note, title, severity, finding
        self._buffer = ""
        self._cells: list[str] | None = None
        self._row_kind = "row"
        self._severity: str | None = None
        self._finding: Finding | None = None
        self.feed(html)
        self.close()
        if self._stack:
            self.problems.append(f"unclosed tags: {self._stack}")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in EXTERNAL_TAGS:
            self.problems.append(f"<{tag}>")
        for name, value in attrs:
            if name in EXTERNAL_ATTRS or name.startswith("on") or "url(" in (value or "") \
                    or "://" in (value or ""):
                self.problems.append(f"<{tag} {name}={value!r}>")
        if tag not in VOID:
            self._stack.append(tag)
        if tag == "div" and not self.title and len(self._stack) == 2:
            self._where, self._buffer = "title", ""
        elif tag == "table":
            self._table = Table(a.get("data-section") or "?")
        elif tag == "caption":
            self._where, self._buffer = "caption", ""
        elif tag == "tr" and self._table is not None:
            self._cells = []
            kind = "detail" if "data-detail" in a else "note" if "data-note" in a else "row"
            self._row_kind = kind
            if kind == "row" and "data-tone" in a:
                self._table.tones.append(a["data-tone"] or "")
        elif tag in ("td", "th") and self._cells is not None:
            self._where, self._buffer = "cell", ""
        elif tag == "div" and "data-severity" in a:
            self._severity = a["data-severity"] or ""
            self.findings[self._severity] = []
        elif tag == "li" and "data-finding" in a:
            self._finding = Finding(a["data-finding"] or "", "")

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self._stack or self._stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self._stack[-1:] or 'nothing'}")
        else:
            self._stack.pop()
        t = self._table
        if tag == "div" and self._where == "title":
            self.title, self._where = self._buffer, ""
        elif tag == "caption" and t is not None:
            t.caption, self._where = self._buffer, ""
        elif tag in ("td", "th") and self._cells is not None:
            self._cells.append(self._buffer)
            self._where = ""
        elif tag == "tr" and t is not None and self._cells is not None:
            if self._row_kind == "detail":
                t.details[-1].append(self._cells[0])
            elif self._row_kind == "note":
                t.notes.append(self._cells[0])
            elif "thead" in self._stack:
                t.columns = self._cells
            else:
                t.rows.append(self._cells)
                t.details.append([])
            self._cells = None
        elif tag == "table" and t is not None:
            self.tables[t.key] = t
            self._table = None
        elif tag == "li" and self._finding is not None and self._severity is not None:
            self.findings[self._severity].append(self._finding)
            self._finding = None

    def handle_data(self, data: str) -> None:
        self.text += data
        if self._where:
            self._buffer += data
        if self._finding is not None:
            self._finding.text += data
