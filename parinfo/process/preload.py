"""The libraries a launch preloads: one :class:`Allocator` record per malloc, one :class:`OpenMPRuntime`
record per OpenMP runtime a profile can choose, and where their files are found.

As :mod:`parinfo.process.libraries` is for thread pools, this module is the only one that knows an
allocator or a preloadable OpenMP runtime: its file names, how a mapped file is recognised, the
variable that configures it and the settings parinfo gives it for a server, what to install when it
is missing. The profile language (``allocator:``, ``openmp:``), the resolver, the launcher and the
report all ask the records here.

A file is looked for in the Python environment first (``sys.prefix/lib``, where the ``intel-openmp``
wheel and conda put theirs, then the library folders of site-packages: ``torch/lib``, ``*.libs``),
then in the system's library paths (``LD_LIBRARY_PATH``, the folders of ``/etc/ld.so.conf``, the
multiarch and standard folders, ``/usr/lib/llvm-*/lib``). A candidate is accepted only when the
file it resolves to is the library asked for: Debian's ``libiomp5.so`` is a link to LLVM's libomp.
As root, a candidate that another user owns or may write, or that lies in a folder another user
owns or may write, is skipped (:func:`untrusted`), and the plan says which folder and why.

Standard library only at module level: the launcher imports it on the start-up path.
"""
from __future__ import annotations

import functools
import glob
import itertools
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence

import parinfo.safe_file as safe_file
from parinfo.process import libraries as reg
from parinfo.records.record import record

#: The dynamic loader's preload list, and parinfo's mark of the entries it put at its front (so a
#: program, a nested launch and the report can tell them from the user's own).
PRELOAD_VAR = "LD_PRELOAD"
MARK_VAR = reg.role_var("preload")

_MAX_DIR_ENTRIES = 20000  # entries of one site-packages folder looked at
_MAX_CONF_FILES = 64  # files of /etc/ld.so.conf and its includes read
_MAX_CONF_BYTES = 1 << 16
#: Entries of LD_PRELOAD (or PARINFO_PRELOAD) compared when a report tells who preloaded a file.
MAX_READ_ENTRIES = 64


@record(frozen=True)
class Allocator:
    """One malloc implementation.

    ``name`` is the profile's word; ``files`` the file names to preload, best first; ``prefixes``
    how a loaded (or found) file is recognised by its real name; ``conf_var`` the variable that
    configures it (None: it has no settings string); ``server_conf`` the value parinfo sets for a
    server and ``server_why`` why; ``install`` what to install when it is missing; ``preloadable``
    False for the C library's own malloc, which is always there.
    """

    name: str
    label: str
    prefixes: tuple[str, ...]
    files: tuple[str, ...] = ()
    conf_var: str | None = None
    server_conf: str | None = None
    server_why: str = ""
    install: str = ""
    auto_why: str = ""
    preloadable: bool = True


@record(frozen=True)
class OpenMPRuntime:
    """One OpenMP runtime a profile can put in charge of a process's ``omp_*`` (and ``GOMP_*``) calls.

    A view of the runtime's :class:`~parinfo.process.libraries.Library` record (``library``), which
    holds its facts: the profile's word, the files to preload, how its threads are bound, its
    variables (by role), what to install.
    """

    library: str

    @property
    def rec(self) -> reg.Library:
        return reg.library(self.library)

    @property
    def how(self) -> reg.Preloadable:
        how = self.rec.preload
        if how is None:  # only records with a preload are made into runtimes
            raise KeyError(self.library)
        return how

    @property
    def name(self) -> str:
        return self.how.word

    @property
    def label(self) -> str:
        return self.rec.label

    @property
    def files(self) -> tuple[str, ...]:
        return self.how.names

    @property
    def install(self) -> str:
        return self.how.install

    def _role(self, role: str) -> str | None:
        try:
            return self.rec.var(role)
        except KeyError:
            return None

    @property
    def variables(self) -> tuple[str, ...]:
        """Every variable :meth:`settings` may set."""
        blocktime = self._role("blocktime")
        return (blocktime,) if blocktime else ()

    def settings(self, passive: bool) -> list[tuple[str, str, str]]:
        """(variable, value, why) for a program whose idle OpenMP threads should sleep (``passive``).

        Its threads are not bound one per CPU (``affinity``, ``proc_bind`` and ``places`` stay
        unset): parinfo pins the process, or each instance, to its CPUs already, and these
        runtimes bind the program's initial thread too, to the first CPU, where the Python code,
        torch's inter-op threads and every other pool would then be confined."""
        blocktime = self._role("blocktime")
        if not blocktime:
            return []
        wait = reg.role_var("wait_policy")
        if passive:
            return [(blocktime, "0", f"openmp {self.name}: {wait} is passive: idle threads sleep at once")]
        return [(blocktime, "1", f"openmp {self.name}: idle threads spin 1 ms (not 200), so other pools and "
                 "instances get the CPUs")]

    def unbound_why(self, pinned: bool) -> str:
        """Why the runtime's threads are not bound one per CPU, for a plan that pins (or not)."""
        if not pinned:
            return ""
        vars_ = [v for v in map(self._role, ("affinity", "proc_bind")) if v]
        return (f"threads not bound one per CPU ({' or '.join(vars_)}): the process is pinned to its CPUs, and "
                "binding would confine its main thread to the first one")


