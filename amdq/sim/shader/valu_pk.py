"""VOP3P packed math (two 16-bit lanes per register), dot products, mixed-precision FMA, and VOPD dual issue.

Semantics from the AMD RDNA3 ISA guide. A VOP3P source supplies its low operand from the half OPSEL[i] picks
and its high operand from the half OPSEL_HI[i] picks; NEG[i] negates the low operand and NEG_HI[i] the high
one (floats). For v_fma_mix*, OPSEL_HI[i] says the source is f16 (from the half OPSEL[i] picks) rather than
f32, NEG negates and NEG_HI takes the absolute value. VOPD issues two VOP2-like operations that both read
their sources before either writes.
"""
from __future__ import annotations

import numpy as np

from . import dpp
from ...hw.isa.decode import Inst
from .fp import fma16, fma32, fma32_odd, sum_odd
from .ops import F32, F64, I32, I64, M32, U32, Table, mask_read, vread
from .valu import (F16, I16, U16, _step, flush_in, ftz_bits, ieee_mode, mode_word, raw_reader, store, typed_reader,
                   typed_writer)
from .valu_float import _dx9_mul, fmax, fmax_num, fmin, fmin_num

TABLE = Table(name="valu_pk")  # this family's handler builders (composed by the front ends in isa.py)
handler = TABLE.handler

U8 = np.uint8


def _halves(inst: Inst, i: int, typ: str):
    """Reader of source i of a VOP3P instruction: (lo, hi) 16-bit values of `typ` after OPSEL/NEG."""
    raw = raw_reader(inst.src[i], False, inst, i)
    slo, shi = U32(16 * (inst.opsel >> i & 1)), U32(16 * (inst.opsel_hi >> i & 1))
    fl = typ in ("f16", "bf16")
    nlo = fl and inst.src[i].neg
    nhi = fl and bool(inst.neg_hi >> i & 1)
    dt = {"f16": F16, "bf16": U16, "u16": U16, "i16": I16}[typ]

    def rd(w, sel):
        u = np.asarray(raw(w, sel), U32)
        lo, hi = (u >> slo).astype(U16), (u >> shi).astype(U16)
        if nlo:
            lo = lo ^ U16(0x8000)
        if nhi:
            hi = hi ^ U16(0x8000)
        if typ == "f16" and flush_in(w, sel, "f16"):
            lo, hi = ftz_bits(lo, "f16"), ftz_bits(hi, "f16")
        return lo.view(dt), hi.view(dt)
    return rd


def _pk_writer(inst: Inst, typ: str):
    r = inst.dst[0].reg
    isf = typ == "f16"
    dm = dpp.write_mask(inst)

    def wr(w, sel, lo, hi):
        if isf:
            lo, hi = np.asarray(lo).astype(F16), np.asarray(hi).astype(F16)
            if inst.clamp:
                lo, hi = (np.where(x > 0, np.minimum(x, F16(1)), F16(0)) for x in (lo, hi))
            if not mode_word(w, sel) >> 6 & 2:
                lo, hi = ftz_bits(lo.view(U16), "f16"), ftz_bits(hi.view(U16), "f16")
        lo, hi = np.asarray(lo), np.asarray(hi)
        lo = lo.view(U16) if lo.dtype.itemsize == 2 else lo.astype(U16)
        hi = hi.view(U16) if hi.dtype.itemsize == 2 else hi.astype(U16)
        store(w, r, sel, lo.astype(U32) | hi.astype(U32) << U32(16), dm(w, sel) if dm else None)
    return wr


def _pk(fn, typ: str, n: int, sat: tuple | None = None):
    """Packed op: fn applied to the low operands and to the high operands; `sat` = (lo, hi, wide fn) for
    integer CLAMP saturation."""
    def build(inst: Inst):
        rds = [_halves(inst, i, typ) for i in range(n)]
        wr = _pk_writer(inst, typ)
        f = fn
        if sat is not None and inst.clamp:
            lo_, hi_, wide = sat
            f = lambda *xs: np.clip(wide(*[np.asarray(x).astype(I64) for x in xs]), lo_, hi_)  # noqa: E731

        def step(w, sel):
            with np.errstate(all="ignore"):
                hs = [rd(w, sel) for rd in rds]
                wr(w, sel, f(*[h[0] for h in hs]), f(*[h[1] for h in hs]))
        return step
    return build


