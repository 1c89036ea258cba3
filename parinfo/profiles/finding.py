"""Where profiles are: the shipped ones (by name) and files named by a path."""
from __future__ import annotations

import difflib
import os
from pathlib import Path

from parinfo.errors import ProfileError
from parinfo.profiles.yaml_nodes import shown


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
        try:
            if p.is_file():
                return p
        except (OSError, ValueError):  # a name too long for a file name is not shipped
            continue
    return None


def _looks_like_path(text: str) -> bool:
    return os.sep in text or "/" in text or text.endswith((".yaml", ".yml")) or text.startswith(".")


def command_word(origin: str) -> str | None:
    """The shell word that names the profile read from ``origin`` on a command line (``parinfo apply
    WORD -- COMMAND``): a shipped profile's name, any other file's path (quoted; ``./`` before a
    path the command line would take for a shipped name), or None for a profile given as data
    ("<profile>"), which no command line can name."""
    import shlex

    if origin == "<profile>":
        return None
    path = Path(origin)
    shipped = shipped_path(path.stem) if path.suffix == ".yaml" else None
    try:
        if shipped is not None and shipped.samefile(path):
            return path.stem
    except OSError:
        pass
    return shlex.quote(origin if _looks_like_path(origin) else f"./{origin}")


def find_profile(name: str | os.PathLike[str], relative_to: Path | None = None) -> Path:
    """The file that ``name`` names: a path (relative to ``relative_to``) or a shipped name."""
    text = os.fspath(name)
    if "\0" in text:
        raise ProfileError(f"{shown(repr(text))} contains a NUL byte", fix="give a path or a shipped profile name")
    if not text.strip():
        raise ProfileError("empty profile name", fix=f"give a path or one of: {', '.join(shipped_names())}")
    if isinstance(name, os.PathLike) or _looks_like_path(text):
        p = Path(text).expanduser()
        if relative_to is not None and not p.is_absolute():
            p = relative_to / p
        return p
    shipped = shipped_path(text)
    if shipped is not None:
        return shipped
    # Not shipped: a file of that name next to the profile that names it (or in the current
    # directory for a name given on the command line).
    local = (relative_to or Path.cwd()) / text
    if os.path.lexists(local):
        return local
    names = shipped_names()
    close = difflib.get_close_matches(text, names, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    raise ProfileError(f"no shipped profile named {shown(repr(text))}",
                       fix=f"{hint}give a path to a .yaml file or one of: {', '.join(names) or 'none found'}")
