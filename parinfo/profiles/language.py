"""Profiles: YAML files that say what the thread counts should be, in terms of machine facts.

:func:`load_profile` reads a file (or a shipped profile by name), validates it against the
version-1 language and follows ``extends``; :func:`resolve_profile` turns it into a
:class:`parinfo.profiles.plan.Plan` for one machine. Every fault raises :class:`parinfo.errors.ProfileError`
naming file:line:column and the fix; nothing is applied by this module.
"""
from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

from parinfo.profiles import expr
from parinfo.machine.cpulist import parse_cpu_list
from parinfo.process.libraries import LIBRARY_VARS, profile_keys
from parinfo.profiles.yaml_nodes import Document, KeyPath, Mark, parse, read_text
from parinfo.errors import ProfileError

VERSION = 1
MAX_COUNT = 4096
MAX_EXTENDS = 8

TOP_KEYS = ("version", "name", "description", "extends", "intra_op", "inter_op", "libraries", "env",
            "affinity", "instances")
LIBRARIES = profile_keys()  # blas, openmp, mkl, torch, numexpr (from the library registry)
INSTANCE_KEYS = ("count", "per_numa_node", "cores_per_instance")
AFFINITY_WORDS = ("none", "compact", "spread")

# Facts a count expression may name. The instance names are only meaningful with ``instances``;
# without it they are 1 and the usable physical cores.
FACT_NAMES = ("usable_cpus", "usable_physical_cores", "physical_cores", "logical_cpus", "numa_nodes",
              "cores_per_numa_node")
INSTANCE_NAMES = ("instances", "cores_per_instance")

# Variables that the plan derives from the counts; the profile sets them through the count keys.
DERIVED_VARS: dict[str, str] = {
    "PARINFO_NUM_THREADS": "intra_op",
    "PARINFO_NUM_INTEROP_THREADS": "inter_op",
    **{var: f"libraries.{lib}" for lib, names in LIBRARY_VARS.items() for var in names},
}


class Profile(dict):
    """A validated profile (plain values, ``extends`` already merged) that remembers where each
    value was written, so that resolution errors can still name file:line:column."""

    def __init__(self, data: dict, *, source: str, marks: dict[KeyPath, Mark] | None = None,
                 chain: tuple[str, ...] = ()) -> None:
        super().__init__(data)
        self.source = source
        self.marks: dict[KeyPath, Mark] = dict(marks or {})
        self.chain = chain or (source,)

    def mark(self, *keypath: str) -> Mark | None:
        """Where the value at ``keypath`` was written, if it came from a file."""
        return self.marks.get(tuple(keypath))

    def error(self, keypath: tuple[str, ...], message: str, fix: str | None = None,
              column_in_value: int | None = None) -> ProfileError:
        """A ProfileError positioned at the value of ``keypath`` (and a column inside it)."""
        return _error_at(self.marks.get(keypath), self.source, message, fix, column_in_value)


def _error_at(mark: Mark | None, source: str, message: str, fix: str | None,
              column_in_value: int | None = None) -> ProfileError:
    message = _one_line(message)
    fix = _one_line(fix) if fix else fix
    if mark is None:
        return ProfileError(message, path=source, fix=fix)
    column = mark.column
    if column_in_value is not None and mark.inline:
        column += column_in_value - 1
    return ProfileError(message, path=mark.path, line=mark.line, column=column, fix=fix)


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


# ---------------------------------------------------------------------------------------------
# Finding profiles


def shipped_dirs() -> list[Path]:
    """Where shipped profiles live: in the installed package first, then in a source checkout."""
    package = Path(__file__).resolve().parent.parent
    dirs = [package / "_shipped_profiles"]
    if (package.parent / "pyproject.toml").is_file():
        dirs.append(package.parent / "profiles")
    return [d for d in dirs if d.is_dir()]


