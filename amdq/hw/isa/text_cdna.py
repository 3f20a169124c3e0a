"""LLVM-syntax text of decoded gfx9 (CDNA3, gfx942) instructions: what llvm-objdump --mcpu=gfx942 prints.

    text9(inst) -> str       one instruction decoded by decode_cdna (amdq.hw.isa.syntax.text routes gfx9 here)

The decoder puts operands in the shader core's register space (decode_cdna: AccVGPR a[i] is row ACC_BASE + i,
gfx9 M0 is the core's M0, gfx9 NULL the core's NULL); this module maps them back to gfx9 assembler names.
Spellings (register names, waitcnt/sendmsg/hwreg syntax, SDWA and DPP controls, buffer formats, cache bits)
follow LLVM 19's AMDGPU assembler syntax for gfx940 (AMDGPUAsmGFX940.rst, AMDGPUOperandSyntax.rst), checked
line by line against llvm-mc-19 -mcpu=gfx942 on LLVM's disassembler test corpus (scripts/disasm_corpus.py).
"""
from __future__ import annotations

import re

from .decode import FLOAT_CONST, SPECIAL, Inst, Operand, _key
from .decode_cdna import ACC_BASE, M0, NULL_CORE, OPS
from .text import FLOAT_TEXT, _lit_text, _swizzle

# ---------------------------------------------------------------- facts (LLVM AMDGPU operand syntax, gfx9)

# SGPR-space names beyond s0..s101 (AMDGPUOperandSyntax.rst "Registers"; gfx940 has xnack_mask, no tba/tma).
SREG_NAMES = {102: "flat_scratch", 104: "xnack_mask", 106: "vcc", 126: "exec"}
# s_waitcnt simm16 fields on gfx9 (AMD "AMD Instinct MI300 ISA", S_WAITCNT): vmcnt [3:0] and [15:14],
# expcnt [6:4], lgkmcnt [11:8]
WAITCNT_MAX = (63, 7, 15)
# s_sendmsg message ids and GS operations (MI300 ISA, S_SENDMSG table; LLVM's SendMsg names)
MSG = {1: "MSG_INTERRUPT", 2: "MSG_GS", 3: "MSG_GS_DONE", 4: "MSG_SAVEWAVE", 5: "MSG_STALL_WAVE_GEN",
       6: "MSG_HALT_WAVES", 7: "MSG_ORDERED_PS_DONE", 8: "MSG_EARLY_PRIM_DEALLOC", 9: "MSG_GS_ALLOC_REQ",
       10: "MSG_GET_DOORBELL", 15: "MSG_SYSMSG"}
GS_OP = {0: "GS_OP_NOP", 1: "GS_OP_CUT", 2: "GS_OP_EMIT", 3: "GS_OP_EMIT_CUT"}
SYSMSG_OP = {1: "SYSMSG_OP_ECC_ERR_INTERRUPT", 2: "SYSMSG_OP_REG_RD", 3: "SYSMSG_OP_HOST_TRAP_ACK",
             4: "SYSMSG_OP_TTRACE_PC"}
# hardware registers of s_getreg/s_setreg (MI300 ISA, S_GETREG_B32 HW_REG ids; LLVM's gfx940 names)
HWREG = {1: "HW_REG_MODE", 2: "HW_REG_STATUS", 3: "HW_REG_TRAPSTS", 4: "HW_REG_HW_ID", 5: "HW_REG_GPR_ALLOC",
         6: "HW_REG_LDS_ALLOC", 7: "HW_REG_IB_STS", 15: "HW_REG_SH_MEM_BASES", 16: "HW_REG_TBA_LO",
         17: "HW_REG_TBA_HI", 18: "HW_REG_TMA_LO", 19: "HW_REG_TMA_HI", 20: "HW_REG_XCC_ID",
         21: "HW_REG_SQ_PERF_SNAPSHOT_DATA", 22: "HW_REG_SQ_PERF_SNAPSHOT_DATA1", 23: "HW_REG_SQ_PERF_SNAPSHOT_PC_LO",
         24: "HW_REG_SQ_PERF_SNAPSHOT_PC_HI"}
