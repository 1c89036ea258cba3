"""The rules of the profile language's value shapes: what every rule is (:class:`Rule`, checked
through a :class:`Checker`), and the rules of the shapes several keys share: the version, a text, a
count or a mapping of counts, one word of a list, and the variables of ``env``.
"""
import difflib
from collections.abc import Mapping
from typing import Any, Protocol

from parinfo.errors import ProfileError
from parinfo.process.libraries import role_var
from parinfo.process.preload import SET_BY_KEY
from parinfo.profiles import expr
from parinfo.profiles.model import type_name
from parinfo.profiles.words import DERIVED_VARS, EXPR_PATTERN, MAX_COUNT, VAR_NAME_PATTERN, VERSION
from parinfo.profiles.yaml_nodes import KeyPath, shown

#: A piece of the published JSON Schema (the JSON edge: :mod:`parinfo.profiles.schema` writes it out).
Schema = dict[str, Any]


class Checker(Protocol):
    """What a rule needs from the validator: errors positioned in the document."""

    def fail(self, keypath: KeyPath, message: str, fix: str | None = None, *, key: bool = False,
             column_in_value: int | None = None) -> ProfileError: ...

    def keys(self, mapping: Mapping[Any, object], keypath: KeyPath, allowed: tuple[str, ...]) -> None: ...


class Rule:
    """One key's rule: ``check`` returns the value to keep or raises; ``schema`` is its JSON Schema."""

    required = False

    def __init__(self, doc: str = "") -> None:
        self.doc = doc

    def check(self, c: Checker, value: Any, key_path: KeyPath) -> Any:
        raise NotImplementedError

    def shape(self) -> Schema:
        raise NotImplementedError

    def schema(self) -> Schema:
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


def char_name(ch: str) -> str:
    import unicodedata

    name = _C0_NAMES.get(ord(ch)) or unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" ({name})" if name else "")


#: The fix for a preload's variable set in ``env`` or a malformed ``allocator``.
PRELOAD_FIX = ("write e.g. 'allocator: jemalloc' (or {name: jemalloc, conf: \"...\"} for MALLOC_CONF) or "
                "'openmp: intel': parinfo finds the library, preloads it and sets its variables")


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

    def shape(self) -> Schema:
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
                raise c.fail(key_path, f"'{label}' has the control character {char_name(ch)} at character {i + 1}",
                             "remove it: profile text is printed to terminals")
        return text

    def shape(self) -> Schema:
        out: Schema = {"type": "string"}
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

    def shape(self) -> Schema:
        return {"$ref": "#/$defs/count"}

    @staticmethod
    def definition() -> Schema:
        """The shared ``$defs/count`` schema."""
        return {
            "description": f"An integer from 1 to {MAX_COUNT}, or an expression such as physical_cores // 2.",
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": MAX_COUNT},
                {"type": "string", "minLength": 1, "maxLength": expr.MAX_LENGTH, "pattern": EXPR_PATTERN},
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

    def shape(self) -> Schema:
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
                             PRELOAD_FIX, key=True)
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
                raise c.fail(var_path, f"env {name}: the value has {char_name(odd)}; thread variables are read as "
                             f"printable ASCII", "write the value with ASCII letters, digits and punctuation")
            why = validate(name, text)
            if why:
                raise c.fail(var_path, f"env {name}: {why}", f"see 'parinfo show' for what {name} accepts")
            out[name] = text
        return out

    def shape(self) -> Schema:
        # Names by pattern: the list of variables lives in parinfo.process, and the validator checks it.
        return {"type": "object", "propertyNames": {"pattern": VAR_NAME_PATTERN},
                "additionalProperties": {"type": ["string", "integer", "boolean"]}}


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

    def shape(self) -> Schema:
        return {"enum": list(self.words)}