# jemalloc: the settings torch's run_cpu gives it (docs/launch.md says why, and what Intel's launcher adds).
_JEMALLOC_CONF = "oversize_threshold:1,background_thread:true,metadata_thp:auto"

#: Every allocator, in the order ``allocator: auto`` prefers them (the C library's last).
ALLOCATORS: tuple[Allocator, ...] = (
    Allocator("jemalloc", "jemalloc", ("libjemalloc",), ("libjemalloc.so.2", "libjemalloc.so"),
              conf_var="MALLOC_CONF", server_conf=_JEMALLOC_CONF,
              server_why="as torch's run_cpu: large tensors in the ordinary arenas, transparent huge pages for "
                         "jemalloc's metadata where the kernel allows, purging in a background thread, off the "
                         "request path",
              install="apt-get install libjemalloc2 (Debian, Ubuntu), dnf install jemalloc, or conda install "
                      "jemalloc",
              auto_why="ranks first: the launchers' tuned settings come with it and show in the report"),
    Allocator("tcmalloc", "TCMalloc (gperftools)", ("libtcmalloc",),
              ("libtcmalloc.so.4", "libtcmalloc_minimal.so.4", "libtcmalloc.so", "libtcmalloc_minimal.so"),
              install="apt-get install libtcmalloc-minimal4 (Debian, Ubuntu), dnf install gperftools-libs, or "
                      "conda install gperftools",
              auto_why="ranks next: it has no settings string to tune or to show"),
    Allocator("glibc", "glibc malloc", ("libc.so", "libc-"), preloadable=False),
)

#: The runtimes ``openmp:`` can choose (the registry's records that say how to preload them).
OPENMP_RUNTIMES: tuple[OpenMPRuntime, ...] = tuple(OpenMPRuntime(r.name) for r in reg.records() if r.preload)

#: The words of ``allocator:`` and ``openmp:`` besides the records' names.
DEFAULT, AUTO = "default", "auto"
ALLOCATOR_WORDS = (*(a.name for a in ALLOCATORS if a.preloadable), DEFAULT, AUTO)
OPENMP_WORDS = (*(r.name for r in OPENMP_RUNTIMES), DEFAULT)

#: Variables that only a preload choice sets: a profile's ``env`` names the key instead.
SET_BY_KEY: dict[str, str] = {PRELOAD_VAR: "allocator' or 'openmp", MARK_VAR: "allocator' or 'openmp",
                              **{a.conf_var: "allocator" for a in ALLOCATORS if a.conf_var}}


def allocator(name: str) -> Allocator:
    """The allocator record named ``name`` (KeyError when there is none)."""
    for rec in ALLOCATORS:
        if rec.name == name:
            return rec
    raise KeyError(name)


def openmp_runtime(name: str) -> OpenMPRuntime:
    """The OpenMP runtime record whose profile word is ``name`` (KeyError when there is none)."""
    for rt in OPENMP_RUNTIMES:
        if rt.name == name:
            return rt
    raise KeyError(name)


@functools.lru_cache(maxsize=4096)
def allocator_of_file(path: str) -> Allocator | None:
    """The allocator a shared object is (by its real file name), or None."""
    base = os.path.basename(path).lower()
    return next((a for a in ALLOCATORS if base.startswith(a.prefixes)), None)


