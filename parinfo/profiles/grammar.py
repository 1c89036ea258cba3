"""The profile language (version 1), declared once: every key with the rule that checks it.

Each rule both checks a value (for :mod:`parinfo.profiles.validation`) and describes itself as JSON
Schema (for :mod:`parinfo.profiles.schema`, which writes profile.schema.json), so the validator and
the published schema cannot drift apart. A schema cannot judge everything (expression names,
per-variable values, other files, the machine); the rules check those too, and say so.
"""
from __future__ import annotations

import difflib
import re
from typing import Any, Protocol

from parinfo.errors import ProfileError
from parinfo.machine.cpulist import parse_cpu_list
from parinfo.machine.rounding import ROUNDINGS
from parinfo.process.libraries import LIBRARY_VARS, RUNTIME_VARS, profile_keys, role_var
from parinfo.process.preload import ALLOCATOR_WORDS, ALLOCATORS, OPENMP_WORDS, SET_BY_KEY
from parinfo.profiles import expr
from parinfo.profiles.model import type_name
from parinfo.profiles.yaml_nodes import KeyPath, shown

VERSION = 1
MAX_COUNT = 4096

LIBRARIES = profile_keys()  # blas, openmp, mkl, torch, numexpr (from the library registry)
INSTANCE_KEYS = ("count", "per_numa_node", "cores_per_instance", "cpus", "cross_numa", "nodes")
#: What each instance is pinned to: one CPU of each of its cores, or every CPU (SMT siblings) of them.
INSTANCE_CPUS = ("physical_cores", "logical_cpus")
#: Where each launched program's (each instance's) memory comes from: the NUMA nodes of its CPUs
#: (bound, or interleaved over them), or wherever the kernel's default policy puts it.
MEMORY_WORDS = ("local", "interleave", "none")
AFFINITY_WORDS = ("none", "compact", "spread")

# Facts a count expression may name. The instance names are only meaningful with ``instances``;
# without it they are 1 and the usable physical cores.
FACT_NAMES = ("usable_cpus", "usable_physical_cores", "physical_cores", "logical_cpus", "numa_nodes",
              "cores_per_numa_node")
INSTANCE_NAMES = ("instances", "cores_per_instance")

# Variables that the plan derives from the counts; the profile sets them through the count keys.
DERIVED_VARS: dict[str, str] = {
    RUNTIME_VARS[0]: "intra_op",
    RUNTIME_VARS[1]: "inter_op",
    **{var: f"libraries.{lib}" for lib, names in LIBRARY_VARS.items() for var in names},
}

_CPU_LIST_PATTERN = r"^\s*[0-9]+(\s*-\s*[0-9]+)?(\s*,\s*[0-9]+(\s*-\s*[0-9]+)?)*\s*$"
_EXPR_PATTERN = r"^(?=.*[A-Za-z0-9_)])(?:[A-Za-z0-9_+*(), \t-]|//)+$"
_VAR_NAME_PATTERN = r"^[A-Z][A-Z0-9_]*$"


class Checker(Protocol):
    """What a rule needs from the validator: errors positioned in the document."""

    def fail(self, keypath: KeyPath, message: str, fix: str | None = None, *, key: bool = False,
             column_in_value: int | None = None) -> ProfileError: ...

    def keys(self, mapping: dict[str, Any], keypath: KeyPath, allowed: tuple[str, ...]) -> None: ...


class Rule:
    """One key's rule: ``check`` returns the value to keep or raises; ``schema`` is its JSON Schema."""

    required = False

    def __init__(self, doc: str = "") -> None:
        self.doc = doc

    def check(self, c: Checker, value: Any, key_path: KeyPath) -> Any:
        raise NotImplementedError

    def shape(self) -> dict[str, Any]:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        return {"description": self.doc, **self.shape()} if self.doc else self.shape()


def _label(key_path: KeyPath) -> str:
    return ".".join(key_path)


# Characters that steer a terminal or reorder text: C0/C1 controls, DEL and the Unicode format
# characters (bidi overrides such as U+202E, zero-width characters).
_FORMAT = r"\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff"
_NAME_CHAR = rf"[^\x00-\x1f\x7f-\x9f{_FORMAT}]"
_TEXT_CHAR = rf"[^\x00-\x08\x0b-\x1f\x7f-\x9f{_FORMAT}]"  # also tab and line feed
_C0_NAMES = {0x00: "NUL", 0x07: "BEL", 0x08: "BS", 0x09: "TAB", 0x0A: "LF", 0x0D: "CR", 0x1B: "ESC", 0x7F: "DEL"}


