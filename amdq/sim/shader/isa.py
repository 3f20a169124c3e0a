"""The ISA seam of the shader core: one front end per instruction-set family (decoder, handler table),
chosen from the dispatch's target (Target.isa, hw/targets.py) and part of every decoded-instruction cache key.

Front ends: RDNA3 (gfx11, also gfx11.5), RDNA4 (gfx12: hw/isa/decode_rdna4.py, rdna4.py), CDNA3 (gfx942:
hw/isa/decode_cdna.py, cdna.py; the opcodes gfx942 lacks (hw/isa/gfx942.py ABSENT) are illegal there) and CDNA4 (gfx950:
the CDNA3 front end plus cdna4.py). A family without a front end is refused with UnsupportedInstruction when a
dispatch starts instead of being decoded with the wrong tables.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...errors import UnsupportedInstruction
from ...hw.targets import GENERATIONS
from .ops import Table


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


def common():
    """The handler table RDNA3, RDNA4 and CDNA3 share: the scalar ALU, scalar memory, vector ALU, LDS and vector
    memory families, composed explicitly (a key defined by two families is an error)."""
    from . import lds, salu, smem, valu, vmem
    return Table(salu.TABLE, smem.TABLE, valu.table(), lds.TABLE, vmem.TABLE, name="common")


def _rdna3() -> Isa:
    """gfx11 and gfx11.5: the RDNA3.5 tables (a superset of RDNA3's) and the common handlers, with gfx11.5's
    scalar float operations (the handlers RDNA4 shares them with)."""
    from ...hw.isa import decode
    from . import rdna4
    t = common().override(rdna4.SALU_FLOAT, name="rdna3")
    return Isa("rdna3", decode.decode, decode.mask_dead, t, frozenset(t.control))


def _rdna4() -> Isa:
    """gfx12 (RDNA4): its own decoder; the common handlers with RDNA4's overrides and aliases."""
    from ...hw.isa import decode_rdna4
    from . import rdna4
    from .valu import blocked
    over = {k: blocked(b) if k.startswith("v_") else b for k, b in rdna4.OVERRIDES.items()}   # cache-sized wave blocks
    t = common().override(Table(over, name="rdna4"), name="rdna4")
    return Isa("rdna4", decode_rdna4.decode, decode_rdna4.mask_dead, t, frozenset(t.control))


def _cdna3() -> Isa:
    """gfx942 (CDNA3): the gfx9 decoder refusing gfx950's additions as illegal; the RDNA3 handlers where the
    operations agree, gfx9 ones elsewhere, and none of the keys only gfx950 has."""
    from ...hw.isa import decode_cdna
    from . import cdna, cdna4
    drop = cdna4.gfx950_keys()
    full = cdna.table(for_isa("rdna3").handlers)
    t = Table({k: b for k, b in full.items() if k not in drop}, name="cdna3")
    t.control = full.control - drop
    return Isa("cdna3", decode_cdna.GFX942.decode, decode_cdna.GFX942.mask_dead, t, frozenset(t.control))


def _cdna4() -> Isa:
    """gfx950 (CDNA4): CDNA3 plus its additions (the whole CDNA4 opcode table, cdna4.py's handlers)."""
    from ...hw.isa import decode_cdna
    from . import cdna4
    cdna3 = for_isa("cdna3")
    t = cdna4.table(cdna3.handlers, for_isa("rdna3").handlers)
    return Isa("cdna4", decode_cdna.decode, decode_cdna.mask_dead, t, frozenset(t.control))


FRONT_ENDS: dict[str, Callable[[], Isa]] = {"rdna3": _rdna3, "rdna4": _rdna4, "cdna3": _cdna3, "cdna4": _cdna4}
_made: dict[str, Isa] = {}


def for_gfx(gfx: int, pc: int | None = None) -> Isa:
    """The front end of a GPU generation's first family (9 -> cdna3, 11, 12); for_isa names one exactly."""
    return for_isa(GENERATIONS[gfx].isa if gfx in GENERATIONS else f"gfx{gfx}", pc)


def for_isa(family: str, pc: int | None = None) -> Isa:
    """The front end of an ISA family (Target.isa: "rdna3", "rdna4", "cdna3", "cdna4"), built once;
    UnsupportedInstruction for a family without one."""
    isa = _made.get(family)
    if isa is None:
        make = FRONT_ENDS.get(family)
        if make is None:
            raise UnsupportedInstruction(f"the simulated shader core has no {family} front end yet ({family} code "
                                         f"cannot run; families: {', '.join(FRONT_ENDS)})", address=pc, pc=pc,
                                         encoding=family)
        isa = _made[family] = make()
    return isa
