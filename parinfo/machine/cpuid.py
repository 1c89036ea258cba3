"""CPU identity: brand, vendor, architecture, the ISA extensions that matter for kernels, cache sizes.

The fast path reads the first processor block of /proc/cpuinfo and the sysfs cache directories
(well under a millisecond, cached in-process). py-cpuinfo (about a second per call: it starts a
subprocess) is used only when the fast path lacks the brand or /proc/cpuinfo, or when ``slow=True``;
its answer is cached per boot (key: /proc/sys/kernel/random/boot_id) in $XDG_CACHE_HOME/parinfo, and
an unwritable cache directory only means it is not cached. Cache sizes come from sysfs alone:
py-cpuinfo's can be wrong.
"""
from __future__ import annotations

import copy
import os
import re
from dataclasses import field
from functools import lru_cache
from typing import TypedDict

from parinfo.machine.sysfs import Unreadable, read, read_bytes, shown
from parinfo.records.convert import OMIT_NONE
from parinfo.records.record import record
from parinfo.records.source import Source, file, unknown

# (name shown, /proc/cpuinfo flag). py-cpuinfo's names differ only by underscores.
X86_ISA: tuple[tuple[str, str], ...] = (
    ("AVX", "avx"), ("AVX2", "avx2"), ("FMA", "fma"), ("F16C", "f16c"),
    ("AVX-512F", "avx512f"), ("AVX-512BW", "avx512bw"), ("AVX-512VL", "avx512vl"),
    ("AVX-512VNNI", "avx512_vnni"), ("AVX-512BF16", "avx512_bf16"), ("AVX-512FP16", "avx512_fp16"),
    ("AVX-VNNI", "avx_vnni"), ("AMX-TILE", "amx_tile"), ("AMX-BF16", "amx_bf16"), ("AMX-INT8", "amx_int8"),
)
ARM_ISA: tuple[tuple[str, str], ...] = (
    ("NEON", "asimd"), ("SVE", "sve"), ("SVE2", "sve2"), ("DOTPROD", "asimddp"), ("I8MM", "i8mm"),
    ("BF16", "bf16"), ("SME", "sme"),
)
# "CPU implementer" codes of /proc/cpuinfo on ARM (from the Arm architecture reference manual).
ARM_IMPLEMENTERS = {
    0x41: "ARM", 0x42: "Broadcom", 0x43: "Cavium", 0x46: "Fujitsu", 0x48: "HiSilicon", 0x4E: "NVIDIA",
    0x50: "APM", 0x51: "Qualcomm", 0x53: "Samsung", 0x61: "Apple", 0x69: "Intel", 0xC0: "Ampere",
}
_X86_ARCHES = ("x86_64", "amd64", "i386", "i686", "x86")
CACHE_FORMAT = 1


#: Where the fast path reads the CPU's identity.
FAST_SOURCE = file("/proc/cpuinfo + sysfs")

@record
class CpuIdentity:
    """The CPU as :func:`cpu_identity` describes it: the report's ``cpu`` section (its JSON).

    ``hz_advertised`` is py-cpuinfo's advertised clock, asked for only with ``slow=True``.
    """

    brand: str | None = None
    vendor: str | None = None
    arch: str | None = None
    isa: list[str] = field(default_factory=list)
    isa_checked: list[str] = field(default_factory=list)
    caches: dict[str, int] = field(default_factory=dict)
    source: Source = field(default=FAST_SOURCE, metadata={"missing": unknown("not in the report")})
    unknown: dict[str, str] = field(default_factory=dict)
    hz_advertised: str | None = field(default=None, metadata=OMIT_NONE)


def cpu_identity(root: str = "/", slow: bool = False) -> CpuIdentity:
    """Describe the CPU: ``brand``, ``vendor``, ``arch``, ``isa`` (the kernel-relevant extensions
    present, e.g. ["AVX", "AVX2", "FMA"]), ``isa_checked`` (every extension looked for on this arch,
    so "AVX-512F not in isa" means absent), ``caches`` ({"L1d": bytes, ...}), ``source`` and
    ``unknown`` ({field: reason}). ``slow=True`` also asks py-cpuinfo (cached per boot) and adds
    ``hz_advertised``.
    """
    root = os.path.abspath(root)
    info = copy.deepcopy(_fast(root))
    real = root == "/"
    if real and (slow or info.brand is None or "proc_cpuinfo" in info.unknown):
        _merge_slow(info, _slow(root), slow)
    info.unknown.pop("proc_cpuinfo", None)
    for name in ("brand", "vendor", "arch"):
        if getattr(info, name) is None and name not in info.unknown:
            info.unknown[name] = "not in /proc/cpuinfo"
    return info


