"""LLVM-syntax text of decoded RDNA instructions (what llvm-objdump --mcpu=gfx1100 / gfx1200 prints).

    text(inst) -> str            one decoded instruction
    decoder(family) -> decode    the decode function of an ISA family
"""
from __future__ import annotations

from amdq.errors import UnsupportedTarget
from amdq.hw import isa
from .decode import DPP8, EXEC_LO, FLOAT_CONST, M0, NULL, SPECIAL, VCC_LO, Inst, Operand, _key, decode

# LLVM assembler names of message ids and hardware registers (AMD RDNA3 ISA guide, S_SENDMSG / S_GETREG tables).
MSG = {1: "MSG_INTERRUPT", 2: "MSG_HS_TESSFACTOR", 3: "MSG_DEALLOC_VGPRS", 5: "MSG_STALL_WAVE_GEN",
       6: "MSG_HALT_WAVES", 9: "MSG_GS_ALLOC_REQ"}
MSG.update({v: k for k, v in isa.tables().NAMES["MSG"].items() if k != "MSG_RTN_ILLEGAL_MSG"})
HWREG_SYNTAX = {"HW_REG_SHADER_FLAT_SCRATCH_LO": "HW_REG_FLAT_SCR_LO", "HW_REG_SHADER_FLAT_SCRATCH_HI": "HW_REG_FLAT_SCR_HI"}
HWREG_UNNAMED = {8, 9, 13, 14, 16, 17, 25, 26, 28}      # registers gfx11 assembler syntax leaves numeric
HWREG = {v: HWREG_SYNTAX.get(k, k) for k, v in isa.tables().NAMES["HWREG"].items() if v not in HWREG_UNNAMED}
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
        t = f"neg({t})" if op.kind == "c" and not op.abs and (op.literal or op.code <= 208) else f"-{t}"
    return t


# ---------------------------------------------------------------- scalar formats

def waitcnt(v: int) -> str:
    vm, exp, lgkm = v >> 10 & 0x3F, v & 7, v >> 4 & 0x3F
    parts = [f"vmcnt({vm})" if vm != 0x3F else "", f"expcnt({exp})" if exp != 7 else "", f"lgkmcnt({lgkm})" if lgkm != 0x3F else ""]
    parts = [p for p in parts if p]
    return " ".join(parts) if parts else "vmcnt(63) expcnt(7) lgkmcnt(63)"


def delay_alu(v: int) -> str:
    id0, skip, id1 = v & 0xF, v >> 4 & 7, v >> 7 & 0xF
    if v >> 11:
        return f"{v:#x}"
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


def hwreg(v: int) -> str:
    rid, off, size = v & 0x3F, v >> 6 & 0x1F, (v >> 11 & 0x1F) + 1
    name = HWREG.get(rid, str(rid))
    return f"hwreg({name})" if off == 0 and size == 32 else f"hwreg({name}, {off}, {size})"


def sendmsg(v: int) -> str:
    if v in MSG:
        return f"sendmsg({MSG[v]})"
    return f"sendmsg({v}, 0, 0)" if v < 256 else str(v)


def _sopp(i: Inst) -> str:
    m, v = i.mnemonic, i.simm16 & 0xFFFF
    if m in ("s_endpgm", "s_barrier", "s_code_end", "s_icache_inv", "s_wakeup", "s_endpgm_saved", "s_wait_idle",
             "s_ttracedata", "s_endpgm_ordered_ps_done"):
        return m if not (m == "s_endpgm" and v) else f"{m} {v}"
    if m == "s_waitcnt":
        return f"{m} {waitcnt(v)}"
    if m == "s_delay_alu":
        return f"{m} {delay_alu(v)}"
    if m.startswith("s_wait_") and m != "s_wait_idle":     # RDNA4's counters and s_wait_alu print in hex
        return f"{m} {v:#x}"
    if m == "s_waitcnt_depctr":
        return f"{m} {depctr(v)}"
    if m in ("s_sendmsg", "s_sendmsghalt"):
        return f"{m} {sendmsg(v)}"
    if i.target is not None:
        return f"{m} {v}"
    if m in ("s_clause", "s_set_inst_prefetch_distance", "s_round_mode", "s_wait_event", "s_ttracedata_imm"):
        return f"{m} {v:#x}"
    return f"{m} {v}" if v <= 64 else f"{m} {v:#x}"


