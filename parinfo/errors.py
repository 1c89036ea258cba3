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


class RecordError(UsageError, ValueError):
    """Trusted JSON (a test's payload, a report read back) that does not fit its record, said with
    the path of the bad value: ``machine.usable_cpu: unknown key (did you mean usable_cpus?)``,
    ``pools[2].num_threads: expected int, not str``. Raised by :func:`parinfo.records.convert.load` with
    ``strict=True`` only; the hostile paths never raise it."""

    def __init__(self, why: str, path: tuple[str | int, ...] = (), *, of_type: bool = False) -> None:
        self.why = why
        self.of_type = of_type  # a value of the wrong type (not a refused one)
        self.parts = list(path)  # outermost first; an int is a list index
        super().__init__(why)

    def within(self, part: str | int) -> RecordError:
        """This error, its path now starting at ``part`` (a key, or an index of a list)."""
        self.parts.insert(0, part)
        self.args = (str(self),)
        return self

    @property
    def path(self) -> str:
        out = ""
        for part in self.parts:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
        return out

    def __str__(self) -> str:
        return f"{self.path}: {self.why}" if self.parts else self.why