# SDWA selects and dst_unused (MI300 ISA, "SDWA" fields)
SEL = ["BYTE_0", "BYTE_1", "BYTE_2", "BYTE_3", "WORD_0", "WORD_1", "DWORD"]
UNUSED = ["UNUSED_PAD", "UNUSED_SEXT", "UNUSED_PRESERVE"]
# MTBUF data and numeric formats (MI300 ISA, "Buffer formats": DFMT, NFMT)
DFMT = ["INVALID", "8", "16", "8_8", "32", "16_16", "10_11_11", "11_11_10", "10_10_10_2", "2_10_10_10",
        "8_8_8_8", "32_32", "16_16_16_16", "32_32_32", "32_32_32_32", "RESERVED_15"]
NFMT = ["UNORM", "SNORM", "USCALED", "SSCALED", "UINT", "SINT", "RESERVED_6", "FLOAT"]
DFMT_DEFAULT, NFMT_DEFAULT = 1, 0
OMOD = {1: "mul:2", 2: "mul:4", 3: "div:2"}
INT_FMT = re.compile(r"NUM_(PK\d+_)?[IU]\d")
# SDWA forms without dst_sel/dst_unused (their result is a full dword or pair; LLVM's VOP1 SDWA for gfx940)
SDWA_NO_DST = {"v_cvt_f32_fp8", "v_cvt_f32_bf8", "v_cvt_pk_f32_fp8", "v_cvt_pk_f32_bf8"}
# VOP3 operations whose op_sel has four bits (byte selects of the fp8/bf8 stochastic-rounding converts)
OPSEL4 = {"v_cvt_sr_fp8_f32", "v_cvt_sr_bf8_f32"}

# ---------------------------------------------------------------- operands


def reg(op: Operand) -> str:
    """gfx9 register text: v5, v[4:7], a3, a[0:3], s3, s[0:1], vcc, exec, m0, flat_scratch, xnack_mask, ttmp[0:1]."""
    r, n = op.reg, op.n
    if op.kind == "v":
        p, r = ("a", r - ACC_BASE) if r >= ACC_BASE else ("v", r)
        return f"{p}{r}" if n == 1 else f"{p}[{r}:{r + n - 1}]"
    if r == M0:
        return "m0"
    if r == NULL_CORE:
        return "null"
    if r < 102:
        return f"s{r}" if n == 1 else f"s[{r}:{r + n - 1}]"
    if 108 <= r <= 123:
        t = r - 108
        return f"ttmp{t}" if n == 1 else f"ttmp[{t}:{t + n - 1}]"
    base = r & ~1
    if base in SREG_NAMES:
        name = SREG_NAMES[base]
        if n == 2 and r == base:
            return name
        if n == 1:
            return name + ("_hi" if r & 1 else "_lo")
    return f"s{r}" if n == 1 else f"s[{r}:{r + n - 1}]"


def src(op: Operand, salu: bool = False) -> str:
    """A source operand with its neg/abs modifiers."""
    if op.kind == "c":
        if op.literal:
            t = _lit_text(op, salu)
        elif op.code <= 208:
            t = str(op.code - 128 if op.code <= 192 else 192 - op.code)
        elif op.bits == 16 and op.fmt in ("NUM_I16", "NUM_U16", "NUM_B16") and not salu:
            t = f"{FLOAT_CONST[op.code][0]:#x}"
        else:
            t = FLOAT_TEXT.get(op.code) or ("0.15915494309189532" if op.bits == 64 and op.n == 2 and
                                             not op.fmt.startswith("NUM_PK") else "0.15915494")
    elif op.kind == "x":
        t = SPECIAL[op.code]
    else:
        t = reg(op)
    if INT_FMT.match(op.fmt):       # integer operands take no input modifiers (their bits are ignored)
        return t
    if op.abs:
        t = f"|{t}|"
    if op.neg:                      # a negated constant is neg(c): "-1" would read back as another constant
        t = f"neg({t})" if op.kind == "c" and not op.abs else f"-{t}"
    return t


def _hex(v: int) -> str:
    return f"-{-v:#x}" if v < 0 else f"{v:#x}"


def _bits(v: int, n: int) -> str:
    return "[" + ",".join(str(v >> k & 1) for k in range(n)) + "]"


# ---------------------------------------------------------------- scalar

def waitcnt(v: int) -> str:
    """gfx9 s_waitcnt counters."""
    vm, exp, lgkm = (v & 0xF) | (v >> 14 & 3) << 4, v >> 4 & 7, v >> 8 & 0xF
    parts = [f"{n}({c})" for n, c, m in (("vmcnt", vm, 63), ("expcnt", exp, 7), ("lgkmcnt", lgkm, 15)) if c != m]
    return " ".join(parts) if parts else "vmcnt(63) expcnt(7) lgkmcnt(15)"


