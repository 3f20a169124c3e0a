"""LLVM-syntax text of decoded RDNA instructions (what llvm-objdump --mcpu=gfx1100 / gfx1200 prints).

    text(inst) -> str            one decoded instruction
"""
from __future__ import annotations

from amdq.hw import isa
from .decode import DPP8, EXEC_LO, FLOAT_CONST, M0, NULL, SPECIAL, VCC_LO, Inst, Operand, _key

# LLVM assembler names of message ids and hardware registers (AMD RDNA3 ISA guide, S_SENDMSG / S_GETREG tables).
MSG = {1: "MSG_INTERRUPT", 2: "MSG_HS_TESSFACTOR", 3: "MSG_DEALLOC_VGPRS", 5: "MSG_STALL_WAVE_GEN",
       6: "MSG_HALT_WAVES", 9: "MSG_GS_ALLOC_REQ"}
MSG.update({v: k for k, v in isa.tables().NAMES["MSG"].items() if k != "MSG_RTN_ILLEGAL_MSG"})
HWREG_SYNTAX = {"HW_REG_SHADER_FLAT_SCRATCH_LO": "HW_REG_FLAT_SCR_LO", "HW_REG_SHADER_FLAT_SCRATCH_HI": "HW_REG_FLAT_SCR_HI"}
HWREG_UNNAMED = {8, 9, 13, 14, 16, 17, 25, 26, 28}      # registers gfx11 assembler syntax leaves numeric
HWREG = {v: HWREG_SYNTAX.get(k, k) for k, v in isa.tables().NAMES["HWREG"].items() if v not in HWREG_UNNAMED}
# RDNA4: the RDNA4 ISA guide's register ids (its HW_REG_WAVE_* names lose WAVE_ in assembler syntax), plus the ids
# llvm-mc-19 -mcpu=gfx1200 names that the guide's table lacks; messages: the guide's S_SENDMSG ids, MSG_RTN 135
# spelled as LLVM 19 does.
HWREG_BY = {"rdna3": HWREG, "rdna4": {
    **{v: k.replace("HW_REG_WAVE_", "HW_REG_") for k, v in isa.tables("rdna4").NAMES["HWREG"].items()},
    7: "HW_REG_IB_STS", 31: "HW_REG_DVGPR_ALLOC_LO", 32: "HW_REG_DVGPR_ALLOC_HI"}}
MSG_BY = {"rdna3": MSG, "rdna4": {
    1: "MSG_INTERRUPT", 2: "MSG_HS_TESSFACTOR", 3: "MSG_DEALLOC_VGPRS", 9: "MSG_GS_ALLOC_REQ",
    **{v: k for k, v in isa.tables("rdna4").NAMES["MSG"].items() if k != "MSG_RTN_ILLEGAL_MSG"},
    135: "MSG_RTN_GET_SE_AID_ID"}}
DELAY_ID = ["NO_DEP", "VALU_DEP_1", "VALU_DEP_2", "VALU_DEP_3", "VALU_DEP_4", "TRANS32_DEP_1", "TRANS32_DEP_2",
            "TRANS32_DEP_3", "FMA_ACCUM_CYCLE_1", "SALU_CYCLE_1", "SALU_CYCLE_2", "SALU_CYCLE_3"]
DELAY_SKIP = ["SAME", "NEXT", "SKIP_1", "SKIP_2", "SKIP_3", "SKIP_4"]
# s_waitcnt_depctr fields: name, lo, width (default = all ones)
DEPCTR = [("depctr_hold_cnt", 7, 1), ("depctr_sa_sdst", 0, 1), ("depctr_va_vdst", 12, 4), ("depctr_va_sdst", 9, 3),
          ("depctr_va_ssrc", 8, 1), ("depctr_va_vcc", 1, 1), ("depctr_vm_vsrc", 2, 3)]
FLOAT_TEXT = {240: "0.5", 241: "-0.5", 242: "1.0", 243: "-1.0", 244: "2.0", 245: "-2.0", 246: "4.0", 247: "-4.0"}
INV2PI = {0: "0.15915494", 1: "0.15915494", 2: "0.15915494309189532"}
_T = isa.tables().OPCODES


def _promoted(t) -> set[str]:
    """VOP1/VOP2/VOPC operations that also have a VOP3 form (their 32-bit forms print _e32)."""
    return {r[0][:-4] for r in t["VOP3Op"].values() if r[0].endswith("_E64")} | \
        {r[0] for n, r in t["VOP3SDOp"].items() if n < 512}