def _is_control(ch: str) -> bool:
    import unicodedata

    return unicodedata.category(ch) in ("Cc", "Cf")


def _char_name(ch: str) -> str:
    import unicodedata

    name = _C0_NAMES.get(ord(ch)) or unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" ({name})" if name else "")


class Version(Rule):
    required = True

    def check(self, c: Checker, value: Any, key_path: KeyPath) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise c.fail(key_path, f"'version' must be the integer {VERSION}, not {type_name(value)}",
                         f"write 'version: {VERSION}'")
        if value != VERSION:
            raise c.fail(key_path, f"unsupported profile version {value}; this parinfo reads version {VERSION}",
                         f"write 'version: {VERSION}' and check the keys against the documentation")
        return value

    def shape(self) -> dict[str, Any]:
        return {"const": VERSION}


class Text(Rule):
    """Text up to ``limit`` characters, stripped; ``one_line`` and ``empty`` (message, fix) refuse
    multi-line or empty text."""

    def __init__(self, limit: int, doc: str = "", *, one_line: bool = False,
                 empty: tuple[str, str] | None = None) -> None:
        super().__init__(doc)
        self.limit = limit
        self.one_line = one_line
        self.empty = empty

    def check(self, c: Checker, value: Any, key_path: KeyPath) -> str:
        label = _label(key_path)
        if not isinstance(value, str):
            raise c.fail(key_path, f"'{label}' must be text, not {type_name(value)}", "put the value in quotes")
        if len(value) > self.limit:
            raise c.fail(key_path, f"'{label}' is longer than {self.limit} characters", "shorten it")
        text = value.strip()
        if self.empty and (not text or (self.one_line and "\n" in text)):
            raise c.fail(key_path, *self.empty)
        allowed = "" if self.one_line else "\n\t"
        for i, ch in enumerate(text):
            if ch not in allowed and _is_control(ch):
                raise c.fail(key_path, f"'{label}' has the control character {_char_name(ch)} at character {i + 1}",
                             "remove it: profile text is printed to terminals")
        return text

    def shape(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string"}
        if self.empty:
            out["minLength"] = 1
        out["maxLength"] = self.limit
        # Leading and trailing white space is stripped before the checks.
        if self.one_line:
            out["pattern"] = rf"^\s*{_NAME_CHAR}*[^\s\x00-\x1f\x7f-\x9f]{_NAME_CHAR}*\s*$"
        elif self.empty:
            out["pattern"] = r"\S"
        else:
            out["pattern"] = rf"^\s*{_TEXT_CHAR}*\s*$"
        return out


class Count(Rule):
    """A count: an integer from 1 to MAX_COUNT, or an expression over ``names``."""

    def __init__(self, names: tuple[str, ...], doc: str = "") -> None:
        super().__init__(doc)
        self.names = names

    def check(self, c: Checker, value: Any, key_path: KeyPath) -> int | str:
        label = _label(key_path)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise c.fail(key_path, f"'{label}' must be a count (an integer or an expression), not {type_name(value)}",
                         "write e.g. 4 or physical_cores // 2")
        if isinstance(value, int):
            if value < 1:
                raise c.fail(key_path, f"'{label}' is {value}; a count must be at least 1",
                             "use 1 or more, or an expression such as usable_cpus // 2")
            if value > MAX_COUNT:
                raise c.fail(key_path, f"'{label}' is {value}; a count must be at most {MAX_COUNT}",
                             "use a smaller count, or an expression over machine facts")
            return value
        try:
            expr.check(value, self.names)
        except expr.ExprError as exc:
            raise c.fail(key_path, f"'{label}': bad expression {shown(repr(value), 80)}: {exc.message} "
                             f"at column {exc.column}",
                         exc.fix or "write e.g. physical_cores // 2", column_in_value=exc.column) from None
        return value.strip()

    def shape(self) -> dict[str, Any]:
        return {"$ref": "#/$defs/count"}

    @staticmethod
    def definition() -> dict[str, Any]:
        """The shared ``$defs/count`` schema."""
        return {
            "description": f"An integer from 1 to {MAX_COUNT}, or an expression such as physical_cores // 2.",
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": MAX_COUNT},
                {"type": "string", "minLength": 1, "maxLength": expr.MAX_LENGTH, "pattern": _EXPR_PATTERN},
            ],
        }