def runtime_of_file(path: str) -> OpenMPRuntime | None:
    """The OpenMP runtime a shared object is, by the name of the file it resolves to (Debian's
    libiomp5.so, a link to libomp.so.5, is LLVM's), or None."""
    rec = reg.by_prefix(os.path.basename(os.path.realpath(path)).lower())
    return next((rt for rt in OPENMP_RUNTIMES if rec is not None and rt.library == rec.name), None)


# ---------------------------------------------------------------------------------------------
# Where files are found


@functools.cache
def _python_dirs() -> tuple[str, ...]:
    return tuple(python_dirs())


def python_dirs() -> list[str]:
    """Library folders of the Python environment: each prefix's ``lib``, then the library folders
    that packages ship in site-packages (``torch/lib``, ``numpy.libs``...)."""
    dirs = [os.path.join(p, "lib") for p in dict.fromkeys((sys.prefix, sys.exec_prefix, sys.base_prefix))]
    sites = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    for site_dir in dict.fromkeys(sites):
        try:
            with os.scandir(site_dir) as entries:
                for i, entry in enumerate(entries):
                    if i >= _MAX_DIR_ENTRIES:
                        break
                    if not entry.is_dir():
                        continue
                    if entry.name.endswith(".libs"):
                        dirs.append(entry.path)
                    elif os.path.isdir(os.path.join(entry.path, "lib")):
                        dirs.append(os.path.join(entry.path, "lib"))
        except OSError:
            continue
    return list(dict.fromkeys(dirs))


def _ld_so_conf(path: str, seen: set[str]) -> list[str]:
    """The folders an ld.so.conf file lists, following ``include`` lines (bounded)."""
    if path in seen or len(seen) >= _MAX_CONF_FILES:
        return []
    seen.add(path)
    try:
        text = safe_file.read_file(path, _MAX_CONF_BYTES, follow=True).decode("utf-8", "replace")
    except OSError:
        return []
    dirs: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("include"):
            pattern = line[len("include"):].strip()
            if not os.path.isabs(pattern):
                pattern = os.path.join(os.path.dirname(path), pattern)
            for inc in sorted(glob.glob(pattern))[:_MAX_CONF_FILES]:
                dirs += _ld_so_conf(inc, seen)
        elif line.startswith("/"):
            dirs.append(line.split()[0])
    return dirs


def _llvm_version(path: str) -> int:
    match = re.search(r"llvm-(\d+)", path)
    return int(match.group(1)) if match else 0


def system_dirs(environ: Mapping[str, str] | None = None) -> list[str]:
    """The system's library folders, in the order the dynamic loader searches them (LD_LIBRARY_PATH,
    /etc/ld.so.conf, the standard folders), then LLVM's own folders, newest first."""
    env = os.environ if environ is None else environ
    dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d.startswith("/")]
    dirs += _ld_so_conf("/etc/ld.so.conf", set())
    multiarch = getattr(sys.implementation, "_multiarch", "") or ""
    if multiarch:
        dirs += [f"/usr/local/lib/{multiarch}", f"/lib/{multiarch}", f"/usr/lib/{multiarch}"]
    dirs += ["/usr/local/lib", "/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    dirs += sorted(glob.glob("/usr/lib/llvm-*/lib"), key=_llvm_version, reverse=True)
    return list(dict.fromkeys(dirs))


@record(frozen=True)
class Found:
    """Where a library was looked for: ``path`` (None when not found), ``where`` (the Python
    environment or the system), ``rejected``: files of the right name that are another library
    (path, what they are), and ``skipped``: folders passed over because another user has a say in
    them (folder, why)."""

    path: str | None
    where: str = ""
    rejected: tuple[tuple[str, str], ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()

    def skipped_note(self) -> str:
        """The skipped folders in words ("" when none)."""
        return "; ".join(f"skipped {folder}: {why}" for folder, why in self.skipped)


def untrusted(path: str) -> str | None:
    """Why root must not load the file ``path``, or None (and always None for another user, who
    may load what it can read). As parinfo.safe_file's rule for a folder to write in: every folder
    on the way to the file, and to the file a link names, and the file itself, are root's (a link
    too), and none is writable by another user (a folder may be, with the sticky bit, as /tmp)."""
    if os.geteuid() != 0:
        return None
    import stat

    for full in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
        here = ""
        for part in [p for p in full.split("/") if p]:
            here += "/" + part
            try:
                st = os.lstat(here)
            except OSError:
                return None  # gone meanwhile: not found, the search goes on
            if st.st_uid != 0:
                return f"{here} is owned by uid {st.st_uid}, not root"
            if stat.S_ISLNK(st.st_mode):
                continue  # root's link: where it leads is walked as the real path
            others = st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != 0)
            if others and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and here != full):
                return f"{here} is writable by {'every user' if st.st_mode & stat.S_IWOTH else f'group {st.st_gid}'}"
    return None


