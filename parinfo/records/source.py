"""Where a count (or a rounding, a quota, a backend) came from: a :class:`Source` record.

Rules and precedence compare a source's :class:`Kind`, never its words; the words (``str()``) are
only for people. ``detail`` names the evidence: the variable and its value, the call, the profile
and its key, the file. ``when`` is when the fact was read (seconds since the epoch), where the time
matters (a default that followed a changed quota). In ``--json`` a source is an object with
``kind``, ``detail`` and ``text`` (and ``when`` where known). Bottom layer: imports nothing of parinfo
but the record helpers.
"""
from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from parinfo.records.field_marks import OMIT_NONE, doc
from parinfo.records.record import record


class Kind(enum.Enum):
    """What decided a value."""

    EXPLICIT = "explicit call"           # parinfo.set_num_threads and friends, in this process
    PROFILE = "profile"                  # a profile, applied here or by the start-up hook
    VARIABLE = "variable"                # an environment variable the owner reads
    LIBRARY_DEFAULT = "library default"  # the library's own rule, nobody set anything
    PARINFO_DEFAULT = "parinfo default"  # parinfo's rule from the usable CPUs
    FOLLOWED = "followed"                # a default that followed a change of the usable CPUs
    RUN_TIME = "run-time call"           # set at run time by a named call (or one of several)
    FRAMEWORK = "framework"              # a framework set it (torch sizes its OpenMP runtime)
    GETTER = "getter"                    # read back through its owner's own getter
    MEMORY = "read from memory"          # read from another process's memory
    LAUNCH_ENVIRONMENT = "launch environment"  # predicted from a process's launch environment
    FILE = "file"                        # a kernel file (cgroup, sysfs, procfs)
    ARGUMENT = "argument"                # given by the caller (a command-line option, an API argument)
    ATTACHED = "attached"                # read inside another process through an attach
    NONE = "none"                        # nothing limits or sets it
    UNKNOWN = "unknown"                  # could not be told
    OTHER = "other"                      # words from an older report, kind not recorded

    @property
    def chosen(self) -> bool:
        """Whether someone chose the value (a call, a profile, a variable, an argument)."""
        return self in _CHOSEN

    @property
    def default(self) -> bool:
        """Whether the value is a rule's default that nobody chose (followed defaults included)."""
        return self in (Kind.LIBRARY_DEFAULT, Kind.PARINFO_DEFAULT, Kind.FOLLOWED)


#: The public name of :class:`Kind` (``parinfo.SourceKind``).
SourceKind = Kind

_CHOSEN = frozenset({Kind.EXPLICIT, Kind.PROFILE, Kind.VARIABLE, Kind.RUN_TIME, Kind.ARGUMENT})
_BY_VALUE = {kind.value: kind for kind in Kind}