PROMOTED = _promoted(_T)
PROMOTED_BY = {"rdna3": PROMOTED, "rdna4": _promoted(isa.tables("rdna4").OPCODES)}
NO_SUFFIX = {"V_READFIRSTLANE_B32_E32", "V_NOP_E32", "V_FMAMK_F32_E32", "V_FMAAK_F32_E32", "V_FMAMK_F16_E32",
             "V_FMAAK_F16_E32", "V_PIPEFLUSH_E32", "V_READFIRSTLANE_B32_E64", "V_NOP_E64", "V_PIPEFLUSH_E64"}


# ---------------------------------------------------------------- operands

def reg(op: Operand) -> str:
    """Register text: v5, v[4:7], s3, s[0:1], vcc_lo, vcc, exec_lo, exec, m0, null, ttmp5, ttmp[0:1]."""
    r, n = op.reg, op.n
    if op.kind == "v":
        return f"v{r}" if n == 1 else f"v[{r}:{r + n - 1}]"
    if r < 106:
        return f"s{r}" if n == 1 else f"s[{r}:{r + n - 1}]"
    if r in (VCC_LO, VCC_LO + 1):
        return "vcc" if n == 2 and r == VCC_LO else ("vcc_lo" if r == VCC_LO else "vcc_hi")
    if r in (EXEC_LO, EXEC_LO + 1):
        return "exec" if n == 2 and r == EXEC_LO else ("exec_lo" if r == EXEC_LO else "exec_hi")
    if 108 <= r <= 123:
        t = r - 108
        return f"ttmp{t}" if n == 1 else f"ttmp[{t}:{t + n - 1}]"
    return {NULL: "null", M0: "m0"}.get(r, f"s{r}")


def _fkind(op: Operand, fmt_hint: str = "") -> int:
    return 0 if op.bits == 16 else 2 if op.bits == 64 else 1


def _int16(op: Operand) -> bool:
    return op.bits == 16 and op.fmt in ("NUM_I16", "NUM_U16", "NUM_B16")


def _lit_text(op: Operand, salu: bool = False) -> str:
    """A literal, printed as LLVM does: the inline spelling when its value has one, else hex."""
    lit = op.value >> 32 if op.bits == 64 and op.value >> 32 and not op.value & 0xFFFFFFFF else op.value & 0xFFFFFFFF
    raw = lit
    if op.bits == 64 and op.value >> 32 and not op.value & 0xFFFFFFFF:
        raw = op.value >> 32
    s = raw - (1 << 32) if raw >> 31 else raw
    if -16 <= s <= 64:
        return str(s)
    if op.bits != 64 and not _int16(op):
        for code, pats in FLOAT_CONST.items():
            if pats[1] == raw or (op.bits == 16 and not salu and pats[0] == raw):
                return FLOAT_TEXT.get(code, INV2PI[1])
    return f"{raw:#x}"


def src_text(op: Operand, salu: bool = False) -> str:
    """A source operand with its neg/abs modifiers (`salu`: a scalar operand; its 16-bit constants are dwords)."""
    if op.kind == "c":
        if op.literal:
            t = _lit_text(op, salu)
        elif op.code <= 208:
            t = str(op.code - 128 if op.code <= 192 else 192 - op.code)
        elif _int16(op) and not salu:      # 16-bit integer operands read the f16 bit pattern; LLVM prints it in hex
            t = f"{FLOAT_CONST[op.code][0]:#x}"
        else:
            t = FLOAT_TEXT.get(op.code) or INV2PI[_fkind(op)]
    elif op.kind == "x":
        t = SPECIAL[op.code]
    else:
        t = reg(op)
    if op.fmt.startswith(("NUM_I", "NUM_U")):    # integer operands take no input modifiers
        return t
    if op.abs:
        t = f"|{t}|"
    if op.neg:
        t = f"neg({t})" if op.kind == "c" and not op.abs else f"-{t}"
    return t


# ---------------------------------------------------------------- scalar formats

def waitcnt(v: int) -> str:
    vm, exp, lgkm = v >> 10 & 0x3F, v & 7, v >> 4 & 0x3F
    parts = [f"vmcnt({vm})" if vm != 0x3F else "", f"expcnt({exp})" if exp != 7 else "", f"lgkmcnt({lgkm})" if lgkm != 0x3F else ""]
    parts = [p for p in parts if p]
    return " ".join(parts) if parts else "vmcnt(63) expcnt(7) lgkmcnt(63)"


def delay_alu(v: int) -> str:
    id0, skip, id1 = v & 0xF, v >> 4 & 7, v >> 7 & 0xF     # bits 11-15 are ignored
    ids = lambda k: DELAY_ID[k] if k < len(DELAY_ID) else "/* invalid instid value */"    # noqa: E731
    parts = [f"instid0({ids(id0)})" if id0 else "",
             f"instskip({DELAY_SKIP[skip] if skip < len(DELAY_SKIP) else '/* invalid instskip value */'})" if skip else "",
             f"instid1({ids(id1)})" if id1 else ""]
    return " | ".join(p for p in parts if p) or "0"


