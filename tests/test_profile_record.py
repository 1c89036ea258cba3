"""A profile is parsed once into records: the language's keys are the Profile record's fields, and
nothing reads a profile by string key (it has no mapping interface to read by)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from parinfo.profiles.grammar import LANGUAGE
from parinfo.profiles.loading import load_profile, validate_profile
from parinfo.profiles.model import AllocatorChoice, InstanceSpec, Profile

PACKAGE = Path(__file__).resolve().parent.parent / "parinfo"


def test_the_records_fields_are_the_languages_keys():
    assert Profile.document_keys() == tuple(LANGUAGE)


def test_a_profile_cannot_be_read_by_string_key():
    prof = load_profile("latency")
    assert not hasattr(prof, "get") and not hasattr(prof, "__getitem__")
    with pytest.raises(TypeError):
        prof["name"]  # type: ignore[index]


def test_no_module_reads_a_profile_by_string_key():
    # the readers' names for a Profile and its parts followed by .get("...") or ["..."], in the
    # layers that read profiles (before: 30 such reads)
    pattern = re.compile(r"\b(prof|self\.prof|profile|spec|own|parent|merged)(\.get\(|\[)[\"']")
    paths = [p for layer in ("profiles", "launch", "tuning", "cli", "fleet") for p in (PACKAGE / layer).rglob("*.py")]
    hits = [f"{path.relative_to(PACKAGE)}:{n}" for path in sorted(paths)
            for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []


def test_structured_keys_become_records():
    prof = validate_profile({"version": 1, "name": "r", "allocator": {"name": "jemalloc", "conf": "narenas:2"},
                             "instances": {"count": 2, "cpus": "logical_cpus", "nodes": "0-1"},
                             "affinity": "0-3,8", "libraries": {"blas": 1}})
    assert prof.allocator == AllocatorChoice("jemalloc", "narenas:2")
    assert prof.instances == InstanceSpec(count=2, cpus="logical_cpus", nodes=(0, 1))
    assert prof.instances.logical
    assert prof.cpus == (0, 1, 2, 3, 8) and prof.affinity_word == "cpus"
    assert prof.memory_word == "none" and prof.intra_op is None
    assert validate_profile({"version": 1, "allocator": "auto"}).allocator == AllocatorChoice("auto")


def test_the_document_is_the_written_keys_only():
    prof = validate_profile({"version": 1, "name": "d", "intra_op": "usable_cpus // 2", "affinity": [3, 1]})
    assert prof.document() == {"version": 1, "name": "d", "intra_op": "usable_cpus // 2", "affinity": [1, 3]}