@lru_cache(maxsize=8)
def _fast(root: str) -> CpuIdentity:
    unknown: dict[str, str] = {}
    fields: dict[str, str] = {}
    try:
        fields = _first_processor(root)
    except Unreadable as exc:
        unknown["proc_cpuinfo"] = str(exc)
        for name in ("brand", "vendor", "isa"):
            unknown[name] = str(exc)
    arch = os.uname().machine if root == "/" else _guess_arch(fields)
    flags = fields.get("flags") or fields.get("features")
    vendor = fields.get("vendor_id")
    if vendor is None and "cpu implementer" in fields:
        vendor = _arm_vendor(fields["cpu implementer"])
    brand = fields.get("model name") or fields.get("hardware") or fields.get("cpu model")
    caches = _caches(root, unknown)
    if flags is None and "proc_cpuinfo" not in unknown:
        unknown["isa"] = "no flags/Features line in /proc/cpuinfo"
    return CpuIdentity(brand, vendor, arch, _isa(arch, flags.split() if flags else None),
                       [name for name, _ in _isa_table(arch)] if flags else [], caches,
                       unknown=unknown)


def _first_processor(root: str) -> dict[str, str]:
    """The key/value lines of the first processor block; later blocks are not even generated."""
    rel = "proc/cpuinfo"
    try:
        text = read_bytes(os.path.join(root, rel), stop=b"\n\n").decode("utf-8", "replace")
    except OSError as exc:
        raise Unreadable(f"cannot read {shown(rel)}: {exc.strerror or exc}") from None
    fields: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    if not fields:
        raise Unreadable(f"{shown(rel)} is empty")
    # ARM lists the model name (when at all) and Hardware after the processor blocks
    if "model name" not in fields and "\n\n" in text:
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip().lower() in ("model name", "hardware") and value.strip():
                fields.setdefault(key.strip().lower(), value.strip())
    return fields


def _guess_arch(fields: dict[str, str]) -> str | None:
    """The architecture a fake root's /proc/cpuinfo describes (the real root asks uname)."""
    if "flags" in fields or "vendor_id" in fields:
        return "x86_64" if "lm" in fields.get("flags", "").split() else "i686"
    if "asimd" in fields.get("features", "").split() or fields.get("cpu architecture") == "8":
        return "aarch64"
    if "features" in fields or "cpu implementer" in fields:
        return "arm"
    return None


def _arm_vendor(code: str) -> str | None:
    try:
        value = int(code, 0)
    except ValueError:
        return None
    return ARM_IMPLEMENTERS.get(value, f"implementer {code}")


def _isa_table(arch: str | None) -> tuple[tuple[str, str], ...]:
    a = (arch or "").lower()
    if a in _X86_ARCHES:
        return X86_ISA
    if a.startswith(("aarch64", "arm")):
        return ARM_ISA
    return ()


def _isa(arch: str | None, flags: list[str] | None) -> list[str]:
    """The extensions of the arch's table that ``flags`` has, in table order."""
    if flags is None:
        return []
    have = {f.replace("_", "").lower() for f in flags}
    if "neon" in have:
        have.add("asimd")  # 32-bit ARM spells Advanced SIMD "neon"
    return [name for name, flag in _isa_table(arch) if flag.replace("_", "") in have]


