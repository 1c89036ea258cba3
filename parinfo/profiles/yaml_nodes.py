"""Read a small YAML document safely and keep where each value was written.

Profiles need every error to name file:line:column, so the document is composed into a node tree
(safe loader only) and turned into plain Python values here, with a mark for each key and value.
The loader rejects duplicate keys, merge keys and custom tags, and caps file size, node count,
aliases and nesting so that an alias bomb or a deeply nested document fails fast with one line.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import parinfo.safe_file as safe_file
from parinfo.errors import ProfileError
from parinfo.records.record import record

MAX_FILE_BYTES = 64 * 1024
MAX_NODES = 5000
MAX_ALIASES = 64
MAX_DEPTH = 32
MAX_INT_DIGITS = 20

KeyPath = tuple[str, ...]


@record(frozen=True)
class Mark:
    """Where a value was written; ``inline`` says columns inside the scalar map onto the file."""

    path: str
    line: int
    column: int
    inline: bool = False


@record
class Document:
    """One YAML file as plain values, with marks for values (``marks``) and keys (``key_marks``)."""

    path: str
    data: Any
    marks: dict[KeyPath, Mark]
    key_marks: dict[KeyPath, Mark]


MAX_READ_SECONDS = 2.0
PATH_LIMIT = 400  # characters of a path shown in a message
# Pseudo-file systems: their "regular" files can block (/proc/kmsg) or never end; no profile lives there.
REFUSED_ROOTS = ("/proc", "/sys", "/dev")


def _error(message: str, path: str, line: int | None = None, column: int | None = None,
           fix: str | None = None) -> ProfileError:
    return ProfileError(shown(message, 2000), path=shown(path, PATH_LIMIT), line=line, column=column, fix=fix)


def shown(text: str, limit: int = 120) -> str:
    """``text`` for a one-line message: control and format characters escaped, shortened in the middle."""
    from parinfo.safe_text import escape_controls

    out = escape_controls(text)
    if len(out) > limit:
        half = (limit - 3) // 2
        out = f"{out[:half]}...{out[-half:]}"
    return out


_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


class Missing(str):
    """The problem of a path that names no file (nor a dangling link): told from the others by its
    type, as its fix differs (the name of a shipped profile may have been meant)."""


NO_SUCH_FILE = Missing("no such file")


def file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a profile file (without opening it), or None when it may be one."""
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError) as exc:
        return f"cannot resolve: {getattr(exc, 'strerror', None) or exc}"
    for root in REFUSED_ROOTS:
        if real == root or real.startswith(root + "/"):
            return f"is under {root}, not a profile file"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        try:
            os.lstat(path)
        except OSError:
            return NO_SUCH_FILE
        return "is a dangling symbolic link"
    except PermissionError:
        return None  # reading says "permission denied"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link loop"
        return f"cannot read: {exc.strerror or exc}"
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        return f"is {kind}, not a profile file"
    return None


def read_text(path: Path) -> str:
    """Read a profile file as UTF-8 text, turning every file-system fault into a ProfileError.

    Only small regular files outside /proc, /sys and /dev are read, opened through
    :func:`parinfo.safe_file.open_file` (never blocking, the type checked again on the open file, not
    on FUSE) and read for at most MAX_FILE_BYTES and MAX_READ_SECONDS.
    """
    shown_path = str(path)
    problem = file_problem(path)
    if isinstance(problem, Missing):
        raise _error(problem, shown_path, fix="check the path, or give the name of a shipped profile")
    if problem is not None:
        raise _error(problem, shown_path, fix="give the path of a .yaml file")
    try:
        fd = safe_file.open_file(os.fspath(path), follow=True)
    except safe_file.Unsafe as exc:  # swapped for a FIFO or a device since the check above, or on FUSE
        why = exc.strerror or "is not a regular file"
        on_fuse = isinstance(exc, safe_file.OnFuse)
        fix = "copy the profile to a local file" if on_fuse else "give the path of a .yaml file"
        raise _error(why, shown_path, fix=fix) from None
    except FileNotFoundError:
        raise _error("no such file", shown_path, fix="check the path, or give the name of a shipped profile") from None
    except PermissionError:
        raise _error("permission denied", shown_path, fix="make the file readable") from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise _error(f"cannot read: {reason}", shown_path, fix="give a readable .yaml file") from None
    try:
        raw = _read_bounded(fd, shown_path)
    finally:
        os.close(fd)
    if len(raw) > MAX_FILE_BYTES:
        raise _error(f"file is larger than {MAX_FILE_BYTES // 1024} KiB", shown_path,
                     fix="a profile is a few lines of YAML; check that this is the right file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        raise _error(f"byte 0x{raw[exc.start]:02x} is not valid UTF-8", shown_path, line, column,
                     fix="save the file as UTF-8") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise _error("empty file", shown_path, fix="start the profile with 'version: 1'")
    return text


