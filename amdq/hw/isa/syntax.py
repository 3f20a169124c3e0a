"""The disassembler's family seam: the decoder and the text formatter of each ISA family.

    decoder(family) -> decode(code, pc, base, wave64)     rdna3, rdna4, cdna3 (exactly gfx942), cdna4
    text(inst) -> str                                     LLVM syntax, by the family that decoded it
"""
from __future__ import annotations

from typing import Callable

from amdq.errors import UnsupportedTarget

from .decode import Inst


def decoder(family: str = "rdna3") -> Callable:
    """The decode function of an ISA family ("rdna3", "rdna4", "cdna3", "cdna4")."""
    if family in ("cdna3", "cdna4"):       # gfx942 exactly; CDNA4 (gfx950) the tables' superset
        from .decode_cdna import CDNA, GFX942
        return GFX942.decode if family == "cdna3" else CDNA.decode
    if family == "rdna4":
        from .decode_rdna4 import decode
        return decode
    if family != "rdna3":
        raise UnsupportedTarget(f"the disassembler reads rdna3, rdna4, cdna3 and cdna4 code, not {family}")
    from .decode import decode
    return decode


def text(inst: Inst) -> str:
    """The LLVM-syntax text of a decoded instruction."""
    if inst.family == "cdna3":
        from .text_cdna import text9
        return text9(inst)
    from .text import text as rdna
    return rdna(inst)