def depctr(v: int) -> str:
    known = 0
    for _, lo, w in DEPCTR:
        known |= ((1 << w) - 1) << lo
    if v & ~known & 0xFFFF:
        return f"{v:#x}"
    parts = [f"{n}({v >> lo & ((1 << w) - 1)})" for n, lo, w in DEPCTR if v >> lo & ((1 << w) - 1) != (1 << w) - 1]
    return " ".join(parts) or " ".join(f"{n}({(1 << w) - 1})" for n, lo, w in DEPCTR)


def hwreg(v: int, family: str = "rdna3") -> str:
    """hwreg(...) text of a SIMM16 register/offset/size triple."""
    rid, off, size = v & 0x3F, v >> 6 & 0x1F, (v >> 11 & 0x1F) + 1
    name = HWREG_BY[family].get(rid, str(rid))
    return f"hwreg({name})" if off == 0 and size == 32 else f"hwreg({name}, {off}, {size})"


def sendmsg(v: int, family: str = "rdna3") -> str:
    """sendmsg(...) text of a message id."""
    msg = MSG_BY[family]
    if v & 0xFF in msg:             # a named message: LLVM 19 ignores the bits above the id
        return f"sendmsg({msg[v & 0xFF]})"
    return f"sendmsg({v}, 0, 0)" if v < 256 else str(v)


def _sopp(i: Inst) -> str:
    m, v = i.mnemonic, i.simm16 & 0xFFFF
    if m in ("s_endpgm", "s_barrier", "s_code_end", "s_icache_inv", "s_wakeup", "s_endpgm_saved", "s_wait_idle",
             "s_ttracedata", "s_endpgm_ordered_ps_done", "s_barrier_leave"):
        return m if not (m == "s_endpgm" and v) else f"{m} {v}"
    if m == "s_waitcnt":
        return f"{m} {waitcnt(v)}"
    if m == "s_delay_alu":
        return f"{m} {delay_alu(v)}"
    if m in ("s_waitcnt_depctr", "s_wait_alu"):       # RDNA4's s_wait_alu is gfx11's s_waitcnt_depctr
        return f"{m} {depctr(v)}"
    if m.startswith("s_wait_") and m != "s_wait_idle":     # RDNA4's counters and s_wait_alu print in hex
        return f"{m} {v:#x}"
    if m in ("s_sendmsg", "s_sendmsghalt"):
        return f"{m} {sendmsg(v, i.family)}"
    if i.target is not None:
        return f"{m} {v}"
    if m in ("s_clause", "s_set_inst_prefetch_distance", "s_round_mode", "s_wait_event", "s_ttracedata_imm",
             "s_singleuse_vdst"):
        return f"{m} {v:#x}"
    return f"{m} {v}" if v <= 64 else f"{m} {v:#x}"


# s_version's RDNA4 symbols, as llvm-mc-19 -mcpu=gfx1200 prints them: code-object version ids (bits 0-7) and flags
UC_VERSION = {0: "UC_VERSION_GFX7", 4: "UC_VERSION_GFX10", 6: "UC_VERSION_GFX11", 9: "UC_VERSION_GFX12"}
UC_FLAGS = ((13, "UC_VERSION_W64_BIT"), (14, "UC_VERSION_W32_BIT"), (15, "UC_VERSION_MDP_BIT"))


def version(v: int) -> str:
    """RDNA4 s_version operand: VERSION|FLAG... (left-nested), or the number when bits 8-12 are set."""
    if v & 0x1F00:
        return f"{v:#x}"
    t = UC_VERSION.get(v & 0xFF, str(v & 0xFF))
    for n, (bit, name) in enumerate(b for b in UC_FLAGS if v >> b[0] & 1):
        t = f"({t})|{name}" if n else f"{t}|{name}"
    return t


def _sopk(i: Inst) -> str:
    m, v = i.mnemonic, i.simm16 & 0xFFFF
    if m in ("s_getreg_b32", "s_setreg_b32"):
        # s_setreg's SOPK sdst field names its source register (the decoder puts it in src)
        h = hwreg(v, i.family)
        return f"{m} {reg(i.dst[0])}, {h}" if m == "s_getreg_b32" else f"{m} {h}, {reg(i.src[0])}"
    if m == "s_setreg_imm32_b32":
        return f"{m} {hwreg(v, i.family)}, {src_text(i.src[0], salu=True)}"
    if m == "s_version":
        return f"{m} {version(v) if i.family == 'rdna4' else v if v <= 255 else f'{v:#x}'}"
    if m.startswith("s_subvector_loop"):
        return f"{m} {reg(Operand('s', i.fields['sdst']))}, {v}"
    if m == "s_call_b64":
        return f"{m} {reg(i.dst[0])}, {v}"
    return f"{m} {reg(i.dst[0])}, {v:#x}" if i.dst else f"{m} {v:#x}"