class Counts(Rule):
    """A mapping of known keys to counts (``libraries``)."""

    def __init__(self, keys: tuple[str, ...], names: tuple[str, ...], doc: str = "") -> None:
        super().__init__(doc)
        self.keys = keys
        self.count = Count(names)

    def check(self, c: Checker, value: Any, key_path: KeyPath) -> dict[str, int | str]:
        if not isinstance(value, dict):
            raise c.fail(key_path, f"'{_label(key_path)}' must be a mapping, not {type_name(value)}",
                         "write e.g. 'libraries: {blas: 1, openmp: intra_op}' as separate lines")
        c.keys(value, key_path, self.keys)
        return {k: self.count.check(c, v, (*key_path, k)) for k, v in value.items()}

    def shape(self) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": False,
                "properties": {k: self.count.schema() for k in self.keys}}


class Env(Rule):
    """Extra thread variables: names and values from parinfo.process.variables, not the counts'."""

    def check(self, c: Checker, value: Any, key_path: KeyPath) -> dict[str, str]:
        from parinfo.process.variables import THREAD_VARS, validate

        if not isinstance(value, dict):
            raise c.fail(key_path, f"'env' must be a mapping of variable names to values, not {type_name(value)}",
                         f"write e.g. 'env: {{{role_var('wait_policy')}: passive}}'")
        out: dict[str, str] = {}
        for name, raw in value.items():
            var_path = (*key_path, name)
            if name in DERIVED_VARS:
                owner = DERIVED_VARS[name]
                raise c.fail(var_path, f"{name} is set from '{owner}', not from 'env'",
                             f"write the count under '{owner}' instead", key=True)
            if name in SET_BY_KEY:
                raise c.fail(var_path, f"{name} is set from '{SET_BY_KEY[name]}', not from 'env'",
                             _PRELOAD_FIX, key=True)
            if name not in THREAD_VARS:
                allowed = sorted(n for n in THREAD_VARS if n not in DERIVED_VARS)
                close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
                fix = f"did you mean {close[0]}?" if close else f"known variables: {', '.join(allowed)}"
                raise c.fail(var_path, f"unknown thread variable {shown(repr(name), 80)}", fix, key=True)
            if isinstance(raw, bool):
                text = "TRUE" if raw else "FALSE"
            elif isinstance(raw, (int, str)):
                text = str(raw)
            else:
                raise c.fail(var_path, f"env {name} must be text or an integer, not {type_name(raw)}",
                             "put the value in quotes")
            odd = next((ch for ch in text if not (" " <= ch <= "~")), None)
            if odd is not None:
                raise c.fail(var_path, f"env {name}: the value has {_char_name(odd)}; thread variables are read as "
                             f"printable ASCII", "write the value with ASCII letters, digits and punctuation")
            why = validate(name, text)
            if why:
                raise c.fail(var_path, f"env {name}: {why}", f"see 'parinfo show' for what {name} accepts")
            out[name] = text
        return out

    def shape(self) -> dict[str, Any]:
        # Names by pattern: the list of variables lives in parinfo.process, and the validator checks it.
        return {"type": "object", "propertyNames": {"pattern": _VAR_NAME_PATTERN},
                "additionalProperties": {"type": ["string", "integer", "boolean"]}}


_PRELOAD_FIX = ("write e.g. 'allocator: jemalloc' (or {name: jemalloc, conf: \"...\"} for MALLOC_CONF) or "
                "'openmp: intel': parinfo finds the library, preloads it and sets its variables")
# An allocator's settings string reaches its variable (and --export's shell line): printable ASCII,
# no space, commas between option:value pairs.
_CONF_VALUE = r"[\x21-\x2b\x2d-\x7e]*"
_CONF_PATTERN = rf"^[A-Za-z0-9_]+:{_CONF_VALUE}(,[A-Za-z0-9_]+:{_CONF_VALUE})*$"
_CONF_LIMIT = 1000


