"""gfx9 (CDNA3) handlers: the operations RDNA3 lacks or defines differently, and the CDNA3 front end's
handler table (the RDNA3 table for the shared operations, overridden and extended here).

Semantics from AMD "AMD Instinct MI300 Instruction Set Architecture Reference Guide" (CDNA3 ISA): section 12
opcode descriptions; chapter 7 (matrix arithmetic) for MFMA operand layouts.
"""
from __future__ import annotations

import re

import numpy as np

from . import fp
from ...hw import xcc as XCC
from ...hw.isa.decode import Inst
from .ops import U32, U64, M32, Table, mask_read, mask_write, put_mask, swrite, unsupported, vread, vread_halves, vwrite64
from .valu import blocked, flush_in, flush_out, ftz, read64
from .wave import EXEC

F32 = np.float32
H9 = Table(name="cdna3")        # gfx9-only builders and overrides, by key
h9 = H9.handler


def _plain(inst: Inst) -> None:
    """Refuse modifiers a handler does not model."""
    if inst.dpp is not None or getattr(inst, "sdwa", None) is not None or inst.clamp or inst.omod or \
            any(s.neg or s.abs for s in inst.src):
        raise unsupported(inst, "modifiers (DPP/SDWA/clamp/omod/neg/abs) on this gfx9 operation are not modelled")


@h9("v_lshl_add_u64")
def _lshl_add_u64(inst: Inst):
    """D.u64 = (S0.u64 << S1.u32[2:0]) + S2.u64 (gfx940)."""
    _plain(inst)
    (alo, ahi), s, (clo, chi), r = vread_halves(inst.src[0]), vread(inst.src[1]), vread_halves(inst.src[2]), \
        inst.dst[0].reg

    def step(w, sel):                      # on the dword halves: a shift, an add and the carry, no uint64 pass
        sh = np.asarray(s(w, sel), U32) & U32(7)
        lo, hi = alo(w, sel), ahi(w, sel)
        if np.ndim(sh) == 0 and int(sh) == 0:
            slo, shi = lo, hi
        else:
            slo = np.left_shift(lo, sh)
            shi = np.left_shift(hi, sh) | np.right_shift(lo, U32(32) - sh, dtype=U32) * (sh != 0)
        dlo = slo + clo(w, sel)
        dhi = shi + chi(w, sel) + (dlo < slo)
        w.write_v(r, sel, dlo)
        w.write_v(r + 1, sel, dhi)
    return step


@h9("v_mov_b64")
def _mov_b64(inst: Inst):
    """D.u64 = S0.u64 (gfx940)."""
    _plain(inst)
    a, wr = read64(inst.src[0]), vwrite64(inst.dst[0])
    return lambda w, sel: wr(w, sel, np.asarray(a(w, sel), U64))


def _pk_f32(inst: Inst, fn, nsrc: int):
    """Packed f32 (gfx90a): result dword h takes dword (OP_SEL_HI if h else OP_SEL) bit i of source i, negated
    by NEG_HI / NEG; the two results are computed independently."""
    if inst.dpp is not None or inst.clamp:
        raise unsupported(inst, "clamp/DPP on packed f32 operations are not modelled")
    for i, s in enumerate(inst.src[:nsrc]):
        if s.kind == "c" and (inst.opsel | inst.opsel_hi) >> i & 1:
            raise unsupported(inst, "the high dword of a constant operand of a packed f32 operation is not modelled")
    rd = [read64(inst.src[i]) for i in range(nsrc)]
    wr = vwrite64(inst.dst[0])
    neg_lo = [s.neg for s in inst.src[:nsrc]]

    def step(w, sel):
        vals = [np.asarray(r(w, sel), U64) for r in rd]
        fi, fo = flush_in(w, sel, "f32"), flush_out(w, sel, "f32")
        out = []
        for h in (0, 1):
            sel_bits, neg = (inst.opsel_hi, inst.neg_hi) if h else (inst.opsel, None)
            ops = []
            for i, v in enumerate(vals):
                x = ((v >> U64(32 * (sel_bits >> i & 1))) & U64(M32)).astype(U32)
                if (neg >> i & 1) if h else neg_lo[i]:
                    x = x ^ U32(0x80000000)
                x = x.view(F32)
                ops.append(ftz(x, "f32") if fi else x)
            r = np.asarray(fn(*ops), F32)
            out.append((ftz(r, "f32") if fo else r).view(U32).astype(U64))
        wr(w, sel, out[0] | out[1] << U64(32))
    return step


