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


def merged(base: dict) -> dict:
    """The generated opcode tables with the gfx942 rows laid over them (a new dict; `base` is not changed)."""
    out = {enum: dict(rows) for enum, rows in base.items()}
    for enum, rows in OPCODES.items():
        out.setdefault(enum, {}).update(rows)
    return out
