"""Disassembler in LLVM syntax for the ISA families the decoder reads (the text llvm-objdump prints): rdna3
(gfx11), rdna4 (gfx12), cdna3 (gfx942, exactly its operations) and cdna4 (gfx950).

    disassemble(code, arch, base=0, wave64=None) -> [(address, size, text)]   listing of a code region
    disassemble_elf(elf_bytes) -> {kernel: [(address, size, text)]}          listing per function symbol
"""
from __future__ import annotations

import struct
import sys

from amdq.errors import AmdqError, UnsupportedTarget
from amdq.hw.isa.syntax import decoder, text
from amdq.hw.targets import GENERATIONS, TARGETS

FAMILIES = ("rdna3", "rdna4", "cdna3", "cdna4")


def _family(arch: str) -> tuple[str, bool]:
    """(ISA family, default wave64) of a target name (gfx1100, gfx942) or a family name (rdna3)."""
    t = TARGETS.get(arch.split(":")[0].strip().lower())
    if t is not None:
        # gfx950 shares gfx942's generation (and front end) but has CDNA4's operations
        return ("cdna4" if t.arch == "gfx950" else t.gen.isa), not t.gen.wave32
    for g in GENERATIONS.values():
        if g.isa == arch:
            return arch, not g.wave32
    if arch == "cdna4":
        return arch, True
    raise UnsupportedTarget(f"no decoder for {arch!r} (targets: {', '.join(TARGETS)}; families: {', '.join(FAMILIES)})")


def disassemble(code: bytes, arch: str, base: int = 0, wave64: bool | None = None) -> list[tuple[int, int, str]]:
    """[(address, size, text)] for a code region; a word that does not decode is `.long 0x...` of size 4 and the
    listing goes on. wave64=None: the target's default wave size. UnsupportedTarget for an arch without a decoder."""
    family, default64 = _family(arch)
    dec = decoder(family)
    wave64 = default64 if wave64 is None else wave64
    code = bytes(code)
    out, pc, end = [], base, base + len(code)
    while pc + 4 <= end:
        try:
            inst = dec(code, pc, base, wave64)
            out.append((pc, inst.size, text(inst)))
            pc += inst.size
            continue
        except AmdqError:
            pass
        raw = None
        if family == "rdna3":
            from amdq.hw.isa.text_raw import text_raw       # encodings the decoder does not model
            raw = text_raw(code, pc - base, wave64)
        if raw:
            out.append((pc, raw[1], raw[0]))
            pc += raw[1]
        else:
            out.append((pc, 4, f".long {struct.unpack_from('<I', code, pc - base)[0]:#010x}"))
            pc += 4
    return out


def kernels(elf: bytes, img=None) -> dict[str, tuple[int, bytes, bool]]:
    """Function symbol -> (address, code bytes, wave64) of an AMDGPU code object, as the loader lays it out."""
    from ..codeobj import load_code_object
    img = img or load_code_object(elf)
    code = img.at(0)
    out = {}
    for name, (off, size, typ) in sorted(img.symbols.items(), key=lambda kv: kv[1][0]):
        if typ == "STT_FUNC":
            k = img.kernels.get(name)
            wave64 = (not k.descriptor.wave32) if k else img.target.wave_size == 64
            out[name] = (off, bytes(code[off:off + size]), wave64)
    return out


def disassemble_elf(elf: bytes) -> dict[str, list[tuple[int, int, str]]]:
    """Listing per function symbol of an AMDGPU code object (ET_REL .o or linked .hsaco)."""
    from ..codeobj import load_code_object
    img = load_code_object(elf)
    return {name: disassemble(code, img.target.arch, addr, wave64)
            for name, (addr, code, wave64) in kernels(elf, img).items()}


def main(argv: list[str] | None = None) -> None:
    """Print the listing of a code object: python -m amdq.tools.disasm file.hsaco"""
    for path in (argv if argv is not None else sys.argv[1:]):
        for name, listing in disassemble_elf(open(path, "rb").read()).items():
            print(f"{name}:")
            for pc, _, t in listing:
                print(f"  {pc:#08x}  {t}")


if __name__ == "__main__":
    main()