def _h(fn):
    return lambda *xs: fn(*[np.asarray(x).astype(F64) for x in xs]).astype(F16)


_add, _sub = (lambda a, b: a + b), (lambda a, b: a - b)
_PK = {
    "v_pk_fma_f16": (fma16, "f16", 3), "v_pk_add_f16": (_h(_add), "f16", 2),
    "v_pk_mul_f16": (_h(lambda a, b: a * b), "f16", 2),
    "v_pk_mad_i16": (lambda a, b, c: a * b + c, "i16", 3), "v_pk_mad_u16": (lambda a, b, c: a * b + c, "u16", 3),
    "v_pk_mul_lo_u16": (lambda a, b: a * b, "u16", 2),
    "v_pk_lshlrev_b16": (lambda a, b: b << (a & U16(15)), "u16", 2),
    "v_pk_lshrrev_b16": (lambda a, b: b >> (a & U16(15)), "u16", 2),
    "v_pk_ashrrev_i16": (lambda a, b: b >> (a.view(U16) & U16(15)).astype(I16), "i16", 2),
    "v_pk_max_i16": (np.maximum, "i16", 2), "v_pk_min_i16": (np.minimum, "i16", 2),
    "v_pk_max_u16": (np.maximum, "u16", 2), "v_pk_min_u16": (np.minimum, "u16", 2),
}
for _k, (_f, _t, _n) in _PK.items():
    handler(_k)(_pk(_f, _t, _n))
for _k, _f, _t, _lo, _hi in (("v_pk_add_i16", _add, "i16", -2**15, 2**15 - 1),
                             ("v_pk_sub_i16", _sub, "i16", -2**15, 2**15 - 1),
                             ("v_pk_add_u16", _add, "u16", 0, 0xFFFF), ("v_pk_sub_u16", _sub, "u16", 0, 0xFFFF)):
    handler(_k)(_pk(_f, _t, 2, (_lo, _hi, _f)))


def _pk_minmax(fn):
    def build(inst: Inst):
        rds = [_halves(inst, i, "f16") for i in range(2)]
        wr = _pk_writer(inst, "f16")

        def step(w, sel):
            ie = ieee_mode(w, sel)
            (al, ah), (bl, bh) = rds[0](w, sel), rds[1](w, sel)
            wr(w, sel, fn(al, bl, ie), fn(ah, bh, ie))
        return step
    return build


handler("v_pk_max_f16")(_pk_minmax(fmax))
handler("v_pk_min_f16")(_pk_minmax(fmin))


@handler("v_pk_fmac_f16")
def _pk_fmac(inst: Inst):
    a, b, d = vread(inst.src[0]), vread(inst.src[1]), vread(inst.dst[0])
    r = inst.dst[0].reg

    def step(w, sel):
        x, y, z = (np.asarray(f(w, sel), U32) for f in (a, b, d))
        h = [fma16(*[(v >> U32(s)).astype(U16).view(F16) for v in (x, y, z)]).view(U16).astype(U32) for s in (0, 16)]
        store(w, r, sel, h[0] | h[1] << U32(16))
    return step


# ---------------------------------------------------------------- dot products

def _bf16(u):
    return (np.asarray(u).view(U16).astype(U32) << U32(16)).view(F32)


def dot2(al, ah, bl, bh, c) -> np.ndarray:
    """al*bl + ah*bh + c: products exact in float64, their sum rounded to nearest, then added to c and rounded
    once to the destination (via round-to-odd)."""
    f = [np.asarray(x).astype(F64) for x in (al, ah, bl, bh)]
    p = f[0] * f[2] + f[1] * f[3]
    p, c = np.broadcast_arrays(p, np.asarray(c).astype(F64))
    return sum_odd(p, c)


def _split16(u, typ):
    u = np.asarray(u, U32)
    lo, hi = (u & U32(0xFFFF)).astype(U16), (u >> U32(16)).astype(U16)
    return (lo.view(F16), hi.view(F16)) if typ == "f16" else (_bf16(lo), _bf16(hi))


