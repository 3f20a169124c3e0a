"""gfx9 (CDNA3, gfx942) instruction decoder: code bytes + PC -> Inst (the classes of decode.py).

Bit layouts and opcode tables come from amdq.hw.isa("cdna3") (generated from AMD's machine-readable CDNA4 ISA
XML, gfx950 being a superset of gfx942). Operands come out in the shader core's register space, so the RDNA3
handlers can execute them where the semantics agree:

- SGPR codes 0..105 (FLAT_SCRATCH 102/103, XNACK_MASK 104/105 as plain SGPRs), VCC 106/107, EXEC 126/127;
  gfx9's M0 (code 124) becomes register 125, the core's M0; gfx9 has no NULL register.
- AccVGPR a[i] is register row ACC_BASE + i of the wave's VGPR array. On gfx90a/gfx942 the unified file puts
  a[i] at v[accum_offset + i] (AMDGPUUsage, "COMPUTE_PGM_RSRC3 ACCUM_OFFSET"); ArchVGPRs stop below
  accum_offset, so no instruction can tell the two placements apart.
- `Inst.key` is the RDNA3 handler key where the operation is the same (ALIASES and _canon below: gfx9
  v_add_u32 is RDNA3 v_add_nc_u32, v_addc_co_u32 is v_add_co_ci_u32, global_load_dword is global_load_b32...);
  gfx9 VOP2 carry forms get VCC as explicit carry-in/carry-out operands.
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from amdq.errors import IllegalInstruction, UnsupportedInstruction
from amdq.hw import isa

from . import gfx942
from . import decode as D
from .decode import (DPP16, LITERAL, QUIET_SOPP, SAFE_ENC, Decoder, Inst, Operand, _Ctx, _fail, _fields, _get, _key,
                     _nregs, _sext, _src_op)

ARCH = "cdna3"
ENC = isa.encodings(ARCH)
OPS = gfx942.merged(isa.tables(ARCH).OPCODES)     # CDNA4's tables with the gfx942 rows they lack

VCC_LO, M0_GFX9, M0, EXEC_LO = 106, 124, 125, 126
NULL_GFX9, NULL_CORE = 125, 124            # gfx9 codes M0 124 and NULL 125 are the core's 125 and 124
SDWA_SRC, DPP_SRC = 249, 250
SADDR_OFF = 0x7F                        # FLAT/GLOBAL/SCRATCH saddr "off"
ACC_BASE = 256                          # row of a[0] in the wave's VGPR array

# gfx9 mnemonic -> RDNA3 handler key, where the operation is the same (RDNA3 ISA guide renames, AMD "RDNA3
# Instruction Set Architecture" section 16 opcode tables vs. "AMD Instinct MI300 ISA" section 12).
ALIASES = {
    "v_add_u32": "v_add_nc_u32", "v_sub_u32": "v_sub_nc_u32", "v_subrev_u32": "v_subrev_nc_u32",
    "v_add_i32": "v_add_nc_i32", "v_sub_i32": "v_sub_nc_i32", "v_add_u16": "v_add_nc_u16",
    "v_sub_u16": "v_sub_nc_u16", "v_add_i16": "v_add_nc_i16", "v_sub_i16": "v_sub_nc_i16",
    "v_addc_co_u32": "v_add_co_ci_u32", "v_subb_co_u32": "v_sub_co_ci_u32", "v_subbrev_co_u32": "v_subrev_co_ci_u32",
    "v_ffbh_u32": "v_clz_i32_u32", "v_ffbl_b32": "v_ctz_i32_b32", "v_ffbh_i32": "v_cls_i32",
    "v_cvt_pkrtz_f16_f32": "v_cvt_pk_rtz_f16_f32", "v_cvt_flr_i32_f32": "v_cvt_floor_i32_f32",
    "v_cvt_rpi_i32_f32": "v_cvt_nearest_i32_f32", "v_cvt_pknorm_i16_f32": "v_cvt_pk_norm_i16_f32",
    "v_cvt_pknorm_u16_f32": "v_cvt_pk_norm_u16_f32", "v_cvt_pknorm_i16_f16": "v_cvt_pk_norm_i16_f16",
    "v_cvt_pknorm_u16_f16": "v_cvt_pk_norm_u16_f16",
    "buffer_wbl2": "buffer_gl0_inv", "buffer_inv": "buffer_gl0_inv",     # cache maintenance: the core has no caches
    "v_accvgpr_read": "v_mov_b32", "v_accvgpr_write": "v_mov_b32", "v_accvgpr_mov_b32": "v_mov_b32",
    "s_andn2_b32": "s_and_not1_b32", "s_andn2_b64": "s_and_not1_b64", "s_orn2_b32": "s_or_not1_b32",
    "s_orn2_b64": "s_or_not1_b64", "s_andn2_saveexec_b64": "s_and_not1_saveexec_b64",
    "s_orn2_saveexec_b64": "s_or_not1_saveexec_b64", "s_andn1_saveexec_b64": "s_and_not0_saveexec_b64",
    "s_orn1_saveexec_b64": "s_or_not0_saveexec_b64", "s_andn1_wrexec_b64": "s_and_not0_wrexec_b64",
    "s_andn2_wrexec_b64": "s_and_not1_wrexec_b64",
    "s_ff1_i32_b32": "s_ctz_i32_b32", "s_ff1_i32_b64": "s_ctz_i32_b64", "s_flbit_i32_b32": "s_clz_i32_u32",
    "s_flbit_i32_b64": "s_clz_i32_u64", "s_flbit_i32": "s_cls_i32",
    "ds_cmpst_b32": "ds_cmpstore_b32", "ds_cmpst_b64": "ds_cmpstore_b64", "ds_cmpst_rtn_b32": "ds_cmpstore_rtn_b32",
    "ds_cmpst_rtn_b64": "ds_cmpstore_rtn_b64", "ds_cmpst_f32": "ds_cmpstore_f32", "ds_cmpst_rtn_f32": "ds_cmpstore_rtn_f32",
    "ds_cmpst_f64": "ds_cmpstore_f64", "ds_cmpst_rtn_f64": "ds_cmpstore_rtn_f64",
}
_WIDTH = {"dwordx16": "b512", "dwordx8": "b256", "dwordx4": "b128", "dwordx3": "b96", "dwordx2": "b64",
          "dword": "b32", "ubyte": "u8", "sbyte": "i8", "ushort": "u16", "sshort": "i16"}
_ATOMIC = {"add": "add_u32", "sub": "sub_u32", "inc": "inc_u32", "dec": "dec_u32", "smin": "min_i32",
           "smax": "max_i32", "umin": "min_u32", "umax": "max_u32", "and": "and_b32", "or": "or_b32",
           "xor": "xor_b32", "swap": "swap_b32", "cmpswap": "cmpswap_b32"}
_ATOMIC64 = {"add": "add_u64", "sub": "sub_u64", "inc": "inc_u64", "dec": "dec_u64", "smin": "min_i64",
             "smax": "max_i64", "umin": "min_u64", "umax": "max_u64", "and": "and_b64", "or": "or_b64",
             "xor": "xor_b64", "swap": "swap_b64", "cmpswap": "cmpswap_b64"}


@lru_cache(maxsize=None)
def _canon(key: str) -> str:
    """The RDNA3 handler key of a gfx9 mnemonic (lower case, without _e32/_e64); one answer per mnemonic."""
    if key in ALIASES:
        return ALIASES[key]
    m = re.fullmatch(r"(global|flat|scratch|buffer)_(load|store)_(.*)", key)
    if m:
        seg, kind, rest = m.groups()
        d16 = re.fullmatch(r"(ubyte|sbyte|short|byte)_d16(_hi)?", rest)
        if d16:
            w = {"ubyte": "u8", "sbyte": "i8", "short": "b16", "byte": "b8"}[d16.group(1)]
            return f"{seg}_{kind}_d16{d16.group(2) or ''}_{w}"
        if kind == "store" and rest in ("byte", "short"):
            return f"{seg}_store_{'b8' if rest == 'byte' else 'b16'}"
        return f"{seg}_{kind}_{_WIDTH.get(rest, rest)}"
    m = re.fullmatch(r"(global|flat|buffer)_atomic_([a-z]+)(_x2)?", key)
    if m and m.group(2) in _ATOMIC:
        return f"{m.group(1)}_atomic_{(_ATOMIC64 if m.group(3) else _ATOMIC)[m.group(2)]}"
    m = re.fullmatch(r"s_(buffer_)?load_(dword\w*)", key)
    if m:
        return f"s_{m.group(1) or ''}load_{_WIDTH[m.group(2)]}"
    if key.startswith("ds_read"):
        k = key.replace("ds_read2st64_", "ds_load_2addr_stride64_").replace("ds_read2_", "ds_load_2addr_")
        return k.replace("ds_read_", "ds_load_")
    if key.startswith("ds_write") or key.startswith("ds_wrxchg"):
        k = key.replace("ds_write2st64_", "ds_store_2addr_stride64_").replace("ds_write2_", "ds_store_2addr_")
        k = k.replace("ds_wrxchg2st64_rtn_", "ds_storexchg_2addr_stride64_rtn_")
        k = k.replace("ds_wrxchg2_rtn_", "ds_storexchg_2addr_rtn_").replace("ds_wrxchg_rtn_", "ds_storexchg_rtn_")
        return k.replace("ds_write_", "ds_store_")
    return key


class Inst9(Inst):
    """A decoded gfx9 instruction; `sdwa` holds the SDWA controls (or None), `acc_cd`/`cbsz`/`abid`/`blgp` the
    MFMA modifiers."""

    __slots__ = ("sdwa", "acc_cd", "cbsz", "abid", "blgp", "form")

    def __init__(self, pc: int, enc: str, op: int, name: str):
        super().__init__(pc, enc, op, name)
        self.key = _canon(_key(name))
        self.family = ARCH
        self.form = enc             # the encoding of the machine code (enc may be the form the core runs it as)
        self.sdwa = None
        self.acc_cd = self.cbsz = self.abid = self.blgp = 0


class SDWA:
    """SDWA controls: dst_sel/src0_sel/src1_sel (0..3 byte, 4/5 word, 6 dword), dst_unused (0 pad with zeros,
    1 sign-extend, 2 preserve), src sext flags; sdst for VOPC."""

    __slots__ = ("dst_sel", "dst_unused", "src_sel", "sext")

    def __init__(self, dst_sel: int, dst_unused: int, src_sel: tuple, sext: tuple):
        self.dst_sel, self.dst_unused, self.src_sel, self.sext = dst_sel, dst_unused, src_sel, sext

    def __repr__(self) -> str:
        return f"SDWA(dst_sel={self.dst_sel}, unused={self.dst_unused}, src_sel={self.src_sel}, sext={self.sext})"


def _lookup(ctx: _Ctx, enc: str, num: int) -> tuple[str, dict]:
    return D._lookup(ctx, enc + "Op", num, "gfx9 " + enc)


def _sreg(code: int, bits: int = 32) -> Operand:
    """A gfx9 SGPR-space operand in the core's register space (M0 and NULL swapped, tuples aligned)."""
    n = _nregs(bits)
    if code > 127:
        raise IllegalInstruction(f"scalar register code {code} names no SGPR")
    if code == M0_GFX9 and n > 1:
        raise IllegalInstruction("m0 is a 32-bit register: no operand of 64 bits or more can name it")
    if code == NULL_GFX9:
        return Operand("s", NULL_CORE, n, bits=bits)
    if n > 1:
        code &= ~1 if n == 2 else ~3
    return Operand("s", {M0_GFX9: M0, NULL_GFX9: NULL_CORE}.get(code, code), n, bits=bits)


