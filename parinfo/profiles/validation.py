"""Validate one parsed profile document against the language declared in :mod:`parinfo.profiles.grammar`.

The first fault raises a one-line ProfileError at the file:line:column of the key or value.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from parinfo.errors import ProfileError
from parinfo.profiles.grammar import LANGUAGE, TOP_KEYS, VERSION
from parinfo.profiles.model import Profile, error_at, type_name
from parinfo.profiles.yaml_nodes import MAX_DEPTH, Document, KeyPath, shown


class DocumentChecker:
    """Positions errors in one document (values by default, keys with ``key=True``)."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc

    def fail(self, keypath: KeyPath, message: str, fix: str | None = None, *, key: bool = False,
             column_in_value: int | None = None) -> ProfileError:
        marks = self.doc.key_marks if key else self.doc.marks
        mark = marks.get(keypath) or self.doc.marks.get(keypath)
        return error_at(mark, self.doc.path, message, fix, column_in_value)

    def keys(self, mapping: Mapping[Any, object], keypath: KeyPath, allowed: tuple[str, ...]) -> None:
        for k in mapping:
            if k not in allowed:
                k = shown(str(k), 80)
                where = ".".join((*keypath, k)) if keypath else k
                close = difflib.get_close_matches(k, allowed, n=1, cutoff=0.6)
                fix = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(allowed)}"
                raise self.fail((*keypath, k), f"unknown key {where!r}", fix, key=True)


def validate_document(doc: Document) -> Profile:
    """The document checked key by key in the language's order, as a Profile (``extends`` not
    followed; the name is the document's own, or empty)."""
    c = DocumentChecker(doc)
    data = doc.data
    if not isinstance(data, dict):
        raise c.fail((), f"a profile is a mapping of keys to values, not {type_name(data)}",
                     "start the profile with 'version: 1' on its own line")
    _check_keys_are_text(c, data)
    c.keys(data, (), TOP_KEYS)
    for key, rule in LANGUAGE.items():
        if rule.required and key not in data:
            raise ProfileError(f"missing {key!r}", path=doc.path, line=1, column=1,
                               fix=f"add 'version: {VERSION}' as the first line")
    checked = {key: rule.check(c, data[key], (key,)) for key, rule in LANGUAGE.items() if key in data}
    return Profile(**checked, origin=doc.path, marks=dict(doc.marks), chain=(doc.path,))


def _check_keys_are_text(c: DocumentChecker, data: dict[Any, Any]) -> None:
    """Refuse keys that are not text anywhere in an in-memory profile (YAML keys always are)."""
    stack: list[tuple[Any, KeyPath, int]] = [(data, (), 0)]
    while stack:
        value, keypath, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise c.fail(keypath, f"nested more than {MAX_DEPTH} levels deep",
                         "a profile needs only two or three levels")
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for k, v in items:
            if isinstance(value, dict) and not isinstance(k, str):
                where = ".".join(keypath) or "the profile"
                raise c.fail(keypath, f"key {shown(repr(k), 60)} in {where} is {type_name(k)}, not text",
                             "write every key as text, e.g. 'intra_op'")
            stack.append((v, (*keypath, str(k)), depth + 1))