h9("v_pk_fma_f32")(lambda inst: _pk_f32(inst, fp.fma32, 3))
h9("v_pk_mul_f32")(lambda inst: _pk_f32(inst, lambda a, b: a * b, 2))
h9("v_pk_add_f32")(lambda inst: _pk_f32(inst, lambda a, b: a + b, 2))


@h9("v_pk_mov_b32")
def _pk_mov_b32(inst: Inst):
    """D.u32[0] = S0.u32[OP_SEL[0]], D.u32[1] = S1.u32[OP_SEL[1]] (gfx90a)."""
    if inst.dpp is not None:
        raise unsupported(inst, "DPP on v_pk_mov_b32 is not modelled")
    a, b, wr = read64(inst.src[0]), read64(inst.src[1]), vwrite64(inst.dst[0])
    s0, s1 = U64(32 * (inst.opsel & 1)), U64(32 * (inst.opsel >> 1 & 1))

    def step(w, sel):
        lo = (np.asarray(a(w, sel), U64) >> s0) & U64(M32)
        hi = (np.asarray(b(w, sel), U64) >> s1) & U64(M32)
        wr(w, sel, lo | hi << U64(32))
    return step


def _f64_atomic(inst: Inst):
    """FLAT/GLOBAL_ATOMIC_ADD_F64 (gfx90a+): MEM.f64 += DATA.f64, IEEE add, the old value returned with SC0."""
    from .vmem import _flat_atomic
    return _flat_atomic(inst)


h9("global_atomic_add_f64", "flat_atomic_add_f64")(_f64_atomic)


def cmpx(base):
    """gfx9 V_CMPX writes the compare result to its SGPR destination (VCC for VOPC) and to EXEC."""
    def build(inst: Inst):
        step0 = base(inst)
        d = inst.dst[0]
        m = mask_read(d)

        def step(w, sel):
            step0(w, sel)
            put_mask(w, EXEC, sel, m(w, sel))
        return step
    return build


def zero_high16(base):
    """gfx9 16-bit operations (but PRESERVE16) write zeros to the destination VGPR's high half."""
    def build(inst: Inst):
        step0 = base(inst)
        r = inst.dst[0].reg

        def step(w, sel):
            step0(w, sel)
            v = w.v[r][sel]
            w.write_v(r, sel, v & U32(0xFFFF))
        return step
    return build


def refuse(why: str):
    def build(inst: Inst):
        raise unsupported(inst, why)
    return build


def mode_only(base, getreg: bool = False):
    """gfx9 hardware registers: MODE (id 1, the same FP_ROUND/FP_DENORM/DX10_CLAMP/IEEE bits as gfx11) and,
    for s_getreg_b32, XCC_ID (id 20, the die's id in bits [3:0], amdq.hw.xcc); the other ids number
    different registers than on gfx11."""
    def build(inst: Inst):
        rid = inst.simm16 & 0x3F
        if getreg and rid == XCC.HW_REG_XCC_ID:
            return _xcc_id(inst)
        if rid != 1:
            raise unsupported(inst, f"gfx9 hardware register {rid} is not modelled")
        return base(inst)
    return build


def _xcc_id(inst: Inst):
    v = inst.simm16 & 0xFFFF
    off, size = (v >> 6) & 0x1F, ((v >> 11) & 0x1F) + 1
    d = swrite(inst.dst[0])
    mask = U32((1 << size) - 1 if size < 32 else 0xFFFFFFFF)

    def step(w, sel):
        reg = np.full(np.shape(w.scc[sel]), w.xcc & ((1 << XCC.XCC_ID_BITS) - 1), U32)
        d(w, sel, (reg >> U32(off)) & mask)
    return step


