"""Typed errors. The CLI maps every ParinfoError to one line on stderr and exit code 2."""
from __future__ import annotations


class ParinfoError(Exception):
    """Base class for errors caused by bad input (never by a bug in parinfo)."""

    exit_code = 2


class UsageError(ParinfoError):
    """A bad argument or value given by the user (CLI option, API argument, variable)."""


class ProfileError(ParinfoError):
    """A profile that cannot be loaded, validated or resolved.

    ``str()`` gives ``file:line:column: message (fix)`` when the position is known.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 column: int | None = None, fix: str | None = None) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.column = column
        self.fix = fix
        super().__init__(self.format())

    def format(self) -> str:
        where = ""
        if self.path is not None:
            where = str(self.path)
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        text = where + self.message
        if self.fix:
            text += f" ({self.fix})"
        return text


class ApplyError(ParinfoError):
    """A profile that is valid but cannot be put in force here (too late, not allowed)."""


class TuneError(ParinfoError):
    """A tuning request that cannot be carried out (impossible range, failing workload)."""


class ConnectError(UsageError):
    """A cluster address that is malformed, refused, silent or not the cluster's, said in one line."""
