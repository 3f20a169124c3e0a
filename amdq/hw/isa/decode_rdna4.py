"""gfx12 (RDNA4) decoding: the RDNA decoder (decode.py) with RDNA4's tables, its own SMEM and 96-bit
VFLAT/VGLOBAL/VSCRATCH/VBUFFER layouts, and the aliases that map renamed mnemonics to the shared handler keys.

Sources: field layouts and opcode tables from amdq.hw.isa.tables("rdna4") (AMD's machine-readable RDNA4 ISA
XML); the cache-policy fields per the "AMD RDNA4 Instruction Set Architecture" reference guide (SCOPE: CU, SE,
DEV, SYS; TH: temporal hint, whose bit 0 on an atomic is TH_ATOMIC_RETURN, "return the pre-op value"), checked
against llvm-mc-19 -mcpu=gfx1201 encodings. Memory instructions come out in the RDNA3 shape (enc 'GLOBAL'
'SCRATCH' 'FLAT' 'SMEM' 'MUBUF'; addr/saddr/data/offset/glc) so the shared memory handlers execute them; scope and
th are kept in Inst.fields.
"""
from __future__ import annotations

from . import decode as D
from amdq.errors import UnsupportedInstruction

from .decode import NULL, Decoder, Inst, _Ctx, _fail, _fields, _lookup, _sext, _sreg, _vreg

ARCH = "rdna4"

# RDNA4 mnemonic (handler key) -> the RDNA3 handler key with the same semantics. Source: the RDNA4 ISA guide's
# renamed-instruction list (RDNA3 name -> RDNA4 name), each pair checked against both opcode tables' operand
# formats. Not aliased: the *_num_* float min/max (IEEE-754-2019 semantics differ; rdna4 handlers).
ALIASES = {
    "s_add_co_u32": "s_add_u32", "s_add_co_ci_u32": "s_addc_u32", "s_sub_co_u32": "s_sub_u32",
    "s_sub_co_ci_u32": "s_subb_u32", "s_add_co_i32": "s_add_i32", "s_sub_co_i32": "s_sub_i32",
    "s_addk_co_i32": "s_addk_i32",
    "v_mad_co_u64_u32": "v_mad_u64_u32", "v_mad_co_i64_i32": "v_mad_i64_i32",
}


def _smem4(ctx: _Ctx) -> Inst:
    """SMEM: 24-bit signed IOFFSET, SCOPE/TH instead of GLC/DLC, sub-dword loads in the table."""
    f = _fields(ctx, "SMEM")
    name, opr = _lookup(ctx, "SMEMOp", f["op"], "SMEM")
    inst = Inst(ctx.pc, "SMEM", f["op"], name)
    inst.fields, inst.size = f, 8
    inst.offset = _sext(f["ioffset"], 24)
    if "sbase" in opr:
        inst.sbase = _sreg(f["sbase"] * 2, opr["sbase"][1])
    if "sdata" in opr:
        inst.dst = (_sreg(f["sdata"], opr["sdata"][1]),)
    inst.soffset = None if f["soffset"] == NULL or "soffset" not in opr else _sreg(f["soffset"], 32)
    inst.src = tuple(x for x in (inst.sbase, inst.soffset) if x is not None)
    return inst


_SEG = {"VFLAT": "FLAT", "VGLOBAL": "GLOBAL", "VSCRATCH": "SCRATCH"}


