"""Applying AMDGPU relocations to a loaded image.

Source: LLVM AMDGPUUsage "Relocation Records": S = symbol address, A = addend, P = address of the
patched location, B = image base.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import CodeObjectError
from ..hw.elf import R_AMDGPU, R_BY_NAME

M64 = (1 << 64) - 1


@dataclass(frozen=True)
class Fixup:
    offset: int          # image offset of the patched bytes (P - B)
    type: int
    sym: int | None      # image offset of the symbol (S - B), None for RELATIVE64
    sym_abs: bool        # the symbol is absolute (SHN_ABS): S does not move with B
    addend: int
    section: str         # for messages

    def value(self, base: int) -> tuple[int, int]:
        """(bytes to write, value) at image base `base`."""
        t = self.type
        if t == RELATIVE64:
            return 8, (base + self.addend) & M64
        s = (self.sym if self.sym_abs else base + self.sym) + self.addend
        p = base + self.offset
        if t == ABS64:
            return 8, s & M64
        if t == REL64:
            return 8, (s - p) & M64
        if t == ABS32_LO:
            return 4, s & 0xFFFFFFFF
        if t == ABS32_HI:
            return 4, (s >> 32) & 0xFFFFFFFF
        if t == REL32_LO or t == REL32:
            return 4, (s - p) & 0xFFFFFFFF
        if t == REL32_HI:
            return 4, ((s - p) >> 32) & 0xFFFFFFFF
        if t == ABS32:
            if not 0 <= s < 1 << 32:
                raise CodeObjectError(f"R_AMDGPU_ABS32 in {self.section} at {self.offset:#x}: value {s:#x} "
                                      f"does not fit 32 bits (load the image below 4 GiB or relink)")
            return 4, s
        raise AssertionError(t)


ABS32_LO, ABS32_HI, ABS64, REL32, REL64, ABS32, REL32_LO, REL32_HI, RELATIVE64 = (
    R_BY_NAME[n] for n in ("R_AMDGPU_ABS32_LO", "R_AMDGPU_ABS32_HI", "R_AMDGPU_ABS64", "R_AMDGPU_REL32",
                           "R_AMDGPU_REL64", "R_AMDGPU_ABS32", "R_AMDGPU_REL32_LO", "R_AMDGPU_REL32_HI",
                           "R_AMDGPU_RELATIVE64"))
SUPPORTED = {ABS32_LO, ABS32_HI, ABS64, REL32, REL64, ABS32, REL32_LO, REL32_HI, RELATIVE64}
NONE = 0


def check_type(t: int, section: str) -> None:
    if t in SUPPORTED:
        return
    name = R_AMDGPU.get(t, f"unknown relocation type {t}")
    raise CodeObjectError(f"{name} in {section} is not supported by the loader "
                          f"(supported: {', '.join(R_AMDGPU[x] for x in sorted(SUPPORTED))})")


def apply(image: bytearray, fixups: list[Fixup], base: int) -> None:
    """Patch `image` in place for loading at GPU address `base`."""
    for f in fixups:
        n, v = f.value(base)
        struct.pack_into("<Q" if n == 8 else "<I", image, f.offset, v)
