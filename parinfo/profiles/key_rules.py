"""The rules of the profile language's structured keys: ``allocator`` (a word or a name with its
settings), ``affinity`` (a word or CPUs) and ``instances`` (a count or a layout of cores per instance).
"""
import difflib
import re
from typing import Any

from parinfo.machine.cpulist import parse_cpu_list
from parinfo.process.preload import ALLOCATOR_WORDS, ALLOCATORS
from parinfo.profiles.model import AllocatorChoice, InstanceSpec, Written, type_name
from parinfo.profiles.value_rules import Checker, Choice, Count, Rule, Schema, char_name
from parinfo.profiles.words import AFFINITY_WORDS, CPU_LIST_PATTERN, FACT_NAMES, INSTANCE_CPUS, INSTANCE_KEYS
from parinfo.profiles.yaml_nodes import KeyPath, shown

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

    def check(self, c: Checker, value: Any, key_path: KeyPath) -> AllocatorChoice:
        if not isinstance(value, dict):
            return AllocatorChoice(self.word.check(c, value, key_path))
        c.keys(value, key_path, ("name", "conf"))
        if "name" not in value:
            raise c.fail(key_path, "'allocator' has settings but no 'name'", "add e.g. 'name: jemalloc'")
        name = self.word.check(c, value["name"], (*key_path, "name"))
        if "conf" not in value:
            return AllocatorChoice(name)
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
            raise c.fail(conf_path, f"'allocator.conf' has {char_name(odd[1])} at character {odd[0] + 1}; "
                         f"{conf_vars[name]} is read as printable ASCII",
                         "write option:value pairs in ASCII letters, digits and punctuation")
        if len(text) > _CONF_LIMIT or not re.fullmatch(_CONF_PATTERN, text, re.ASCII):
            raise c.fail(conf_path, f"'allocator.conf' {shown(repr(raw), 60)} is not a {conf_vars[name]} string",
                         "write option:value pairs separated by commas, e.g. background_thread:true,"
                         "dirty_decay_ms:10000")
        return AllocatorChoice(name, text)

    def shape(self) -> Schema:
        conf = {"type": "string", "maxLength": _CONF_LIMIT, "pattern": _CONF_PATTERN}
        mapping = {"type": "object", "additionalProperties": False, "required": ["name"],
                   "properties": {"name": self.word.shape(), "conf": conf}}
        return {"anyOf": [self.word.shape(), mapping]}


