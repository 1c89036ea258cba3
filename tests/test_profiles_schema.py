"""The published JSON Schema (parinfo/profiles/profile.schema.json) is generated from the language's one
declaration (parinfo.profiles.grammar) and agrees with parinfo's own validator."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from parinfo.errors import ProfileError
from parinfo.process.variables import THREAD_VARS
from parinfo.profiles.loading import (
    DERIVED_VARS,
    INSTANCE_KEYS,
    LIBRARIES,
    MAX_COUNT,
    TOP_KEYS,
    shipped_names,
    shipped_path,
    validate_profile,
)
from parinfo.profiles.schema import build_schema, schema_text

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "parinfo" / "profiles" / "profile.schema.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
CORPUS = Path(__file__).resolve().parent / "profiles_bad"

# Corpus cases a schema cannot judge: they need the machine, other files, the order of YAML keys
# or the expression grammar. Every other corpus case must be rejected by the schema as well.
BEYOND_SCHEMA = {
    "affinity_backwards.yaml": "range order",
    "affinity_outside.yaml": "the machine's CPUs",
    "duplicate_key.yaml": "lost when YAML becomes JSON",
    "duplicate_nested_key.yaml": "lost when YAML becomes JSON",
    "env_bad_value.yaml": "per-variable value rules",
    "env_derived_name.yaml": "variable names (the library registry)",
    "env_unknown_name.yaml": "variable names (the library registry)",
    "expr_division_by_zero.yaml": "the machine's numbers",
    "expr_instance_in_count.yaml": "which names each key may use",
    "expr_min_one_arg.yaml": "expression grammar",
    "expr_trailing_op.yaml": "expression grammar",
    "expr_unbalanced.yaml": "expression grammar",
    "expr_unknown_name.yaml": "expression names",
    "extends_bad_parent.yaml": "other files",
    "extends_cycle_a.yaml": "other files",
    "extends_cycle_b.yaml": "other files",
    "extends_missing.yaml": "other files",
    "extends_self.yaml": "other files",
    "extends_unknown_name.yaml": "shipped names",
    "instances_count_times_cpi.yaml": "the machine's cores",
    "instances_cpi_too_big.yaml": "the machine's cores",
    "instances_too_many.yaml": "the machine's cores",
    "intra_huge_expr.yaml": "the machine's numbers",
    "intra_huge_for_machine.yaml": "the machine's CPUs",
}


def _plain_yaml(path: Path):
    """The document as a generic YAML reader sees it, or None when it is not loadable YAML at all."""
    try:
        return True, yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError):
        return False, None


def test_schema_is_valid_draft_2020_12():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_committed_schema_is_the_generated_one():
    # Regenerate with: python -m parinfo.profiles.schema > parinfo/profiles/profile.schema.json
    assert SCHEMA_PATH.read_text() == schema_text()
    assert build_schema() == SCHEMA


def test_schema_lists_the_same_keys_and_limits_as_the_validator():
    assert list(SCHEMA["properties"]) == list(TOP_KEYS)
    assert set(SCHEMA["properties"]["libraries"]["properties"]) == set(LIBRARIES)
    obj = SCHEMA["properties"]["instances"]["anyOf"][1]
    assert set(obj["properties"]) == set(INSTANCE_KEYS)
    # Variable names are the library registry's: the schema checks their form only, names none.
    pattern = re.compile(SCHEMA["properties"]["env"]["propertyNames"]["pattern"])
    assert all(pattern.match(n) for n in THREAD_VARS) and set(DERIVED_VARS) <= set(THREAD_VARS)
    assert not any(f'"{n}"' in json.dumps(SCHEMA) for n in THREAD_VARS)
    assert SCHEMA["$defs"]["count"]["anyOf"][0]["maximum"] == MAX_COUNT


def test_schema_names_no_thread_variable():
    # Variable names live in one module of the package; the schema matches them by pattern.
    text = SCHEMA_PATH.read_text()
    assert [n for n in THREAD_VARS if n in text] == []


def test_module_regenerates_the_file():
    proc = subprocess.run([sys.executable, "-m", "parinfo.profiles.schema"], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": str(SCHEMA_PATH.parents[2])})
    assert proc.stdout == SCHEMA_PATH.read_text()


@pytest.mark.parametrize("name", shipped_names())
def test_shipped_profiles_are_valid_under_the_schema(name):
    VALIDATOR.validate(yaml.safe_load(shipped_path(name).read_text()))


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.yaml") if p.name != "expected.yaml"))
def test_schema_rejects_the_structural_corpus_cases(name):
    loadable, doc = _plain_yaml(CORPUS / name)
    if not loadable:
        return  # not YAML at all: no schema is consulted
    rejected = not VALIDATOR.is_valid(doc)
    assert rejected == (name not in BEYOND_SCHEMA), BEYOND_SCHEMA.get(name, "schema should reject this")


counts = st.one_of(st.integers(-2, 5000), st.sampled_from(
    ["usable_cpus", "physical_cores // 2", "min(2, numa_nodes)", "x", "", "1 / 2", "(1", "max(1, 2)", "3.5",
     "cores_per_instance * 2"]), st.booleans(), st.none())
docs = st.fixed_dictionaries({"version": st.sampled_from([1, 1, 1, 2, "1"])}, optional={
    "name": st.one_of(st.text(max_size=10), st.integers()),
    "description": st.text(max_size=10),
    "intra_op": counts, "inter_op": counts,
    "libraries": st.dictionaries(st.sampled_from([*LIBRARIES, "blas2"]), counts, max_size=3),
    "env": st.dictionaries(st.sampled_from(["OMP_WAIT_POLICY", "OMP_NUM_THREADS", "KMP_BLOCKTIME", "FOO"]),
                           st.sampled_from(["passive", "1", "TRUE"]), max_size=2),
    "affinity": st.one_of(st.sampled_from(["none", "compact", "spread", "0-3", "0,2", "x"]),
                          st.lists(st.integers(-1, 8), max_size=3), st.integers(-1, 3)),
    "instances": st.one_of(counts, st.dictionaries(st.sampled_from(["count", "per_numa_node", "cores_per_instance"]),
                                                   st.one_of(counts, st.booleans()), max_size=2)),
})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs)
def test_what_parinfo_accepts_the_schema_accepts(doc):
    try:
        validate_profile(doc)
    except ProfileError:
        return
    errors = [e.message for e in VALIDATOR.iter_errors(doc)]
    assert not errors, (doc, errors)