def _dot2_vop3p(typ: str):
    def build(inst: Inst):
        a, b = _halves(inst, 0, typ), _halves(inst, 1, typ)
        c = typed_reader(inst.src[2], "f32", inst, 2)
        wr = typed_writer(inst.dst[0], "f32", inst)
        conv = (lambda x: x) if typ == "f16" else _bf16

        def step(w, sel):
            with np.errstate(all="ignore"):
                (al, ah), (bl, bh) = a(w, sel), b(w, sel)
                wr(w, sel, dot2(conv(al), conv(ah), conv(bl), conv(bh), c(w, sel)).astype(F32))
        return step
    return build


handler("v_dot2_f32_f16")(_dot2_vop3p("f16"))
handler("v_dot2_f32_bf16")(_dot2_vop3p("bf16"))


def _dot2acc(typ: str):
    """VOP2 v_dot2acc_f32_f16 (and the VOPD bf16 form): D = S0.lo*S1.lo + S0.hi*S1.hi + D."""
    def fn(a, b, d):
        al, ah = _split16(a, typ)
        bl, bh = _split16(b, typ)
        return dot2(al, ah, bl, bh, d).astype(F32)
    return fn


def _dot2acc_build(inst: Inst):
    typ = "bf16" if inst.key.endswith("bf16") else "f16"
    srcs = [typed_reader(inst.src[0], "u32", inst, 0), typed_reader(inst.src[1], "u32", inst, 1),
            typed_reader(inst.dst[0], "f32", inst, 3)]
    return _step(inst, srcs, _dot2acc(typ), typed_writer(inst.dst[0], "f32", inst))


handler("v_dot2acc_f32_f16", "v_dot2acc_f32_bf16")(_dot2acc_build)


@handler("v_dot2_f16_f16", "v_dot2_bf16_bf16")
def _dot2_16(inst: Inst):
    typ = "f16" if inst.key == "v_dot2_f16_f16" else "bf16"
    a, b = typed_reader(inst.src[0], "u32", inst, 0), typed_reader(inst.src[1], "u32", inst, 1)
    c = typed_reader(inst.src[2], typ, inst, 2)
    wr = typed_writer(inst.dst[0], "f16" if typ == "f16" else "u16", inst)

    def step(w, sel):
        with np.errstate(all="ignore"):
            al, ah = _split16(a(w, sel), typ)
            bl, bh = _split16(b(w, sel), typ)
            cc = c(w, sel) if typ == "f16" else _bf16(c(w, sel))
            r = dot2(al, ah, bl, bh, cc)
            if typ == "f16":
                wr(w, sel, r.astype(F16))
            else:                                   # to bf16, round to nearest even
                u = r.astype(F32).view(U32)
                nan = np.isnan(r)
                u = np.where(nan, u | U32(0x00400000), u + U32(0x7FFF) + ((u >> U32(16)) & U32(1)))
                wr(w, sel, (u >> U32(16)).astype(U16))
    return step


def _dot_int(nbits: int, count: int, signed_kind: bool):
    """v_dot4_*8 / v_dot8_*4: sum of `count` products of nbits-wide fields plus S2; for the iu forms NEG[0]/NEG[1]
    make the fields of src0/src1 signed. CLAMP saturates."""
    def build(inst: Inst):
        a, b, c = vread(inst.src[0]), vread(inst.src[1]), vread(inst.src[2])
        wr = typed_writer(inst.dst[0], "u32", inst)
        sa = signed_kind and inst.src[0].neg
        sb = signed_kind and inst.src[1].neg
        signed_out = signed_kind
        mask = (1 << nbits) - 1

        def fields(x, s):
            x = np.asarray(x, U32).astype(I64)
            out = []
            for i in range(count):
                f = (x >> (nbits * i)) & mask
                if s:
                    f = np.where(f >> (nbits - 1), f - (1 << nbits), f)
                out.append(f)
            return out

        def step(w, sel):
            acc = np.asarray(c(w, sel), U32)
            acc = acc.view(I32).astype(I64) if signed_out else acc.astype(I64)
            tot = sum(p * q for p, q in zip(fields(a(w, sel), sa), fields(b(w, sel), sb))) + acc
            if inst.clamp:
                tot = np.clip(tot, -2**31, 2**31 - 1) if signed_out else np.clip(tot, 0, M32)
            wr(w, sel, (tot & M32).astype(U32))
        return step
    return build