def _vflat(ctx: _Ctx, enc4: str) -> Inst:
    """VFLAT/VGLOBAL/VSCRATCH (96 bits): VADDR, VSRC (data), VDST, SADDR, SVE, 24-bit signed IOFFSET."""
    f = _fields(ctx, enc4)
    enc = _SEG[enc4]
    name, opr = _lookup(ctx, enc4 + "Op", f["op"], enc4)
    if not name.startswith(enc + "_"):     # a row the tables carry for another segment's operation
        raise _fail(ctx, f"{name} has no {enc4} form")
    inst = Inst(ctx.pc, enc, f["op"], name)
    inst.fields, inst.size = f, 12
    atomic = "ATOMIC" in name
    inst.glc = f["th"] & 1 if atomic else 0        # TH_ATOMIC_RETURN: the RDNA3 handlers' GLC on atomics
    inst.sve = f["sve"]
    inst.offset = _sext(f["ioffset"], 24)
    has_saddr = f["saddr"] != NULL and "saddr" in opr
    if has_saddr:
        inst.saddr = _sreg(f["saddr"], opr["saddr"][1])
    if "vaddr" in opr:
        if enc == "GLOBAL":
            inst.addr = _vreg(f["vaddr"], 32 if has_saddr else 64)
        elif enc == "SCRATCH":
            inst.addr = _vreg(f["vaddr"], 32) if f["sve"] else None
        else:
            inst.addr = _vreg(f["vaddr"], 64)
    if "vsrc" in opr:
        inst.data = _vreg(f["vsrc"], opr["vsrc"][1])
    if "vdst" in opr and (not atomic or inst.glc):
        inst.dst = (_vreg(f["vdst"], opr["vdst"][1]),)
    inst.src = tuple(x for x in (inst.addr, inst.saddr, inst.data) if x is not None)
    return inst


def _vbuffer(ctx: _Ctx) -> Inst:
    """VBUFFER (96 bits) in the MUBUF shape: VDATA, VADDR (OFFEN/IDXEN), RSRC (an SGPR quad), SOFFSET (an SGPR:
    7 bits), IOFFSET, FORMAT (typed forms), TFE; buffer descriptors keep the gfx11 layout (hw.aql_tables)."""
    f = _fields(ctx, "VBUFFER")
    name, opr = _lookup(ctx, "VBUFFEROp", f["op"], "VBUFFER")
    inst = Inst(ctx.pc, "MUBUF", f["op"], name)
    inst.fields, inst.size = f, 12
    if f["ioffset"] >> 23:
        raise _fail(ctx, f"{name.lower()} with an offset past 0x7fffff (LLVM's limit; unverified)",
                    UnsupportedInstruction)
    inst.offset, inst.offen, inst.idxen = f["ioffset"], f["offen"], f["idxen"]
    atomic = "ATOMIC" in name
    inst.glc = f["th"] & 1 if atomic else 0
    if opr:
        nv = f["offen"] + f["idxen"]
        inst.addr = _vreg(f["vaddr"], 32 * nv) if nv else None
        inst.srsrc = _sreg(f["rsrc"], 128)
        inst.soffset = _sreg(f["soffset"], 32)
        bits = (opr["vdata"][1] if "vdata" in opr else 32) + 32 * f["tfe"]
        inst.data = _vreg(f["vdata"], bits)
        if "LOAD" in name or (atomic and inst.glc):
            inst.dst = (_vreg(f["vdata"], bits // 2 if "CMPSWAP" in name else bits),)
        inst.src = tuple(x for x in (inst.addr, inst.srsrc, inst.soffset, inst.data) if x is not None)
    return inst


def _vop1_4(ctx: _Ctx) -> Inst:
    """VOP1: RDNA4's opcode field is 7 bits (9-15); bit 16, an opcode bit on RDNA3, is no field of RDNA4's."""
    if ctx.bits >> 16 & 1:
        raise _fail(ctx, "undefined VOP1 opcode (bit 16 set)")
    return D._vop1(ctx)


DECODERS = {k: v for k, v in D.DECODERS.items() if k not in ("FLAT", "GLOBAL", "SCRATCH", "MUBUF")}
DECODERS.update({"SMEM": _smem4, "VBUFFER": _vbuffer, "VOP1": _vop1_4, "VFLAT": lambda c: _vflat(c, "VFLAT"), "VGLOBAL": lambda c: _vflat(c, "VGLOBAL"),
                 "VSCRATCH": lambda c: _vflat(c, "VSCRATCH")})
QUIET_SOPP = D.QUIET_SOPP + ("s_wait_alu", "s_wait_loadcnt", "s_wait_storecnt", "s_wait_dscnt", "s_wait_kmcnt",
                             "s_wait_expcnt", "s_wait_samplecnt", "s_wait_bvhcnt", "s_wait_loadcnt_dscnt",
                             "s_wait_storecnt_dscnt", "s_barrier_wait")

RDNA4 = Decoder(ARCH, DECODERS, ALIASES, quiet_sopp=QUIET_SOPP)
decode, mask_dead, decode_program = RDNA4.decode, RDNA4.mask_dead, RDNA4.decode_program
