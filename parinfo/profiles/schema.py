"""The JSON Schema of the profile language, generated from :data:`parinfo.profiles.grammar.LANGUAGE`.

The published file parinfo/profiles/profile.schema.json is this module's output (a test checks it);
regenerate it with ``python -m parinfo.profiles.schema > parinfo/profiles/profile.schema.json``.
"""
from __future__ import annotations

import json
import sys

from parinfo.profiles.grammar import FACT_NAMES, INSTANCE_NAMES, LANGUAGE, VERSION, Count
from parinfo.profiles.value_rules import Schema


def build_schema() -> Schema:
    """The schema (JSON Schema draft 2020-12) as a dict."""
    facts = ", ".join(FACT_NAMES + INSTANCE_NAMES[:-1]) + f" and {INSTANCE_NAMES[-1]}"
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://parinfo.invalid/profile.schema.json",
        "title": f"parinfo profile (version {VERSION})",
        "description": ("What the thread counts of a process should be, in terms of machine facts. Counts are "
                        f"integers or expressions over {facts} with + - * // min max and parentheses. "
                        "`parinfo apply FILE` checks everything this schema cannot (expression names, variable "
                        "names and values, machine limits, extends cycles)."),
        "type": "object",
        "required": [key for key, rule in LANGUAGE.items() if rule.required],
        "additionalProperties": False,
        "properties": {key: rule.schema() for key, rule in LANGUAGE.items()},
        "$defs": {"count": Count.definition()},
    }


def schema_text() -> str:
    """The schema file's exact text."""
    return json.dumps(build_schema(), indent=2, ensure_ascii=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(schema_text())
