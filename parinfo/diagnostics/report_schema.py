"""The JSON Schema of the report (``parinfo show --json``), generated from the report's records.

The published file parinfo/diagnostics/report.schema.json is this module's output (a test checks it):
every type, bound, key and description in it comes from the declarations of
:class:`~parinfo.diagnostics.model.Report` and the records it holds (:mod:`parinfo.records.schema`).
Regenerate it with ``python -m parinfo.diagnostics.report_schema > parinfo/diagnostics/report.schema.json``.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from parinfo.diagnostics.model import SCHEMA_VERSION, Report
from parinfo.records.schema import record_schema


def build_schema() -> dict[str, Any]:
    """The report's schema (JSON Schema draft 2020-12) as a dict."""
    return record_schema(
        Report,
        **{"$id": "https://parinfo.invalid/report.schema.json",
           "title": "parinfo report (parinfo show --json)",
           "description": (f"Schema version {SCHEMA_VERSION} of the payload printed by `parinfo show --json` and "
                           "returned by parinfo.inspect().to_dict(), generated from parinfo's report records. Fields "
                           "may be added within a schema version; removing or changing one bumps schema_version.")})


def schema_text() -> str:
    """The schema file's exact text."""
    return json.dumps(build_schema(), indent=1, ensure_ascii=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(schema_text())