class AllocatorRule(Rule):
    """``allocator``: a word, or ``{name: WORD, conf: TEXT}`` with the allocator's own settings string."""

    def __init__(self, doc: str = "") -> None:
        super().__init__(doc)
        self.word = Choice(ALLOCATOR_WORDS)

    def check(self, c: Checker, value: Any, key_path: KeyPath) -> dict[str, str]:
        # The checked form is itself a valid value (a fleet sends it on to be checked again).
        if not isinstance(value, dict):
            return {"name": self.word.check(c, value, key_path)}
        c.keys(value, key_path, ("name", "conf"))
        if "name" not in value:
            raise c.fail(key_path, "'allocator' has settings but no 'name'", "add e.g. 'name: jemalloc'")
        name = self.word.check(c, value["name"], (*key_path, "name"))
        if "conf" not in value:
            return {"name": name}
        conf_path = (*key_path, "conf")
        conf_vars = {a.name: a.conf_var for a in ALLOCATORS}
        if not conf_vars.get(name):
            named = [a.name for a in ALLOCATORS if a.conf_var]
            raise c.fail(conf_path, f"allocator {name} takes no settings string",
                         f"'conf' is for {', '.join(named)}; leave it out", key=True)
        raw = value["conf"]
        if not isinstance(raw, str):
            raise c.fail(conf_path, f"'allocator.conf' must be text, not {type_name(raw)}", "put the value in quotes")
        text = raw.strip()
        odd = next(((i, ch) for i, ch in enumerate(text) if not " " <= ch <= "~"), None)
        if odd is not None:
            raise c.fail(conf_path, f"'allocator.conf' has {_char_name(odd[1])} at character {odd[0] + 1}; "
                         f"{conf_vars[name]} is read as printable ASCII",
                         "write option:value pairs in ASCII letters, digits and punctuation")
        if len(text) > _CONF_LIMIT or not re.fullmatch(_CONF_PATTERN, text, re.ASCII):
            raise c.fail(conf_path, f"'allocator.conf' {shown(repr(raw), 60)} is not a {conf_vars[name]} string",
                         "write option:value pairs separated by commas, e.g. background_thread:true,"
                         "dirty_decay_ms:10000")
        return {"name": name, "conf": text}

    def shape(self) -> dict[str, Any]:
        conf = {"type": "string", "maxLength": _CONF_LIMIT, "pattern": _CONF_PATTERN}
        mapping = {"type": "object", "additionalProperties": False, "required": ["name"],
                   "properties": {"name": self.word.shape(), "conf": conf}}
        return {"anyOf": [self.word.shape(), mapping]}


