"""Profiles: YAML files that say what the thread counts should be, in terms of machine facts.

:func:`load_profile` reads a file (or a shipped profile by name), validates it against the
version-1 language (:mod:`parinfo.profiles.grammar`, checked by :mod:`parinfo.profiles.validation`)
and follows ``extends``; :func:`resolve_profile` turns it into a :class:`parinfo.profiles.plan.Plan`
for one machine. Every fault raises :class:`parinfo.errors.ProfileError` naming file:line:column
and the fix; nothing is applied by this module.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parinfo.errors import ProfileError
from parinfo.profiles.finding import (
    find_profile,
    shipped_dirs,
    shipped_names,
    shipped_path,
)
from parinfo.profiles.grammar import (
    AFFINITY_WORDS,
    DERIVED_VARS,
    FACT_NAMES,
    INSTANCE_KEYS,
    INSTANCE_NAMES,
    LIBRARIES,
    MAX_COUNT,
    TOP_KEYS,
    VERSION,
)
from parinfo.profiles.model import Profile, error_at, type_name
from parinfo.profiles.validation import validate_document
from parinfo.profiles.yaml_nodes import (
    Document,
    Mark,
    Missing,
    file_problem,
    parse,
    read_text,
    shown,
)

if TYPE_CHECKING:
    from parinfo.machine.topology import MachineFacts
    from parinfo.profiles.plan import Plan

__all__ = ["AFFINITY_WORDS", "DERIVED_VARS", "FACT_NAMES", "INSTANCE_KEYS", "INSTANCE_NAMES", "LIBRARIES",
           "MAX_COUNT", "MAX_EXTENDS", "TOP_KEYS", "VERSION", "Profile", "as_profile", "find_profile", "list_profiles",
           "load_profile", "resolve_profile", "shipped_dirs", "shipped_names", "shipped_path",
           "validate_profile"]

MAX_EXTENDS = 8


def list_profiles() -> list[dict[str, str]]:
    """The shipped profiles: name, description and file, for ``parinfo profiles``."""
    out = []
    for name in shipped_names():
        path = shipped_path(name)
        if path is None:  # removed since the listing
            continue
        prof = load_profile(path)
        out.append({"name": name, "description": prof.description or "", "path": str(path)})
    return out


# ---------------------------------------------------------------------------------------------
# Loading and validation


def load_profile(name: str | os.PathLike[str]) -> Profile:
    """Load, validate and merge (``extends``) the profile at a path or with a shipped name."""
    return _load(find_profile(name), ())


def _load(path: Path, seen: tuple[Path, ...], via: tuple[Mark | None, str] | None = None) -> Profile:
    try:
        key = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop: read_text reports it
        key = Path(os.path.abspath(path))
    if key in seen:
        loop = " -> ".join([*(p.name for p in seen[seen.index(key):]), key.name])
        mark, where = via if via else (None, str(path))
        raise error_at(mark, where, f"extends cycle: {loop}",
                       "remove one 'extends' so that the chain ends in a profile without one")
    if len(seen) >= MAX_EXTENDS:
        mark, where = via if via else (None, str(path))
        raise error_at(mark, where, f"extends chain is longer than {MAX_EXTENDS} profiles",
                       "extend a profile that does not itself extend many others")
    doc = parse(read_text(path), str(path))
    return _extend(doc, (*seen, key), path.stem, path.parent)


def _extend(doc: Document, chain: tuple[Path, ...], default_name: str, base_dir: Path) -> Profile:
    """Validate ``doc`` and merge it over the profile it extends (the one place ``extends`` is followed).

    Child values win; ``libraries`` and ``env`` merge key by key; everything else is replaced. The
    name is the child's (or ``default_name``); the description is inherited when the child has none.
    """
    own = validate_document(doc)
    name = own.name or default_name
    if own.extends is None:
        return replace(own, name=name)
    extends_mark = doc.marks.get(("extends",))
    try:
        parent_path = find_profile(own.extends, relative_to=base_dir)
    except ProfileError as exc:
        raise error_at(extends_mark, doc.path, f"extends: {exc.message}", exc.fix) from None
    problem = file_problem(parent_path)
    if problem is not None:
        what = f"no such file {parent_path}" if isinstance(problem, Missing) else f"{shown(str(parent_path))} {problem}"
        raise error_at(extends_mark, doc.path, f"extends: {what}",
                       "give a path relative to this file, or the name of a shipped profile")
    parent = _load(parent_path, chain, (extends_mark, doc.path))
    return _over(own, parent, name)


def _over(own: Profile, parent: Profile, name: str) -> Profile:
    """``own`` merged over ``parent``: ``libraries`` and ``env`` key by key, any other key the
    child does not write taken from the parent (with the parent's marks under it)."""
    single = [key for key in Profile.document_keys() if key not in ("libraries", "env")]
    inherited = {key: getattr(parent, key) for key in single if getattr(own, key) is None}
    written = {(key,) for key in single if getattr(own, key) not in (None, "")}
    marks = {mk: m for mk, m in parent.marks.items() if mk[:1] not in written}
    marks.update((mk, m) for mk, m in own.marks.items() if mk[:1] != ("extends",))
    return replace(own, **inherited, name=name, extends=None, libraries={**parent.libraries, **own.libraries},
                   env={**parent.env, **own.env}, marks=marks, chain=(own.origin, *parent.chain))


def validate_profile(data: Any, origin: str = "<profile>") -> Profile:
    """Validate an in-memory profile (a dict shaped like the YAML); ``extends`` is followed from
    the current directory."""
    return _extend(Document(origin, data, {}, {}), (), "profile", Path.cwd())


# ---------------------------------------------------------------------------------------------
# Resolution


def as_profile(profile: Any) -> Profile:
    """``profile`` (a name, path, loaded Profile or plain dict) loaded and validated."""
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, (str, os.PathLike)):
        return load_profile(profile)
    if isinstance(profile, dict):
        return validate_profile(profile)
    raise ProfileError(f"a profile is a name, a path or a dict, not {type_name(profile)}",
                       fix="pass e.g. 'latency' or 'my-profile.yaml'")


def resolve_profile(profile: Any, facts: MachineFacts | None = None, *, instances: int | None = None) -> Plan:
    """Resolve ``profile`` (a name, path, loaded Profile or plain dict) on ``facts`` (default: this
    machine) into a :class:`parinfo.profiles.plan.Plan`. ``instances`` overrides the profile's count."""
    from parinfo.profiles.resolve import resolve

    prof = as_profile(profile)
    if facts is None:
        from parinfo.machine.topology import machine_facts

        facts = machine_facts()
    return resolve(prof, facts, instances=instances)