def sendmsg(v: int) -> str:
    """gfx9 s_sendmsg operand: sendmsg(MSG[, OP[, STREAM]]) for a valid message (bits outside the id, op and
    stream fields ignored), else sendmsg(id, op, stream) when those fields are all it has, else the number."""
    mid, op, stream = v & 0xF, v >> 4 & 7, v >> 8 & 3
    name = MSG.get(mid)
    if mid in (2, 3):                   # GS: an operation (GS_DONE also NOP); a stream with any but NOP
        if (op or mid == 3) and op in GS_OP and (op or not stream):
            return f"sendmsg({name}, {GS_OP[op]}" + (f", {stream})" if op else ")")
    elif mid == 15:
        if op in SYSMSG_OP and not stream:
            return f"sendmsg({name}, {SYSMSG_OP[op]})"
    elif name and not op and not stream:
        return f"sendmsg({name})"
    if v == mid | op << 4 | stream << 8:
        return f"sendmsg({mid}, {op}, {stream})"
    return str(v)


def hwreg(v: int) -> str:
    rid, off, size = v & 0x3F, v >> 6 & 0x1F, (v >> 11 & 0x1F) + 1
    name = HWREG.get(rid, str(rid))
    return f"hwreg({name})" if off == 0 and size == 32 else f"hwreg({name}, {off}, {size})"


GPR_IDX = ["SRC0", "SRC1", "SRC2", "DST"]


def gpr_idx(v: int) -> str:
    return "gpr_idx(" + ",".join(n for k, n in enumerate(GPR_IDX) if v >> k & 1) + ")"


NO_OPERAND = ("s_endpgm", "s_barrier", "s_wakeup", "s_icache_inv", "s_ttracedata", "s_endpgm_saved",
              "s_set_gpr_idx_off", "s_endpgm_ordered_ps_done")


def _sopp(i: Inst) -> str:
    m, v = i.mnemonic, i.simm16 & 0xFFFF
    if m in NO_OPERAND:
        return f"{m} {v}" if m == "s_endpgm" and v else m      # only s_endpgm may carry an immediate
    if m == "s_waitcnt":
        return f"{m} {waitcnt(v)}"
    if m in ("s_sendmsg", "s_sendmsghalt"):
        return f"{m} {sendmsg(v)}"
    if m == "s_set_gpr_idx_mode":
        return f"{m} {gpr_idx(v)}" if v < 16 else f"{m} {v:#x}"
    if i.target is not None:
        return f"{m} {v}"
    return f"{m} {v:#x}" if v > 64 else f"{m} {v}"


def _sopk(i: Inst) -> str:
    m, v = i.mnemonic, i.simm16 & 0xFFFF
    if m == "s_getreg_b32":
        return f"{m} {reg(i.dst[0])}, {hwreg(v)}"
    if m == "s_setreg_b32":
        return f"{m} {hwreg(v)}, {reg(i.src[0])}"
    if m == "s_setreg_imm32_b32":
        return f"{m} {hwreg(v)}, {src(i.src[0], True)}"
    if m in ("s_call_b64", "s_cbranch_i_fork"):
        return f"{m} {reg(i.dst[0] if i.dst else i.src[0])}, {v}"
    return f"{m} {reg(i.dst[0])}, {v:#x}" if i.dst else f"{m} {v:#x}"


def _salu(i: Inst) -> str:
    if i.enc == "SOPP":
        return _sopp(i)
    if i.enc == "SOPK":
        return _sopk(i)
    m = i.mnemonic
    if m == "s_set_gpr_idx_on":
        v = i.fields["ssrc1"]
        return f"{m} {src(i.src[0], True)}, {gpr_idx(v) if v < 16 else hex(v)}"
    ops = [reg(d) for d in i.dst] + [src(s, True) for s in i.src]
    return f"{m} {', '.join(ops)}" if ops else m