_SIZE = re.compile(r"^(\d+)\s*([KMG]?)B?$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def _caches(root: str, unknown: dict[str, str]) -> dict[str, int]:
    """Cache sizes in bytes of cpu0 by name: L1d, L1i, L2, L3 (and any other level listed)."""
    rel = "sys/devices/system/cpu/cpu0/cache"
    try:
        names = sorted(n for n in os.listdir(os.path.join(root, rel)) if n.startswith("index"))
    except OSError as exc:
        unknown["caches"] = f"cannot list {shown(rel)}: {exc.strerror or exc}"
        return {}
    out: dict[str, int] = {}
    for name in names:
        base = f"{rel}/{name}"
        try:
            level, kind, size = (read(root, f"{base}/{f}") for f in ("level", "type", "size"))
        except Unreadable as exc:
            unknown["caches"] = str(exc)
            continue
        m = _SIZE.match(size)
        if not level.isdigit() or m is None:
            unknown["caches"] = f"unexpected content in {shown(base)}: level {level!r} size {size!r}"
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        out[f"L{level}{suffix}"] = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if not out and "caches" not in unknown:
        unknown["caches"] = f"no cache described under {shown(rel)}"
    return dict(sorted(out.items()))


# --- py-cpuinfo, cached per boot ---------------------------------------------------------------------

_SLOW_KEYS = ("brand_raw", "vendor_id_raw", "arch_string_raw", "flags", "hz_advertised_friendly")


class SlowAnswer(TypedDict, total=False):
    """py-cpuinfo's answer as parinfo keeps it (the keys of ``_SLOW_KEYS``), or why it failed
    (``error``): the shape of the per-boot cache file, so a file of another shape is not believed."""

    format: int
    brand_raw: str | None
    vendor_id_raw: str | None
    arch_string_raw: str | None
    flags: list[str] | None
    hz_advertised_friendly: str | None
    error: str


def cache_dir() -> str:
    """Where parinfo keeps per-boot caches: $XDG_CACHE_HOME/parinfo, default ~/.cache/parinfo."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "parinfo")


def _boot_id(root: str) -> str | None:
    try:
        text = read(root, "proc/sys/kernel/random/boot_id")
    except Unreadable:
        return None
    return text if re.fullmatch(r"[0-9a-fA-F-]{8,64}", text) else None


def _slow(root: str) -> SlowAnswer:
    """py-cpuinfo's answer (only the keys parinfo uses), from memory, the per-boot file, or a call."""
    return _slow_for_boot(_boot_id(root))


@lru_cache(maxsize=8)
def _slow_for_boot(boot: str | None) -> SlowAnswer:
    """py-cpuinfo's answer for this boot (None: no boot id), once per process."""
    path = os.path.join(cache_dir(), f"cpuinfo-{boot}.json") if boot else None
    data = _load(path) if path else None
    if data is None:
        data = _call_py_cpuinfo()
        if path and "error" not in data:
            _store(path, data)
    return data


def _call_py_cpuinfo() -> SlowAnswer:
    try:
        import cpuinfo

        raw = cpuinfo.get_cpu_info()
    except Exception as exc:  # any failure of py-cpuinfo is an "unknown", not a crash
        return {"format": CACHE_FORMAT, "error": f"py-cpuinfo failed: {exc}"}
    return {"brand_raw": raw.get("brand_raw"), "vendor_id_raw": raw.get("vendor_id_raw"),
            "arch_string_raw": raw.get("arch_string_raw"), "flags": raw.get("flags"),
            "hz_advertised_friendly": raw.get("hz_advertised_friendly"), "format": CACHE_FORMAT}


_CACHE_MAX_BYTES = 64 * 1024


def _load(path: str) -> SlowAnswer | None:
    """The cached answer, or None. The file is untrusted: it is read through :mod:`parinfo.safe_file`
    (a small regular file, in a folder no other user can write: a FIFO would block, a link to
    /dev/zero would never end), and every value is type-checked."""
    import json

    import parinfo.safe_file as safe_file

    try:
        folder = safe_file.writable_dir(os.path.dirname(path), make=False)
    except OSError:
        return None
    try:
        raw = safe_file.read_file(os.path.basename(path), _CACHE_MAX_BYTES + 1, dir_fd=folder)
    except OSError:
        return None
    finally:
        os.close(folder)
    if len(raw) > _CACHE_MAX_BYTES:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return _checked(data)


def _checked(data: object) -> SlowAnswer | None:
    """``data`` when it has the cache's shape (strings, and a list of strings for flags), else None."""
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
        return None
    texts: dict[str, str | None] = {}
    for key in ("brand_raw", "vendor_id_raw", "arch_string_raw", "hz_advertised_friendly"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            return None
        texts[key] = value
    flags = data.get("flags")
    if flags is not None and not (isinstance(flags, list) and all(isinstance(f, str) for f in flags)):
        return None
    return {"brand_raw": texts["brand_raw"], "vendor_id_raw": texts["vendor_id_raw"],
            "arch_string_raw": texts["arch_string_raw"], "flags": flags,
            "hz_advertised_friendly": texts["hz_advertised_friendly"], "format": CACHE_FORMAT}


def _store(path: str, data: SlowAnswer) -> None:
    """Cache ``data`` at ``path``: written to a new file of a temporary name in the cache folder
    (made, or checked, by :func:`parinfo.safe_file.writable_dir`), then renamed over ``path``."""
    import json

    import parinfo.safe_file as safe_file

    try:
        folder = safe_file.writable_dir(os.path.dirname(path))
    except OSError:
        return  # an unwritable cache only costs the next process another py-cpuinfo call
    tmp = f".cpuinfo-{os.getpid()}-{os.urandom(4).hex()}.tmp"
    try:
        fd = safe_file.create(folder, tmp)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, os.path.basename(path), src_dir_fd=folder, dst_dir_fd=folder)
    except OSError:
        try:
            os.unlink(tmp, dir_fd=folder)
        except OSError:
            pass
    finally:
        os.close(folder)


def _merge_slow(info: CpuIdentity, data: SlowAnswer, slow: bool) -> None:
    if "error" in data:
        if info.brand is None:
            info.unknown["brand"] = data["error"]
        return
    used = False
    for field_, value in (("brand", data.get("brand_raw")), ("vendor", data.get("vendor_id_raw")),
                          ("arch", data.get("arch_string_raw"))):
        if getattr(info, field_) is None and isinstance(value, str) and value:
            setattr(info, field_, value)
            info.unknown.pop(field_, None)
            used = True
    flags = data.get("flags")
    if not info.isa_checked and isinstance(flags, list):
        info.isa = _isa(info.arch, [str(f) for f in flags])
        info.isa_checked = [name for name, _ in _isa_table(info.arch)]
        if info.isa_checked:
            info.unknown.pop("isa", None)
            used = True
    if slow:
        hz = data.get("hz_advertised_friendly")
        info.hz_advertised = hz if isinstance(hz, str) else None
        used = True
    if used:
        info.source = file(f"{FAST_SOURCE.detail} + py-cpuinfo")
