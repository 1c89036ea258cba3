"""Which variable a count getter returns, decoded from its first few dozen bytes of machine code.

A library's exported getter (OpenBLAS's ``openblas_get_num_threads``) is, on the builds parinfo
knows, a load of the count variable followed by a return, sometimes behind a check that the library
is set up. Decoding that load tells where the count lives when no symbol names it, and confirms that
a library is what its name says when one does. Only these forms are decoded, on the straight path
from the entry to the first return (branches are not followed):

- x86-64: ``endbr64``, ``nop``; ``mov eax, [rip+disp32]`` (also ``movsxd rax, [rip+disp32]``);
  ``mov rax, [rip+disp32]`` then ``mov eax, [rax]`` (through the GOT, when the variable may be
  interposed); ``cmp dword [rip+disp32], imm8``; ``test eax, eax``; ``je``/``jne`` rel8; ``ret``;
- aarch64: ``bti``, ``paciasp``, ``nop``; ``adrp xN, page``; ``add xN, xN, #imm``;
  ``ldr wN, [xM, #imm]``; ``ldr xN, [xM, #imm]`` (a GOT slot); ``cbz``/``cbnz wN``; ``ret``.

Anything else is an :class:`~parinfo.records.unknown.Unknown` with the reason: the count is then
unknown, never guessed.
"""
from __future__ import annotations

from parinfo.records.unknown import Unknown

__all__ = ["MAX_BYTES", "Load", "loaded_address"]

#: At most this many bytes of a getter are decoded.
MAX_BYTES = 64


#: Where a getter loads its result from: (address, through): the variable's address, or with
#: ``through`` the address of a pointer slot (the GOT) that holds the variable's address.
Load = tuple[int, bool]

_NO_LOAD = Unknown("the getter returns without loading a variable")


def loaded_address(code: bytes, address: int, machine: str, little: bool = True) -> Load | Unknown:
    """Where the getter at ``address`` (whose first bytes are ``code``) loads the 4-byte value it
    returns (:data:`Load`), or Unknown saying why it cannot be told. ``machine`` is "x86_64" or "aarch64"."""
    code = code[:MAX_BYTES]
    if machine == "x86_64" and little:
        return _x86_64(code, address)
    if machine == "aarch64" and little:
        return _aarch64(code, address)
    return Unknown(f"parinfo does not decode {machine} getters")


# (opening bytes, length, what it does): "load" eax from [rip+disp32] (its last four bytes), "slot"
# rax from [rip+disp32], "deref" eax from [rax]
_X86_FORMS: tuple[tuple[bytes, int, str], ...] = (
    (b"\xf3\x0f\x1e\xfa", 4, ""),  # endbr64
    (b"\x90", 1, ""),  # nop
    (b"\x8b\x05", 6, "load"),  # mov eax, [rip+disp32]
    (b"\x48\x63\x05", 7, "load"),  # movsxd rax, [rip+disp32]
    (b"\x48\x8b\x05", 7, "slot"),  # mov rax, [rip+disp32]
    (b"\x8b\x00", 2, "deref"),  # mov eax, [rax]
    (b"\x83\x3d", 7, ""),  # cmp dword [rip+disp32], imm8
    (b"\x85\xc0", 2, ""),  # test eax, eax
    (b"\x74", 2, ""),  # je rel8: the straight path goes on
    (b"\x75", 2, ""),  # jne rel8
)


def _x86_64(code: bytes, address: int) -> Load | Unknown:
    i, loaded, slot = 0, None, None
    while i < len(code):
        if code[i] == 0xC3:  # ret
            return loaded if loaded is not None else _NO_LOAD
        form = next((f for f in _X86_FORMS if code.startswith(f[0], i) and i + f[1] <= len(code)), None)
        if form is None:
            return Unknown(f"the getter's code is not a load parinfo knows (byte {code[i]:#04x} at +{i})")
        i += form[1]
        target = address + i + int.from_bytes(code[i - 4:i], "little", signed=True)
        if form[2] == "load":
            loaded, slot = (target, False), None
        elif form[2] == "slot":
            loaded, slot = None, target
        elif form[2] == "deref":
            if slot is None:
                return Unknown("the getter loads through a pointer parinfo cannot follow")
            loaded, slot = (slot, True), None
    return Unknown(f"no return within the getter's first {len(code)} bytes")


_RET = 0xD65F03C0
_HINTS = {0xD503201F, 0xD503233F, 0xD503245F, 0xD503241F, 0xD50324DF}  # nop, paciasp, bti c/j/jc


def _aarch64(code: bytes, address: int) -> Load | Unknown:
    regs: dict[int, Load] = {}  # register -> the address it holds (through: read from a slot)
    loaded: Load | None = None
    for i in range(0, len(code) - 3, 4):
        insn = int.from_bytes(code[i:i + 4], "little")
        pc = address + i
        rd, rn = insn & 0x1F, (insn >> 5) & 0x1F
        base = regs.get(rn)
        if insn == _RET:
            return loaded if loaded is not None else _NO_LOAD
        if insn in _HINTS:
            continue
        if insn & 0x9F000000 == 0x90000000:  # adrp
            imm = (((insn >> 5) & 0x7FFFF) << 2) | ((insn >> 29) & 3)
            imm -= (imm & (1 << 20)) << 1  # sign-extend 21 bits
            regs[rd] = ((pc & ~0xFFF) + (imm << 12), False)
        elif insn & 0xFFC00000 == 0x91000000 and base is not None and not base[1]:  # add xd, xn, #imm12
            regs[rd] = (base[0] + ((insn >> 10) & 0xFFF), False)
        elif insn & 0xFFC00000 == 0xF9400000 and base is not None and not base[1]:  # ldr xt, [xn, #imm*8]
            regs[rd] = (base[0] + ((insn >> 10) & 0xFFF) * 8, True)
        elif insn & 0xFFC00000 == 0xB9400000 and base is not None:  # ldr wt, [xn, #imm*4]
            if base[1] and insn & 0x3FFC00:
                return Unknown("the getter loads at an offset from a pointer parinfo cannot follow")
            regs.pop(rd, None)
            if rd == 0:
                loaded = base if base[1] else (base[0] + ((insn >> 10) & 0xFFF) * 4, False)
        elif insn & 0x7E000000 == 0x34000000 and not insn & 0x80000000:  # cbz/cbnz wN: straight on
            continue
        else:
            return Unknown(f"the getter's code is not a load parinfo knows (instruction {insn:#010x} at +{i})")
    return Unknown(f"no return within the getter's first {len(code)} bytes")
