"""The ISA seam of the shader core: one front end per instruction-set family (decoder, handler table),
chosen from the dispatch's target (Target.isa, hw/targets.py) and part of every decoded-instruction cache key.

Front ends: RDNA3 (gfx11, also gfx11.5), RDNA4 (gfx12: hw/isa/decode_rdna4.py, rdna4.py), CDNA3 (gfx942:
hw/isa/decode_cdna.py, cdna.py; the gfx950-only opcodes of hw/isa/gfx950.py are illegal there) and CDNA4 (gfx950:
the CDNA3 front end plus cdna4.py). A family without a front end is refused with UnsupportedInstruction when a
dispatch starts instead of being decoded with the wrong tables.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...errors import UnsupportedInstruction
from ...hw.targets import GENERATIONS


@dataclass(frozen=True)
class Isa:
    """One family's front end: decode(code, pc, base, wave64) -> Inst, the look-ahead for dead masks, and
    the handler builders by instruction key (with the keys of handlers that set the PC themselves)."""
    name: str
    decode: Callable
    mask_dead: Callable
    handlers: dict
    control: frozenset

    def build(self, inst):
        b = self.handlers.get(inst.key)
        if b is None:
            from .ops import unsupported
            raise unsupported(inst)
        return b(inst)


def _rdna3() -> Isa:
    """gfx11 and gfx11.5: the RDNA3.5 tables (a superset of RDNA3's); gfx11.5's scalar float operations run
    with the handlers RDNA4 shares them with (same semantics: AMD RDNA3.5 and RDNA4 ISA guides, SALU)."""
    from ...hw.isa import decode
    from . import lds, rdna4, salu, smem, valu, vmem  # noqa: F401  the families fill the handler table
    from .ops import CONTROL, HANDLERS
    salu_float = {k: v for k, v in rdna4.OVERRIDES.items()
                  if k in ("s_add_f32", "s_sub_f32", "s_mul_f32") or k.startswith(("s_cvt_", "s_cmp_"))}
    return Isa("rdna3", decode.decode, decode.mask_dead, {**HANDLERS, **salu_float}, frozenset(CONTROL))


def _rdna4() -> Isa:
    """gfx12 (RDNA4): its own decoder and the RDNA3 handlers with RDNA4's overrides and aliases."""
    from ...hw.isa import decode_rdna4
    from . import lds, rdna4, salu, smem, valu, vmem  # noqa: F401
    from .ops import CONTROL
    return Isa("rdna4", decode_rdna4.decode, decode_rdna4.mask_dead, rdna4.handlers(), frozenset(CONTROL))


def _cdna3() -> Isa:
    """gfx942 (CDNA3): the gfx9 decoder refusing gfx950's additions as illegal; the RDNA3 handlers where the
    operations agree, gfx9 ones elsewhere, and none of the keys only gfx950 has."""
    from ...hw.isa import decode_cdna, gfx950
    from . import cdna, cdna4
    rdna3 = _rdna3()
    drop = cdna4.gfx950_keys()
    handlers = {k: b for k, b in cdna.table(rdna3.handlers).items() if k not in drop}
    return Isa("cdna3", gfx950.decode_gfx942, decode_cdna.mask_dead, handlers, rdna3.control)


def _cdna4() -> Isa:
    """gfx950 (CDNA4): CDNA3 plus its additions (the whole CDNA4 opcode table, cdna4.py's handlers)."""
    from ...hw.isa import decode_cdna
    from . import cdna4
    cdna3, rdna3 = for_isa("cdna3"), _rdna3()
    return Isa("cdna4", decode_cdna.decode, decode_cdna.mask_dead, cdna4.table(cdna3.handlers, rdna3.handlers),
               cdna3.control)


FRONT_ENDS: dict[str, Callable[[], Isa]] = {"rdna3": _rdna3, "rdna4": _rdna4, "cdna3": _cdna3, "cdna4": _cdna4}
_made: dict[str, Isa] = {}


def for_gfx(gfx: int, pc: int | None = None) -> Isa:
    """The front end of a GPU generation's first family (9 -> cdna3, 11, 12); for_isa names one exactly."""
    return for_isa(GENERATIONS[gfx].isa if gfx in GENERATIONS else f"gfx{gfx}", pc)


def for_isa(family: str, pc: int | None = None) -> Isa:
    """The front end of an ISA family (Target.isa: "rdna3", "rdna4", "cdna3", "cdna4"); UnsupportedInstruction
    for a family without one."""
    isa = _made.get(family)
    if isa is None:
        make = FRONT_ENDS.get(family)
        if make is None:
            raise UnsupportedInstruction(f"the simulated shader core has no {family} front end yet ({family} code "
                                         f"cannot run; families: {', '.join(FRONT_ENDS)})", address=pc, pc=pc,
                                         encoding=family)
        isa = _made[family] = make()
    return isa