def _sopk(i: Inst) -> str:
    m, v = i.mnemonic, i.simm16 & 0xFFFF
    if m in ("s_getreg_b32", "s_setreg_b32"):
        # s_setreg's SOPK sdst field names its source register (the decoder puts it in src)
        return f"{m} {reg(i.dst[0])}, {hwreg(v)}" if m == "s_getreg_b32" else f"{m} {hwreg(v)}, {reg(i.src[0])}"
    if m == "s_setreg_imm32_b32":
        return f"{m} {hwreg(v)}, {src_text(i.src[0], salu=True)}"
    if m == "s_version":
        return f"{m} {v}" if v <= 255 else f"{m} {v:#x}"
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
    if m == "s_sendmsg_rtn_b32" or m == "s_sendmsg_rtn_b64":
        srcs = [sendmsg(i.fields["ssrc0"])]
    if m == "s_fmamk_f32":
        srcs = [srcs[0], srcs[2], srcs[1]]
    return f"{m} {', '.join(ops + srcs)}" if ops or srcs else m


def _smem(i: Inst) -> str:
    m = i.mnemonic
    ops = [reg(d) for d in i.dst]
    if m.startswith("s_atc_probe"):    # sdata holds a 7-bit immediate
        v = i.fields["sdata"]
        ops = [str(v) if v <= 64 else f"{v:#x}"]
    if i.sbase is not None:
        ops.append(reg(i.sbase))
        if i.soffset is not None:
            ops.append(reg(i.soffset) + (f" offset:{_hex(i.offset)}" if i.offset or i.family == "rdna4" else ""))
        else:
            ops.append(_hex(i.offset) if i.offset or i.family == "rdna4" else "null")
    return " ".join([m + (" " + ", ".join(ops) if ops else "")] + _cache(i))


# RDNA4 cache policy spellings (LLVM 19, checked with llvm-mc-19 -mcpu=gfx1201 for every TH value at scopes CU
# and SYS, and the LLVM corpus): TH value -> name by access kind; load/store TH 3 is BYPASS at SCOPE_SYS, atomic
# TH 4-7 are CASCADE_* above SCOPE_CU
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
            t = TH_ATOMIC.get(th) or (("CASCADE_RT", "CASCADE_NT")[th >> 1 & 1] if sc else f"{th:#x}")
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
        if m in ("v_permlane16_b32", "v_permlanex16_b32"):     # op_sel bits 0/1 are fetch-inactive, bound_ctrl
            if i.opsel & 3:
                mods.append("op_sel:" + _bits_list(i.opsel, 2))
        elif i.opsel and any(o.bits == 16 for o in (*dst, *srcs)) and not (i.dpp is not None and i.op < 512):
            # LLVM 19 has no op_sel on the DPP forms of VOP1/VOP2/VOPC operations, and shows bits of 16-bit
            # operands only
            nsrc = len(srcs)
            sel = sum(1 << k for k, o in enumerate(srcs) if i.opsel >> k & 1 and o.bits == 16)
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
        if i.opsel:
            mods.append("op_sel:" + _bits_list(i.opsel, n))
        if i.opsel_hi & ((1 << n) - 1) != full:
            mods.append("op_sel_hi:" + _bits_list(i.opsel_hi, n))
        if mix:   # mixed-precision FMA: neg/abs per source like VOP3 (neg_hi holds abs)
            ops = [reg(d) for d in dst]
            for k, sv in enumerate(srcs):
                c = _plain(sv)
                c.neg, c.abs = sv.neg, bool(i.neg_hi >> k & 1)
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
    mods = [n for n, b in (("idxen", i.idxen), ("offen", i.offen)) if b]
    if i.offset:
        mods.append(f"offset:{i.offset}")
    return " ".join([m + " " + ", ".join(ops)] + mods + _cache(i) + (["tfe"] if i.fields.get("tfe") else []))


FORMATTERS = {"SOP1": _salu, "SOP2": _salu, "SOPC": _salu, "SOPK": _salu, "SOPP": _salu, "SMEM": _smem,
              "VOP1": _valu, "VOP2": _valu, "VOPC": _valu, "VOP3": _valu, "VOP3SD": _valu, "VOP3P": _valu,
              "VOPD": _vopd, "DS": _ds, "FLAT": _flat, "GLOBAL": _flat, "SCRATCH": _flat, "MUBUF": _mubuf}


def text(inst: Inst) -> str:
    """The LLVM-syntax text of a decoded instruction."""
    if inst.family == "cdna3":
        from .text_cdna import text9
        return text9(inst)
    return FORMATTERS[inst.enc](inst)


def decoder(arch: str = "rdna3"):
    """The decode function of an ISA family ("rdna3", "rdna4", "cdna3", "cdna4")."""
    if arch in ("cdna3", "cdna4"):       # gfx942 exactly; CDNA4 (gfx950) the tables' superset
        from .decode_cdna import CDNA, GFX942
        return GFX942.decode if arch == "cdna3" else CDNA.decode
    if arch == "rdna4":
        from .decode_rdna4 import decode as decode4
        return decode4
    if arch != "rdna3":
        raise UnsupportedTarget(f"the disassembler reads rdna3, rdna4, cdna3 and cdna4 code, not {arch}")
    return decode