def _vreg(idx: int, bits: int = 32, acc: bool = False) -> Operand:
    n = _nregs(bits)
    if idx + n > 256:
        raise IllegalInstruction(f"register tuple {'a' if acc else 'v'}[{idx}:{idx + n - 1}] runs past the last register")
    return Operand("v", idx + (ACC_BASE if acc else 0), n, bits=bits)


def _src(ctx: _Ctx, code: int, info: tuple | None, mask_bits: int = 64, salu: bool = False,
         acc: bool = False) -> Operand:
    """A gfx9 source operand (9-bit VALU or 8-bit SALU code)."""
    fmt, bits, typ = info if info else ("NUM_B32", 32, "SRC")
    if fmt == "NUM_M64":
        bits = mask_bits
    if code < 128:
        op = _sreg(code, bits)
    elif code >= 256:
        op = _vreg(code - 256, bits, acc or "ACCVGPR" in typ and "VGPR_OR" not in typ)
    elif code in (SDWA_SRC, DPP_SRC) or 209 <= code <= 234:
        raise _fail(ctx, f"invalid gfx9 source operand code {code}")
    elif fmt.startswith("NUM_PK2_") and fmt.endswith("32"):
        op = _src_op(ctx, code, fmt[:4] + fmt[8:], 32, salu)    # a packed-f32 constant is the low dword
        op.n, op.bits = 2, 64
    else:
        op = _src_op(ctx, code, fmt, bits, salu)
    op.fmt = fmt
    return op