def _smem(i: Inst) -> str:
    m = i.mnemonic
    f = i.fields
    if m in ("s_dcache_inv", "s_dcache_wb", "s_dcache_inv_vol", "s_dcache_wb_vol"):
        return m
    if m in ("s_memtime", "s_memrealtime"):
        return f"{m} {reg(i.dst[0])}"
    ops = [reg(i.data if i.data is not None else i.dst[0])] if i.data is not None or i.dst else []
    if m.startswith("s_atc_probe"):
        ops = [f"{f['sdata']:#x}" if f["sdata"] > 64 else str(f["sdata"])]
    ops.append(reg(i.sbase))
    if f["imm"]:
        if f["soffset_en"]:
            ops.append(f"{reg(i.soffset)} offset:{_hex(i.offset)}")
        else:
            ops.append(_hex(i.offset))
    else:
        ops.append(reg(i.soffset))
    mods = ["glc"] if f["glc"] and not m.startswith(("s_atc_probe", "s_dcache_discard")) else []
    return " ".join([f"{m} {', '.join(ops)}"] + mods)


# ---------------------------------------------------------------- vector ALU

def _promoted() -> set[str]:
    """VOP1/VOP2/VOPC operations that also have a VOP3 form (both forms print with _e32/_e64)."""
    short = {r[0][:-4] for e in ("VOP1Op", "VOP2Op", "VOPCOp") for r in OPS[e].values()}
    return {r[0][:-4] for r in OPS["VOP3Op"].values() if r[0].endswith("_E64")} & short | \
        {r[0] for n, r in OPS["VOP3SDOp"].items() if n < 448}


PROMOTED = _promoted()
NO_SUFFIX = {"V_NOP", "V_CLREXCP", "V_READFIRSTLANE_B32", "V_ACCVGPR_MOV_B32", "V_SWAP_B32"}
# mnemonics LLVM spells differently for gfx940 than the ISA tables (gfx906+ opcodes 0x20-0x22 of VOP3P are the
# fused v_fma_mix*, MI300 ISA section 12.10)
RENAME = {"v_mad_mix_f32": "v_fma_mix_f32", "v_mad_mixlo_f16": "v_fma_mixlo_f16", "v_mad_mixhi_f16": "v_fma_mixhi_f16",
          "v_accvgpr_read": "v_accvgpr_read_b32", "v_accvgpr_write": "v_accvgpr_write_b32"}


def _vname(i: Inst) -> str:
    n = i.name
    base = _key(n)
    base = RENAME.get(base, base)
    if base.upper() in NO_SUFFIX:
        return base
    if getattr(i, "sdwa", None) is not None:
        return base + "_sdwa"
    if i.dpp is not None:
        return base + "_dpp"
    if n.endswith("_E32"):
        return base + "_e32" if n[:-4] in PROMOTED else base
    if n.endswith("_E64") and n[:-4] in PROMOTED or n in PROMOTED:
        return base + "_e64"
    return base


def _dpalu(i: Inst) -> bool:
    """An operation with a 64-bit VGPR operand: its DPP takes row_newbcast only (gfx90a+ "DP ALU DPP")."""
    return any(o.kind == "v" and o.n == 2 for o in (*i.dst, *i.src))


def _dpp_text(i: Inst) -> list[str]:
    d = i.dpp
    c = d.ctrl
    if _dpalu(i) and not 0x150 <= c <= 0x15F:
        ctl = "/* DP ALU dpp only supports row_newbcast */"
    elif c <= 0xFF:
        ctl = f"quad_perm:[{c & 3},{c >> 2 & 3},{c >> 4 & 3},{c >> 6 & 3}]"
    elif 0x101 <= c <= 0x10F:
        ctl = f"row_shl:{c & 0xF}"
    elif 0x111 <= c <= 0x11F:
        ctl = f"row_shr:{c & 0xF}"
    elif 0x121 <= c <= 0x12F:
        ctl = f"row_ror:{c & 0xF}"
    else:
        ctl = {0x130: "wave_shl:1", 0x134: "wave_rol:1", 0x138: "wave_shr:1", 0x13C: "wave_ror:1",
               0x140: "row_mirror", 0x141: "row_half_mirror", 0x142: "row_bcast:15", 0x143: "row_bcast:31"}.get(c)
        if ctl is None and 0x150 <= c <= 0x15F:
            ctl = f"row_newbcast:{c & 0xF}"
    out = [ctl, f"row_mask:{d.row_mask:#x}", f"bank_mask:{d.bank_mask:#x}"]
    if d.bound_ctrl:
        out.append("bound_ctrl:1")
    return out


