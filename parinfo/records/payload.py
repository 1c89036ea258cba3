"""Reading the fields of a JSON-ready payload that may come from elsewhere: another process (a fleet
worker, ``/proc``), an older or newer parinfo, or a hand-made dict in a test.

Each reader returns the value when it has the expected type and the empty value (None, [], {})
otherwise, so the few readers that work a payload over by hand (a record's ``_json_in`` hook of
:mod:`parinfo.records.convert`, the bounded parse of an attached process's answer) never raise on a missing
or odd field: the field is simply unknown, and the report says so where it shows it. Bottom layer:
imports nothing.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def section(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping (a JSON object), else an empty one."""
    return value if isinstance(value, Mapping) else {}


def rows(value: Any) -> list[Mapping[str, Any]]:
    """The mappings of a list (a JSON array of objects); anything else in it is left out."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, (list, tuple)) else []


def integer(value: Any) -> int | None:
    """An int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def number(value: Any) -> float | None:
    """An int or a float (not a bool), kept as it is, else None."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def text(value: Any) -> str | None:
    """A str, else None."""
    return value if isinstance(value, str) else None


def flag(value: Any) -> bool | None:
    """A bool, else None."""
    return value if isinstance(value, bool) else None


def texts(value: Any) -> list[str]:
    """The strings of a list; anything else in it is left out."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, (list, tuple)) else []


def ints(value: Any) -> tuple[int, ...]:
    """The ints of a list (CPU ids, counts); anything else in it is left out."""
    return tuple(v for v in value if integer(v) is not None) if isinstance(value, (list, tuple)) else ()


def text_map(value: Any) -> dict[str, str]:
    """The entries of a mapping whose values are strings (``unknown``: {field: reason})."""
    return {str(k): v for k, v in section(value).items() if isinstance(v, str)}
