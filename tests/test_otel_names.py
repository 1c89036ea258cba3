"""The OpenTelemetry names parinfo exports (parinfo/watching/otel_names.py, their one source): each is
the semantic conventions' (as recorded here from conventions 1.44.0, and as the installed
opentelemetry-semantic-conventions package spells it, where present) or parinfo's own under
``parinfo.``, named by the conventions' rules; docs/metrics.md's table says exactly what the module does."""
from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

from parinfo.watching import otel_names as n

DOC = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"

#: The conventions' metrics parinfo exports, recorded from semantic conventions 1.44.0
#: (model/*/metrics.yaml): name -> (instrument, unit).
SEMCONV_1_44_0_METRICS = {
    "process.thread.count": ("updowncounter", "{thread}"),
    "process.cpu.utilization": ("gauge", "1"),
    "container.cpu.usage": ("gauge", "{cpu}"),
    "container.cpu.time": ("counter", "s"),
    "system.cpu.logical.count": ("updowncounter", "{cpu}"),
}
#: The conventions' attributes parinfo sets, from the same version (model/*/registry.yaml).
SEMCONV_1_44_0_ATTRIBUTES = {"process.pid", "process.executable.name"}

NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")


def _attributes() -> set[str]:
    return {k for m in n.METRICS for keys in (m.watch, m.host) if keys is not None for k in keys}


def test_the_recorded_conventions_are_the_version_the_module_names():
    assert n.SEMCONV_VERSION == "1.44.0" and n.SCHEMA_URL.endswith("/1.44.0")


def test_every_name_is_the_conventions_or_parinfos_own():
    for m in n.METRICS:
        if m.name.startswith("parinfo."):
            assert not m.convention
            continue
        assert m.convention and m.name in SEMCONV_1_44_0_METRICS, f"{m.name}: not a convention, not parinfo.*"
        assert (m.instrument, m.unit) == SEMCONV_1_44_0_METRICS[m.name], m.name
    for key in _attributes():
        assert key in SEMCONV_1_44_0_ATTRIBUTES or key.startswith("parinfo."), key


def test_names_follow_the_conventions_naming_rules():
    names = [m.name for m in n.METRICS]
    keys = _attributes()
    assert len(names) == len(set(names))
    for name in [*names, *keys]:
        assert NAME.fullmatch(name), f"{name}: lower case, dot-separated namespaces, snake_case words"
    for name in [*names, *keys]:  # a name is never also a namespace
        assert not [other for other in [*names, *keys] if other.startswith(name + ".")], name
    for m in n.METRICS:
        assert m.instrument in (n.GAUGE, n.COUNTER, n.UPDOWNCOUNTER)
        assert m.unit in ("1", "s") or re.fullmatch(r"\{[a-z_]+\}", m.unit), f"{m.name}: UCUM unit {m.unit!r}"
        assert m.watch is not None or m.host is not None


def _semconv_docs() -> dict[str, str]:
    """name -> docstring of every metric constant of the installed conventions package."""
    try:
        import opentelemetry.semconv._incubating.metrics as pkg
    except ImportError as exc:
        pytest.skip(f"opentelemetry-semantic-conventions is not installed (the otel extra brings it): {exc}")

    found = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        module = importlib.import_module(f"{pkg.__name__}.{info.name}")
        source = Path(module.__file__).read_text()
        for _, value, doc in re.findall(r'^([A-Z0-9_]+): Final = "([^"]+)"\n"""(.*?)"""', source, re.M | re.S):
            found[value] = doc
    return found


def test_the_installed_conventions_package_spells_them_so():
    docs = _semconv_docs()
    from opentelemetry.semconv.schemas import Schemas

    assert n.SCHEMA_URL in {s.value for s in Schemas}
    for m in n.METRICS:
        if m.convention:
            doc = docs.get(m.name)
            assert doc is not None, f"{m.name} is not in the installed conventions"
            assert f"Instrument: {m.instrument}\n" in doc and f"Unit: {m.unit}\n" in doc, (m.name, doc)
        else:
            assert m.name not in docs, f"{m.name} is now a convention: use its name"
    attributes = importlib.import_module("opentelemetry.semconv._incubating.attributes.process_attributes")
    values = {v for v in vars(attributes).values() if isinstance(v, str)}
    assert values >= SEMCONV_1_44_0_ATTRIBUTES


def _keys(keys: tuple[str, ...] | None) -> str:
    return "not sent" if keys is None else ", ".join(f"`{k}`" for k in keys) or "none"


def table() -> list[str]:
    """docs/metrics.md's OpenTelemetry table, as the module says it."""
    rows = ["| name | instrument | unit | `watch` attributes | `host` attributes | from | what |",
            "|---|---|---|---|---|---|---|"]
    for m in n.METRICS:
        origin = f"semconv {n.SEMCONV_VERSION}" if m.convention else "parinfo's own"
        rows.append(f"| `{m.name}` | {m.instrument} | `{m.unit}` | {_keys(m.watch)} | {_keys(m.host)} | {origin} "
                    f"| {m.what} |")
    return rows


def test_the_docs_table_is_the_modules():
    lines = DOC.read_text().splitlines()
    start = lines.index(table()[0]) if table()[0] in lines else -1
    assert start >= 0, "docs/metrics.md lacks the OpenTelemetry table; it reads:\n" + "\n".join(table())
    documented = lines[start:start + len(table()) + 1]
    assert documented[:-1] == table() and not documented[-1].startswith("|"), \
        "docs/metrics.md's OpenTelemetry table differs from parinfo/watching/otel_names.py; it should read:\n" \
        + "\n".join(table())
