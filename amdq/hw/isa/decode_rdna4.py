"""gfx12 (RDNA4) decoding: the RDNA decoder (decode.py) with RDNA4's tables, its own SMEM and 96-bit
VFLAT/VGLOBAL/VSCRATCH/VBUFFER layouts, and the aliases that map renamed mnemonics to the shared handler keys.

Sources: field layouts and opcode tables from amdq.hw.isa.tables("rdna4") (AMD's machine-readable RDNA4 ISA
XML); the cache-policy fields per the "AMD RDNA4 Instruction Set Architecture" reference guide (SCOPE: CU, SE,
DEV, SYS; TH: temporal hint, whose bit 0 on an atomic is TH_ATOMIC_RETURN, "return the pre-op value"), checked
against llvm-mc-19 -mcpu=gfx1201 encodings. Memory instructions come out in the RDNA3 shape (enc 'GLOBAL'
'SCRATCH' 'FLAT' 'SMEM' 'MUBUF'; addr/saddr/data/offset/glc) so the shared memory handlers execute them; scope and
th are kept in Inst.fields. VIMAGE/VSAMPLE (image operations), VINTERP, VDSDIR and VEXPORT decode to operands
the disassembler prints; the shader core has no handlers for them (it raises UnsupportedInstruction).

Image addresses per the RDNA4 ISA guide, "Image instructions" (address VGPR order: offset, bias, z-compare,
derivatives, coordinates with slice/face/fragment, then LOD/clamp/mip; A16 packs two 16-bit coordinates per
VGPR and, as the G16 forms do, two derivative components per VGPR within each derivative vector; the last
address slot holds the remaining VGPRs as one tuple).
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
    if "sdata" in opr and opr["sdata"][2] != "SIMM5":       # the prefetches' SDATA is a length, no register
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
        inst.addr = D._flat_vaddr(enc, f["vaddr"], has_saddr, f["sve"])
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


# DIM field: name, coordinates (with slice, face or fragment), derivative components (d/dx and d/dy together).
# Source: the RDNA4 ISA guide, "Image instructions", DIM.
DIMS = (("1D", 1, 2), ("2D", 2, 4), ("3D", 3, 6), ("CUBE", 3, 4), ("1D_ARRAY", 2, 2), ("2D_ARRAY", 3, 4),
        ("2D_MSAA", 3, 4), ("2D_MSAA_ARRAY", 4, 4))
# address slots: VIMAGE vaddr0..vaddr4 (vaddr4 sits at bits 56-63), VSAMPLE vaddr0..vaddr3
ADDR_SLOTS = {"VIMAGE": ("vaddr0", "vaddr1", "vaddr2", "vaddr3", "vaddr4"),
              "VSAMPLE": ("vaddr0", "vaddr1", "vaddr2", "vaddr3")}
TUPLES = frozenset(range(1, 13)) | {16}      # VGPR tuple sizes an operand can name


def image_addr_words(name: str, dim: int, a16: bool) -> list[int]:
    """VGPRs of each address component group of an image operation (lower-case mnemonic), before the groups
    are folded into the encoding's address slots."""
    if "bvh" in name:   # node pointer, ray extent, origin, direction, inverse direction (A16: dir/inv packed)
        node = 2 if "bvh64" in name else 1
        return [node, 1, 3, 3] if a16 else [node, 1, 3, 3, 3]
    if name == "image_get_resinfo":      # the mip level
        return [1]
    parts = name.split("_")[1:]
    _, coords, grads = DIMS[dim]
    words = sum(p in ("o", "b", "c") for p in parts)
    comps = coords + any(p in ("l", "cl", "mip") for p in parts)
    if "d" in parts:
        words += 2 * ((grads // 2 + 1) // 2) if "g16" in parts else grads
    words += (comps + 1) // 2 if a16 else comps
    return [1] * words


def _image(ctx: _Ctx, enc: str) -> Inst:
    """VIMAGE / VSAMPLE: VDATA (DMASK components, D16 halves, +1 for TFE), address VGPRs in NSA slots, RSRC
    (8 SGPRs; 4 for BVH), SAMP (4 SGPRs), DIM, A16, R128, UNRM, LWE, and the SCOPE/TH cache policy."""
    f = _fields(ctx, enc)
    name, opr = _lookup(ctx, enc + "Op", f["op"], enc)
    m = name.lower()
    if f["op"] >= 128 and "bvh" in m:
        raise _fail(ctx, f"{m}: its address layout is not modelled", UnsupportedInstruction)
    inst = Inst(ctx.pc, enc, f["op"], name)
    inst.fields, inst.size = f, 12
    groups = image_addr_words(m, f["dim"], bool(f["a16"]))
    slots = ADDR_SLOTS[enc]
    if len(groups) > len(slots):
        groups = groups[:len(slots) - 1] + [sum(groups[len(slots) - 1:])]
    for n in groups:
        if n not in TUPLES:
            raise _fail(ctx, f"{m}: {n} address VGPRs in one slot", UnsupportedInstruction)
    inst.vaddr = tuple(_vreg(f[s], 32 * n) for s, n in zip(slots, groups))
    bvh = "bvh" in m
    inst.srsrc = _sreg(f["rsrc"], 128 if bvh else 256)
    if "samp" in opr:
        inst.ssamp = _sreg(f["samp"], 128)
    if bvh:
        n = 4
    else:
        n = 4 if "gather4" in m or m == "image_msaa_load" else bin(f["dmask"]).count("1") or 1
        n = (n + 1) // 2 if f["d16"] else n
    n += f["tfe"]
    inst.data = _vreg(f["vdata"], 32 * n)
    atomic = "atomic" in m
    inst.glc = f["th"] & 1 if atomic else 0
    if atomic and inst.glc:
        inst.dst = (_vreg(f["vdata"], 32 * max(1, n // 2) if "cmpswap" in m else 32 * n),)
    elif not atomic and "store" not in m:
        inst.dst = (inst.data,)
    inst.src = inst.vaddr + tuple(x for x in (inst.srsrc, inst.ssamp) if x is not None) + \
        ((inst.data,) if atomic or "store" in m else ())
    return inst


def _vinterp(ctx: _Ctx) -> Inst:
    """VINTERP: three VGPR sources with NEG, OPSEL (16-bit halves), CLMP, WAITEXP."""
    f = _fields(ctx, "VINTERP")
    name, opr = _lookup(ctx, "VINTERPOp", f["op"], "VINTERP")
    inst = Inst(ctx.pc, "VINTERP", f["op"], name)
    inst.fields, inst.size = f, 8
    srcs = []
    for k, fld in enumerate(("src0", "src1", "src2")):
        if f[fld] < 256:
            raise _fail(ctx, f"{name.lower()} {fld} is no VGPR (code {f[fld]})")
        s = _vreg(f[fld] - 256, opr[fld][1])
        s.fmt, s.neg = opr[fld][0], bool(f["neg"] >> k & 1)
        srcs.append(s)
    inst.src = tuple(srcs)
    inst.dst = (_vreg(f["vdst"], opr["vdst"][1]),)
    inst.clamp, inst.opsel = f["clmp"], f["opsel"]
    return inst


def _vdsdir(ctx: _Ctx) -> Inst:
    """VDSDIR (ds_param_load / ds_direct_load): VDST, ATTR/ATTR_CHAN, WAIT_VA_VDST, WAIT_VM_VSRC."""
    f = _fields(ctx, "VDSDIR")
    name, _ = _lookup(ctx, "VDSDIROp", f["op"], "VDSDIR")
    inst = Inst(ctx.pc, "VDSDIR", f["op"], name)
    inst.fields = f
    inst.dst = (_vreg(f["vdst"], 32),)
    return inst


def _vexport(ctx: _Ctx) -> Inst:
    """VEXPORT: TARGET, EN (one bit per source VGPR), DONE, ROW."""
    f = _fields(ctx, "VEXPORT")
    inst = Inst(ctx.pc, "VEXPORT", 0, "EXPORT")
    inst.fields, inst.size = f, 8
    inst.src = tuple(_vreg(f[f"vsrc{k}"], 32) for k in range(4) if f["en"] >> k & 1)
    return inst


def _vop1_4(ctx: _Ctx) -> Inst:
    """VOP1: RDNA4's opcode field is 7 bits (9-15); bit 16, an opcode bit on RDNA3, is no field of RDNA4's."""
    if ctx.bits >> 16 & 1:
        raise _fail(ctx, "undefined VOP1 opcode (bit 16 set)")
    return D._vop1(ctx)


DECODERS = {k: v for k, v in D.DECODERS.items() if k not in ("FLAT", "GLOBAL", "SCRATCH", "MUBUF")}
DECODERS.update({"SMEM": _smem4, "VBUFFER": _vbuffer, "VOP1": _vop1_4, "VFLAT": lambda c: _vflat(c, "VFLAT"), "VGLOBAL": lambda c: _vflat(c, "VGLOBAL"),
                 "VSCRATCH": lambda c: _vflat(c, "VSCRATCH"), "VIMAGE": lambda c: _image(c, "VIMAGE"),
                 "VSAMPLE": lambda c: _image(c, "VSAMPLE"), "VINTERP": _vinterp, "VDSDIR": _vdsdir,
                 "VEXPORT": _vexport})
QUIET_SOPP = D.QUIET_SOPP + ("s_wait_alu", "s_wait_loadcnt", "s_wait_storecnt", "s_wait_dscnt", "s_wait_kmcnt",
                             "s_wait_expcnt", "s_wait_samplecnt", "s_wait_bvhcnt", "s_wait_loadcnt_dscnt",
                             "s_wait_storecnt_dscnt", "s_barrier_wait")

# Opcode rows the ISA XML lacks or lists without operands, with the operands llvm-mc-19 -mcpu=gfx1200 assembles
# for them (named-barrier operations: a barrier id in SSRC0, M0 or an inline constant; S_SINGLEUSE_VDST: a
# SIMM16 hint). (enum, opcode) -> row in the generated tables' shape.
EXTRA_OPS = {
    ("SOP1Op", 80): ("S_GET_BARRIER_STATE", (("sdst", "NUM_B32", 32, "SDST"), ("ssrc0", "NUM_B32", 32, "SSRC_BARRIER_ID"))),
    ("SOP1Op", 81): ("S_BARRIER_INIT", (("ssrc0", "NUM_B32", 32, "SSRC_BARRIER_ID"),)),
    ("SOP1Op", 82): ("S_BARRIER_JOIN", (("ssrc0", "NUM_B32", 32, "SSRC_BARRIER_ID"),)),
    ("SOP1Op", 87): ("S_WAKEUP_BARRIER", (("ssrc0", "NUM_B32", 32, "SSRC_BARRIER_ID"),)),
    ("SOPPOp", 19): ("S_SINGLEUSE_VDST", (("simm16", "NUM_B16", 16, "SIMM16"),)),
}


def _ops() -> dict:
    """RDNA4's opcode tables with EXTRA_OPS merged in."""
    ops = {enum: dict(rows) for enum, rows in D.isa.tables(ARCH).OPCODES.items()}
    for (enum, num), row in EXTRA_OPS.items():
        ops[enum][num] = row
    return ops


RDNA4 = Decoder(ARCH, DECODERS, ALIASES, quiet_sopp=QUIET_SOPP)
RDNA4.ops = _ops()
decode, mask_dead, decode_program = RDNA4.decode, RDNA4.mask_dead, RDNA4.decode_program
