"""Text for people: text from outside (profiles, environment values, file names) made safe to print
or to eval, and the one way a count is said with its noun (:func:`plural`).

A profile name or an environment value can hold terminal escapes, carriage returns, bidi overrides
or newlines; printed raw they repaint the terminal, hide text, or break out of a shell comment.
"""
from __future__ import annotations

# Categories never shown raw: controls (C0, DEL, C1), format characters (bidi overrides, zero
# width), line and paragraph separators, surrogates and unassigned code points.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Cn"})


def escape_controls(text: str, keep: str = "") -> str:
    """``text`` with every unsafe character but those in ``keep`` written as an escape (\\n, \\x1b,
    \\u202e)."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(_escape_char(ch) if _unsafe(ch) and ch not in keep else ch for ch in text)


def shorten(text: str, limit: int = 60) -> str:
    """``text`` escaped and cut to ``limit`` characters with an ellipsis, for messages."""
    shown = escape_controls(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def _unsafe(ch: str) -> bool:
    if " " <= ch <= "~":
        return False
    import unicodedata  # only text beyond printable ASCII pays for it (``parinfo show`` rarely does)

    return unicodedata.category(ch) in _UNSAFE_CATEGORIES


def _escape_char(ch: str) -> str:
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if ch in named:
        return named[ch]
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def label_value(text: str) -> str:
    """``text`` fit for a Prometheus label value: every unsafe character escaped as for a terminal
    (\\x1b, \\u202e), so no control byte reaches a scraper or a dashboard. prometheus_client then
    escapes backslash, quote and newline for the exposition format, and nothing else. Backslashes
    already in the text are kept as they are: systemd's cgroup names hold them (``\\x2d``)."""
    return escape_controls(text)


def plural(n: object, noun: str, spec: str = "") -> str:
    """plural(1, "thread") -> "1 thread"; plural(2, "thread") -> "2 threads"; plural(2, "process") ->
    "2 processes"; plural(1.0, "CPU", "g") -> "1 CPU" (``spec`` formats the number, as in an f-string).
    ``noun`` may be several words ("usable CPU"): the last one takes the ending."""
    shown = format(n, spec)
    if n == 1:
        return f"{shown} {noun}"
    return f"{shown} {noun}es" if noun.endswith(("s", "sh", "ch", "x")) else f"{shown} {noun}s"