handler("v_dot4_i32_iu8")(_dot_int(8, 4, True))
handler("v_dot4_u32_u8")(_dot_int(8, 4, False))
handler("v_dot8_i32_iu4")(_dot_int(4, 8, True))
handler("v_dot8_u32_u4")(_dot_int(4, 8, False))


# ---------------------------------------------------------------- mixed precision FMA

@handler("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16")
def _fma_mix(inst: Inst):
    raws = [raw_reader(inst.src[i], False, inst, i) for i in range(3)]
    is16 = [bool(inst.opsel_hi >> i & 1) for i in range(3)]
    hi = [bool(inst.opsel >> i & 1) for i in range(3)]
    neg = [inst.src[i].neg for i in range(3)]
    ab = [bool(inst.neg_hi >> i & 1) for i in range(3)]
    out = {"v_fma_mix_f32": "f32", "v_fma_mixlo_f16": "lo", "v_fma_mixhi_f16": "hi"}[inst.key]
    r = inst.dst[0].reg

    def operand(w, sel, i):
        u = np.asarray(raws[i](w, sel), U32)
        if is16[i]:
            h = (u >> U32(16 if hi[i] else 0)).astype(U16)
            if flush_in(w, sel, "f16"):
                h = ftz_bits(h, "f16")
            x = h.view(F16).astype(F32)
        else:
            x = (ftz_bits(u, "f32") if flush_in(w, sel, "f32") else u).view(F32)
        if ab[i]:
            x = np.abs(x)
        if neg[i]:
            x = -x
        return x

    def step(w, sel):
        with np.errstate(all="ignore"):
            v = fma32_odd(*[operand(w, sel, i) for i in range(3)])
            if out == "f32":
                x = v.astype(F32)
                if inst.clamp:
                    x = np.where(x > 0, np.minimum(x, F32(1)), F32(0))
                store(w, r, sel, np.asarray(x).view(U32))
                return
            h = v.astype(F16)
            if inst.clamp:
                h = np.where(h > 0, np.minimum(h, F16(1)), F16(0))
            bits = np.asarray(h).view(U16).astype(U32)
            old = w.v[r][sel]
            val = (old & U32(0xFFFF0000)) | bits if out == "lo" else (old & U32(0xFFFF)) | bits << U32(16)
            store(w, r, sel, val)
    return step


# ---------------------------------------------------------------- WMMA (wave32)

_WMMA = {"v_wmma_f32_16x16x16_f16": ("f16", "f32"), "v_wmma_f32_16x16x16_bf16": ("bf16", "f32"),
         "v_wmma_f16_16x16x16_f16": ("f16", "f16"), "v_wmma_bf16_16x16x16_bf16": ("bf16", "bf16"),
         "v_wmma_i32_16x16x16_iu8": ("iu8", "i32"), "v_wmma_i32_16x16x16_iu4": ("iu4", "i32")}


def _wmma_ab(regs: np.ndarray, kind: str, signed: bool) -> np.ndarray:
    """(k, 16 lanes, nregs) uint32 -> (k, 16, 16) values: lane i holds row (A) / column (B) i, K ascending from
    the low bits of the first register."""
    if kind in ("f16", "bf16"):
        h = regs.view(U16).reshape(regs.shape[0], 16, 16)           # little-endian: low half first
        return h.view(F16).astype(F64) if kind == "f16" else (h.astype(U32) << U32(16)).view(F32).astype(F64)
    bits = 8 if kind == "iu8" else 4
    per = 32 // bits
    x = regs.astype(I64)
    f = np.stack([(x >> (bits * j)) & ((1 << bits) - 1) for j in range(per)], -1).reshape(regs.shape[0], 16, 16)
    return np.where(f >> (bits - 1), f - (1 << bits), f) if signed else f