def _salu(i: Inst) -> str:
    m = i.mnemonic
    if i.enc == "SOPP":
        return _sopp(i)
    if i.enc == "SOPK":
        return _sopk(i)
    ops = [reg(d) for d in i.dst]
    srcs = [src_text(s, salu=True) for s in i.src]
    if i.enc == "SOPC":     # s_cmp_*_f16: LLVM 19 prints a float inline constant as its f16 bit pattern
        srcs = [f"{FLOAT_CONST[s.code][0]:#x}" if s.kind == "c" and s.bits == 16 and s.code in FLOAT_CONST else t
                for s, t in zip(i.src, srcs)]
    if m == "s_sendmsg_rtn_b32" or m == "s_sendmsg_rtn_b64":
        srcs = [sendmsg(i.fields["ssrc0"], i.family)]
    if m == "s_fmamk_f32":
        srcs = [srcs[0], srcs[2], srcs[1]]
    return f"{m} {', '.join(ops + srcs)}" if ops or srcs else m


def _smem(i: Inst) -> str:
    m = i.mnemonic
    ops = [reg(d) for d in i.dst]
    if m.startswith("s_atc_probe"):    # sdata holds a 7-bit immediate
        v = i.fields["sdata"]
        ops = [str(v) if v <= 64 else f"{v:#x}"]
    if "prefetch" in m:                # RDNA4: [sbase,] ioffset, soffset, length (sdata)
        ops = ([reg(i.sbase)] if i.sbase is not None else []) + \
            [_hex(i.offset), reg(i.soffset) if i.soffset is not None else "null", str(i.fields["sdata"])]
        return f"{m} {', '.join(ops)}"
    if i.sbase is not None:
        ops.append(reg(i.sbase))
        if i.soffset is not None:
            ops.append(reg(i.soffset) + (f" offset:{_hex(i.offset)}" if i.offset or i.family == "rdna4" else ""))
        else:
            ops.append(_hex(i.offset) if i.offset or i.family == "rdna4" else "null")
    policy = _cache(i) if i.family != "rdna4" or "load" in m else []     # RDNA4: only loads print th/scope
    return " ".join([m + (" " + ", ".join(ops) if ops else "")] + policy)


# RDNA4 cache policy spellings (LLVM 19, checked with llvm-mc-19 -mcpu=gfx1201 for every TH value at scopes CU
# and SYS, and the LLVM corpus; atomics at every scope): TH value -> name by access kind; load/store TH 3 is BYPASS
# at SCOPE_SYS, atomic TH 4-7 are CASCADE_* at SCOPE_DEV and SCOPE_SYS
SCOPES = {1: "SCOPE_SE", 2: "SCOPE_DEV", 3: "SCOPE_SYS"}
TH_LOAD = {1: "NT", 2: "HT", 3: "LU", 4: "NT_RT", 5: "RT_NT", 6: "NT_HT"}
TH_STORE = {1: "NT", 2: "HT", 3: "RT_WB", 4: "NT_RT", 5: "RT_NT", 6: "NT_HT", 7: "NT_WB"}
TH_ATOMIC = {1: "RETURN", 2: "NT", 3: "NT_RETURN"}


def _policy(i: Inst) -> list[str]:
    """th:/scope: modifiers of an RDNA4 memory instruction."""
    th, sc, n = i.fields.get("th", 0), i.fields.get("scope", 0), i.name
    out = []
    if th:
        if "ATOMIC" in n:
            t = TH_ATOMIC.get(th) or (("CASCADE_RT", "CASCADE_NT")[th >> 1 & 1] if sc >= 2 else f"{th:#x}")
            out.append(f"th:TH_ATOMIC_{t}")
        else:
            kind, names = ("STORE", TH_STORE) if "STORE" in n else ("LOAD", TH_LOAD)
            t = "BYPASS" if th == 3 and sc == 3 else names.get(th)
            out.append(f"th:TH_{kind}_{t}" if t else f"th:{th:#x}")
    if sc:
        out.append(f"scope:{SCOPES[sc]}")
    return out


def _hex(v: int) -> str:
    return f"-{-v:#x}" if v < 0 else f"{v:#x}"


def _cache(i: Inst) -> list[str]:
    if i.family == "rdna4":
        return _policy(i)
    return [n for n, b in (("glc", i.glc), ("slc", i.slc), ("dlc", i.dlc)) if b]


