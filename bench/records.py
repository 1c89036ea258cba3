"""parinfo's records against msgspec Structs, measured in one run (issue 37, item 6: take msgspec if it
keeps `parinfo show` within 1.2x `python -m threadpoolctl -i numpy` while removing record.py, the
hooks and the hand schema).

Prints the machine's usable parallelism, then:

- the time to define the report's real records (the classes a Report holds, their field sets, types
  as text and defaults copied from their declarations) with ``parinfo.records.record``,
  ``dataclasses.dataclass`` and ``msgspec.Struct``, and how many records ``parinfo show`` defines;
- the import cost of msgspec (``-X importtime``, and the wall time of ``python -c 'import msgspec'``
  against ``python -c pass``);
- encoding and decoding a real ``parinfo show --json`` report: parinfo's ``dump``/``dumps`` and
  strict ``Report.from_dict`` against ``msgspec.json.encode``/``decode`` into Structs mirrored from the
  same declarations (bounds as ``msgspec.Meta``, flattened records inline, the hooks' keys as fields,
  unknown keys forbidden), the first call in a fresh process and the steady state;
- ``parinfo show`` and ``threadpoolctl -i numpy`` wall times, and what ``parinfo show`` would take
  with msgspec in record.py's place (its import added, the define times swapped).

msgspec is needed only here (``pip install msgspec``); parinfo does not depend on it.

    python bench/records.py [--repeats 9]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import time
import types
import typing
from typing import Annotated, Any, Literal

from _machine import report_machine  # bench/ is on sys.path when run as a script

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

try:
    import msgspec
except ImportError:
    sys.exit("bench/records.py needs msgspec to compare against: pip install msgspec")

from parinfo.diagnostics.model import Report
from parinfo.records.convert import dump, dumps
from parinfo.records.field_marks import Bound, fields as record_fields
from parinfo.records.reading import _hints, _record_type
from parinfo.records.record import record
from parinfo.records.unknown import Unknown

SHOW = "import sys; from parinfo.cli import main; sys.argv = ['parinfo', 'show']; main()\n"
COUNT_SHOW_RECORDS = """
import sys, parinfo.records.record as r
made = []
plain = r._make
def counting(cls, frozen, order):
    made.append(cls.__qualname__)
    return plain(cls, frozen, order)
r._make = counting
from parinfo.cli import main
sys.argv = ['parinfo', 'show']
try:
    main()
except SystemExit:
    pass