@record(frozen=True)
class Source:
    """What decided a value: ``kind``, ``detail`` (the evidence), ``text`` (the words shown) and
    ``when`` (seconds since the epoch it was read, or None). Equal sources have the same kind,
    detail and words; ``when`` is not compared."""

    kind: Kind = field(metadata=doc("what decided the value"))
    detail: str = field(default="", metadata=doc(
        "the evidence: variable=value, the call, profile (key), the file"))
    text: str = field(default="", metadata=doc("the words shown"))
    when: float | None = field(default=None, compare=False, metadata={**OMIT_NONE, **doc(
        "seconds since the epoch it was read, where the time matters")})

    def __post_init__(self) -> None:
        if not self.text:
            words = f"{self.kind.value}: {self.detail}" if self.detail else self.kind.value
            self.__dict__["text"] = words

    def __str__(self) -> str:
        return self.text

    @property
    def chosen(self) -> bool:
        """Whether someone chose the value (see :attr:`Kind.chosen`)."""
        return self.kind.chosen

    def with_text(self, text: str) -> Source:
        """The same source in other words (a note added)."""
        return Source(self.kind, self.detail, text, self.when)

    def noted(self, note: str | None) -> Source:
        """The same source with `` (note)`` after its words; itself when there is no note."""
        return self if not note else self.with_text(f"{self.text} ({note})")

    def to_json(self) -> dict[str, Any]:
        """``{"kind", "detail", "text"}``, and ``"when"`` where known: the source in ``--json``."""
        out: dict[str, Any] = {"kind": self.kind.value, "detail": self.detail, "text": self.text}
        if self.when is not None:
            out["when"] = self.when
        return out

    @classmethod
    def from_json(cls, value: Any) -> Source | None:
        """The source :meth:`to_json` wrote; the words of an older report (a str) as kind OTHER;
        None for anything else. Values are kept as text: they are shown escaped where shown."""
        if isinstance(value, str):
            return cls(Kind.OTHER, "", value) if value else None
        if not isinstance(value, Mapping):
            return None
        raw_kind, raw_detail, raw_text = value.get("kind"), value.get("detail"), value.get("text")
        kind = _BY_VALUE.get(raw_kind) if isinstance(raw_kind, str) else None
        detail = raw_detail if isinstance(raw_detail, str) else ""
        text = raw_text if isinstance(raw_text, str) else ""
        when = value.get("when")
        when = float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else None
        if kind is None:
            return cls(Kind.OTHER, detail, text or detail) if (text or detail) else None
        return cls(kind, detail, text, when)


def clock(when: float | None) -> str:
    """``when`` as the local HH:MM:SS shown in words ("re-read at 12:00:03")."""
    return time.strftime("%H:%M:%S", time.localtime(when if when is not None else time.time()))


# The sources many modules make, in the words reports have always used.
EXPLICIT_CALL = Source(Kind.EXPLICIT, "", "explicit call")
NO_LIMIT = Source(Kind.NONE, "", "none")
#: parinfo's default for a setting whose variable is unset or invalid.
PARINFO_DEFAULT = Source(Kind.PARINFO_DEFAULT, "", "default")


def variable(name: str, value: str | None = None, text: str | None = None) -> Source:
    """A variable decided it: ``env NAME`` (``env NAME=value`` when the value is given)."""
    detail = name if value is None else f"{name}={value}"
    return Source(Kind.VARIABLE, detail, text or f"env {detail}")


def profile(name: str, key: str = "", text: str | None = None) -> Source:
    """A profile decided it: ``profile NAME`` or ``profile NAME (KEY)``."""
    detail = f"{name} ({key})" if key else name
    return Source(Kind.PROFILE, detail, text or f"profile {detail}")


def parinfo_default(why: str) -> Source:
    """parinfo's own default: ``default: WHY``."""
    return Source(Kind.PARINFO_DEFAULT, why, f"default: {why}")


def library_default(why: str) -> Source:
    """A library's own default: ``default: WHY``."""
    return Source(Kind.LIBRARY_DEFAULT, why, f"default: {why}")


def followed_default(why: str, at: float) -> Source:
    """A default that followed the usable CPUs re-read at ``at``: ``default: WHY, re-read at HH:MM:SS``."""
    return Source(Kind.FOLLOWED, why, f"default: {why}, re-read at {clock(at)}", at)


def run_time(call: str, text: str | None = None) -> Source:
    """Set at run time by ``call``: ``set at run time (CALL)`` unless other words are given."""
    return Source(Kind.RUN_TIME, call, text or f"set at run time ({call})")


def unknown(why: str, text: str | None = None) -> Source:
    """Could not be told: ``unknown (WHY)``."""
    return Source(Kind.UNKNOWN, why, text or f"unknown ({why})")


def file(path: str, text: str | None = None) -> Source:
    """A kernel file said it."""
    return Source(Kind.FILE, path, text or path)


def argument(name: str, text: str | None = None) -> Source:
    """The caller gave it (an option or an API argument)."""
    return Source(Kind.ARGUMENT, name, text or name)