def wmma_c_values(h: np.ndarray, dc: str) -> np.ndarray:
    """C elements from their bits (uint32; 16-bit kinds in the low half) as float64 or int64."""
    if dc == "f32":
        return h.astype(U32).view(F32).astype(F64)
    if dc == "i32":
        return h.astype(U32).view(I32).astype(I64)
    h = h.astype(U16)
    return h.view(F16).astype(F64) if dc == "f16" else (h.astype(U32) << U32(16)).view(F32).astype(F64)


def wmma_d_bits(out: np.ndarray, dc: str, clamp: bool) -> np.ndarray:
    """D elements (exact float64 / int64 sums) rounded once to their kind: uint32 bits (16-bit kinds in the low
    half; bf16 rounds to nearest even, NaNs stay quiet NaNs); integer sums wrap, or saturate with CLAMP."""
    if dc == "f32":
        return out.astype(F32).view(U32)
    if dc == "i32":
        out = np.clip(out, -2**31, 2**31 - 1) if clamp else out
        return (out & M32).astype(U32)
    if dc == "f16":
        return out.astype(F16).view(U16).astype(U32)                      # numpy rounds f64 -> f16 directly
    with np.errstate(over="ignore", invalid="ignore"):
        f = out.astype(F32)                                                 # to f32 rounded to odd, then to bf16 to
        err = np.where(np.isfinite(f), out - f.astype(F64), 0.0)           # nearest even: one rounding of the sum
    u = f.view(U32)
    u = np.where((err != 0) & ((u & U32(1)) == 0), np.where((err > 0) == (f > 0), u + U32(1), u - U32(1)), u)
    return np.where(np.isnan(out), (u >> U32(16)) | U32(0x40), (u + U32(0x7FFF) + ((u >> U32(16)) & U32(1))) >> U32(16))