sys.__stderr__.write(f"RECORDS {len(made)}\\n")
"""


def report_records() -> list[type]:
    """The record classes a Report holds, the Report first (each once)."""
    seen: dict[type, None] = {}

    def walk(hint: Any) -> None:
        if typing.get_origin(hint) is not None:
            for arg in typing.get_args(hint):
                if not isinstance(arg, (int, str, Bound)):
                    walk(arg)
            return
        if isinstance(hint, type) and hasattr(hint, "__dataclass_fields__") and hint not in seen:
            seen[hint] = None
            hints = _hints(hint)
            for name, _ in record_fields(hint):
                walk(hints.get(name))
            for _, extra in getattr(hint, "_json_extra", ()):
                walk(extra)

    walk(Report)
    return list(seen)


# -- defining the same field sets three ways -------------------------------------------------------

def _copy_fields(cls: type) -> tuple[bool, list[tuple[str, str, Any, Any]]]:
    """(frozen, [(name, type as text, default, default factory)]) of a record, as declared."""
    frozen = cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    out = []
    for f in dataclasses.fields(cls):
        text = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        out.append((f.name, text, f.default, f.default_factory))
    return frozen, out


def define_record(name: str, frozen: bool, specs: list[tuple[str, str, Any, Any]]) -> type:
    ns: dict[str, Any] = {"__annotations__": {n: t for n, t, _, _ in specs}, "__module__": __name__,
                          "__doc__": name}
    for n, _, default, factory in specs:
        if factory is not dataclasses.MISSING:
            ns[n] = dataclasses.field(default_factory=factory)
        elif default is not dataclasses.MISSING:
            ns[n] = default
    return record(frozen=frozen)(type(name, (), ns))


def define_dataclass(name: str, frozen: bool, specs: list[tuple[str, str, Any, Any]]) -> type:
    ns: dict[str, Any] = {"__annotations__": {n: t for n, t, _, _ in specs}, "__module__": __name__,
                          "__doc__": name}
    for n, _, default, factory in specs:
        if factory is not dataclasses.MISSING:
            ns[n] = dataclasses.field(default_factory=factory)
        elif default is not dataclasses.MISSING:
            ns[n] = default
    return dataclasses.dataclass(frozen=frozen)(type(name, (), ns))


def define_struct(name: str, frozen: bool, specs: list[tuple[str, str, Any, Any]]) -> type:
    def body(ns: dict[str, Any]) -> None:
        ns["__annotations__"] = {n: t for n, t, _, _ in specs}
        ns["__module__"] = __name__
        for n, _, default, factory in specs:
            if factory is not dataclasses.MISSING:
                ns[n] = msgspec.field(default_factory=factory)
            elif default is not dataclasses.MISSING:
                ns[n] = default

    return types.new_class(name, (msgspec.Struct,), {"frozen": frozen, "kw_only": True,
                                                     "forbid_unknown_fields": True}, body)


def define_times(classes: list[type], repeats: int) -> dict[str, float]:
    """Median seconds to define every class of ``classes`` once, each way."""
    copies = [(c.__name__, *_copy_fields(c)) for c in classes]
    out = {}
    for label, make in (("parinfo record", define_record), ("dataclasses", define_dataclass),
                        ("msgspec Struct", define_struct)):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for name, frozen, specs in copies:
                make(name, frozen, specs)
            times.append(time.perf_counter() - t0)
        out[label] = statistics.median(times)
    return out


# -- Structs mirrored from the declarations, to decode a real report ---------------------------------

class Mirror:
    """msgspec Structs made from the records' declarations (resolved types, bounds as Meta)."""

    def __init__(self) -> None:
        self.made: dict[type, type] = {}

    def hint(self, hint: Any) -> Any:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin is Annotated:
            inner = self.hint(args[0])
            for b in args[1:]:
                if isinstance(b, Bound):
                    if b.choices is not None:
                        inner = Literal[b.choices]
                        continue
                    meta: dict[str, Any] = {}
                    if b.most is not None:
                        meta["max_length"] = b.most
                    if b.low is not None:
                        meta["gt" if b.low_open else "ge"] = b.low
                    if b.high is not None:
                        meta["le"] = b.high
                    if b.pattern is not None:
                        meta["pattern"] = b.pattern
                    inner = Annotated[inner, msgspec.Meta(**meta)]
            return inner
        if origin in (typing.Union, types.UnionType):
            return typing.Union[tuple(self.hint(a) for a in args)]
        if origin in (list, set, frozenset, dict):
            return origin[tuple(self.hint(a) for a in args)] if args else origin
        if origin is tuple:
            return tuple[tuple(a if a is Ellipsis else self.hint(a) for a in args)]
        if isinstance(hint, type) and _record_type(hint) is hint:
            return self.record(hint)
        if hint is Unknown:  # written as its words
            return str
        return hint

    def record(self, cls: type) -> type:
        if cls in self.made:
            return self.made[cls]
        specs: list[tuple[str, Any, Any]] = []
        self._fields(cls, specs)
        for key, extra in getattr(cls, "_json_extra", ()):
            specs.append((key, self.hint(extra), msgspec.field(default=None)))
        made = msgspec.defstruct(f"M{cls.__name__}", specs, kw_only=True, forbid_unknown_fields=True,
                                 frozen=cls.__dataclass_params__.frozen)  # type: ignore[attr-defined]
        self.made[cls] = made
        return made

    def _fields(self, cls: type, specs: list[tuple[str, Any, Any]]) -> None:
        hints = _hints(cls)
        for name, f in record_fields(cls):
            meta = f.metadata
            if meta.get("local"):
                continue
            hint = hints.get(name, Any)
            if meta.get("flatten"):
                inner = _record_type(hint)
                assert inner is not None
                self._fields(inner, specs)
                continue
            json_key = meta.get("key", name)  # its attribute too: a flattened record's names may meet its parent's
            if f.default_factory is not dataclasses.MISSING:
                default = msgspec.field(default_factory=lambda: None)
            elif f.default is not dataclasses.MISSING or meta.get("alone") or meta.get("omit_none"):
                default = msgspec.field(default=None)
            else:
                default = msgspec.field()
            specs.append((json_key, self.hint(hint), default))


# -- whole processes ---------------------------------------------------------------------------------