def _sdwa_text(i: Inst, nsrc: int, vopc: bool) -> list[str]:
    s = i.sdwa
    out = []
    if i.clamp:
        out.append("clamp")
    if i.omod:
        out.append(OMOD[i.omod])
    if not vopc and _key(i.name) not in SDWA_NO_DST:
        out += [f"dst_sel:{SEL[s.dst_sel] if s.dst_sel < 7 else s.dst_sel}",
                f"dst_unused:{UNUSED[s.dst_unused] if s.dst_unused < 3 else s.dst_unused}"]
    for k in range(nsrc):
        out.append(f"src{k}_sel:{SEL[s.src_sel[k]] if s.src_sel[k] < 7 else s.src_sel[k]}")
    return out


def _valu(i: Inst) -> str:
    name = _vname(i)
    m = _key(i.name)
    dst, srcs = list(i.dst), list(i.src)
    if m in ("v_nop", "v_clrexcp"):
        return m
    sdwa = getattr(i, "sdwa", None)
    if i.enc == "VOP3P":
        return _vop3p(i, name)
    ops = [reg(d) for d in dst]
    texts = []
    for k, s in enumerate(srcs):
        t = src(s)
        if sdwa is not None and k < 2 and sdwa.sext[k]:
            t = f"sext({t})"
        texts.append(t)
    if m in ("v_madmk_f32", "v_madak_f32", "v_fmamk_f32", "v_fmaak_f32", "v_madmk_f16", "v_madak_f16",
             "v_fmamk_f16", "v_fmaak_f16"):
        k = 1 if "mk" in m else 2
        texts[k] = f"{srcs[k].value:#x}"
    ops += texts
    mods = []
    if i.enc in ("VOP3", "VOP3SD"):
        if i.opsel and m in OPSEL4:
            mods.append("op_sel:" + _bits(i.opsel, 4))
        elif i.opsel and any(o.bits == 16 for o in (*dst, *srcs)):     # op_sel of 16-bit operands only
            nsrc = len(srcs)
            mods.append("op_sel:" + _bits(i.opsel & ((1 << nsrc) - 1) | (i.opsel >> 3 & 1) << nsrc, nsrc + 1))
        if i.clamp:
            mods.append("clamp")
        if i.omod:
            mods.append(OMOD[i.omod])
    if sdwa is not None:
        vopc = i.enc == "VOPC"
        nsrc = 2 if i.enc in ("VOP2", "VOPC") else 1
        mods += _sdwa_text(i, nsrc, vopc)
    if i.dpp is not None:
        mods += _dpp_text(i)
    return " ".join([name + (" " + ", ".join(ops) if ops else "")] + mods)


def _vop3p(i: Inst, name: str) -> str:
    m = _key(i.name)
    srcs = list(i.src)
    n = len(srcs)
    ops = [reg(d) for d in i.dst]
    mods = []
    if m.startswith(("v_accvgpr_read", "v_accvgpr_write")):
        return f"{name} {ops[0]}, {src(srcs[0])}"
    if m.startswith(("v_mfma", "v_smfmac")):
        ops += [src(s) for s in srcs]
        for k, v in (("cbsz", i.cbsz), ("abid", i.abid)):
            if v:
                mods.append(f"{k}:{v}")
        if i.blgp:      # the f64 MFMAs use the BLGP field as neg per source (MI300 ISA, "MFMA" fields)
            mods.append(f"neg:{_bits(i.blgp, 3)}" if m.startswith("v_mfma_f64") else f"blgp:{i.blgp}")
        return " ".join([name + " " + ", ".join(ops)] + mods)
    mix = m.startswith(("v_fma_mix", "v_mad_mix"))
    if mix:
        for k, s in enumerate(srcs):
            c = _plain(s)
            c.neg, c.abs = s.neg, bool(i.neg_hi >> k & 1)
            ops.append(src(c))
    else:
        ops += [src(_plain(s)) for s in srcs]
    if i.opsel:
        mods.append("op_sel:" + _bits(i.opsel, n))
    full = 0 if mix else (1 << n) - 1
    if i.opsel_hi & ((1 << n) - 1) != full:
        mods.append("op_sel_hi:" + _bits(i.opsel_hi, n))
    if not mix:
        neg_lo = sum(1 << k for k, s in enumerate(srcs) if s.neg)
        if neg_lo:
            mods.append("neg_lo:" + _bits(neg_lo, n))
        if i.neg_hi:
            mods.append("neg_hi:" + _bits(i.neg_hi, n))
    if i.clamp:
        mods.append("clamp")
    return " ".join([name + " " + ", ".join(ops)] + mods)