def _wmma(inst: Inst):
    """D = A*B + C for 16x16 tiles held across a wave32: A row i / B column i in lanes i and i+16, C/D element
    (2v + lane//16, lane%16) in VGPR v (16-bit C/D in the half OPSEL[2] picks). Floating-point sums are
    accumulated in float64 and rounded once; integer sums wrap, or saturate with CLAMP."""
    if inst.mask_bits == 64:
        from .ops import unsupported
        raise unsupported(inst, "WMMA is implemented for wave32 only")
    ab, dc = _WMMA[inst.key]
    if ab in ("f16", "bf16") and (any(o.neg for o in inst.src) or inst.neg_hi):
        from .ops import unsupported
        raise unsupported(inst, "NEG_LO/NEG_HI on a floating-point WMMA are not modelled")
    ra, rb = inst.src[0].reg, inst.src[1].reg
    na = {"f16": 8, "bf16": 8, "iu8": 4, "iu4": 2}[ab]
    c_op, rd = inst.src[2], inst.dst[0].reg
    sa, sb = inst.src[0].neg, inst.src[1].neg
    hi = bool(inst.opsel >> 2 & 1)
    lane = np.arange(32)
    row, col = 2 * np.arange(8)[None, :] + (lane // 16)[:, None], np.broadcast_to((lane % 16)[:, None], (32, 8))

    def regs(w, sel, r, n):
        return np.stack([w.v[r + j][sel][:, :16] for j in range(n)], -1)

    def step(w, sel):
        k = w.em[sel].shape[0]
        A = _wmma_ab(regs(w, sel, ra, na), ab, sa)
        B = _wmma_ab(regs(w, sel, rb, na), ab, sb).transpose(0, 2, 1)     # (k, K, N)
        if c_op.kind == "v":
            c = np.stack([w.v[c_op.reg + j][sel] for j in range(8)], -1)  # (k, 32, 8) uint32
        else:
            c = np.full((k, 32, 8), c_op.value & M32, U32)
        cv = wmma_c_values(c >> U32(16) if hi and dc in ("f16", "bf16") else c & U32(0xFFFF) if dc in ("f16", "bf16")
                           else c, dc)
        C = np.zeros((k, 16, 16), cv.dtype)
        C[:, row, col] = cv
        h = wmma_d_bits(np.matmul(A, B) + C, dc, inst.clamp)[:, row, col]  # (k, 32, 8)
        if dc in ("f16", "bf16"):
            bits = (c & U32(0xFFFF)) | (h << U32(16)) if hi else (c & U32(0xFFFF0000)) | h
        else:
            bits = h
        for j in range(8):
            store(w, rd + j, sel, bits[..., j])
    return step


for _k in _WMMA:
    handler(_k)(_wmma)


# ---------------------------------------------------------------- VOPD

def _vopd_half(h, inst: Inst):
    """(compute(w, sel) -> value, write(w, sel, value)) of one VOPD half."""
    hi = Inst(inst.pc, "VOPD", h.op, h.name)
    hi.key, hi.src, hi.dst, hi.mask_bits = h.key, h.src, (h.dst,), inst.mask_bits
    k = h.key
    f32 = lambda i: typed_reader(h.src[i], "f32", hi, i)  # noqa: E731
    u32 = lambda i: typed_reader(h.src[i], "u32", hi, i)  # noqa: E731
    if k == "v_cndmask_b32":
        a, b, m = u32(0), u32(1), mask_read(h.src[2])
        return (lambda w, sel: np.where(m(w, sel), b(w, sel), a(w, sel))), typed_writer(h.dst, "u32", hi)
    if k in ("v_mov_b32", "v_add_nc_u32", "v_lshlrev_b32", "v_and_b32"):
        fn = {"v_mov_b32": lambda a: a, "v_add_nc_u32": lambda a, b: np.asarray(a, U32) + b,
              "v_lshlrev_b32": lambda a, b: np.asarray(b, U32) << (np.asarray(a, U32) & U32(31)),
              "v_and_b32": lambda a, b: np.asarray(a, U32) & b}[k]
        rds = [u32(i) for i in range(len(h.src))]
        return (lambda w, sel: fn(*[r(w, sel) for r in rds])), typed_writer(h.dst, "u32", hi)
    if k in ("v_dot2acc_f32_f16", "v_dot2acc_f32_bf16"):
        rds = [u32(0), u32(1), typed_reader(h.dst, "f32", hi, 3)]
        fn = _dot2acc("bf16" if k.endswith("bf16") else "f16")
        return (lambda w, sel: fn(*[r(w, sel) for r in rds])), typed_writer(h.dst, "f32", hi)
    if k in ("v_max_f32", "v_min_f32"):
        a, b = f32(0), f32(1)
        mm = fmax if k == "v_max_f32" else fmin
        return (lambda w, sel: mm(a(w, sel), b(w, sel), ieee_mode(w, sel))), typed_writer(h.dst, "f32", hi)
    if k in ("v_max_num_f32", "v_min_num_f32"):     # RDNA4's IEEE-754-2019 forms (MODE has no IEEE bit)
        a, b = f32(0), f32(1)
        mm = fmax_num if k == "v_max_num_f32" else fmin_num
        return (lambda w, sel: mm(a(w, sel), b(w, sel))), typed_writer(h.dst, "f32", hi)
    fns = {"v_fmac_f32": fma32, "v_fmaak_f32": fma32, "v_fmamk_f32": fma32, "v_mul_f32": lambda a, b: a * b,
           "v_add_f32": lambda a, b: a + b, "v_sub_f32": lambda a, b: a - b, "v_subrev_f32": lambda a, b: b - a,
           "v_mul_dx9_zero_f32": _dx9_mul}
    if k not in fns:
        from .ops import unsupported
        raise unsupported(inst, f"VOPD half {h.name.lower()} is not implemented")
    rds = [f32(i) for i in range(len(h.src))]
    if k == "v_fmac_f32":
        rds.append(typed_reader(h.dst, "f32", hi, 3))
    fn = fns[k]
    return (lambda w, sel: fn(*[r(w, sel) for r in rds])), typed_writer(h.dst, "f32", hi)


@handler("v_dual")
def _vopd(inst: Inst):
    cx, wx = _vopd_half(inst.x, inst)
    cy, wy = _vopd_half(inst.y, inst)

    def step(w, sel):
        with np.errstate(all="ignore"):
            x, y = cx(w, sel), cy(w, sel)          # both halves read before either writes
            if np.may_share_memory(y, w.v):
                y = np.array(y)
            wx(w, sel, x)
            wy(w, sel, y)
    return step


__all__ = ["dot2"]
