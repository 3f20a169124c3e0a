"""Instructions CDNA4 (gfx950) adds to CDNA3 (gfx942): the opcodes of amdq.hw.isa's CDNA tables (AMD's
machine-readable CDNA4 ISA) that gfx942 does not have, by opcode enum, and a gfx942 decoder that refuses them.

Source: every opcode of the CDNA4 tables, encoded with operands its row allows, given to LLVM 19's gfx942
disassembler (`llvm-mc-19 --disassemble -mcpu=gfx942`, scripts/probe_gfx942_opcodes.py): LLVM 19 knows gfx942
and predates gfx950. The opcodes it does not decode are listed here, less the probe's own mistakes (forms that
need a literal, a GDS bit, or an operand form LLVM does not have; each checked by assembling it for gfx942):
BITOP3, the scaled and stochastic-rounding FP8/FP6/FP4/F16/BF16 conversions, PERMLANE16/32_SWAP, PRNG,
MINIMUM3/MAXIMUM3, ASHR_PK, the doubled-K MFMA shapes, F8F6F4 MFMAs and new SMFMACs, DS_READ_B*_TR_*,
GLOBAL_LOAD_LDS_DWORDX3/X4, BUFFER_ATOMIC_PK_ADD_BF16 and the BF16 dot/convert forms.
"""
from __future__ import annotations

from amdq.errors import IllegalInstruction

