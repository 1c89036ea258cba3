"""A loaded profile (:class:`Profile`) and the one-line errors that point into its files.

Every fault in a profile becomes a :class:`parinfo.errors.ProfileError` naming file:line:column;
the helpers here build those from the marks that :mod:`parinfo.profiles.yaml_nodes` recorded.
"""
from __future__ import annotations

from typing import Any

from parinfo.errors import ProfileError
from parinfo.profiles.yaml_nodes import PATH_LIMIT, KeyPath, Mark, shown


class Profile(dict[str, Any]):
    """A validated profile (plain values, ``extends`` already merged) that remembers where each
    value was written, so that resolution errors can still name file:line:column."""

    def __init__(self, data: dict[str, Any], *, origin: str, marks: dict[KeyPath, Mark] | None = None,
                 chain: tuple[str, ...] = ()) -> None:
        super().__init__(data)
        self.origin = origin  # the file it was read from, or "<profile>" for data given in code
        self.marks: dict[KeyPath, Mark] = dict(marks or {})
        self.chain = chain or (origin,)

    def mark(self, *keypath: str) -> Mark | None:
        """Where the value at ``keypath`` was written, if it came from a file."""
        return self.marks.get(tuple(keypath))

    def error(self, keypath: tuple[str, ...], message: str, fix: str | None = None,
              column_in_value: int | None = None) -> ProfileError:
        """A ProfileError positioned at the value of ``keypath`` (and a column inside it)."""
        return error_at(self.marks.get(keypath), self.origin, message, fix, column_in_value)


def error_at(mark: Mark | None, origin: str, message: str, fix: str | None,
             column_in_value: int | None = None) -> ProfileError:
    """A one-line ProfileError at ``mark`` (or naming ``origin`` when the position is unknown)."""
    message = one_line(message)
    fix = one_line(fix) if fix else fix
    if mark is None:
        return ProfileError(message, path=shown(origin, PATH_LIMIT), fix=fix)
    column = mark.column
    if column_in_value is not None and mark.inline:
        column += column_in_value - 1
    return ProfileError(message, path=shown(mark.path, PATH_LIMIT), line=mark.line, column=column, fix=fix)


def one_line(text: str) -> str:
    """``text`` with control characters escaped, so that an error stays one line and prints safely."""
    return shown(text, 2000)


def type_name(value: Any) -> str:
    """How a YAML value's type reads in a message ("an integer", "a mapping", ...)."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"