def table(rdna3: Table) -> Table:
    """The CDNA3 handler table: the RDNA3 builders (wrapped where gfx9 differs) and the gfx9 ones."""
    from . import mfma  # noqa: F401  registers the MFMA builders in H9
    from ...hw.isa.decode_cdna import PRESERVE16
    t = {}
    for k, b in rdna3.items():
        if k.startswith("buffer_") and k not in ("buffer_gl0_inv", "buffer_gl1_inv"):
            t[k] = refuse("the gfx9 buffer resource (V#) layout and range checking are not modelled")
        elif k.startswith("v_cmpx_"):
            t[k] = cmpx(rdna3["v_cmp_" + k[len("v_cmpx_"):]])
        else:
            t[k] = b
    t.update({k: blocked(b) if k.startswith("v_") else b for k, b in H9.items()})   # cache-sized wave blocks
    for k in ("s_getreg_b32", "s_setreg_b32", "s_setreg_imm32_b32"):
        t[k] = mode_only(rdna3[k], getreg=k == "s_getreg_b32")
    out = Table({k: _wrap16(b, k in PRESERVE16) for k, b in t.items()}, name="cdna3")
    out.control = set(rdna3.control) | H9.control
    return out


def wrap(b, key: str):
    """A builder with the gfx9 16-bit destination rule (and SDWA forms) applied, as the CDNA3 table has them."""
    from ...hw.isa.decode_cdna import PRESERVE16
    return _wrap16(b, key in PRESERVE16)


def _wrap16(b, preserve: bool):
    z = zero_high16(b)

    def build(inst: Inst):
        if getattr(inst, "sdwa", None) is not None:
            return sdwa(inst, b)
        d = inst.dst[0] if inst.dst else None
        if not preserve and d is not None and d.kind == "v" and d.bits == 16 and inst.key.startswith("v_") and \
                inst.enc != "VOP3P":
            if inst.opsel & 8:
                raise unsupported(inst, "OP_SEL of the destination on an operation that zeroes the high half")
            return z(inst)
        return b(inst)
    return build


def _i16(x):
    return (np.asarray(x, U32) & U32(0xFFFF)).astype(np.uint16).view(np.int16)


def _u16(x):
    return np.asarray(x, U32) & U32(0xFFFF)


SDWA_OPS = {  # key: (function of the selected, extended 32-bit sources, result bits)
    "v_mov_b32": (lambda a: a, 32), "v_not_b32": (lambda a: ~a, 32), "v_or_b32": (np.bitwise_or, 32),
    "v_and_b32": (np.bitwise_and, 32), "v_xor_b32": (np.bitwise_xor, 32), "v_add_nc_u32": (lambda a, b: a + b, 32),
    "v_sub_nc_u32": (lambda a, b: a - b, 32), "v_subrev_nc_u32": (lambda a, b: b - a, 32),
    "v_lshlrev_b32": (lambda a, b: b << (a & U32(31)), 32), "v_lshrrev_b32": (lambda a, b: b >> (a & U32(31)), 32),
    "v_ashrrev_i32": (lambda a, b: (b.view(np.int32) >> (a & U32(31)).astype(np.int32)).view(U32), 32),
    "v_mul_u32_u24": (lambda a, b: (a & U32(0xFFFFFF)) * (b & U32(0xFFFFFF)), 32),
    "v_max_u32": (np.maximum, 32), "v_min_u32": (np.minimum, 32),
    "v_max_i32": (lambda a, b: np.maximum(a.view(np.int32), b.view(np.int32)).view(U32), 32),
    "v_min_i32": (lambda a, b: np.minimum(a.view(np.int32), b.view(np.int32)).view(U32), 32),
    "v_add_nc_u16": (lambda a, b: a + b, 16), "v_sub_nc_u16": (lambda a, b: a - b, 16),
    "v_subrev_u16": (lambda a, b: b - a, 16), "v_mul_lo_u16": (lambda a, b: a * b, 16),
    "v_lshlrev_b16": (lambda a, b: b << (a & U32(15)), 16), "v_lshrrev_b16": (lambda a, b: _u16(b) >> (a & U32(15)), 16),
    "v_ashrrev_i16": (lambda a, b: (_i16(b) >> (a & U32(15)).astype(np.int16)).view(np.uint16).astype(U32), 16),
    "v_max_u16": (lambda a, b: np.maximum(_u16(a), _u16(b)), 16), "v_min_u16": (lambda a, b: np.minimum(_u16(a), _u16(b)), 16),
    "v_max_i16": (lambda a, b: np.maximum(_i16(a), _i16(b)).view(np.uint16).astype(U32), 16),
    "v_min_i16": (lambda a, b: np.minimum(_i16(a), _i16(b)).view(np.uint16).astype(U32), 16),
}
CMP = {"eq": np.equal, "ne": np.not_equal, "lg": np.not_equal, "lt": np.less, "le": np.less_equal,
       "gt": np.greater, "ge": np.greater_equal}