# opcode enum -> mnemonics (as the CDNA4 tables spell them) that exist on gfx950 only
GFX950_ONLY: dict[str, frozenset[str]] = {
    'VOP1Op': frozenset((
        'V_CVT_F32_BF16_E32', 'V_PERMLANE16_SWAP_B32_E32', 'V_PERMLANE32_SWAP_B32_E32', 'V_PRNG_B32_E32',
    )),
    'VOP2Op': frozenset((
        'V_DOT2C_F32_BF16_E32',
    )),
    'VOP3Op': frozenset((
        'V_ASHR_PK_I8_I32', 'V_ASHR_PK_U8_I32', 'V_BITOP3_B16', 'V_BITOP3_B32', 'V_CVT_F32_BF16_E64',
        'V_CVT_PK_BF16_F32', 'V_CVT_PK_F16_F32', 'V_CVT_SCALEF32_2XPK16_BF6_F32',
        'V_CVT_SCALEF32_2XPK16_FP6_F32', 'V_CVT_SCALEF32_F16_BF8', 'V_CVT_SCALEF32_F16_FP8',
        'V_CVT_SCALEF32_F32_BF8', 'V_CVT_SCALEF32_F32_FP8', 'V_CVT_SCALEF32_PK32_BF16_BF6',
        'V_CVT_SCALEF32_PK32_BF16_FP6', 'V_CVT_SCALEF32_PK32_BF6_BF16', 'V_CVT_SCALEF32_PK32_BF6_F16',
        'V_CVT_SCALEF32_PK32_F16_BF6', 'V_CVT_SCALEF32_PK32_F16_FP6', 'V_CVT_SCALEF32_PK32_F32_BF6',
        'V_CVT_SCALEF32_PK32_F32_FP6', 'V_CVT_SCALEF32_PK32_FP6_BF16', 'V_CVT_SCALEF32_PK32_FP6_F16',
        'V_CVT_SCALEF32_PK_BF16_BF8', 'V_CVT_SCALEF32_PK_BF16_FP4', 'V_CVT_SCALEF32_PK_BF16_FP8',
        'V_CVT_SCALEF32_PK_BF8_BF16', 'V_CVT_SCALEF32_PK_BF8_F16', 'V_CVT_SCALEF32_PK_BF8_F32',
        'V_CVT_SCALEF32_PK_F16_BF8', 'V_CVT_SCALEF32_PK_F16_FP4', 'V_CVT_SCALEF32_PK_F16_FP8',
        'V_CVT_SCALEF32_PK_F32_BF8', 'V_CVT_SCALEF32_PK_F32_FP4', 'V_CVT_SCALEF32_PK_F32_FP8',
        'V_CVT_SCALEF32_PK_FP4_BF16', 'V_CVT_SCALEF32_PK_FP4_F16', 'V_CVT_SCALEF32_PK_FP4_F32',
        'V_CVT_SCALEF32_PK_FP8_BF16', 'V_CVT_SCALEF32_PK_FP8_F16', 'V_CVT_SCALEF32_PK_FP8_F32',
        'V_CVT_SCALEF32_SR_BF8_BF16', 'V_CVT_SCALEF32_SR_BF8_F16', 'V_CVT_SCALEF32_SR_BF8_F32',
        'V_CVT_SCALEF32_SR_FP8_BF16', 'V_CVT_SCALEF32_SR_FP8_F16', 'V_CVT_SCALEF32_SR_FP8_F32',
        'V_CVT_SCALEF32_SR_PK32_BF6_BF16', 'V_CVT_SCALEF32_SR_PK32_BF6_F16', 'V_CVT_SCALEF32_SR_PK32_BF6_F32',
        'V_CVT_SCALEF32_SR_PK32_FP6_BF16', 'V_CVT_SCALEF32_SR_PK32_FP6_F16', 'V_CVT_SCALEF32_SR_PK32_FP6_F32',
        'V_CVT_SCALEF32_SR_PK_FP4_BF16', 'V_CVT_SCALEF32_SR_PK_FP4_F16', 'V_CVT_SCALEF32_SR_PK_FP4_F32',
        'V_CVT_SR_BF16_F32', 'V_CVT_SR_F16_F32', 'V_DOT2C_F32_BF16_E64', 'V_MAXIMUM3_F32', 'V_MINIMUM3_F32',
        'V_PERMLANE16_SWAP_B32_E64', 'V_PERMLANE32_SWAP_B32_E64', 'V_PRNG_B32_E64',
    )),
    'VOP3POp': frozenset((
        'V_DOT2_F32_BF16', 'V_MFMA_F32_16X16X128_F8F6F4', 'V_MFMA_F32_16X16X32_BF16', 'V_MFMA_F32_16X16X32_F16',
        'V_MFMA_F32_32X32X16_BF16', 'V_MFMA_F32_32X32X16_F16', 'V_MFMA_F32_32X32X64_F8F6F4',
        'V_MFMA_I32_16X16X64_I8', 'V_MFMA_I32_32X32X32_I8', 'V_MFMA_LD_SCALE_B32', 'V_PK_MAXIMUM3_F16',
        'V_PK_MINIMUM3_F16', 'V_SMFMAC_F32_16X16X128_BF8_BF8', 'V_SMFMAC_F32_16X16X128_BF8_FP8',
        'V_SMFMAC_F32_16X16X128_FP8_BF8', 'V_SMFMAC_F32_16X16X128_FP8_FP8', 'V_SMFMAC_F32_16X16X64_BF16',
        'V_SMFMAC_F32_16X16X64_F16', 'V_SMFMAC_F32_32X32X32_BF16', 'V_SMFMAC_F32_32X32X32_F16',
        'V_SMFMAC_F32_32X32X64_BF8_BF8', 'V_SMFMAC_F32_32X32X64_BF8_FP8', 'V_SMFMAC_F32_32X32X64_FP8_BF8',
        'V_SMFMAC_F32_32X32X64_FP8_FP8', 'V_SMFMAC_I32_16X16X128_I8', 'V_SMFMAC_I32_32X32X64_I8',
    )),
    'DSOp': frozenset((
        'DS_READ_B64_TR_B16', 'DS_READ_B64_TR_B4', 'DS_READ_B64_TR_B8', 'DS_READ_B96_TR_B6',
    )),
    'GLOBALOp': frozenset((
        'GLOBAL_LOAD_LDS_DWORDX3', 'GLOBAL_LOAD_LDS_DWORDX4',
    )),
    'MUBUFOp': frozenset((
        'BUFFER_ATOMIC_PK_ADD_BF16',
    )),
}
ALL: frozenset[str] = frozenset().union(*GFX950_ONLY.values())


def gfx950_only(name: str) -> bool:
    """True for a mnemonic (CDNA4 table spelling, e.g. "V_BITOP3_B16") that gfx942 does not have."""
    return name in ALL


def decode_gfx942(code: bytes, pc: int, base: int = 0, wave64: bool = True):
    """The gfx9 decoder for gfx942: an opcode only gfx950 defines is an illegal instruction there."""
    from .decode_cdna import decode
    inst = decode(code, pc, base, wave64)
    if inst.name in ALL:
        raise IllegalInstruction(f"{inst.name.lower()} at pc {pc:#x} is a gfx950 (CDNA4) instruction; gfx942 "
                                 f"(CDNA3) does not have it", address=pc, pc=pc, encoding=inst.raw.hex())
    return inst