class Choice(Rule):
    """One word of ``words``, written exactly."""

    def __init__(self, words: tuple[str, ...], doc: str = "") -> None:
        super().__init__(doc)
        self.words = words

    def check(self, c: Checker, value: Any, key_path: KeyPath) -> str:
        label = _label(key_path)
        fix = f"write one of {', '.join(self.words)}"
        if not isinstance(value, str):
            raise c.fail(key_path, f"'{label}' must be one of {', '.join(self.words)}, not {type_name(value)}", fix)
        if value not in self.words:
            close = difflib.get_close_matches(value.strip().lower(), self.words, n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'? or " if close else ""
            raise c.fail(key_path, f"unknown {label} {shown(repr(value), 60)}", hint + fix)
        return value

    def shape(self) -> dict[str, Any]:
        return {"enum": list(self.words)}


class Affinity(Rule):
    FIX = "write none, compact, spread, a list such as [0, 1, 2] or a string such as \"0-3,8\""

    def check(self, c: Checker, value: Any, key_path: KeyPath) -> str | list[int]:
        fix = self.FIX
        if isinstance(value, str) and value.strip().lower() in AFFINITY_WORDS:
            return value.strip().lower()
        if isinstance(value, str) and not any(ch.isdigit() for ch in value):
            close = difflib.get_close_matches(value.strip().lower(), AFFINITY_WORDS, n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'? or " if close else ""
            raise c.fail(key_path, f"unknown affinity {shown(repr(value), 60)}", hint + fix)
        if isinstance(value, str):
            return _cpu_list(c, value, key_path, fix)
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, list):
            raise c.fail(key_path, f"'affinity' must be none, compact, spread or a CPU list, not {type_name(value)}",
                         fix)
        if not value:
            raise c.fail(key_path, "'affinity' is an empty list", "list at least one CPU, or write none")
        cpus: set[int] = set()
        for i, item in enumerate(value):
            item_path = (*key_path, str(i))
            if isinstance(item, bool) or not isinstance(item, (int, str)):
                raise c.fail(item_path, f"affinity entry must be a CPU number or range, not {type_name(item)}", fix)
            cpus.update(_cpu_list(c, str(item), item_path, fix))
        return sorted(cpus)

    def shape(self) -> dict[str, Any]:
        cpu_list = {"type": "string", "pattern": _CPU_LIST_PATTERN}
        cpu = {"type": "integer", "minimum": 0}
        return {"anyOf": [{"enum": list(AFFINITY_WORDS)}, cpu_list, cpu,
                          {"type": "array", "minItems": 1, "items": {"anyOf": [cpu, cpu_list]}}]}


def _cpu_list(c: Checker, text: str, key_path: KeyPath, fix: str) -> list[int]:
    """A CPU list in ASCII decimal ("0-3,8"); int() alone would also take "٣" and "0_0"."""
    try:
        cpus = parse_cpu_list(text)
    except ValueError as exc:
        raise c.fail(key_path, f"affinity: {exc}", fix) from None
    if not re.match(_CPU_LIST_PATTERN, text, re.ASCII):
        raise c.fail(key_path, f"affinity: {shown(repr(text), 60)} is not written in ASCII digits 0-9, '-' and ','",
                     "write CPU numbers as plain ASCII decimal, such as 0-3,8")
    return cpus


def _node_list(c: Checker, value: Any, key_path: KeyPath) -> list[int]:
    """NUMA node numbers: a list such as [0, 1], one number, or a string such as "0-1,3"."""
    fix = "write the NUMA node numbers, e.g. [0, 1] or \"0-1\" (see 'parinfo show' for this machine's nodes)"
    items = value if isinstance(value, list) else [value]
    if not items:
        raise c.fail(key_path, "'instances.nodes' is an empty list", fix)
    nodes: set[int] = set()
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise c.fail(key_path, f"'instances.nodes' entry must be a node number or range, not {type_name(item)}",
                         fix)
        text = str(item)
        try:
            nodes.update(parse_cpu_list(text))
        except ValueError as exc:
            raise c.fail(key_path, f"instances.nodes: {exc}", fix) from None
        if not re.match(_CPU_LIST_PATTERN, text, re.ASCII):
            raise c.fail(key_path, f"instances.nodes: {shown(repr(text), 60)} is not written in ASCII digits", fix)
    return sorted(nodes)


class Instances(Rule):
    def __init__(self, doc: str = "") -> None:
        super().__init__(doc)
        self.count = Count(FACT_NAMES)
        self.cpus = Choice(INSTANCE_CPUS, "physical_cores (the default): one CPU of each core; logical_cpus: "
                                          "every CPU of each core (SMT siblings included).")

    def check(self, c: Checker, value: Any, key_path: KeyPath) -> dict[str, Any]:
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            return {"count": self.count.check(c, value, key_path)}
        if not isinstance(value, dict):
            raise c.fail(key_path, f"'instances' must be a count or a mapping, not {type_name(value)}",
                         "write e.g. 'instances: 2' or 'instances: {per_numa_node: true}'")
        c.keys(value, key_path, INSTANCE_KEYS)
        out: dict[str, Any] = {}
        if "per_numa_node" in value:
            flag = value["per_numa_node"]
            if not isinstance(flag, bool):
                raise c.fail((*key_path, "per_numa_node"),
                             f"'instances.per_numa_node' must be true or false, not {type_name(flag)}",
                             "write 'per_numa_node: true'")
            out["per_numa_node"] = flag
        if "count" in value:
            if out.get("per_numa_node"):
                raise c.fail((*key_path, "count"), "'instances' has both 'count' and 'per_numa_node: true'",
                             "keep one: per_numa_node gives one instance per NUMA node", key=True)
            out["count"] = self.count.check(c, value["count"], (*key_path, "count"))
        if "cores_per_instance" in value:
            out["cores_per_instance"] = self.count.check(c, value["cores_per_instance"],
                                                         (*key_path, "cores_per_instance"))
        if "cpus" in value:
            out["cpus"] = self.cpus.check(c, value["cpus"], (*key_path, "cpus"))
        if "cross_numa" in value:
            flag = value["cross_numa"]
            if not isinstance(flag, bool):
                raise c.fail((*key_path, "cross_numa"),
                             f"'instances.cross_numa' must be true or false, not {type_name(flag)}",
                             "write 'cross_numa: true' to let an instance span two NUMA nodes")
            out["cross_numa"] = flag
        if "nodes" in value:
            out["nodes"] = _node_list(c, value["nodes"], (*key_path, "nodes"))
        if not out.get("per_numa_node") and "count" not in out and "cores_per_instance" not in out:
            raise c.fail(key_path, "'instances' says neither how many instances nor how large",
                         "add 'count: N', 'cores_per_instance: N' or 'per_numa_node: true'")
        return out

    def shape(self) -> dict[str, Any]:
        per_node_true = {"properties": {"per_numa_node": {"const": True}}}
        mapping = {
            "type": "object", "additionalProperties": False,
            "properties": {"count": self.count.schema(), "per_numa_node": {"type": "boolean"},
                           "cores_per_instance": self.count.schema(), "cpus": self.cpus.schema(),
                           "cross_numa": {"type": "boolean", "description": "Let an instance span two NUMA nodes "
                                          "(by default each stays inside one)."},
                           "nodes": {"description": "Lay the instances over these NUMA nodes only.",
                                     "anyOf": [{"type": "integer", "minimum": 0},
                                               {"type": "string", "pattern": _CPU_LIST_PATTERN},
                                               {"type": "array", "minItems": 1, "items": {"anyOf": [
                                                   {"type": "integer", "minimum": 0},
                                                   {"type": "string", "pattern": _CPU_LIST_PATTERN}]}}]}},
            "anyOf": [{"required": ["count"]}, {"required": ["cores_per_instance"]},
                      {"required": ["per_numa_node"], **per_node_true}],
            "not": {"required": ["count", "per_numa_node"], **per_node_true},
        }
        return {"anyOf": [self.count.schema(), mapping]}


_COUNT_NAMES = (*FACT_NAMES, *INSTANCE_NAMES)

#: The language: every top-level key, in the order the validator checks them.
LANGUAGE: dict[str, Rule] = {
    "version": Version("The profile language version; always 1."),
    "name": Text(80, one_line=True, empty=("'name' must be one non-empty line", "write e.g. 'name: my-server'")),
    "description": Text(2000),
    "extends": Text(1000, "A shipped profile name, or a path relative to this file (./base.yaml).",
                    empty=("'extends' is empty", "name a shipped profile or a path")),
    "intra_op": Count(_COUNT_NAMES, "Threads inside one op (parallel_for, BLAS, OpenMP)."),
    "inter_op": Count(_COUNT_NAMES, "Ops run at once by the inter-op pool (fork/wait)."),
    "libraries": Counts(LIBRARIES, _COUNT_NAMES, "Per-library counts; each defaults to intra_op."),
    "env": Env("Extra thread variables (see `parinfo show`). A count that has a key (libraries.openmp, "
               "libraries.blas, ...) is set through that key, not here."),
    "affinity": Affinity("none (inherit), compact, spread, or the CPUs to run on."),
    "allocator": AllocatorRule("The malloc preloaded into a launched program: jemalloc, tcmalloc, auto (the best "
                               "installed) or default (the C library's); or {name: jemalloc, conf: MALLOC_CONF}."),
    "openmp": Choice(OPENMP_WORDS, "The OpenMP runtime preloaded to serve every omp_* call of a launched program: "
                                   "intel, gnu, llvm, or default (whatever the program's libraries load)."),
    "instances": Instances("Pinned processes to split the usable cores between (parinfo apply P -- COMMAND)."),
    "memory": Choice(MEMORY_WORDS, "Bind each launched program's (each instance's) memory to the NUMA nodes of its "
                                   "CPUs (local), spread it over them (interleave), or leave the kernel's default "
                                   "(none, the default)."),
    "quota_rounding": Choice(ROUNDINGS, "How a fractional CPU quota counts in usable_cpus: floor (the default: "
                                        "never throttled), ceil (uses the fraction) or nearest."),
}
TOP_KEYS = tuple(LANGUAGE)
