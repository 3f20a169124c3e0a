"""Disassembler in LLVM syntax for the ISA families the decoder reads (the text llvm-objdump prints): rdna3
(gfx11), rdna4 (gfx12), cdna3 (gfx942, exactly its operations) and cdna4 (gfx950).

    disassemble(code, arch, base=0, wave64=None) -> [(address, size, text)]   listing of a code region
    disassemble_elf(elf_bytes) -> {kernel: [(address, size, text)]}          listing per function symbol
    labelled(listing, func) -> [(label or None, address, text)]               branch targets as BB<func>_<n> labels
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


BRANCHES = ("s_branch", "s_cbranch_")       # SOPP branches: target = pc + 4 + simm16 * 4
CALLS = ("s_call_b64",)                      # SOPK: the same offset form


def branch_target(pc: int, size: int, asm: str) -> int | None:
    """The address a branch (s_branch, s_cbranch_*, s_call_b64) jumps to, from its 16-bit signed dword offset."""
    op, _, rest = asm.partition(" ")
    if not (op.startswith(BRANCHES) or op in CALLS) or not rest:
        return None
    last = rest.split(",")[-1].strip()
    try:
        v = int(last, 0)
    except ValueError:
        return None
    if 0x8000 <= v <= 0xFFFF:
        v -= 0x10000
    if not -0x8000 <= v <= 0x7FFF:
        return None
    return pc + 4 + 4 * v


def labelled(listing: list[tuple[int, int, str]], func: int = 0) -> list[tuple[str | None, int, str]]:
    """The listing with branch targets as labels, LLVM's way (`BB<function>_<n>:` before each target, in address
    order; the branch names its label): [(label or None, address, text)]. A target outside the listing keeps its
    number."""
    addrs = {pc for pc, _, _ in listing}
    targets = sorted({t for pc, size, asm in listing if (t := branch_target(pc, size, asm)) is not None and t in addrs})
    names = {t: f"BB{func}_{k}" for k, t in enumerate(targets)}
    out = []
    for pc, size, asm in listing:
        t = branch_target(pc, size, asm)
        if t is not None and t in names:
            head, _, rest = asm.partition(" ")
            parts = rest.split(",")
            parts[-1] = (" " if len(parts) > 1 else "") + names[t]
            asm = f"{head} {','.join(parts)}"
        out.append((names.get(pc), pc, asm))
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the listing of a code object: python -m amdq.tools.disasm file.hsaco"""
    for path in (argv if argv is not None else sys.argv[1:]):
        for name, listing in disassemble_elf(open(path, "rb").read()).items():
            print(f"{name}:")
            for pc, _, t in listing:
                print(f"  {pc:#08x}  {t}")


if __name__ == "__main__":
    main()
