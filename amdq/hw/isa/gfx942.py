"""gfx942 (CDNA3) opcode facts the generated CDNA tables (amdq/hw/isa/cdna.py, CDNA4/gfx950's) do not carry.

Source: AMD "AMD Instinct MI300 Instruction Set Architecture Reference Guide" (CDNA3), chapter 12 opcode
tables (DS, MUBUF, VOP3P); each entry checked against llvm-mc-19 -mcpu=gfx942 (its text and operands).

OPCODES: operations gfx942 has and CDNA4 dropped (or lists without operands), in the generated tables' row
format: enum -> {opcode: (MNEMONIC, ((field, format, bits, operand type), ...))}. The GWS operations take
their data operand in the ADDR field (llvm-mc-19's encoding of ds_gws_init v1: ADDR = 1).
"""
from __future__ import annotations

OPCODES = {
    "DSOp": {
        153: ("DS_GWS_INIT", (("addr", "NUM_B32", 32, "VGPR_OR_ACCVGPR"),)),
        155: ("DS_GWS_SEMA_BR", (("addr", "NUM_B32", 32, "VGPR_OR_ACCVGPR"),)),
        157: ("DS_GWS_BARRIER", (("addr", "NUM_B32", 32, "VGPR_OR_ACCVGPR"),)),
    },
    "MUBUFOp": {
        62: ("BUFFER_WBINVL1", ()),
        63: ("BUFFER_WBINVL1_VOL", ()),
    },
    "VOP3POp": {
        62: ("V_MFMA_F32_16X16X8_XF32", (("src0", "NUM_PK2_F32", 64, "SRC_VGPR_OR_ACCVGPR"),
                                         ("src1", "NUM_PK2_F32", 64, "SRC_VGPR_OR_ACCVGPR"),
                                         ("src2", "NUM_PK4_F32", 128, "SRC_VGPR_OR_ACCVGPR_OR_CONST"),
                                         ("vdst", "NUM_PK4_F32", 128, "VGPR_OR_ACCVGPR"))),
        63: ("V_MFMA_F32_32X32X4_XF32", (("src0", "NUM_PK2_F32", 64, "SRC_VGPR_OR_ACCVGPR"),
                                         ("src1", "NUM_PK2_F32", 64, "SRC_VGPR_OR_ACCVGPR"),
                                         ("src2", "NUM_PK16_F32", 512, "SRC_VGPR_OR_ACCVGPR_OR_CONST"),
                                         ("vdst", "NUM_PK16_F32", 512, "VGPR_OR_ACCVGPR"))),
    },
}


# Operations of the CDNA4 tables that gfx942 does not have: CDNA4's additions (AMD "AMD Instinct CDNA4 ISA
# Reference Guide", "New instructions": bf16/fp8/fp6/fp4 conversions and MFMAs, v_bitop3, v_prng, permlane swaps,
# LDS transpose loads, wider LDS DMA) and the VOP3 forms gfx942 lacks for v_pk_fmac_f16, v_readfirstlane_b32,
# v_swap_b32, v_accvgpr_mov_b32. Checked: llvm-mc-19 -mcpu=gfx942 rejects every encoding of each.
ABSENT = {
    "SOPPOp": {31},
    "VOP1Op": {88, 89, 90, 91},
    "VOP2Op": {22},
    "VOP3Op": {278, 316, 322, 401, 402, 408, 409, 410, 411, *range(563, 612), 613, 614, 615, 616, 617, 618,
               678, 679, 680, 681},
    "VOP3POp": {26, 27, 28, 44, 45, 46, 53, 54, 55, 56, 57, 58, 59, 60, 61, 67, 70, 71, 75, 78, 79, 83, 84, 85,
                90, 91},
    "DSOp": {224, 225, 226, 227},
    "GLOBALOp": {125, 126},
    "MUBUFOp": {82},
}


def has(enum: str, op: int) -> bool:
    """Whether gfx942 has opcode `op` of an opcode enum ("VOP3Op", ...) that the tables define."""
    return op not in ABSENT.get(enum, ())


def merged(base: dict) -> dict:
    """The generated opcode tables with the gfx942 rows laid over them (a new dict; `base` is not changed)."""
    out = {enum: dict(rows) for enum, rows in base.items()}
    for enum, rows in OPCODES.items():
        out.setdefault(enum, {}).update(rows)
    return out
