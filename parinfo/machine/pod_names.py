"""A pod's name and namespace, as far as the process's own files tell them (no API server is asked).

- The name: the kubelet gives each container of a pod the pod's name as its hostname, in the
  ``/etc/hostname`` it mounts into the container and in ``HOSTNAME`` the runtime sets; so the
  container's ``/etc/hostname`` (read through ``/proc/PID/root``), else ``HOSTNAME`` in the
  process's environment. A pod that sets ``spec.hostname`` or runs in the host's network
  (``hostNetwork``) has another hostname, which is then taken for its name. Another process in
  parinfo's own UTS namespace gets no name this way: its hostname is parinfo's (the node's, for
  parinfo run on the node), not its pod's.
- The namespace: the service-account volume the kubelet mounts at
  ``/var/run/secrets/kubernetes.io/serviceaccount/namespace`` (followed through the container's
  links, as the container sees them: ``/var/run`` is often a link to ``/run``, and the file a link
  into the volume's ``..data``); absent when the pod mounts no service account token.

The process's root and environment are its owner's: each file is opened without blocking, beneath
that root, a few hundred bytes read, and a value that is not a DNS name is not believed.
"""
from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

import parinfo.safe_file as safe_file
from parinfo.errors import UsageError
from parinfo.machine.proc_words import parse_environ
from parinfo.records.source import Source, file, unknown, variable
from parinfo.records.unknown import Unknown

if TYPE_CHECKING:
    from parinfo.machine.procfs import Proc

#: The most bytes read of a name's file: a DNS name is at most 253 characters.
LIMIT = 512
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
HOSTNAME_FILE = "etc/hostname"
NAMESPACE_FILES = ("var/run/secrets/kubernetes.io/serviceaccount/namespace",
                   "run/secrets/kubernetes.io/serviceaccount/namespace")


def _in_root(proc: Proc, rel: str) -> str:
    """The stripped text of ``rel`` in the process's root; OSError when it cannot be read."""
    fd = safe_file.open_in_root(proc.path("root"), rel)
    try:
        return safe_file.read_bounded(fd, LIMIT).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)


def _checked(text: str, shape: re.Pattern[str], where: str) -> str:
    if not shape.fullmatch(text):
        raise ValueError(f"{where} holds {text[:40]!r}, not a name Kubernetes gives")
    return text


def _from_file(proc: Proc, rel: str, shape: re.Pattern[str]) -> tuple[str | None, Source | str]:
    """(the name in the container's file ``rel``, its source), or (None, why not)."""
    where = f"{proc.shown('root')}/{rel}"
    try:
        return _checked(_in_root(proc, rel), shape, where), file(where)
    except OSError as exc:
        return None, f"cannot read {where}: {exc.strerror or exc}"
    except ValueError as exc:
        return None, str(exc)


def _hostname_variable(proc: Proc) -> tuple[str | None, Source | str]:
    try:
        block = proc.read_or_why("environ", 1 << 22)
    except UsageError as exc:  # ProcessGone or NoAccess: the name stays unknown, the report goes on
        return None, f"cannot read {proc.shown('environ')}: {exc}"
    if isinstance(block, Unknown):
        return None, block.why
    value = parse_environ(block).get("HOSTNAME")
    if value is None:
        return None, "no HOSTNAME in its environment"
    try:
        return _checked(value, _NAME, "HOSTNAME"), variable("HOSTNAME", value[:64])
    except ValueError as exc:
        return None, str(exc)


def _shares_my_hostname(proc: Proc) -> bool:
    """Whether ``proc`` is another process in parinfo's own UTS namespace (False when unknown)."""
    if proc.pid is None or proc.pid == os.getpid():
        return False
    try:
        return os.stat(proc.path("ns/uts")).st_ino == os.stat(os.path.join(proc.root, "proc/self/ns/uts")).st_ino
    except OSError:
        return False


def names_of(proc: Proc | None, root: str = "/") -> tuple[str | None, Source, str | None, Source]:
    """(pod name, its source, namespace, its source) of process ``proc`` (default: this one); a
    name that cannot be told is None with an unknown source saying why."""
    from parinfo.machine.procfs import this_or

    handle = this_or(proc, root)
    name: str | None = None
    said: Source | str = "its hostname is parinfo's own (one UTS namespace): not its pod's name"
    if not _shares_my_hostname(handle):
        name, said = _from_file(handle, HOSTNAME_FILE, _NAME)
    if name is None and not _shares_my_hostname(handle):
        name, also = _hostname_variable(handle)
        said = also if name is not None else f"{said}; {also}"
    name_source = said if isinstance(said, Source) else unknown(said)
    problems = []
    for rel in NAMESPACE_FILES:
        namespace, got = _from_file(handle, rel, _NAMESPACE)
        if isinstance(got, Source):
            return name, name_source, namespace, got
        problems.append(got)
    return name, name_source, None, unknown("; ".join(problems))