def shipped_names() -> list[str]:
    """Names of the shipped profiles (file stems), sorted."""
    names: set[str] = set()
    for d in shipped_dirs():
        names.update(p.stem for p in d.glob("*.yaml"))
    return sorted(names)


def shipped_path(name: str) -> Path | None:
    """The file of shipped profile ``name``, or None."""
    for d in shipped_dirs():
        p = d / f"{name}.yaml"
        if p.is_file():
            return p
    return None


def _looks_like_path(text: str) -> bool:
    return os.sep in text or "/" in text or text.endswith((".yaml", ".yml")) or text.startswith(".")


def find_profile(source: str | os.PathLike, relative_to: Path | None = None) -> Path:
    """The file that ``source`` names: a path (relative to ``relative_to``) or a shipped name."""
    text = os.fspath(source)
    if "\0" in text:
        raise ProfileError(f"{text!r} contains a NUL byte", fix="give a path or a shipped profile name")
    if not text.strip():
        raise ProfileError("empty profile name", fix=f"give a path or one of: {', '.join(shipped_names())}")
    if isinstance(source, os.PathLike) or _looks_like_path(text):
        p = Path(text).expanduser()
        if relative_to is not None and not p.is_absolute():
            p = relative_to / p
        return p
    p = shipped_path(text)
    if p is not None:
        return p
    if Path(text).exists():
        return Path(text)
    names = shipped_names()
    close = difflib.get_close_matches(text, names, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise ProfileError(f"no shipped profile named {text!r}",
                       fix=f"{hint}give a path to a .yaml file or one of: {', '.join(names) or 'none found'}")


def list_profiles() -> list[dict[str, str]]:
    """The shipped profiles: name, description and file, for ``parinfo profiles``."""
    out = []
    for name in shipped_names():
        path = shipped_path(name)
        prof = load_profile(path)
        out.append({"name": name, "description": prof.get("description", ""), "path": str(path)})
    return out


# ---------------------------------------------------------------------------------------------
# Loading and validation


def load_profile(source: str | os.PathLike) -> Profile:
    """Load, validate and merge (``extends``) the profile at a path or with a shipped name."""
    return _load(find_profile(source), ())


def _load(path: Path, seen: tuple[Path, ...], via: tuple[Mark | None, str] | None = None) -> Profile:
    try:
        key = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop: read_text reports it
        key = Path(os.path.abspath(path))
    if key in seen:
        loop = " -> ".join([*(p.name for p in seen[seen.index(key):]), key.name])
        mark, source = via if via else (None, str(path))
        raise _error_at(mark, source, f"extends cycle: {loop}",
                        "remove one 'extends' so that the chain ends in a profile without one")
    if len(seen) >= MAX_EXTENDS:
        mark, source = via if via else (None, str(path))
        raise _error_at(mark, source, f"extends chain is longer than {MAX_EXTENDS} profiles",
                        "extend a profile that does not itself extend many others")
    doc = parse(read_text(path), str(path))
    own = _validate(doc)
    chain = (*seen, key)
    if "extends" not in own:
        name = own.get("name", path.stem)
        return Profile({**own, "name": name}, source=str(path), marks=doc.marks, chain=(str(path),))
    target = own.pop("extends")
    extends_mark = doc.marks.get(("extends",))
    try:
        parent_path = find_profile(target, relative_to=path.parent)
    except ProfileError as exc:
        raise _error_at(extends_mark, str(path), f"extends: {exc.message}", exc.fix) from None
    if not parent_path.is_file() and not parent_path.is_dir():
        raise _error_at(extends_mark, str(path), f"extends: no such file {parent_path}",
                        "give a path relative to this file, or the name of a shipped profile")
    parent = _load(parent_path, chain, (extends_mark, str(path)))
    merged, marks = _merge(parent, parent.marks, own, doc.marks)
    merged["name"] = own.get("name", path.stem)
    if "description" not in own and "description" in parent:
        merged["description"] = parent["description"]
    return Profile(merged, source=str(path), marks=marks, chain=(str(path), *parent.chain))


def _merge(base: dict, base_marks: dict, top: dict, top_marks: dict) -> tuple[dict, dict]:
    """Child values win; ``libraries`` and ``env`` merge key by key; everything else is replaced."""
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    marks = dict(base_marks)
    for k, v in top.items():
        if k in ("libraries", "env") and isinstance(merged.get(k), dict):
            merged[k].update(v)
        else:
            merged[k] = v
            for mk in [m for m in marks if m[:1] == (k,)]:
                del marks[mk]
    for mk, m in top_marks.items():
        if mk[:1] != ("extends",):
            marks[mk] = m
    return merged, marks


def validate_profile(data: Any, source: str = "<profile>") -> Profile:
    """Validate an in-memory profile (a dict shaped like the YAML); ``extends`` is followed from
    the current directory."""
    doc = Document(source, data, {}, {})
    own = _validate(doc)
    if "extends" in own:
        target = own.pop("extends")
        parent = _load(find_profile(target, relative_to=Path.cwd()), ())
        merged, marks = _merge(parent, parent.marks, own, {})
        merged["name"] = own.get("name", "profile")
        if "description" not in own and "description" in parent:
            merged["description"] = parent["description"]
        return Profile(merged, source=source, marks=marks, chain=(source, *parent.chain))
    return Profile({**own, "name": own.get("name", "profile")}, source=source)


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


class _Validator:
    """Checks one document; the first fault raises."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc

    def fail(self, keypath: KeyPath, message: str, fix: str | None = None, *, key: bool = False,
             column_in_value: int | None = None) -> ProfileError:
        marks = self.doc.key_marks if key else self.doc.marks
        mark = marks.get(keypath) or self.doc.marks.get(keypath)
        return _error_at(mark, self.doc.path, message, fix, column_in_value)

    def keys(self, mapping: dict, keypath: KeyPath, allowed: tuple[str, ...]) -> None:
        for k in mapping:
            if k not in allowed:
                where = ".".join((*keypath, k)) if keypath else k
                close = difflib.get_close_matches(k, allowed, n=1, cutoff=0.6)
                fix = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(allowed)}"
                raise self.fail((*keypath, k), f"unknown key {where!r}", fix, key=True)

    def text(self, value: Any, keypath: KeyPath, limit: int) -> str:
        if not isinstance(value, str):
            raise self.fail(keypath, f"'{'.'.join(keypath)}' must be text, not {_type_name(value)}",
                            "put the value in quotes")
        if len(value) > limit:
            raise self.fail(keypath, f"'{'.'.join(keypath)}' is longer than {limit} characters", "shorten it")
        return value

    def count(self, value: Any, keypath: KeyPath, names: tuple[str, ...]) -> int | str:
        label = ".".join(keypath)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise self.fail(keypath, f"'{label}' must be a count (an integer or an expression), not {_type_name(value)}",
                            "write e.g. 4 or physical_cores // 2")
        if isinstance(value, int):
            if value < 1:
                raise self.fail(keypath, f"'{label}' is {value}; a count must be at least 1",
                                "use 1 or more, or an expression such as usable_cpus // 2")
            if value > MAX_COUNT:
                raise self.fail(keypath, f"'{label}' is {value}; a count must be at most {MAX_COUNT}",
                                "use a smaller count, or an expression over machine facts")
            return value
        text = value.strip()
        try:
            expr.check(value, names)
        except expr.ExprError as exc:
            raise self.fail(keypath, f"'{label}': bad expression {value!r}: {exc.message} at column {exc.column}",
                            exc.fix or "write e.g. physical_cores // 2", column_in_value=exc.column) from None
        return text

    def run(self) -> dict:
        data = self.doc.data
        if not isinstance(data, dict):
            raise self.fail((), f"a profile is a mapping of keys to values, not {_type_name(data)}",
                            "start the profile with 'version: 1' on its own line")
        self.keys(data, (), TOP_KEYS)
        out: dict[str, Any] = {}
        if "version" not in data:
            raise ProfileError("missing 'version'", path=self.doc.path, line=1, column=1,
                               fix=f"add 'version: {VERSION}' as the first line")
        version = data["version"]
        if isinstance(version, bool) or not isinstance(version, int):
            raise self.fail(("version",), f"'version' must be the integer {VERSION}, not {_type_name(version)}",
                            f"write 'version: {VERSION}'")
        if version != VERSION:
            raise self.fail(("version",), f"unsupported profile version {version}; this parinfo reads version {VERSION}",
                            f"write 'version: {VERSION}' and check the keys against the documentation")
        out["version"] = version
        if "name" in data:
            name = self.text(data["name"], ("name",), 80).strip()
            if not name or "\n" in name:
                raise self.fail(("name",), "'name' must be one non-empty line", "write e.g. 'name: my-server'")
            out["name"] = name
        if "description" in data:
            out["description"] = self.text(data["description"], ("description",), 2000).strip()
        if "extends" in data:
            target = self.text(data["extends"], ("extends",), 1000).strip()
            if not target:
                raise self.fail(("extends",), "'extends' is empty", "name a shipped profile or a path")
            out["extends"] = target
        names = (*FACT_NAMES, *INSTANCE_NAMES)
        for key in ("intra_op", "inter_op"):
            if key in data:
                out[key] = self.count(data[key], (key,), names)
        if "libraries" in data:
            libs = data["libraries"]
            if not isinstance(libs, dict):
                raise self.fail(("libraries",), f"'libraries' must be a mapping, not {_type_name(libs)}",
                                "write e.g. 'libraries: {blas: 1, openmp: intra_op}' as separate lines")
            self.keys(libs, ("libraries",), LIBRARIES)
            out["libraries"] = {k: self.count(v, ("libraries", k), names) for k, v in libs.items()}
        if "env" in data:
            out["env"] = self.env(data["env"])
        if "affinity" in data:
            out["affinity"] = self.affinity(data["affinity"])
        if "instances" in data:
            out["instances"] = self.instances(data["instances"])
        return out

    def env(self, env: Any) -> dict[str, str]:
        from parinfo.process.variables import THREAD_VARS, validate

        if not isinstance(env, dict):
            raise self.fail(("env",), f"'env' must be a mapping of variable names to values, not {_type_name(env)}",
                            "write e.g. 'env: {OMP_WAIT_POLICY: passive}'")
        out: dict[str, str] = {}
        for name, value in env.items():
            kp = ("env", name)
            if name in DERIVED_VARS:
                owner = DERIVED_VARS[name]
                raise self.fail(kp, f"{name} is set from '{owner}', not from 'env'",
                                f"write the count under '{owner}' instead", key=True)
            if name not in THREAD_VARS:
                allowed = sorted(n for n in THREAD_VARS if n not in DERIVED_VARS)
                close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
                fix = f"did you mean {close[0]}?" if close else f"known variables: {', '.join(allowed)}"
                raise self.fail(kp, f"unknown thread variable {name!r}", fix, key=True)
            if isinstance(value, bool):
                text = "TRUE" if value else "FALSE"
            elif isinstance(value, (int, str)):
                text = str(value)
            else:
                raise self.fail(kp, f"env {name} must be text or an integer, not {_type_name(value)}",
                                "put the value in quotes")
            why = validate(name, text)
            if why:
                raise self.fail(kp, f"env {name}: {why}", f"see 'parinfo show' for what {name} accepts")
            out[name] = text
        return out

    def affinity(self, value: Any) -> str | list[int]:
        kp = ("affinity",)
        fix = "write none, compact, spread, a list such as [0, 1, 2] or a string such as \"0-3,8\""
        if isinstance(value, str) and value.strip().lower() in AFFINITY_WORDS:
            return value.strip().lower()
        if isinstance(value, str) and not any(c.isdigit() for c in value):
            close = difflib.get_close_matches(value.strip().lower(), AFFINITY_WORDS, n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'? or " if close else ""
            raise self.fail(kp, f"unknown affinity {value!r}", hint + fix)
        if isinstance(value, str):
            try:
                return parse_cpu_list(value)
            except ValueError as exc:
                raise self.fail(kp, f"affinity: {exc}", fix) from None
        if isinstance(value, bool) or value is None:
            raise self.fail(kp, f"'affinity' must be none, compact, spread or a CPU list, not {_type_name(value)}",
                            fix)
        if isinstance(value, int):
            value = [value]
        if not isinstance(value, list):
            raise self.fail(kp, f"'affinity' must be none, compact, spread or a CPU list, not {_type_name(value)}",
                            fix)
        if not value:
            raise self.fail(kp, "'affinity' is an empty list", "list at least one CPU, or write none")
        cpus: set[int] = set()
        for i, item in enumerate(value):
            ikp = (*kp, str(i))
            if isinstance(item, bool) or not isinstance(item, (int, str)):
                raise self.fail(ikp, f"affinity entry must be a CPU number or range, not {_type_name(item)}", fix)
            try:
                cpus.update(parse_cpu_list(str(item)))
            except ValueError as exc:
                raise self.fail(ikp, f"affinity: {exc}", fix) from None
        return sorted(cpus)

    def instances(self, value: Any) -> dict[str, Any]:
        kp = ("instances",)
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            return {"count": self.count(value, kp, FACT_NAMES)}
        if not isinstance(value, dict):
            raise self.fail(kp, f"'instances' must be a count or a mapping, not {_type_name(value)}",
                            "write e.g. 'instances: 2' or 'instances: {per_numa_node: true}'")
        self.keys(value, kp, INSTANCE_KEYS)
        out: dict[str, Any] = {}
        if "per_numa_node" in value:
            flag = value["per_numa_node"]
            if not isinstance(flag, bool):
                raise self.fail((*kp, "per_numa_node"), f"'instances.per_numa_node' must be true or false, not {_type_name(flag)}",
                                "write 'per_numa_node: true'")
            out["per_numa_node"] = flag
        if "count" in value:
            if out.get("per_numa_node"):
                raise self.fail((*kp, "count"), "'instances' has both 'count' and 'per_numa_node: true'",
                                "keep one: per_numa_node gives one instance per NUMA node", key=True)
            out["count"] = self.count(value["count"], (*kp, "count"), FACT_NAMES)
        if "cores_per_instance" in value:
            out["cores_per_instance"] = self.count(value["cores_per_instance"], (*kp, "cores_per_instance"),
                                                   FACT_NAMES)
        if not out.get("per_numa_node") and "count" not in out and "cores_per_instance" not in out:
            raise self.fail(kp, "'instances' says neither how many instances nor how large",
                            "add 'count: N', 'cores_per_instance: N' or 'per_numa_node: true'")
        return out


def _validate(doc: Document) -> dict:
    return _Validator(doc).run()





# ---------------------------------------------------------------------------------------------
# Resolution


def resolve_profile(profile: Any, facts: Any = None, *, instances: int | None = None):
    """Resolve ``profile`` (a name, path, loaded Profile or plain dict) on ``facts`` (default: this
    machine) into a :class:`parinfo.profiles.plan.Plan`. ``instances`` overrides the profile's count."""
    from parinfo.profiles.resolve import resolve

    if isinstance(profile, Profile):
        prof = profile
    elif isinstance(profile, (str, os.PathLike)):
        prof = load_profile(profile)
    elif isinstance(profile, dict):
        prof = validate_profile(profile)
    else:
        raise ProfileError(f"a profile is a name, a path or a dict, not {_type_name(profile)}",
                           fix="pass e.g. 'latency' or 'my-profile.yaml'")
    if facts is None:
        from parinfo.machine.topology import machine_facts

        facts = machine_facts()
    return resolve(prof, facts, instances=instances)