CMP_VIEW = {"u32": lambda x: x, "i32": lambda x: x.view(np.int32), "u16": _u16, "i16": _i16}


def _sel(x: np.ndarray, s: int, sext: int) -> np.ndarray:
    """SDWA source select: BYTE_0..3 (0-3), WORD_0/1 (4, 5), DWORD (6), zero- or sign-extended to 32 bits."""
    if s == 6:
        return x
    bits, sh = (8, 8 * s) if s < 4 else (16, 16 * (s - 4))
    v = (x >> U32(sh)) & U32((1 << bits) - 1)
    if sext:
        v = v | np.where(v >> U32(bits - 1) & U32(1), U32(M32 ^ ((1 << bits) - 1)), U32(0))
    return v


def sdwa(inst: Inst, base):
    """SDWA forms (MI300 ISA, "SDWA") of the integer VOP1/VOP2 operations of SDWA_OPS and of integer VOPC
    compares: each source selects a byte, word or the dword (zero- or sign-extended); a 16-bit operation uses
    the low half of those; the result goes to the selected destination field, and the rest of the destination
    is zeros (UNUSED_PAD), the field's sign (UNUSED_SEXT) or kept (UNUSED_PRESERVE)."""
    sd = inst.sdwa
    if inst.clamp or inst.omod or any(s.neg or s.abs for s in inst.src) or max(sd.src_sel) > 6:
        raise unsupported(inst, "SDWA with clamp/omod/neg/abs or an undefined select is not modelled")
    rd = [vread(s) for s in inst.src]
    if inst.enc == "VOPC":
        m = re.fullmatch(r"v_cmp_(eq|ne|lg|lt|le|gt|ge)_([iu](?:16|32))", inst.key)
        if m is None:
            raise unsupported(inst, "this SDWA compare is not modelled")
        fn, view = CMP[m.group(1)], CMP_VIEW[m.group(2)]
        wm = mask_write(inst.dst[0])

        def cstep(w, sel):
            x, y = (_sel(np.asarray(f(w, sel), U32), sd.src_sel[i], sd.sext[i]) for i, f in enumerate(rd))
            res = np.broadcast_to(fn(view(x), view(y)), w.em[sel].shape)
            wm(w, sel, res & w.em[sel])
        return cstep
    op = SDWA_OPS.get(inst.key)
    if op is None or inst.enc not in ("VOP1", "VOP2") or sd.dst_unused > 2 or sd.dst_sel > 6:
        raise unsupported(inst, "this SDWA form is not modelled")
    fn, rbits = op
    r = inst.dst[0].reg
    ds = sd.dst_sel
    bits, sh = (32, 0) if ds == 6 else ((8, 8 * ds) if ds < 4 else (16, 16 * (ds - 4)))
    fmask = U32(((1 << bits) - 1) << sh & M32)
    rmask = U32((1 << rbits) - 1)

    def step(w, sel):
        xs = [_sel(np.asarray(f(w, sel), U32), sd.src_sel[i], sd.sext[i]) for i, f in enumerate(rd)]
        res = ((np.asarray(fn(*xs), U32) & rmask) << U32(sh)) & fmask
        if sd.dst_unused == 2:
            res = res | (w.v[r][sel] & ~fmask)
        elif sd.dst_unused == 1 and sh + bits < 32:
            top = (res >> U32(sh + bits - 1)) & U32(1)
            res = res | (top * U32(M32 & ~((1 << (sh + bits)) - 1)))
        w.write_v(r, sel, res)
    return step