# ---------------------------------------------------------------- vector ALU

def _dpp_text(i: Inst) -> list[str]:
    d = i.dpp
    if isinstance(d, DPP8):
        return [f"dpp8:[{','.join(map(str, d.sel))}]"] + (["fi:1"] if d.fi else [])
    c = d.ctrl
    if c <= 0xFF:
        ctl = f"quad_perm:[{c & 3},{c >> 2 & 3},{c >> 4 & 3},{c >> 6 & 3}]"
    elif 0x101 <= c <= 0x10F:
        ctl = f"row_shl:{c & 0xF}"
    elif 0x111 <= c <= 0x11F:
        ctl = f"row_shr:{c & 0xF}"
    elif 0x121 <= c <= 0x12F:
        ctl = f"row_ror:{c & 0xF}"
    elif c == 0x140:
        ctl = "row_mirror"
    elif c == 0x141:
        ctl = "row_half_mirror"
    elif 0x150 <= c <= 0x15F:
        ctl = f"row_share:{c & 0xF}"
    elif 0x160 <= c <= 0x16F:
        ctl = f"row_xmask:{c & 0xF}"
    else:
        ctl = "/* Invalid dpp_ctrl value */"
    out = [ctl, f"row_mask:{d.row_mask:#x}", f"bank_mask:{d.bank_mask:#x}"]
    if d.bound_ctrl:
        out.append("bound_ctrl:1")
    if d.fi:
        out.append("fi:1")
    return out


# VOP3 operations whose OPSEL field is no operand-half select. Source: the RDNA4 ISA guide (V_PERMLANE*:
# OPSEL[0] fetch-inactive, OPSEL[1] bound-control; V_CVT_*FP8/BF8*: OPSEL names the byte read or written),
# spellings as llvm-mc-19 prints them. BYTE_SEL: mnemonic -> (OPSEL bit of byte_sel bit 1, of byte_sel bit 0).
PERMLANE = ("v_permlane16_b32", "v_permlanex16_b32", "v_permlane16_var_b32", "v_permlanex16_var_b32")
BYTE_SEL = {"v_cvt_sr_fp8_f32": (3, 2), "v_cvt_sr_bf8_f32": (3, 2), "v_cvt_f32_fp8": (0, 1),
            "v_cvt_f32_bf8": (0, 1)}
# VOP3 operations with 16-bit operands whose op_sel LLVM 19 does not print, and those whose op_sel it prints for
# every source (32-bit ones too); found by encoding each OPSEL bit of every VOP3 opcode for llvm-mc-19 -mcpu=gfx1100
# and gfx1200
NO_OPSEL = frozenset({"v_alignbit_b32", "v_alignbyte_b32", "v_maxmin_f16", "v_minmax_f16", "v_maxmin_num_f16",
                      "v_minmax_num_f16"})
OPSEL_ALL = frozenset({"v_mad_u32_u16", "v_mad_i32_i16"})


def _vname(i: Inst) -> str:
    n = i.name
    base = _key(n)          # the family's own mnemonic (i.key may be a handler alias)
    if n in NO_SUFFIX:
        return base
    if i.dpp is not None:
        if i.enc == "VOPC":
            return base
        return base + ("_e64_dpp" if i.enc in ("VOP3", "VOP3SD", "VOP3P") else "_dpp")   # LLVM 19: VOP3-only too
    if n.endswith("_E32"):
        return base + "_e32" if n[:-4] in PROMOTED_BY[i.family] else base
    if n.endswith("_E64") or (i.enc == "VOP3SD" and i.op < 512):
        return base + "_e64"
    return base


def _bits_list(v: int, n: int) -> str:
    return "[" + ",".join(str(v >> k & 1) for k in range(n)) + "]"


