"""A loaded profile (:class:`Profile`, a record made once by validation) and the one-line errors
that point into its files.

Every fault in a profile becomes a :class:`parinfo.errors.ProfileError` naming file:line:column;
the helpers here build those from the marks that :mod:`parinfo.profiles.yaml_nodes` recorded.
The record's fields are the language's keys (:data:`parinfo.profiles.grammar.LANGUAGE`, a test
keeps them equal); None is "not written". YAML-shaped data exists only at the edges: the document
that validation reads, and :meth:`Profile.document`, the checked form a fleet sends its workers.
"""
from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from parinfo.errors import ProfileError
from parinfo.profiles.yaml_nodes import PATH_LIMIT, KeyPath, Mark, shown
from parinfo.records.field_marks import LOCAL
from parinfo.records.record import record

#: A count as written: a whole number, or an expression over machine facts (checked, not evaluated).
Written = int | str


@record(frozen=True)
class AllocatorChoice:
    """``allocator``: the word (jemalloc, tcmalloc, auto, default) and the allocator's own settings
    string (``conf``, for MALLOC_CONF), when the profile gives one."""

    name: str
    conf: str | None = None


@record(frozen=True)
class InstanceSpec:
    """``instances``: how many pinned processes (``count``), or one per NUMA node, or as many of
    ``cores_per_instance`` cores as fit; which CPUs of each core (``cpus``), whether one may span
    two NUMA nodes, and on which nodes (``nodes``). None: not written."""

    count: Written | None = None
    per_numa_node: bool | None = None
    cores_per_instance: Written | None = None
    cpus: str | None = None
    cross_numa: bool | None = None
    nodes: tuple[int, ...] | None = None

    @property
    def logical(self) -> bool:
        """Whether each instance gets every CPU of its cores (SMT siblings included)."""
        return self.cpus == "logical_cpus"


@record(frozen=True)
class Profile:
    """A validated profile (``extends`` already merged) that remembers where each value was written
    (``marks``), so that resolution errors can still name file:line:column. ``origin`` is the file
    it was read from, or "<profile>" for data given in code; ``chain`` the files it extends."""

    version: int = 1
    name: str = ""
    description: str | None = None
    extends: str | None = None
    intra_op: Written | None = None
    inter_op: Written | None = None
    libraries: dict[str, Written] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    affinity: str | tuple[int, ...] | None = None  # a word (none, compact, spread) or the CPUs
    allocator: AllocatorChoice | None = None
    openmp: str | None = None
    instances: InstanceSpec | None = None
    memory: str | None = None
    quota_rounding: str | None = None
    threads: str | None = None  # caller (None: the default) | every
    wait_policy: str | None = None  # passive | active | default (None: each runtime's own)
    origin: str = field(default="<profile>", compare=False, metadata=LOCAL)
    marks: dict[KeyPath, Mark] = field(default_factory=dict, compare=False, repr=False, metadata=LOCAL)
    chain: tuple[str, ...] = field(default=(), compare=False, metadata=LOCAL)

    @classmethod
    def document_keys(cls) -> tuple[str, ...]:
        """The fields a profile document holds (the language's keys), in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get("local"))

    @property
    def cpus(self) -> tuple[int, ...] | None:
        """The CPUs ``affinity`` lists; None for a word or nothing."""
        return self.affinity if isinstance(self.affinity, tuple) else None

    @property
    def affinity_word(self) -> str:
        """``affinity``'s word: none (the default: inherited), compact, spread, or "cpus" for a list."""
        return "cpus" if isinstance(self.affinity, tuple) else self.affinity or "none"

    @property
    def memory_word(self) -> str:
        """``memory``: local, interleave or none (the default)."""
        return self.memory or "none"

    def mark(self, *keypath: str) -> Mark | None:
        """Where the value at ``keypath`` was written, if it came from a file."""
        return self.marks.get(tuple(keypath))

    def error(self, keypath: tuple[str, ...], message: str, fix: str | None = None,
              column_in_value: int | None = None) -> ProfileError:
        """A ProfileError positioned at the value of ``keypath`` (and a column inside it)."""
        return error_at(self.marks.get(keypath), self.origin, message, fix, column_in_value)

    def document(self) -> dict[str, Any]:
        """The checked profile as plain YAML-shaped data (the JSON edge): what a fleet sends each
        worker to check and resolve there; it checks again to the same profile."""
        return {key: _plain(value) for key in self.document_keys()
                if (value := getattr(self, key)) is not None and value != {}}


def _plain(value: object) -> object:
    """``value`` as YAML data: records as mappings of their written fields, tuples as lists."""
    if isinstance(value, (AllocatorChoice, InstanceSpec)):
        return {f.name: _plain(v) for f in dataclasses.fields(value) if (v := getattr(value, f.name)) is not None}
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


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