# ---------------------------------------------------------------- scalar

def _sop(ctx: _Ctx, enc: str) -> Inst:
    """The shared scalar decoding (decode._sop with the gfx9 operands); SOPP operations without an operand
    must have SIMM16 clear (s_endpgm takes one)."""
    inst = D._sop(ctx, enc)
    if inst.name == "S_SET_GPR_IDX_ON":      # SSRC1 holds the 4-bit mode immediate, not an operand code
        ctx.lit_used = inst.src[0].literal
        inst.src = (inst.src[0], Operand("c", inst.fields["ssrc1"], 1, inst.fields["ssrc1"]))
    if enc == "SOPP" and inst.simm16 and not OPS["SOPPOp"][inst.op][1] and inst.name != "S_ENDPGM":
        raise _fail(ctx, f"{inst.mnemonic} with reserved SIMM16 bits set")
    return inst


def _smem(ctx: _Ctx) -> Inst:
    """gfx9 SMEM: IMM selects a 21-bit signed byte offset (else OFFSET[6:0] names an SGPR); SOFFSET_EN adds
    the SGPR in SOFFSET (MI300 ISA, "Scalar Memory Operations")."""
    f = _fields(ctx, "SMEM")
    name, opr = _lookup(ctx, "SMEM", f["op"])
    inst = Inst9(ctx.pc, "SMEM", f["op"], name)
    inst.fields, inst.size, inst.glc = f, 8, f["glc"]
    if "sdata" in opr and opr["sdata"][2] == "SREG":
        sdata = _sreg(f["sdata"], opr["sdata"][1])
        if name.startswith(("S_LOAD", "S_BUFFER_LOAD", "S_SCRATCH_LOAD", "S_MEM")):
            inst.dst = (sdata,)
        else:               # stores and atomics read sdata; atomics with GLC return the old value in it
            inst.data = sdata
            if "ATOMIC" in name and f["glc"]:
                inst.dst = (_sreg(f["sdata"], opr["sdata"][1] // (2 if "CMPSWAP" in name else 1)),)
    if "sbase" not in opr:
        return inst                                   # s_dcache_*, s_memtime, s_memrealtime
    inst.sbase = _sreg(f["sbase"] * 2, opr["sbase"][1])
    if f["imm"]:
        inst.offset = _sext(f["offset"], 21)
        inst.soffset = _sreg(f["soffset"]) if f["soffset_en"] else None
    else:
        inst.soffset = _sreg(f["soffset"] if f["soffset_en"] else f["offset"] & 0x7F)
    inst.src = tuple(x for x in (inst.sbase, inst.soffset) if x is not None)
    return inst


# ---------------------------------------------------------------- vector ALU

# 16-bit VALU results on gfx9 zero the destination's high half (LLVM GCNSubtarget::zeroesHigh16BitsOfDest:
# "On gfx10, all 16-bit instructions preserve the high bits", the list including v_fma_f16, v_mad_u16/i16 and
# v_div_fixup_f16 up to gfx9), except these, which write one half and keep the other.
PRESERVE16 = {"v_mac_f16", "v_madak_f16", "v_madmk_f16", "v_fmac_f16", "v_fmamk_f16", "v_fmaak_f16",
              "v_fma_mixlo_f16", "v_fma_mixhi_f16", "v_mad_mixlo_f16", "v_mad_mixhi_f16"}


def _has16(opr: dict) -> bool:
    return any(bits == 16 for _, bits, _ in opr.values())


def _dpp9(ctx: _Ctx, inst: Inst) -> Operand:
    """gfx9 DPP dword (bits 32..63): src0 VGPR, dpp_ctrl, bound_ctrl, neg/abs, bank and row masks."""
    ctrl = _get(ctx, 40, 48)
    if 0x160 <= ctrl or 0x144 <= ctrl <= 0x14F or ctrl in (0x100, 0x110, 0x120) or 0x131 <= ctrl <= 0x13F and \
            ctrl not in (0x134, 0x138, 0x13C):
        raise _fail(ctx, f"undefined gfx9 DPP control {ctrl:#x}")
    row_mask = _get(ctx, 60, 63)
    cls = DPP9 if 0x130 <= ctrl <= 0x13C or 0x142 <= ctrl <= 0x143 or 0x150 <= ctrl <= 0x15F else DPP16
    inst.dpp = cls(ctrl, row_mask, _get(ctx, 56, 59), _get(ctx, 51, 51), 0)
    ctx.lit_pos = 64
    return Operand("v", _get(ctx, 32, 39))


class DPP9(DPP16):
    """gfx9-only DPP controls (MI300 ISA, "DPP_CTRL"): wave_shl:1 0x130 (lane i reads i + 1), wave_rol:1
    0x134, wave_shr:1 0x138 (reads i - 1), wave_ror:1 0x13C, row_bcast:15 0x142 (row r reads lane 16r - 1),
    row_bcast:31 0x143 (rows 2 and 3 read lane 31); gfx90a+ row_newbcast:n 0x150+n (every lane reads lane n of
    its row). Sources past the wave's edge are invalid, as for row shifts."""

    __slots__ = ()

    def check(self) -> None:
        """UnsupportedInstruction for a control the core does not model (called when a handler is built)."""
        if self.ctrl == 0x142 and self.row_mask & 1 or self.ctrl == 0x143 and self.row_mask & 3:
            raise UnsupportedInstruction(f"row broadcast {self.ctrl:#x} writing rows that have no source row is "
                                         "not modelled")

    def plan(self, lanes: int):
        return _plan9(self.ctrl, self.row_mask, self.bank_mask, lanes)


@lru_cache(maxsize=None)
def _plan9(c: int, row_mask: int, bank_mask: int, lanes: int):
    """(source lane, in bounds, writable) of every lane for a DPP9 control."""
    lane = np.arange(lanes)
    if c in (0x130, 0x134):
        j = lane + 1
    elif c in (0x138, 0x13C):
        j = lane - 1
    elif c == 0x142:
        j = (lane & ~15) - 1
    elif c >= 0x150:
        j = (lane & ~15) + (c & 0xF)
    else:
        j = np.where(lane >= 32, 31, -1)
    valid = (j >= 0) & (j < lanes) if c not in (0x134, 0x13C) else np.ones(lanes, bool)
    src = (j % lanes).astype(np.intp)
    writable = ((row_mask >> (lane >> 4)) & 1).astype(bool) & ((bank_mask >> ((lane >> 2) & 3)) & 1).astype(bool)
    for a in (src, valid, writable):
        a.setflags(write=False)
    return src, valid, writable


def _sdwa(ctx: _Ctx, inst: Inst, vopc: bool, info: tuple | None) -> Operand:
    """gfx9 SDWA dword: src0 (VGPR, or with S0 an SGPR-space operand or inline constant), selects, sign
    extension, neg/abs (MI300 ISA "SDWA")."""
    inst.sdwa = SDWA(0 if vopc else _get(ctx, 40, 42), 0 if vopc else _get(ctx, 43, 44),
                     (_get(ctx, 48, 50), _get(ctx, 56, 58)), (_get(ctx, 51, 51), _get(ctx, 59, 59)))
    if 7 in (inst.sdwa.dst_sel, *inst.sdwa.src_sel) or inst.sdwa.dst_unused == 3:
        raise _fail(ctx, "an undefined SDWA select (7) or dst_unused (3)")
    if not vopc:
        inst.clamp, inst.omod = _get(ctx, 45, 45), _get(ctx, 46, 47)
    else:
        inst.clamp = 0
    ctx.lit_pos = 64
    code = _get(ctx, 32, 39)
    return _sdwa_scalar(ctx, code, info) if _get(ctx, 55, 55) else Operand("v", code)


def _sdwa_scalar(ctx: _Ctx, code: int, info: tuple | None) -> Operand:
    """An SDWA source with its S bit set: an 8-bit scalar source code (SGPR, constant, special; no literal)."""
    if code == LITERAL:
        raise _fail(ctx, "a literal constant in a gfx9 SDWA operand")
    return _src(ctx, code, info)


def _src0_ext(ctx: _Ctx, inst: Inst, f: dict, opr: dict, vopc: bool = False) -> list[Operand]:
    info = opr.get("src0")
    code = f["src0"]
    if code == DPP_SRC:
        s = _dpp9(ctx, inst)
        negabs = [(_get(ctx, 52, 52), _get(ctx, 53, 53)), (_get(ctx, 54, 54), _get(ctx, 55, 55))]
    elif code == SDWA_SRC:
        s = _sdwa(ctx, inst, vopc, info)
        negabs = [(_get(ctx, 52, 52), _get(ctx, 53, 53)), (_get(ctx, 60, 60), _get(ctx, 61, 61))]
    else:
        return [_src(ctx, code, info)]
    fmt, bits, _ = info if info else ("", 32, "")
    s.n, s.bits, s.fmt = _nregs(bits), bits, fmt
    inst.fields["_negabs"] = negabs
    return [s]


def _apply_negabs(inst: Inst, srcs: list[Operand]) -> None:
    for s, (n, a) in zip(srcs, inst.fields.pop("_negabs", ())):
        s.neg, s.abs = bool(n), bool(a)


def _vcc() -> Operand:
    return Operand("s", VCC_LO, 2, bits=64)


def _exec() -> Operand:
    return Operand("s", EXEC_LO, 2, bits=64)


CARRY_OUT = ("V_ADD_CO_U32", "V_SUB_CO_U32", "V_SUBREV_CO_U32")
CARRY_IN = ("V_ADDC_CO_U32", "V_SUBB_CO_U32", "V_SUBBREV_CO_U32")


def _short_enc(inst: Inst, opr: dict) -> None:
    """gfx9 VOP1/VOP2/VOPC 16-bit operands are the low halves of VGPRs 0..255 (no RDNA3 v128+ high-half
    encoding): the core reads them as VOP3 with OP_SEL 0."""
    if _has16(opr) and inst.sdwa is None:
        inst.enc = "VOP3"


def _vop1(ctx: _Ctx) -> Inst:
    f = _fields(ctx, "VOP1")
    name, opr = _lookup(ctx, "VOP1", f["op"])
    inst = Inst9(ctx.pc, "VOP1", f["op"], name)
    inst.fields = f
    srcs = _src0_ext(ctx, inst, f, opr) if "src0" in opr else []
    if "src0" not in opr and f["src0"] in (SDWA_SRC, DPP_SRC):
        inst.size = 8               # v_nop with an SDWA or DPP dword: nothing to read in it
    _apply_negabs(inst, srcs)
    if "vdst" in opr:
        fmt, bits, typ = opr["vdst"]
        inst.dst = (_sreg(f["vdst"], bits) if typ.startswith(("SREG", "SDST")) else
                    _vreg(f["vdst"], bits, typ == "ACCVGPR"),)
    if name == "V_ACCVGPR_MOV_B32_E32" and srcs and srcs[0].reg < ACC_BASE:
        srcs[0] = _vreg(srcs[0].reg, 32, True)
    inst.src = tuple(srcs)
    _short_enc(inst, opr)
    return inst


def _vop2(ctx: _Ctx) -> Inst:
    f = _fields(ctx, "VOP2")
    name, opr = _lookup(ctx, "VOP2", f["op"])
    inst = Inst9(ctx.pc, "VOP2", f["op"], name)
    inst.fields = f
    srcs = _src0_ext(ctx, inst, f, opr) + [_vreg(f["vsrc1"], opr.get("vsrc1", ("", 32, ""))[1])]
    srcs[1].fmt = opr.get("vsrc1", ("",))[0]
    if inst.sdwa is not None and _get(ctx, 63, 63):
        srcs[1] = _sdwa_scalar(ctx, f["vsrc1"], opr.get("vsrc1"))    # SDWA S1: src1 is a scalar source
    _apply_negabs(inst, srcs)
    inst.dst = (_vreg(f["vdst"], opr.get("vdst", ("", 32, ""))[1]),)
    base = _key(name).upper()
    if base[-6:] in ("MK_F32", "AK_F32", "MK_F16", "AK_F16") and (inst.dpp is not None or inst.sdwa is not None):
        raise _fail(ctx, f"{base.lower()} has no DPP or SDWA form (its K constant takes that dword)")
    if base in ("V_FMAMK_F32", "V_MADMK_F32", "V_FMAMK_F16", "V_MADMK_F16"):
        srcs.insert(1, Operand("c", LITERAL, 1, ctx.literal(), literal=True, bits=16 if "F16" in base else 32))
    elif base in ("V_FMAAK_F32", "V_MADAK_F32", "V_FMAAK_F16", "V_MADAK_F16"):
        srcs.append(Operand("c", LITERAL, 1, ctx.literal(), literal=True, bits=16 if "F16" in base else 32))
    elif base == "V_CNDMASK_B32":
        srcs.append(_vcc())
    elif base in CARRY_IN:
        srcs.append(_vcc())
        inst.dst += (_vcc(),)
    elif base in CARRY_OUT:
        inst.dst += (_vcc(),)
    inst.src = tuple(srcs)
    _short_enc(inst, opr)
    return inst


def _vopc(ctx: _Ctx) -> Inst:
    f = _fields(ctx, "VOPC")
    name, opr = _lookup(ctx, "VOPC", f["op"])
    inst = Inst9(ctx.pc, "VOPC", f["op"], name)
    inst.fields = f
    srcs = _src0_ext(ctx, inst, f, opr, vopc=True) + [_vreg(f["vsrc1"], opr.get("vsrc1", ("", 32, ""))[1])]
    srcs[1].fmt = opr.get("vsrc1", ("",))[0]
    sdst = _vcc()
    if inst.sdwa is not None:
        if _get(ctx, 63, 63):
            srcs[1] = _sdwa_scalar(ctx, f["vsrc1"], opr.get("vsrc1"))
        if _get(ctx, 47, 47):
            sdst = _sreg(_get(ctx, 40, 46), 64)
    _apply_negabs(inst, srcs)
    inst.dst = (sdst,)
    inst.src = tuple(srcs)
    _short_enc(inst, opr)
    return inst


def _vop3(ctx: _Ctx) -> Inst:
    op = _get(ctx, 16, 25)
    sd = op in OPS["VOP3SDOp"]
    enc = "VOP3SD" if sd else "VOP3"
    f = _fields(ctx, enc)
    name, opr = _lookup(ctx, enc, op)
    inst = Inst9(ctx.pc, enc, op, name)
    inst.fields, inst.size = f, 8
    inst.e64 = op < 448
    ctx.lit_pos = 64
    if "vsrc0" in opr:
        opr["src0"] = opr.pop("vsrc0")
    srcs = []
    for i, fld in enumerate(("src0", "src1", "src2")):
        if fld not in opr:
            break
        s = _src(ctx, f[fld], opr[fld])
        if s.kind == "c" and s.literal:
            raise _fail(ctx, "a literal constant in a gfx9 VOP3 instruction")
        s.neg = bool(f["neg"] >> i & 1)
        if not sd:
            s.abs = bool(f["abs"] >> i & 1)
        srcs.append(s)
    inst.clamp, inst.omod = f["clmp"], f["omod"]
    if not sd:
        inst.opsel = f["opsel"]
    if "vdst" in opr:
        fmt, bits, typ = opr["vdst"]
        if typ.startswith(("SREG", "SDST")):
            inst.dst = (_sreg(f["vdst"], 64 if fmt == "NUM_M64" or bits == 64 else bits),)
        else:
            inst.dst = (_vreg(f["vdst"], bits, typ == "ACCVGPR"),)
    if sd:
        inst.dst += (_sreg(f["sdst"], 64),)
    inst.src = tuple(srcs)
    return inst


def _vop3p(ctx: _Ctx) -> Inst:
    f = _fields(ctx, "VOP3P")
    name, opr = _lookup(ctx, "VOP3P", f["op"])
    inst = Inst9(ctx.pc, "VOP3P", f["op"], name)
    inst.fields, inst.size = f, 8
    ctx.lit_pos = 64
    if "vdst" not in opr:       # v_mfma_ld_scale_b32: the tables carry no operands for it
        raise _fail(ctx, f"{name} is not modelled", UnsupportedInstruction)
    mfma = name.startswith(("V_MFMA", "V_SMFMAC"))
    if mfma:
        m = _fields(ctx, "VOP3P_MFMA")
        inst.acc_cd, inst.cbsz, inst.abid, inst.blgp = m["acc_cd"], m["cbsz"], m["abid"], m["blgp"]
        acc = (m["acc"] & 1, m["acc"] >> 1 & 1, m["acc_cd"])
    srcs = []
    for i, fld in enumerate(("src0", "src1", "src2")):
        if fld not in opr:
            break
        s = _src(ctx, f[fld], opr[fld], acc=bool(mfma and acc[i] and opr[fld][2] != "SRC_VGPR"))
        if s.kind == "c" and s.literal:
            raise _fail(ctx, "a literal constant in a gfx9 VOP3P instruction")
        if not mfma:
            s.neg = bool(f["neg"] >> i & 1)
        srcs.append(s)
    if mfma:
        inst.dst = (_vreg(f["vdst"], opr["vdst"][1], bool(inst.acc_cd)),)
    else:
        inst.clamp, inst.opsel, inst.neg_hi = f["clmp"], f["opsel"], f["neg_hi"]
        inst.opsel_hi = f["opsel_hi"] | f["opsel_hi2"] << 2
        fmt, bits, typ = opr.get("vdst", ("", 32, "VGPR"))
        inst.dst = (_vreg(f["vdst"], bits, typ == "ACCVGPR"),)
    inst.src = tuple(srcs)
    return inst


# ---------------------------------------------------------------- memory

def _ds(ctx: _Ctx) -> Inst:
    f = _fields(ctx, "DS")
    name, opr = _lookup(ctx, "DS", f["op"])
    inst = Inst9(ctx.pc, "DS", f["op"], name)
    inst.fields, inst.size = f, 8
    inst.offset0, inst.offset1, inst.gds = f["offset0"], f["offset1"], f["gds"]
    inst.offset = f["offset1"] << 8 | f["offset0"]
    acc = bool(f["acc"])
    if name.startswith("DS_GWS") and not f["gds"]:
        raise _fail(ctx, f"{name} without GDS")
    if "addr" in opr:               # an address, or the GWS operations' data (AccVGPR with ACC)
        inst.addr = _vreg(f["addr"], 32, acc and "ACCVGPR" in opr["addr"][2])
    data = [_vreg(f[fld], opr[fld][1], acc) for fld in ("data0", "data1") if fld in opr]
    if name.startswith("DS_CMPST") and len(data) == 2:
        data.reverse()              # gfx9 DATA is the compare value, DATA2 the new one; RDNA3 swapped them
    inst.data = tuple(data)
    if "vdst" in opr:
        inst.dst = (_vreg(f["vdst"], opr["vdst"][1], acc),)
    inst.src = tuple(([inst.addr] if inst.addr else []) + data)
    return inst


def _flat(ctx: _Ctx) -> Inst:
    seg = _get(ctx, 14, 15)
    enc = {0: "FLAT", 1: "SCRATCH", 2: "GLOBAL"}.get(seg)
    if enc is None:
        raise _fail(ctx, f"invalid FLAT segment {seg}")
    f = _fields(ctx, enc)
    name, opr = _lookup(ctx, enc, f["op"])
    if not opr:
        raise _fail(ctx, f"{name} has no {enc} form")
    inst = Inst9(ctx.pc, enc, f["op"], name)
    inst.fields, inst.size = f, 8
    inst.glc, inst.slc, inst.sve = f["sc0"], f["nt"], f["sve"]
    inst.offset = f["offset"] if enc == "FLAT" else _sext(f["offset"], 13)
    acc = bool(f["acc"])
    if enc == "FLAT" and f["saddr"]:
        raise _fail(ctx, "FLAT with its reserved SADDR field set")
    has_saddr = f["saddr"] != SADDR_OFF and "saddr" in opr and enc != "FLAT"
    if has_saddr:
        inst.saddr = _sreg(f["saddr"], opr["saddr"][1])
    if "addr" in opr:
        inst.addr = D._flat_vaddr(enc, f["addr"], has_saddr, f["sve"], _vreg)
    if "data" in opr:
        inst.data = _vreg(f["data"], opr["data"][1], acc)
    if "vdst" in opr and "_LDS_" not in name:         # *_load_lds_* write LDS at M0, not VGPRs
        bits = opr["vdst"][1]
        if "CMPSWAP" in name:
            bits = opr["data"][1] // 2
        if "ATOMIC" not in name or inst.glc:
            inst.dst = (_vreg(f["vdst"], bits, acc),)
    inst.src = tuple(x for x in (inst.addr, inst.saddr, inst.data) if x is not None)
    return inst


def _mubuf(ctx: _Ctx, enc: str = "MUBUF") -> Inst:
    """MUBUF and MTBUF (the same operands; MTBUF adds the DFMT/NFMT buffer format fields). With LDS set a
    MUBUF load writes LDS at M0 instead of VDATA (MI300 ISA, "Buffer Instructions")."""
    f = _fields(ctx, enc)
    name, opr = _lookup(ctx, enc, f["op"])
    inst = Inst9(ctx.pc, enc, f["op"], name)
    inst.fields, inst.size = f, 8
    inst.glc, inst.slc, inst.offen, inst.idxen = f["sc0"], f["nt"], f["offen"], f["idxen"]
    inst.offset = f["offset"]
    if opr:
        acc = bool(f["acc"])
        nv = f["offen"] + f["idxen"]
        inst.addr = _vreg(f["vaddr"], 32 * nv) if nv else None
        inst.srsrc = _sreg(f["srsrc"] * 4, 128)
        if f["soffset"] == LITERAL:
            raise _fail(ctx, "a literal constant as a buffer SOFFSET")
        inst.soffset = _src(ctx, f["soffset"], ("NUM_B32", 32, "SSRC"))
        if not f.get("lds"):
            bits = opr["vdata"][1] if "vdata" in opr else 32
            inst.data = _vreg(f["vdata"], bits, acc)
            if "LOAD" in name or ("ATOMIC" in name and inst.glc):
                inst.dst = (_vreg(f["vdata"], bits // 2 if "CMPSWAP" in name else bits, acc),)
        inst.src = tuple(x for x in (inst.addr, inst.srsrc, inst.soffset, inst.data) if x is not None)
    return inst


DECODERS = {
    "SOP1": lambda c: _sop(c, "SOP1"), "SOP2": lambda c: _sop(c, "SOP2"), "SOPK": lambda c: _sop(c, "SOPK"),
    "SOPC": lambda c: _sop(c, "SOPC"), "SOPP": lambda c: _sop(c, "SOPP"), "SMEM": _smem, "VOP1": _vop1,
    "VOP2": _vop2, "VOPC": _vopc, "VOP3": _vop3, "VOP3SD": _vop3, "VOP3_SDST": _vop3, "VOP3P": _vop3p,
    "VOP3P_MFMA": _vop3p, "DS": _ds, "FLAT": _flat, "GLOBAL": _flat, "SCRATCH": _flat, "MUBUF": _mubuf,
    "MTBUF": lambda c: _mubuf(c, "MTBUF"),
}


class Decoder9(Decoder):
    """The gfx9 decoder: the shared Decoder over the gfx9 operand space (its source and SGPR decoding, Inst9),
    wave64 only; `absent` names opcodes (enum -> numbers) the target lacks, which then do not decode."""

    def __init__(self, absent: dict | None = None):
        super().__init__(ARCH, DECODERS, ops=OPS, inst=Inst9, src=_src, sreg=_sreg, safe_enc=SAFE_ENC,
                         quiet_sopp=QUIET_SOPP)
        self.absent = absent or {}

    def decode(self, code: bytes, pc: int, base: int = 0, wave64: bool = True) -> Inst:
        """Decode the gfx9 instruction at `pc` of a code region that starts at address `base`."""
        if not wave64:
            raise UnsupportedInstruction("gfx9 (CDNA) waves are 64 lanes wide; wave32 code does not exist there",
                                         address=pc, pc=pc)
        try:
            inst = super().decode(code, pc, base, wave64)
        except IllegalInstruction as e:
            if e.address is not None:
                raise
            ctx = _Ctx(code, pc - base, pc, wave64, self)
            raise _fail(ctx, str(e)) from None
        if inst.op in self.absent.get(inst.form + "Op", ()):
            raise _fail(_Ctx(code, pc - base, pc, wave64, self), f"{inst.mnemonic} is a gfx950 (CDNA4) encoding; gfx942 (CDNA3) does "
                        "not have it")
        return inst

    def decode_program(self, code: bytes, base: int = 0, wave64: bool = True) -> dict[int, Inst]:
        return super().decode_program(code, base, wave64)


CDNA = Decoder9()                           # CDNA3 and CDNA4 (the tables' superset): the shader core's
GFX942 = Decoder9(gfx942.ABSENT)            # exactly gfx942's operations: the disassembler's
decode, mask_dead, decode_program = CDNA.decode, CDNA.mask_dead, CDNA.decode_program