def _valu(i: Inst) -> str:
    name = _vname(i)
    m = i.key
    dst = list(i.dst)
    srcs = list(i.src)
    if m.startswith("v_cmpx_"):
        dst = []
    if i.enc == "VOP1" and m in ("v_nop", "v_pipeflush"):
        return m
    ops = [reg(d) for d in dst] + [src_text(s) for s in srcs]
    if m in ("v_fmamk_f32", "v_fmamk_f16", "v_fmaak_f32", "v_fmaak_f16"):   # the K constant always prints as hex
        k = 1 if "mk" in m else 2
        ops[len(dst) + k] = f"{srcs[k].value:#x}"
    mods = []
    if i.enc in ("VOP3", "VOP3SD"):
        if m in PERMLANE:     # op_sel bits 0/1 are fetch-inactive, bound_ctrl
            if i.opsel & 3:
                mods.append("op_sel:" + _bits_list(i.opsel, 2))
        elif m in BYTE_SEL:   # op_sel bits pick the byte of an FP8/BF8 conversion
            hi, lo = BYTE_SEL[m]
            sel = (i.opsel >> hi & 1) << 1 | (i.opsel >> lo & 1)
            if sel:
                mods.append(f"byte_sel:{sel}")
        elif i.opsel and any(o.bits == 16 for o in (*dst, *srcs)) and not (i.dpp is not None and i.op < 512) \
                and m not in NO_OPSEL:
            # LLVM 19 has no op_sel on the DPP forms of VOP1/VOP2/VOPC operations, and shows bits of 16-bit
            # operands only (every source's of the OPSEL_ALL operations)
            nsrc = len(srcs)
            sel = sum(1 << k for k, o in enumerate(srcs) if i.opsel >> k & 1 and (o.bits == 16 or m in OPSEL_ALL))
            sel |= (i.opsel >> 3 & 1) << nsrc
            if sel:
                mods.append("op_sel:" + _bits_list(sel, nsrc + 1))
        if i.clamp:
            mods.append("clamp")
        if i.omod:
            mods.append({1: "mul:2", 2: "mul:4", 3: "div:2"}[i.omod])
    if i.enc == "VOP3P":
        n = len(srcs)
        mix = m.startswith("v_fma_mix")
        full = 0 if mix else (1 << n) - 1
        if i.opsel and m.startswith("v_swmmac"):      # sparse WMMA: op_sel selects the index set
            mods.append(f"index_key:{i.opsel}")
        elif i.opsel:
            mods.append("op_sel:" + _bits_list(i.opsel, n))
        if i.opsel_hi & ((1 << n) - 1) != full:
            mods.append("op_sel_hi:" + _bits_list(i.opsel_hi, n))
        if mix:   # mixed-precision FMA: neg/abs per source like VOP3 (neg_hi holds abs)
            ops = [reg(d) for d in dst]
            for k, sv in enumerate(srcs):
                c = _plain(sv)
                c.neg, c.abs = sv.neg, bool(i.neg_hi >> k & 1)
                if c.literal:       # LLVM 19 prints a mix literal as an f16 (its low half), whatever op_sel_hi
                    c.bits, c.value = 16, c.value & 0xFFFF
                ops.append(src_text(c))
        else:
            neg_lo = sum(1 << k for k, sv in enumerate(srcs) if sv.neg)
            ops = [reg(d) for d in dst] + [src_text(_plain(sv)) for sv in srcs]
            if neg_lo:
                mods.append("neg_lo:" + _bits_list(neg_lo, n))
            if i.neg_hi:
                mods.append("neg_hi:" + _bits_list(i.neg_hi, n))
        if i.clamp:
            mods.append("clamp")
    if i.dpp is not None:
        mods += _dpp_text(i)
    return " ".join([name + (" " + ", ".join(ops) if ops else "")] + mods)


def _plain(op: Operand) -> Operand:
    c = Operand(op.kind, op.reg, op.n, op.value, op.code, op.bits, op.literal)
    return c


def _vopd(i: Inst) -> str:
    def half(h) -> str:
        srcs = list(h.src)
        if h.name == "V_DUAL_CNDMASK_B32":
            srcs = srcs[:2]
        ops = [src_text(s) for s in srcs]
        if h.name in ("V_DUAL_FMAMK_F32", "V_DUAL_FMAAK_F32"):
            k = 1 if "MK" in h.name else 2
            ops[k] = f"{srcs[k].value:#x}"
        return f"{h.name.lower()} {reg(h.dst)}, " + ", ".join(ops)
    return f"{half(i.x)} :: {half(i.y)}"


# ---------------------------------------------------------------- memory

def _ds(i: Inst) -> str:
    m = i.mnemonic
    ops = [reg(d) for d in i.dst] + [reg(s) for s in i.src]
    mods = []
    if "2addr" in m:
        if i.offset0:
            mods.append(f"offset0:{i.offset0}")
        if i.offset1:
            mods.append(f"offset1:{i.offset1}")
    elif m == "ds_swizzle_b32" and i.offset:
        sw = _swizzle(i.offset)
        mods.append(f"offset:swizzle{sw}" if sw else f"offset:{i.offset}")
    elif i.offset:
        mods.append(f"offset:{i.offset}")
    if i.gds:
        mods.append("gds")
    return " ".join([m + (" " + ", ".join(ops) if ops else "")] + mods)