def _read_bounded(fd: int, shown_path: str) -> bytes:
    """Up to MAX_FILE_BYTES + 1 bytes of the open file, checked to be a regular file."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise _error(f"is {kind}, not a profile file", shown_path, fix="give the path of a .yaml file")
        if st.st_size > MAX_FILE_BYTES:
            raise _error(f"file is larger than {MAX_FILE_BYTES // 1024} KiB", shown_path,
                         fix="a profile is a few lines of YAML; check that this is the right file")
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + MAX_READ_SECONDS
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if time.monotonic() > deadline:
                raise _error(f"reading took more than {MAX_READ_SECONDS:g} s", shown_path,
                             fix="copy the profile to a local file")
        return b"".join(chunks)
    except BlockingIOError:
        raise _error("would block (not a regular file?)", shown_path, fix="give the path of a .yaml file") from None
    except PermissionError:
        raise _error("permission denied", shown_path, fix="make the file readable") from None
    except OSError as exc:
        raise _error(f"cannot read: {exc.strerror or exc}", shown_path, fix="give a readable .yaml file") from None


def _position(text: str, index: int) -> tuple[int, int]:
    before = text[:index]
    return before.count("\n") + 1, index - (before.rfind("\n") + 1) + 1


def parse(text: str, path: str) -> Document:
    """Compose ``text`` into a Document; raise ProfileError with the position of the first fault."""
    import yaml

    class Loader(yaml.SafeLoader):
        nodes = 0
        aliases = 0
        depth = 0
        peek_event: Callable[[], yaml.Event]  # PyYAML's stub leaves it untyped

        def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:  # PyYAML hook
            if self.depth >= MAX_DEPTH:
                raise self.fault(f"nested more than {MAX_DEPTH} levels deep",
                                 "a profile needs only two or three levels")
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_ALIASES:
                    raise self.fault(f"more than {MAX_ALIASES} aliases",
                                     "profiles do not need many anchors; write the values out")
            self.nodes += 1
            if self.nodes > MAX_NODES:
                raise self.fault(f"more than {MAX_NODES} YAML nodes",
                                 "a profile is a few lines of YAML; check that this is the right file")
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def fault(self, message: str, fix: str) -> ProfileError:
            """The error for ``message`` at the start of the next event."""
            mark = self.peek_event().start_mark
            if mark is None:
                return _error(message, path, fix=fix)
            return _error(message, path, mark.line + 1, mark.column + 1, fix=fix)

    loader = None
    try:
        loader = Loader(text)
        root = loader.get_single_node()
        if root is None:
            raise _error("the file holds no YAML document", path, fix="start the profile with 'version: 1'")
        builder = _Builder(loader, path)
        data = builder.value(root, (), 0)
        return Document(path, data, builder.marks, builder.key_marks)
    except yaml.reader.ReaderError as exc:
        line, column = _position(text, exc.position)
        what = f"character U+{exc.character:04X}" if isinstance(exc.character, int) else "character"
        raise _error(f"{what} is not allowed in YAML", path, line, column,
                     fix="remove control characters from the file") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.problem and "while" not in exc.context:
            message = f"{exc.context}, {exc.problem}"
        fix = "check indentation, colons and quotes at that position"
        if "single document" in message:
            fix = "a profile is one YAML document: remove the '---' line and what follows"
        raise _error(f"invalid YAML: {message}", path, mark.line + 1 if mark else None,
                     mark.column + 1 if mark else None, fix=fix) from None
    except yaml.YAMLError as exc:
        raise _error(f"invalid YAML: {exc}", path, fix="check the YAML syntax") from None
    except RecursionError:
        raise _error("YAML is nested too deeply", path, fix="a profile needs only two or three levels") from None
    finally:
        if loader is not None:
            loader.dispose()


class _Builder:
    """Turn composed nodes into plain values, recording marks and enforcing the caps."""

    def __init__(self, loader: Any, path: str) -> None:
        self.loader = loader
        self.path = path
        self.visited = 0
        self.marks: dict[KeyPath, Mark] = {}
        self.key_marks: dict[KeyPath, Mark] = {}

    def mark(self, node: Any) -> Mark:
        m = node.start_mark
        style = getattr(node, "style", None)
        single_line = node.end_mark.line == m.line
        inline = single_line and style in (None, "", '"', "'")
        offset = 1 if style in ('"', "'") else 0
        return Mark(self.path, m.line + 1, m.column + 1 + offset, inline)

    def fail(self, node: Any, message: str, fix: str) -> ProfileError:
        m = node.start_mark
        return _error(message, self.path, m.line + 1, m.column + 1, fix=fix)

    def value(self, node: Any, keypath: KeyPath, depth: int) -> Any:
        import yaml

        self.visited += 1
        if self.visited > MAX_NODES:
            raise self.fail(node, f"the document expands to more than {MAX_NODES} values (alias bomb?)",
                            "write the values out instead of nesting aliases")
        if depth > MAX_DEPTH:
            raise self.fail(node, f"nested more than {MAX_DEPTH} levels deep",
                            "a profile needs only two or three levels")
        self.marks.setdefault(keypath, self.mark(node))
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != "tag:yaml.org,2002:seq":
                raise self.fail(node, f"unsupported tag {_short_tag(node.tag)}", "remove the tag")
            return [self.value(child, (*keypath, str(i)), depth + 1) for i, child in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            if node.tag not in ("tag:yaml.org,2002:map",):
                raise self.fail(node, f"unsupported tag {_short_tag(node.tag)}", "remove the tag")
            out: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise self.fail(key_node, "merge keys ('<<') are not supported",
                                    "use 'extends: OTHER_PROFILE' to build on another profile")
                if not isinstance(key_node, yaml.ScalarNode):
                    raise self.fail(key_node, "a key must be plain text", "write 'name: value'")
                key = self.scalar(key_node)
                if not isinstance(key, str) or isinstance(key, bool):
                    key = str(key_node.value)
                path = (*keypath, key)
                if key in out:
                    first = self.key_marks.get(path)
                    where = f" (first at line {first.line})" if first else ""
                    raise self.fail(key_node, f"duplicate key {key!r}{where}", "keep only one of them")
                self.key_marks[path] = self.mark(key_node)
                out[key] = self.value(value_node, path, depth + 1)
            return out
        raise self.fail(node, "unsupported YAML node", "write plain mappings, lists and scalars")


    def scalar(self, node: Any) -> Any:
        """A scalar's value; YAML 1.1 conversions that raise, or that read digits other than plain
        ASCII decimal (1:00 is 60, 0x10 is 16, 010 is 8), are one-line errors."""
        if node.tag == "tag:yaml.org,2002:binary":
            raise self.fail(node, "binary values are not allowed", "write a number or text")
        text = str(node.value)
        if node.tag == "tag:yaml.org,2002:int" and not _DECIMAL.match(text):
            raise self.fail(node, f"{shown(repr(text))} is not a plain decimal integer ({_int_reason(text)})",
                            "write integers as ASCII digits 0-9, or quote the value to make it text")
        if node.tag == "tag:yaml.org,2002:int" and len(text) > MAX_INT_DIGITS:
            raise self.fail(node, f"integer of {len(text)} digits; profiles need at most {MAX_INT_DIGITS}",
                            "write a smaller number")
        try:
            value = self.loader.construct_object(node, deep=True)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as exc:
            why = str(exc) if isinstance(exc, ValueError) else "not in the form that tag reads"
            if node.tag == "tag:yaml.org,2002:bool":
                why = "not one of true, false, yes, no, on, off"
            raise self.fail(node, f"cannot read {shown(repr(text), 60)} as {_short_tag(node.tag)}: {shown(why, 80)}",
                            "write a valid value, or quote it to make it text") from None
        if isinstance(value, str):
            bad = next((ch for ch in value if 0xD800 <= ord(ch) <= 0xDFFF), None)
            if bad is not None:
                raise self.fail(node, f"U+{ord(bad):04X} is a lone surrogate, not a character",
                                "write the character itself, or a pair of \\u escapes")
        return value


_DECIMAL = re.compile(r"^[-+]?(0|[1-9][0-9]*)$", re.ASCII)


def _int_reason(text: str) -> str:
    if ":" in text:
        return "YAML 1.1 reads it as a base-60 number"
    if text.lstrip("+-").lower().startswith(("0x", "0o", "0b")):
        return "YAML 1.1 reads it in another base"
    if "_" in text:
        return "YAML 1.1 drops the underscores"
    if text.lstrip("+-").startswith("0") and len(text.lstrip("+-")) > 1:
        return "YAML 1.1 reads a leading 0 as octal"
    return "only ASCII digits are read"


def _short_tag(tag: str) -> str:
    return "!!" + tag[len("tag:yaml.org,2002:"):] if tag.startswith("tag:yaml.org,2002:") else tag