def _plain(op: Operand) -> Operand:
    c = Operand(op.kind, op.reg, op.n, op.value, op.code, op.bits, op.literal)
    c.fmt = op.fmt
    return c


# ---------------------------------------------------------------- memory

def _cache(i: Inst) -> list[str]:
    f = i.fields
    return [n for n, b in (("sc0", f.get("sc0")), ("nt", f.get("nt")), ("sc1", f.get("sc1"))) if b]


def _ds(i: Inst) -> str:
    m = i.mnemonic
    srcs = list(i.src)
    if m.startswith("ds_cmpst") and len(srcs) == 3:      # the decoder orders (new, compare) as the core reads them
        srcs[1:] = srcs[2], srcs[1]
    ops = [reg(d) for d in i.dst] + [reg(s) for s in srcs]
    mods = []
    if m.startswith(("ds_read2", "ds_write2", "ds_wrxchg2")):     # two 8-bit offsets
        if i.offset0:
            mods.append(f"offset0:{i.offset0}")
        if i.offset1:
            mods.append(f"offset1:{i.offset1}")
    elif m == "ds_swizzle_b32" and i.offset:
        sw = _swizzle(i.offset)
        mods.append(f"offset:swizzle{sw}" if sw else f"offset:{i.offset}")
    elif i.offset:
        mods.append(f"offset:{i.offset}")
    if m.startswith("ds_gws"):      # gfx940 has no GDS: only the GWS operations print it (always set)
        mods.append("gds")
    return " ".join([m + (" " + ", ".join(ops) if ops else "")] + mods)


def _flat(i: Inst) -> str:
    m = i.mnemonic
    ops = [reg(d) for d in i.dst]
    if i.enc == "FLAT":
        ops.append(reg(i.addr))
    else:
        ops.append(reg(i.addr) if i.addr is not None else "off")
    if i.data is not None:
        ops.append(reg(i.data))
    if i.enc != "FLAT":
        ops.append(reg(i.saddr) if i.saddr is not None else "off")
    mods = [f"offset:{i.offset}"] if i.offset else []
    return " ".join([m + " " + ", ".join(ops)] + mods + _cache(i))


def _mubuf(i: Inst) -> str:
    m = i.mnemonic
    f = i.fields
    if i.srsrc is None:
        return " ".join([m] + _cache(i))
    ops = [reg(i.addr) if i.addr is not None else "off", reg(i.srsrc), src(i.soffset)]
    if i.data is not None:
        ops.insert(0, reg(i.data))
    mods = [n for n, b in (("idxen", i.idxen), ("offen", i.offen)) if b]
    if i.enc == "MTBUF" and (f["dfmt"], f["nfmt"]) != (DFMT_DEFAULT, NFMT_DEFAULT):
        fmt = ([f"BUF_DATA_FORMAT_{DFMT[f['dfmt']]}"] if f["dfmt"] != DFMT_DEFAULT else []) + \
            ([f"BUF_NUM_FORMAT_{NFMT[f['nfmt']]}"] if f["nfmt"] != NFMT_DEFAULT else [])
        mods.insert(0, f"format:[{','.join(fmt)}]")
    if i.offset:
        mods.append(f"offset:{i.offset}")
    mods += _cache(i)
    if f.get("lds"):
        mods.append("lds")
    return " ".join([m + " " + ", ".join(ops)] + mods)


FORMATTERS = {"SOP1": _salu, "SOP2": _salu, "SOPC": _salu, "SOPK": _salu, "SOPP": _salu, "SMEM": _smem,
              "VOP1": _valu, "VOP2": _valu, "VOPC": _valu, "VOP3": _valu, "VOP3SD": _valu, "VOP3P": _valu,
              "DS": _ds, "FLAT": _flat, "GLOBAL": _flat, "SCRATCH": _flat, "MUBUF": _mubuf, "MTBUF": _mubuf}


def text9(inst: Inst) -> str:
    """The LLVM-syntax (gfx942) text of an instruction decoded by decode_cdna."""
    return FORMATTERS[getattr(inst, "form", inst.enc)](inst)