def _swizzle(v: int) -> str | None:
    """ds_swizzle offset macro text (LLVM's swizzle(...) syntax), None where LLVM prints the number."""
    if v & 0xFF00 == 0x8000:        # quad-perm mode
        return f"(QUAD_PERM,{v & 3},{v >> 2 & 3},{v >> 4 & 3},{v >> 6 & 3})"
    if v & 0x8000:
        return None
    and_m, or_m, xor_m = v & 0x1F, v >> 5 & 0x1F, v >> 10 & 0x1F
    pow2 = lambda x: x and x & (x - 1) == 0     # noqa: E731
    if and_m == 0x1F and or_m == 0 and pow2(xor_m):
        return f"(SWAP,{xor_m})"
    if and_m == 0x1F and or_m == 0 and pow2(xor_m + 1):
        return f"(REVERSE,{xor_m + 1})"
    group = (~and_m & 0x1F) + 1
    if xor_m == 0 and group > 1 and pow2(group) and or_m < group:
        return f"(BROADCAST,{group},{or_m})"
    return f"(BITMASK_PERM,\"{_bitmask(and_m, or_m, xor_m)}\")"


def _bitmask(a: int, o: int, x: int) -> str:
    out = ""
    for k in range(4, -1, -1):
        ab, ob, xb = a >> k & 1, o >> k & 1, x >> k & 1
        # lane bit k becomes ((bit & and) | or) ^ xor: the lane's bit, its inverse, or a constant
        out += ("i" if xb else "p") if ab and not ob else str(ob ^ xb)
    return out


def _flat(i: Inst) -> str:
    m = i.mnemonic
    if m in ("global_inv", "global_wb", "global_wbinv"):
        return " ".join([m] + _cache(i))
    ops = [reg(d) for d in i.dst]
    if i.enc == "FLAT":
        ops.append(reg(i.addr))
    elif "addtid" not in m:
        ops.append(reg(i.addr) if i.addr is not None else "off")
    if i.data is not None:
        ops.append(reg(i.data))
    if i.enc != "FLAT":
        ops.append(reg(i.saddr) if i.saddr is not None else "off")
    mods = [f"offset:{i.offset}"] if i.offset else []
    return " ".join([m + " " + ", ".join(ops)] + mods + _cache(i))


def _mubuf(i: Inst) -> str:
    m = i.mnemonic
    if i.srsrc is None:
        return m
    data = i.dst[0] if i.dst else i.data
    if "cmpswap" in m or ("atomic" in m):
        data = i.data
    ops = [reg(data), reg(i.addr) if i.addr is not None else "off", reg(i.srsrc), src_text(i.soffset)]
    if "_lds_" in m:
        ops = ops[1:]
    mods = buf_format(i.fields["format"]) if i.family == "rdna4" and m.startswith("tbuffer") else []
    mods += [n for n, b in (("idxen", i.idxen), ("offen", i.offen)) if b]
    if i.offset:
        mods.append(f"offset:{i.offset}")
    return " ".join([m + " " + ", ".join(ops)] + mods + _cache(i) + (["tfe"] if i.fields.get("tfe") else []))


# ---------------------------------------------------------------- RDNA4 encodings

# Unified buffer formats 0..63 (AMD RDNA3 and RDNA4 ISA guides, "Buffer formats": one list) in llvm-mc-19's
# spelling; 1 (BUF_FMT_8_UNORM) is the default and is not printed, 64+ print as numbers.
BUF_FMT = ("INVALID", "8_UNORM", "8_SNORM", "8_USCALED", "8_SSCALED", "8_UINT", "8_SINT", "16_UNORM", "16_SNORM",
           "16_USCALED", "16_SSCALED", "16_UINT", "16_SINT", "16_FLOAT", "8_8_UNORM", "8_8_SNORM", "8_8_USCALED",
           "8_8_SSCALED", "8_8_UINT", "8_8_SINT", "32_UINT", "32_SINT", "32_FLOAT", "16_16_UNORM", "16_16_SNORM",
           "16_16_USCALED", "16_16_SSCALED", "16_16_UINT", "16_16_SINT", "16_16_FLOAT", "10_11_11_FLOAT",
           "11_11_10_FLOAT", "10_10_10_2_UNORM", "10_10_10_2_SNORM", "10_10_10_2_UINT", "10_10_10_2_SINT",
           "2_10_10_10_UNORM", "2_10_10_10_SNORM", "2_10_10_10_USCALED", "2_10_10_10_SSCALED", "2_10_10_10_UINT",
           "2_10_10_10_SINT", "8_8_8_8_UNORM", "8_8_8_8_SNORM", "8_8_8_8_USCALED", "8_8_8_8_SSCALED",
           "8_8_8_8_UINT", "8_8_8_8_SINT", "32_32_UINT", "32_32_SINT", "32_32_FLOAT", "16_16_16_16_UNORM",
           "16_16_16_16_SNORM", "16_16_16_16_USCALED", "16_16_16_16_SSCALED", "16_16_16_16_UINT",
           "16_16_16_16_SINT", "16_16_16_16_FLOAT", "32_32_32_UINT", "32_32_32_SINT", "32_32_32_FLOAT",
           "32_32_32_32_UINT", "32_32_32_32_SINT", "32_32_32_32_FLOAT")