#: Folder lists to search, in order, with the words that say where a file was found. Replaceable
#: (a test that wants a library absent empties them).
SEARCH: list[tuple[str, Callable[[], Sequence[str]]]] = [("the Python environment", _python_dirs),
                                                         ("the system's library paths", system_dirs)]


def locate(files: tuple[str, ...], accept: Callable[[str], str | None]) -> Found:
    """The first of ``files`` found in the search folders whose real file ``accept`` takes
    (``accept`` returns None to take it, or what the file is instead). The Python environment's
    folders are listed once per process."""
    rejected: list[tuple[str, str]] = []
    skipped: dict[str, str] = {}
    for where, dirs in SEARCH:
        for folder in dirs():
            for name in files:
                path = os.path.join(folder, name)
                if not os.path.isfile(path):
                    continue
                why = untrusted(path)
                if why is not None:
                    skipped.setdefault(folder, f"{why}, and parinfo runs as root")
                    continue
                other = accept(path)
                if other is None:
                    return Found(path, where, tuple(rejected), tuple(skipped.items()))
                if all(p != os.path.realpath(path) for p, _ in rejected):
                    rejected.append((os.path.realpath(path), other))
    return Found(None, "", tuple(rejected), tuple(skipped.items()))


def locate_allocator(rec: Allocator) -> Found:
    def accept(path: str) -> str | None:
        real = allocator_of_file(os.path.realpath(path))
        return None if real is rec else (real.label if real else "another library")

    return locate(rec.files, accept)


def locate_runtime(rt: OpenMPRuntime) -> Found:
    def accept(path: str) -> str | None:
        real = runtime_of_file(path)
        return None if real is rt else (real.label if real else "another library")

    return locate(rt.files, accept)


# ---------------------------------------------------------------------------------------------
# LD_PRELOAD


def split_preload(value: str | None, limit: int | None = None) -> list[str]:
    """The entries of an LD_PRELOAD value (the loader separates them by colons or white space); at
    most ``limit`` of them (a value read from another process's environment is bounded work)."""
    return list(itertools.islice((e for e in re.split(r"[:\s]+", value or "") if e), limit))


def compose_preload(ours: list[str], base: Mapping[str, str]) -> tuple[str, list[str]]:
    """LD_PRELOAD with ``ours`` first, then the user's own entries of ``base`` (those an enclosing
    launch marked as parinfo's are not the user's, and are dropped); and those user entries."""
    outer = set(split_preload(base.get(MARK_VAR)))
    users = [e for e in split_preload(base.get(PRELOAD_VAR)) if e not in outer and e not in ours]
    return ":".join([*ours, *users]), users


#: The private variable a launch writes for its start-up hook (parinfo.launch.child): its
#: ``watch=`` field lists the variables the launch set.
HOOK_VAR = "_PARINFO_HOOK"


@record(frozen=True)
class LaunchMarks:
    """What an enclosing ``parinfo apply`` set in a process's environment: the ``profile``'s name,
    the files it ``preloaded`` (PARINFO_PRELOAD) and the variables it ``set`` (its hook's list)."""

    profile: str | None = None
    preloaded: tuple[str, ...] = ()
    set: frozenset[str] = frozenset()


def launch_marks(environ: Mapping[str, str]) -> LaunchMarks:
    """The marks a launch left in ``environ`` (a launch environment)."""
    watched: frozenset[str] = frozenset()
    for part in environ.get(HOOK_VAR, "").split()[1:]:
        if part.startswith("watch="):
            watched = frozenset(n for n in part[len("watch="):].split(",") if n)
    return LaunchMarks(environ.get(reg.role_var("profile")) or None,
                       tuple(split_preload(environ.get(MARK_VAR), MAX_READ_ENTRIES)), watched)