class Affinity(Rule):
    FIX = "write none, compact, spread, a list such as [0, 1, 2] or a string such as \"0-3,8\""

    def check(self, c: Checker, value: Any, key_path: KeyPath) -> str | tuple[int, ...]:
        fix = self.FIX
        if isinstance(value, str) and value.strip().lower() in AFFINITY_WORDS:
            return value.strip().lower()
        if isinstance(value, str) and not any(ch.isdigit() for ch in value):
            close = difflib.get_close_matches(value.strip().lower(), AFFINITY_WORDS, n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'? or " if close else ""
            raise c.fail(key_path, f"unknown affinity {shown(repr(value), 60)}", hint + fix)
        if isinstance(value, str):
            return tuple(_cpu_list(c, value, key_path, fix))
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
        return tuple(sorted(cpus))

    def shape(self) -> Schema:
        cpu_list = {"type": "string", "pattern": CPU_LIST_PATTERN}
        cpu = {"type": "integer", "minimum": 0}
        return {"anyOf": [{"enum": list(AFFINITY_WORDS)}, cpu_list, cpu,
                          {"type": "array", "minItems": 1, "items": {"anyOf": [cpu, cpu_list]}}]}


def _cpu_list(c: Checker, text: str, key_path: KeyPath, fix: str) -> list[int]:
    """A CPU list in ASCII decimal ("0-3,8"); int() alone would also take "٣" and "0_0"."""
    try:
        cpus = parse_cpu_list(text)
    except ValueError as exc:
        raise c.fail(key_path, f"affinity: {exc}", fix) from None
    if not re.match(CPU_LIST_PATTERN, text, re.ASCII):
        raise c.fail(key_path, f"affinity: {shown(repr(text), 60)} is not written in ASCII digits 0-9, '-' and ','",
                     "write CPU numbers as plain ASCII decimal, such as 0-3,8")
    return cpus


def _node_list(c: Checker, value: Any, key_path: KeyPath) -> tuple[int, ...]:
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
        if not re.match(CPU_LIST_PATTERN, text, re.ASCII):
            raise c.fail(key_path, f"instances.nodes: {shown(repr(text), 60)} is not written in ASCII digits", fix)
    return tuple(sorted(nodes))


class Instances(Rule):
    def __init__(self, doc: str = "") -> None:
        super().__init__(doc)
        self.count = Count(FACT_NAMES)
        self.cpus = Choice(INSTANCE_CPUS, "physical_cores (the default): one CPU of each core; logical_cpus: "
                                          "every CPU of each core (SMT siblings included).")

    def check(self, c: Checker, value: Any, key_path: KeyPath) -> InstanceSpec:
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            return InstanceSpec(count=self.count.check(c, value, key_path))
        if not isinstance(value, dict):
            raise c.fail(key_path, f"'instances' must be a count or a mapping, not {type_name(value)}",
                         "write e.g. 'instances: 2' or 'instances: {per_numa_node: true}'")
        c.keys(value, key_path, INSTANCE_KEYS)
        per_node = _flag(c, value, key_path, "per_numa_node", "write 'per_numa_node: true'")
        count: Written | None = None
        if "count" in value:
            if per_node:
                raise c.fail((*key_path, "count"), "'instances' has both 'count' and 'per_numa_node: true'",
                             "keep one: per_numa_node gives one instance per NUMA node", key=True)
            count = self.count.check(c, value["count"], (*key_path, "count"))
        size = (self.count.check(c, value["cores_per_instance"], (*key_path, "cores_per_instance"))
                if "cores_per_instance" in value else None)
        cpus = self.cpus.check(c, value["cpus"], (*key_path, "cpus")) if "cpus" in value else None
        cross = _flag(c, value, key_path, "cross_numa",
                      "write 'cross_numa: true' to let an instance span two NUMA nodes")
        nodes = _node_list(c, value["nodes"], (*key_path, "nodes")) if "nodes" in value else None
        if not per_node and count is None and size is None:
            raise c.fail(key_path, "'instances' says neither how many instances nor how large",
                         "add 'count: N', 'cores_per_instance: N' or 'per_numa_node: true'")
        return InstanceSpec(count, per_node, size, cpus, cross, nodes)

    def shape(self) -> Schema:
        per_node_true = {"properties": {"per_numa_node": {"const": True}}}
        mapping = {
            "type": "object", "additionalProperties": False,
            "properties": {"count": self.count.schema(), "per_numa_node": {"type": "boolean"},
                           "cores_per_instance": self.count.schema(), "cpus": self.cpus.schema(),
                           "cross_numa": {"type": "boolean", "description": "Let an instance span two NUMA nodes "
                                          "(by default each stays inside one)."},
                           "nodes": {"description": "Lay the instances over these NUMA nodes only.",
                                     "anyOf": [{"type": "integer", "minimum": 0},
                                               {"type": "string", "pattern": CPU_LIST_PATTERN},
                                               {"type": "array", "minItems": 1, "items": {"anyOf": [
                                                   {"type": "integer", "minimum": 0},
                                                   {"type": "string", "pattern": CPU_LIST_PATTERN}]}}]}},
            "anyOf": [{"required": ["count"]}, {"required": ["cores_per_instance"]},
                      {"required": ["per_numa_node"], **per_node_true}],
            "not": {"required": ["count", "per_numa_node"], **per_node_true},
        }
        return {"anyOf": [self.count.schema(), mapping]}




def _flag(c: Checker, value: dict[str, object], key_path: KeyPath, key: str, fix: str) -> bool | None:
    """The true/false value of ``instances.<key>``; None when it is not written."""
    if key not in value:
        return None
    flag = value[key]
    if not isinstance(flag, bool):
        raise c.fail((*key_path, key), f"'instances.{key}' must be true or false, not {type_name(flag)}", fix)
    return flag
