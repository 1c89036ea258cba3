"""Library files named like OpenBLAS, built with gcc and changed the ways an attacker would: shared by
the hostile-input tests of the count reader (tests/test_inforce_hostile.py) and bench/hostile.py."""
from __future__ import annotations

import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

from elftools.elf.elffile import ELFFile

# Shaped like OpenBLAS's pthreads build: the count, its getter and setter, a bound array.
SOURCE = r"""
#include <unistd.h>
#ifndef COUNT
#define COUNT 3
#endif
#ifdef LOCAL
static
#endif
int blas_cpu_number = COUNT;
int other_number = 7;
const char openblas_config[] = "OpenBLAS 0.3.99 pthreads";
#ifdef MAXT
void *blas_thread_buffer[MAXT];
#endif
int openblas_get_num_threads(void) {
#if defined(LIAR)
    return other_number;
#elif defined(ELSEWISE)
    return (int)sysconf(_SC_NPROCESSORS_ONLN) + blas_cpu_number;
#else
    return blas_cpu_number;
#endif
}
void openblas_set_num_threads(int n) { blas_cpu_number = n; other_number = n + 5; }
"""

def build(folder: Path, name: str, *flags: str) -> Path:
    src = folder / "fake.c"
    src.write_text(SOURCE)
    out = folder / name
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", *flags, "-o", str(out), str(src)], check=True, timeout=120)
    out.chmod(0o644)
    return out


def section(path: Path, name: str) -> tuple[int, int, int]:
    """(header offset in the file, sh_offset, sh_size) of section ``name``."""
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        for i in range(elf.num_sections()):
            sec = elf.get_section(i)
            if sec.name == name:
                return elf["e_shoff"] + i * elf["e_shentsize"], sec["sh_offset"], sec["sh_size"]
    raise AssertionError(f"{path} has no {name}")


def poke(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def after_load_bloom_zero(path: Path) -> None:
    """Its .gnu.hash's bloom size set to 0 once loaded (the loader would crash on it), which made
    pyelftools divide by zero."""
    _, offset, _ = section(path, ".gnu.hash")
    poke(path, offset + 8, struct.pack("<I", 0))


def sparse_dynsym(entries: int) -> Callable[[Path], None]:
    """.dynsym claims ``entries`` entries at the end of a file grown sparse to hold them; no section
    is a hash table any more."""
    def change(path: Path) -> None:
        header, _, _ = section(path, ".dynsym")
        end = path.stat().st_size
        with open(path, "r+b") as fh:
            fh.truncate(end + entries * 24)
        poke(path, header + 0x18, struct.pack("<QQ", end, entries * 24))
        for name in (".gnu.hash", ".hash"):
            try:
                hash_header, _, _ = section(path, name)
            except AssertionError:
                continue
            poke(path, hash_header + 4, struct.pack("<I", 1))  # SHT_PROGBITS
    return change