def wall(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def walls(commands: dict[str, list[str]], env: dict[str, str], repeats: int) -> dict[str, float]:
    """Median wall time of each command, interleaved (the order reversed every other round)."""
    for cmd in commands.values():
        wall(cmd, env)
    times: dict[str, list[float]] = {name: [] for name in commands}
    order = list(commands.items())
    for round_ in range(repeats):
        for name, cmd in order if round_ % 2 == 0 else order[::-1]:
            times[name].append(wall(cmd, env))
    return {name: statistics.median(ts) for name, ts in times.items()}


def import_time_us(module: str, env: dict[str, str]) -> int:
    """The cumulative import time of ``module`` that ``-X importtime`` reports (microseconds)."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], env=env,
                         capture_output=True, text=True, check=True).stderr
    rows = [line for line in err.splitlines() if re.search(rf"\|\s*{re.escape(module)}$", line)]
    return int(rows[-1].split("|")[1]) if rows else -1


FIRST = """
import json, sys, time
sys.path.insert(0, {bench!r})
payload = open({path!r}, 'rb').read()
{setup}
t0 = time.perf_counter()
{body}
print(json.dumps(time.perf_counter() - t0))
"""
# (setup, timed): the imports (and the Structs' definitions) before the clock; the first decode and
# encode, with each system's type resolution (parinfo's get_type_hints, msgspec's first use), on it.
FIRST_PARINFO = ("from parinfo.diagnostics.model import Report",
                 "r = Report.from_dict(json.loads(payload)); out = json.dumps(r.to_dict()).encode()")
FIRST_MSGSPEC = ("import msgspec, records as b\nM = b.Mirror().record(b.Report)",
                 "r = msgspec.json.decode(payload, type=M); out = msgspec.json.encode(r)")


def first_call(parts: tuple[str, str], path: str, env: dict[str, str], repeats: int) -> float:
    """Median seconds of the first decode + encode in a fresh process (imports before the clock)."""
    code = FIRST.format(bench=os.path.dirname(os.path.abspath(__file__)), path=path, setup=parts[0], body=parts[1])
    return statistics.median(json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                                       text=True, check=True).stdout) for _ in range(repeats))


def steady(fn: Any, n: int = 200) -> float:
    """Median seconds of one call, over ``n`` calls."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    report_machine()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    env = dict(os.environ, NO_COLOR="1", COLUMNS="160", PYTHONPATH=root)
    env.pop("PYTHONDONTWRITEBYTECODE", None)

    classes = report_records()
    shown = subprocess.run([sys.executable, "-c", COUNT_SHOW_RECORDS], env=env, capture_output=True, text=True)
    on_show = int(re.search(r"RECORDS (\d+)", shown.stderr).group(1))  # type: ignore[union-attr]
    define = define_times(classes, args.repeats * 3)
    print(f"defining the report's {len(classes)} records (median of {args.repeats * 3}); parinfo show defines "
          f"{on_show} records:")
    for label, t in define.items():
        print(f"  {label:16s} {t * 1000:7.2f} ms   {t / len(classes) * 1e6:6.1f} us a class")

    imp = import_time_us("msgspec", env)
    print(f"import msgspec {msgspec.__version__}: -X importtime {imp / 1000:.1f} ms cumulative (alone, one run)")

    text = subprocess.run([sys.executable, "-m", "parinfo", "show", "--json"], env=env, capture_output=True,
                          check=True).stdout
    payload = json.loads(text)
    report = Report.from_dict(payload)
    mirrors = Mirror()
    mirror = mirrors.record(Report)
    struct = msgspec.json.decode(text, type=mirror)
    again = json.loads(msgspec.json.encode(struct))
    same = again == payload
    print(f"a real report: {len(text)} bytes; msgspec mirror of {len(mirrors.made)} records decodes it, "
          f"and encodes it back {'the same' if same else 'with other key orders or defaults'} "
          f"({'equal' if same else 'keys equal: ' + str(set(again) == set(payload))})")
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "parinfo-bench-report.json")
    with open(path, "wb") as fh:
        fh.write(text)
    rows = {
        "encode  parinfo dump+dumps": steady(lambda: dumps(dump(report)).encode()),
        "encode  msgspec.json.encode": steady(lambda: msgspec.json.encode(struct)),
        "decode  parinfo loads+from_dict (strict)": steady(lambda: Report.from_dict(json.loads(text))),
        "decode  msgspec.json.decode (strict)": steady(lambda: msgspec.json.decode(text, type=mirror)),
        "first decode+encode, fresh process: parinfo": first_call(FIRST_PARINFO, path, env, args.repeats),
        "first decode+encode, fresh process: msgspec": first_call(FIRST_MSGSPEC, path, env, args.repeats),
    }
    for label, t in rows.items():
        print(f"  {label:46s} {t * 1e6:9.0f} us")

    med = walls({"python -c pass": [sys.executable, "-c", "pass"],
                 "import msgspec": [sys.executable, "-c", "import msgspec"],
                 "parinfo show": [sys.executable, "-c", SHOW],
                 "import msgspec; parinfo show": [sys.executable, "-c", "import msgspec\n" + SHOW],
                 "threadpoolctl -i numpy": [sys.executable, "-m", "threadpoolctl", "-i", "numpy"]}, env, args.repeats)
    print(f"whole-process wall time, median of {args.repeats} interleaved runs:")
    for name, m in med.items():
        print(f"  {name:30s} {m * 1000:7.1f} ms")
    show, anchor = med["parinfo show"], med["threadpoolctl -i numpy"]
    with_import = med["import msgspec; parinfo show"]
    per_class = {k: v / len(classes) for k, v in define.items()}
    swapped = on_show * (per_class["msgspec Struct"] - per_class["parinfo record"])
    projected = with_import + swapped
    print(f"import msgspec on the show path: {(with_import - show) * 1000:+.1f} ms "
          f"(alone: {(med['import msgspec'] - med['python -c pass']) * 1000:+.1f} ms)")
    print(f"RATIO parinfo show / threadpoolctl -i numpy = {show / anchor:.2f}")
    print(f"with msgspec in record.py's place: {with_import * 1000:.1f} ms with its import, {swapped * 1000:+.1f} ms "
          f"defining {on_show} records as Structs = {projected * 1000:.1f} ms, RATIO {projected / anchor:.2f} "
          f"(goal <= 1.2)")


if __name__ == "__main__":
    main()