# export targets (AMD RDNA4 ISA guide, "Export": TARGET; checked with llvm-mc-19 -mcpu=gfx1200, which has no null)
EXPORT_TGT = {**{k: f"mrt{k}" for k in range(8)}, 8: "mrtz", **{12 + k: f"pos{k}" for k in range(5)},
              20: "prim", 21: "dual_src_blend0", 22: "dual_src_blend1"}


def buf_format(v: int) -> list[str]:
    """The format: modifier of a typed buffer access ([] for the default BUF_FMT_8_UNORM)."""
    if v == 1:
        return []
    return [f"format:[BUF_FMT_{BUF_FMT[v]}]" if v < len(BUF_FMT) else f"format:{v}"]


def _image(i: Inst) -> str:
    """VIMAGE / VSAMPLE: vdata, address slots, rsrc[, samp], then dmask/dim/cache policy/flags."""
    from .decode_rdna4 import DIMS
    m, f = i.mnemonic, i.fields
    addr = reg(i.vaddr[0]) if len(i.vaddr) == 1 else "[" + ", ".join(reg(a) for a in i.vaddr) + "]"
    sreg = lambda o, fld: SPECIAL.get(f[fld]) or reg(o)     # noqa: E731  (9-bit fields: src_* codes by name)
    ops = [reg(i.data), addr, sreg(i.srsrc, "rsrc")] + ([sreg(i.ssamp, "samp")] if i.ssamp is not None else [])
    if "bvh" in m:
        return " ".join([f"{m} {', '.join(ops)}"] + _policy(i) + (["a16"] if f["a16"] else []))
    mods = ([f"dmask:{f['dmask']:#x}"] if f["dmask"] else []) + [f"dim:SQ_RSRC_IMG_{DIMS[f['dim']][0]}"]
    mods += (["unorm"] if f.get("unrm") else []) + _policy(i)
    mods += [n for n in ("r128", "a16", "tfe", "lwe", "d16") if f.get(n)]
    return " ".join([f"{m} {', '.join(ops)}"] + mods)


def _vinterp(i: Inst) -> str:
    ops = [reg(i.dst[0])] + [src_text(s) for s in i.src]
    mods = ["clamp"] if i.clamp else []
    if i.opsel and "f16" in i.mnemonic:
        mods.append("op_sel:" + _bits_list(i.opsel, 4))
    mods.append(f"wait_exp:{i.fields['waitexp']}")
    return " ".join([f"{i.mnemonic} {', '.join(ops)}"] + mods)


def _vdsdir(i: Inst) -> str:
    f = i.fields
    ops = [reg(i.dst[0])] + ([f"attr{f['attr']}.{'xyzw'[f['attr_chan']]}"] if i.mnemonic == "ds_param_load" else [])
    return f"{i.mnemonic} {', '.join(ops)} wait_va_vdst:{f['wait_va_vdst']} wait_vm_vsrc:{f['wait_vm_vsrc']}"


def _vexport(i: Inst) -> str:
    f = i.fields
    tgt = EXPORT_TGT.get(f["target"], f"invalid_target_{f['target']}")
    srcs = [reg(Operand("v", f[f"vsrc{k}"])) if f["en"] >> k & 1 else "off" for k in range(4)]
    return " ".join([f"export {tgt} {', '.join(srcs)}"] + (["done"] if f["done"] else []) +
                    (["row_en"] if f["row"] else []))


FORMATTERS = {"SOP1": _salu, "SOP2": _salu, "SOPC": _salu, "SOPK": _salu, "SOPP": _salu, "SMEM": _smem,
              "VOP1": _valu, "VOP2": _valu, "VOPC": _valu, "VOP3": _valu, "VOP3SD": _valu, "VOP3P": _valu,
              "VOPD": _vopd, "DS": _ds, "FLAT": _flat, "GLOBAL": _flat, "SCRATCH": _flat, "MUBUF": _mubuf,
              "VIMAGE": _image, "VSAMPLE": _image, "VINTERP": _vinterp, "VDSDIR": _vdsdir, "VEXPORT": _vexport}


def text(inst: Inst) -> str:
    """The LLVM-syntax text of a decoded RDNA instruction (amdq.hw.isa.syntax.text picks the family)."""
    return FORMATTERS[inst.enc](inst)
