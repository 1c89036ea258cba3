"""Thread variables: what a valid value is, and the count a variable asks for.

The variables themselves (their syntax, who reads them) are declared with the library records in
:mod:`parinfo.process.libraries`; this module parses and checks values against them.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from parinfo.process.libraries import (
    FALSE_WORDS,
    LIBRARY_VARS,
    THREAD_PREFIXES,
    THREAD_VARS,
    TRUE_WORDS,
    Var,
    find,
    is_false,
    openmp_runtimes,
)
from parinfo.process.library_parts import Does, Reading
from parinfo.records.record import record
from parinfo.records.source import PARINFO_DEFAULT, Source, variable

__all__ = ["LIBRARY_VARS", "OPENMP", "THREAD_PREFIXES", "THREAD_VARS", "Setting", "Var", "count_from_env",
           "is_false", "judge", "looks_thread_related", "parse_count", "read_setting", "readings", "validate"]

OPENMP = openmp_runtimes()

_BOOL = TRUE_WORDS + FALSE_WORDS

# re.ASCII: libraries parse with strtol/atoi, which take ASCII digits only ("٣" is no count).
_INT = re.compile(r"^\s*\+?(\d+)\s*$", re.ASCII)
_SPINCOUNT = re.compile(r"^\s*\d+\s*[kKmMgGtT]?\s*$", re.ASCII)
_BLOCKTIME = re.compile(r"^\s*(\d+)\s*(ms|us|s)?\s*$", re.IGNORECASE | re.ASCII)


def parse_count(value: str, *, allow_list: bool = False) -> int:
    """Parse a thread-count value; with ``allow_list`` an OpenMP list like "4,2" gives its first element.

    Raises ValueError saying what is wrong.
    """
    text = value
    if allow_list and "," in value:
        parts = value.split(",")
        for p in parts[1:]:
            try:
                parse_count(p)
            except ValueError:
                raise ValueError(f"{value!r} is not a list of positive integers") from None
        text = parts[0]
    m = _INT.match(text)
    if not m:
        raise ValueError(f"{value!r} is not a positive integer")
    if len(m.group(1).lstrip("0")) > 40:  # past any count, and past Python's cap on int() of digits
        raise ValueError(f"{value!r} is too large for a count")
    n = int(m.group(1))
    if n < 1:
        raise ValueError(f"{value!r} is not a positive integer")
    return n


def validate(name: str, value: str) -> str | None:
    """Return why ``value`` is invalid for variable ``name``, or None when it is valid (or unchecked)."""
    spec = THREAD_VARS.get(name)
    if spec is None:
        return None
    kind = spec.kind
    try:
        if kind in ("count", "count_list"):
            parse_count(value, allow_list=kind == "count_list")
        elif kind == "bool":
            if value.strip().lower() not in _BOOL:
                return f"{value!r} is not a boolean (use TRUE or FALSE)"
        elif kind == "enum":
            items = [v.strip().lower() for v in value.split(",")] if spec.enum_list else [value.strip().lower()]
            bad = [v for v in items if v not in spec.choices]
            if bad or not items:
                return f"{value!r} is not one of {', '.join(spec.choices)}"
        elif kind == "blocktime":
            if value.strip().lower() != "infinite" and not _BLOCKTIME.match(value):
                return f"{value!r} is not a time (an integer of ms, or 'infinite')"
        elif kind == "spincount":
            if value.strip().lower() not in ("infinite", "infinity") and not _SPINCOUNT.match(value):
                return f"{value!r} is not a spin count (an integer, with k, M, G or T, or 'infinite')"
        elif kind == "cpu_count":
            if value.strip().lower() != "default":
                parse_count(value)
        elif kind == "text" and not value.strip():
            return "empty value"
    except ValueError as exc:
        return str(exc)
    return None


def readings(name: str, value: str, readers: Sequence[str]) -> list[tuple[str, Reading]] | None:
    """What each of ``readers`` does with ``value`` of variable ``name``: a library that parses it
    itself says (:meth:`~parinfo.process.library_base.Library.reading`, measured), the others
    follow parinfo's validator (a valid value: its count; an invalid one: ignored, with a warning
    from a library that prints one). None when every reader parses as parinfo validates."""
    libs = [(r, find(r)) for r in readers]
    own = [(r, lib.reading(name, value) if lib is not None else None) for r, lib in libs]
    if all(said is None for _, said in own):
        return None
    valid = validate(name, value) is None
    count = count_from_env(name, {name: value}) if valid else None
    out = []
    for (r, lib), (_, said) in zip(libs, own, strict=True):
        if said is None:
            warns = lib is not None and lib.warns_invalid
            said = Reading(Does.TAKES, count) if valid else Reading(Does.WARNS if warns else Does.IGNORES)
        out.append((r, said))
    return out


#: What a reading says, for one reader and for several.
_SAYS = {
    Does.DEFAULT: ("takes it as asking for its default", "take it as asking for their defaults"),
    Does.IGNORES: ("ignores it and uses its default", "ignore it and use their defaults"),
    Does.WARNS: ("prints a warning and uses its default", "print a warning and use their defaults"),
    Does.RAISES: ("raises an error", "raise an error"),
    Does.TAKES: ("takes it", "take it"),
}


def _says(said: Reading, many: bool) -> str:
    if said.words:
        return said.words if not many else f"each {said.words}"
    if said.does is Does.TAKES and said.count is not None:
        return f"take{'' if many else 's'} {said.count}"
    return _SAYS[said.does][many]


def judge(name: str, value: str, readers: Sequence[str]) -> str | None:
    """Why ``value`` of variable ``name`` is invalid, or None when it is valid: parinfo's validator
    (:func:`validate`) when every reader parses as it does; else, from what each reader does with it
    (:func:`readings`), invalid when any of them refuses it, in words that name each reader and what
    it does ("libgomp prints a warning and uses its default; pyarrow takes 1")."""
    said = readings(name, value, readers)
    if said is None:
        return validate(name, value)
    if not any(r.refuses for _, r in said):
        return None
    groups: dict[Reading, list[str]] = {}
    for reader, r in said:
        groups.setdefault(r, []).append(reader)
    return "; ".join(f"{', '.join(names)} {_says(r, len(names) > 1)}" for r, names in groups.items())


def count_from_env(name: str, environ: Mapping[str, str]) -> int | None:
    """The count a variable asks for, or None when it is unset or invalid (libraries then ignore it)."""
    value = environ.get(name)
    if value is None:
        return None
    spec = THREAD_VARS.get(name)
    try:
        return parse_count(value, allow_list=spec is not None and spec.kind == "count_list")
    except ValueError:
        return None


@record(frozen=True)
class Setting:
    """What a variable says, read by its kind in the registry: ``value`` (an int for a count, a bool,
    an enum's word in lower case, else the text), None when it is unset or invalid; ``raw`` is the
    text as set (None: unset), ``problem`` why it is invalid."""

    value: int | bool | str | None
    raw: str | None = None
    problem: str | None = None

    def source(self, name: str, default: Source = PARINFO_DEFAULT) -> Source:
        """Where a setting read from it came from: the variable, or ``default`` (noting the invalid
        value it passed over)."""
        if self.value is not None:
            return variable(name)
        if self.raw is None:
            return default
        return default.noted(f"ignored invalid {name}={self.raw!r}")


def read_setting(name: str, environ: Mapping[str, str]) -> Setting:
    """Variable ``name`` of ``environ`` read the one way its registry kind says (every PARINFO_*
    reader and every boolean goes through here)."""
    raw = environ.get(name)
    if raw is None:
        return Setting(None)
    problem = validate(name, raw)
    if problem is not None:
        return Setting(None, raw, problem)
    spec = THREAD_VARS.get(name)
    kind = spec.kind if spec is not None else "text"
    value: int | bool | str
    if kind in ("count", "count_list"):
        value = parse_count(raw, allow_list=kind == "count_list")
    elif kind == "bool":
        value = raw.strip().lower() in TRUE_WORDS
    elif kind == "enum":
        value = raw.strip().lower()
    else:
        value = raw
    return Setting(value, raw)


def looks_thread_related(name: str) -> bool:
    """True when ``name`` is in THREAD_VARS or starts with a prefix in THREAD_PREFIXES."""
    return name in THREAD_VARS or name.startswith(THREAD_PREFIXES)
