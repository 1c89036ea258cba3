"""Another process's memory, read through /proc/PID/mem (:class:`Memory`): :class:`~parinfo.machine.procfs.Proc`
gives the path (:meth:`~parinfo.machine.procfs.Proc.memory`), this module reads it.
"""
from __future__ import annotations

import os
from typing import Protocol

from parinfo.machine.proc_words import exited_during_read
from parinfo.records.unknown import Unknown


class Target(Protocol):
    """What :class:`Memory` asks of the process it reads (a :class:`~parinfo.machine.procfs.Proc`)."""

    @property
    def pid(self) -> int | None: ...

    def live_path(self, name: str) -> bytes: ...

    def shown(self, name: str) -> str: ...

    def exists(self) -> bool: ...

    def permission_reason(self) -> str: ...


class Memory:
    """/proc/PID/mem, opened on first use: plain reads, no ptrace attach, no signal, the process runs
    on. A refusal says why once, for every later read. A read the kernel refused for want of rights
    is an Unknown whose ``why`` is a :class:`~parinfo.machine.proc_words.Denied`."""

    def __init__(self, proc: Target) -> None:
        self.proc = proc
        self.fd: int | None = None
        self.refused: Unknown | None = None

    def read(self, address: int, size: int) -> bytes | Unknown:
        """``size`` bytes at ``address``, or Unknown saying why they cannot be read. ProcessGone when
        the process ends."""
        data = self.read_upto(address, size)
        if isinstance(data, bytes) and len(data) != size:
            return Unknown(f"short read of the process's memory at {address:#x}")
        return data

    def read_upto(self, address: int, size: int) -> bytes | Unknown:
        """Up to ``size`` bytes at ``address``: fewer where the readable memory ends before (a guard
        region installed with MADV_GUARD_INSTALL, which /proc/PID/maps does not show), at least one;
        else Unknown saying why none can be read. ProcessGone when the process ends."""
        proc = self.proc
        if self.refused is not None:
            return self.refused
        if self.fd is None:
            try:
                self.fd = os.open(proc.live_path("mem"), os.O_RDONLY | os.O_CLOEXEC)
            except PermissionError:
                self.refused = Unknown(proc.permission_reason())
                return self.refused
            except OSError as exc:
                if isinstance(exc, (FileNotFoundError, ProcessLookupError)) or not proc.exists():
                    raise exited_during_read(proc.pid or 0) from None
                self.refused = Unknown(f"cannot open {proc.shown('mem')}: {exc.strerror or exc}")
                return self.refused
        try:
            data = os.pread(self.fd, size, address)
        except ProcessLookupError:
            raise exited_during_read(proc.pid or 0) from None
        except PermissionError:
            return Unknown(proc.permission_reason())
        except OSError as exc:
            if not proc.exists():
                raise exited_during_read(proc.pid or 0) from None
            return Unknown(f"cannot read the process's memory at {address:#x}: {exc.strerror or exc}")
        if not data and size:
            if not proc.exists():
                raise exited_during_read(proc.pid or 0)
            return Unknown(f"short read of the process's memory at {address:#x}")
        return data

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
