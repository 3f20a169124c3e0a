"""Floating-point VALU operations: f16/f32/f64 arithmetic, min/max, rounding, conversions, class tests, the
division helpers and the transcendental approximations.

Semantics from the AMD RDNA3 ISA guide. Exactly rounded operations are bit-exact (f32 add/mul in numpy
float32, f16 through exact float64 intermediates, FMA via fp.py). Approximate operations (v_rcp, v_rsq,
v_sqrt, v_exp, v_log, v_sin, v_cos for f16/f32, v_rcp/v_rsq for f64) are evaluated in float64 and rounded
once to the destination format: the guaranteed error is <= 0.5 ULP of the destination plus the float64
evaluation error (< 2**-50 relative), i.e. below 0.501 ULP - within the 1 ULP hardware specifies for f32/f16
(and far inside the 2**29 ULP allowed for v_rcp_f64/v_rsq_f64/v_sqrt_f64). v_sqrt_f32/f64 are correctly
rounded. v_rcp/v_rsq/v_sqrt/v_exp/v_log_f32 take no denormal inputs and give no denormal outputs (flushed
to signed zero whatever MODE says, as the ISA notes); v_sin/v_cos and the f16/f64 units support denormals.
"""
from __future__ import annotations

import numpy as np

from . import dpp
from ...hw.isa.decode import Inst
from .fp import f32_to_f16_rtz, fma16, fma32, fma32_odd, fma64
from .ops import F32, F64, I32, I64, U32, U64, Table
from .valu import DTYPE, F16, FBITS, I16, U16, compare, define, ftz, ieee_mode, typed_reader, typed_writer

TABLE = Table(name="valu_float")  # this family's handler builders (composed by the front ends in isa.py)
handler = TABLE.handler

F2, F3 = ("f32", "f32"), ("f32", "f32", "f32")
D1, D2, D3 = ("f64",), ("f64", "f64"), ("f64", "f64", "f64")
H1, H2, H3 = ("f16",), ("f16", "f16"), ("f16", "f16", "f16")


def _f64(x):
    return np.asarray(x).astype(F64)


# ---------------------------------------------------------------- min / max (IEEE-754 2008 minNum/maxNum, -0 < +0)

def _bits(x):
    x = np.asarray(x)
    return x.view({2: U16, 4: U32, 8: U64}[x.dtype.itemsize])


def _quiet(x):
    x = np.asarray(x)
    q = {2: 0x0200, 4: 0x00400000, 8: 1 << 51}[x.dtype.itemsize]
    u = _bits(x)
    return (u | u.dtype.type(q)).view(x.dtype)


def _is_snan(x):
    x = np.asarray(x)
    q = {2: 0x0200, 4: 0x00400000, 8: 1 << 51}[x.dtype.itemsize]
    return np.isnan(x) & ((_bits(x) & _bits(x).dtype.type(q)) == 0)


def fmax(a, b, ieee: bool = False):
    """v_max_*: the larger number (a NaN operand is missing data), +0 above -0; in IEEE mode a signaling NaN
    operand gives the quieted NaN."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    r = np.where(a == b, (_bits(a) & _bits(b)).view(a.dtype), np.fmax(a, b))
    if ieee:
        r = np.where(_is_snan(a), _quiet(a), np.where(_is_snan(b), _quiet(b), r))
    return r


def fmin(a, b, ieee: bool = False):
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    r = np.where(a == b, (_bits(a) | _bits(b)).view(a.dtype), np.fmin(a, b))
    if ieee:
        r = np.where(_is_snan(a), _quiet(a), np.where(_is_snan(b), _quiet(b), r))
    return r


def fmax_num(a, b):
    """RDNA4 v_max_num_*: IEEE-754-2019 maximumNumber: the larger number, a NaN (quiet or signaling) being
    missing data; two NaNs give the first, quieted."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    return np.where(np.isnan(a) & np.isnan(b), _quiet(a), fmax(a, b))


def fmin_num(a, b):
    """RDNA4 v_min_num_*: IEEE-754-2019 minimumNumber: the smaller number, a NaN (quiet or signaling) being
    missing data; two NaNs give the first, quieted."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    return np.where(np.isnan(a) & np.isnan(b), _quiet(a), fmin(a, b))


def med3(a, b, c, ieee: bool = False):
    """v_med3_f*: the middle value; with any NaN operand, min3 of the operands."""
    mx = fmax(fmax(a, b, ieee), c, ieee)
    r = np.where(mx == a, fmax(b, c, ieee), np.where(mx == b, fmax(a, c, ieee), fmax(a, b, ieee)))
    nan = np.isnan(a) | np.isnan(b) | np.isnan(c)
    return np.where(nan, fmin(fmin(a, b, ieee), c, ieee), r)


def _mm(ins: tuple, out: str, combine):
    """min/max family builder: combine(ieee, *sources) gets MODE.IEEE at run time."""
    def build(inst: Inst):
        srcs = [typed_reader(o, t, inst, i) for i, (o, t) in enumerate(zip(inst.src, ins))]
        wr = typed_writer(inst.dst[0], out, inst)
        dm = dpp.write_mask(inst)

        def step(w, sel):
            ieee = ieee_mode(w, sel)
            with np.errstate(all="ignore"):
                wr(w, sel, combine(ieee, *[s(w, sel) for s in srcs]), dm(w, sel) if dm else None)
        return step
    return build


for _t, _n in (("f32", 2), ("f16", 2), ("f64", 2)):
    _ins = (_t,) * 2
    handler(f"v_max_{_t}")(_mm(_ins, _t, lambda ie, a, b: fmax(a, b, ie)))
    handler(f"v_min_{_t}")(_mm(_ins, _t, lambda ie, a, b: fmin(a, b, ie)))
for _t in ("f32", "f16"):
    _ins = (_t,) * 3
    handler(f"v_max3_{_t}")(_mm(_ins, _t, lambda ie, a, b, c: fmax(fmax(a, b, ie), c, ie)))
    handler(f"v_min3_{_t}")(_mm(_ins, _t, lambda ie, a, b, c: fmin(fmin(a, b, ie), c, ie)))
    handler(f"v_med3_{_t}")(_mm(_ins, _t, lambda ie, a, b, c: med3(a, b, c, ie)))
    handler(f"v_maxmin_{_t}")(_mm(_ins, _t, lambda ie, a, b, c: fmin(fmax(a, b, ie), c, ie)))
    handler(f"v_minmax_{_t}")(_mm(_ins, _t, lambda ie, a, b, c: fmax(fmin(a, b, ie), c, ie)))


# ---------------------------------------------------------------- arithmetic

def _h(fn):
    """f16 arithmetic through float64, where + - * of two halves is exact: one rounding to f16."""
    return lambda *xs: fn(*[_f64(x) for x in xs]).astype(F16)


def _dx9_mul(a, b):
    """Legacy multiply: 0 times anything (inf, NaN) is +0."""
    return np.where((a == 0) | (b == 0), a.dtype.type(0), a * b)


def _dx9_fma(a, b, c):
    return np.where((np.asarray(a) == 0) | (np.asarray(b) == 0), np.asarray(c, F32) + F32(0), fma32(a, b, c))


def _ldexp(x, n, dt, lim):
    n = np.clip(np.asarray(n).astype(I64), -lim, lim)
    return np.ldexp(_f64(x), n).astype(dt)


def _fract(x, dt):
    """x - floor(x), kept below 1.0 (so tiny negative inputs give the largest value below 1)."""
    x64 = _f64(x)
    below1 = np.nextafter(dt(1), dt(0))
    r = x64 - np.floor(x64)
    return np.where(np.isinf(x64), np.nan, np.minimum(r, F64(below1))).astype(dt)


def _frexp_mant(x):
    m, _ = np.frexp(x)
    return np.where(np.isfinite(x), m, x)


def _frexp_exp(x, dt):
    _, e = np.frexp(x)
    return np.where(np.isfinite(x), e, 0).astype(dt)


define(TABLE, {
    "v_add_f32": (lambda a, b: a + b, F2, "f32"),
    "v_sub_f32": (lambda a, b: a - b, F2, "f32"),
    "v_subrev_f32": (lambda a, b: b - a, F2, "f32"),
    "v_mul_f32": (lambda a, b: a * b, F2, "f32"),
    "v_mul_dx9_zero_f32": (_dx9_mul, F2, "f32"),
    "v_fma_dx9_zero_f32": (_dx9_fma, F3, "f32"),
    "v_fma_f32": (fma32, F3, "f32"),
    "v_fmamk_f32": (fma32, F3, "f32"),
    "v_fmaak_f32": (fma32, F3, "f32"),
    "v_ldexp_f32": (lambda x, n: _ldexp(x, n, F32, 400), ("f32", "i32"), "f32"),
    "v_add_f16": (_h(lambda a, b: a + b), H2, "f16"),
    "v_sub_f16": (_h(lambda a, b: a - b), H2, "f16"),
    "v_subrev_f16": (_h(lambda a, b: b - a), H2, "f16"),
    "v_mul_f16": (_h(lambda a, b: a * b), H2, "f16"),
    "v_fma_f16": (fma16, H3, "f16"),
    "v_fmamk_f16": (fma16, H3, "f16"),
    "v_fmaak_f16": (fma16, H3, "f16"),
    "v_ldexp_f16": (lambda x, n: _ldexp(x, n, F16, 100), ("f16", "i16"), "f16"),
    "v_add_f64": (lambda a, b: a + b, D2, "f64"),
    "v_mul_f64": (lambda a, b: a * b, D2, "f64"),
    "v_fma_f64": (fma64, D3, "f64"),
    "v_ldexp_f64": (lambda x, n: _ldexp(x, n, F64, 2200), ("f64", "i32"), "f64"),
    # rounding and splitting
    "v_trunc_f32": (np.trunc, ("f32",), "f32"), "v_ceil_f32": (np.ceil, ("f32",), "f32"),
    "v_floor_f32": (np.floor, ("f32",), "f32"), "v_rndne_f32": (np.rint, ("f32",), "f32"),
    "v_trunc_f16": (np.trunc, H1, "f16"), "v_ceil_f16": (np.ceil, H1, "f16"),
    "v_floor_f16": (np.floor, H1, "f16"), "v_rndne_f16": (np.rint, H1, "f16"),
    "v_trunc_f64": (np.trunc, D1, "f64"), "v_ceil_f64": (np.ceil, D1, "f64"),
    "v_floor_f64": (np.floor, D1, "f64"), "v_rndne_f64": (np.rint, D1, "f64"),
    "v_fract_f32": (lambda x: _fract(x, F32), ("f32",), "f32"),
    "v_fract_f16": (lambda x: _fract(x, F16), H1, "f16"),
    "v_fract_f64": (lambda x: _fract(x, F64), D1, "f64"),
    "v_frexp_mant_f32": (_frexp_mant, ("f32",), "f32"),
    "v_frexp_mant_f16": (_frexp_mant, H1, "f16"),
    "v_frexp_mant_f64": (_frexp_mant, D1, "f64"),
    "v_frexp_exp_i32_f32": (lambda x: _frexp_exp(x, I32), ("f32",), "i32"),
    "v_frexp_exp_i16_f16": (lambda x: _frexp_exp(x, I16), H1, "i16"),
    "v_frexp_exp_i32_f64": (lambda x: _frexp_exp(x, I32), D1, "i32"),
})


@handler("v_fmac_f32", "v_fmac_f16", "v_fmac_f64", "v_fmac_dx9_zero_f32")
def _fmac(inst: Inst):
    t = "f16" if inst.key == "v_fmac_f16" else "f64" if inst.key == "v_fmac_f64" else "f32"
    f = {"f32": fma32, "f16": fma16, "f64": fma64}[t]
    if inst.key == "v_fmac_dx9_zero_f32":
        f = _dx9_fma
    srcs = [typed_reader(inst.src[0], t, inst, 0), typed_reader(inst.src[1], t, inst, 1),
            typed_reader(inst.dst[0], t, inst, 3)]
    from .valu import _step
    return _step(inst, srcs, f, typed_writer(inst.dst[0], t, inst))


# ---------------------------------------------------------------- conversions

def _to_int(x, lo, hi, dt, rnd=np.trunc):
    """Float -> integer: round (truncate by default), saturate, NaN -> 0."""
    x = rnd(_f64(x))
    return np.where(np.isnan(x), 0, np.clip(x, lo, hi)).astype(dt)


def _norm(x, signed: bool):
    """f16/f32 -> snorm16/unorm16: clamp to [-1, 1] / [0, 1], scale by 32767 / 65535, round to nearest even."""
    x = _f64(x)
    if signed:
        return np.where(np.isnan(x), 0, np.rint(np.clip(x, -1, 1) * 32767)).astype(I16)
    return np.where(np.isnan(x), 0, np.rint(np.clip(x, 0, 1) * 65535)).astype(U16)


def _byte_insert(d, s, v):
    sh = U32(8) * (np.asarray(s, U32) & U32(3))
    return (np.asarray(d, U32) & ~(U32(0xFF) << sh)) | (v << sh)


def _pk(lo, hi):
    return (np.asarray(lo).view(U16).astype(U32) | np.asarray(hi).view(U16).astype(U32) << U32(16))


define(TABLE, {
    "v_cvt_f32_f16": (lambda x: x.astype(F32), H1, "f32"),
    "v_cvt_f16_f32": (lambda x: x.astype(F16), ("f32",), "f16"),
    "v_cvt_f32_f64": (lambda x: x.astype(F32), D1, "f32"),
    "v_cvt_f64_f32": (lambda x: x.astype(F64), ("f32",), "f64"),
    "v_cvt_f32_i32": (lambda x: np.asarray(x).astype(F32), ("i32",), "f32"),
    "v_cvt_f32_u32": (lambda x: np.asarray(x).astype(F32), ("u32",), "f32"),
    "v_cvt_f64_i32": (lambda x: np.asarray(x).astype(F64), ("i32",), "f64"),
    "v_cvt_f64_u32": (lambda x: np.asarray(x).astype(F64), ("u32",), "f64"),
    "v_cvt_f16_i16": (lambda x: np.asarray(x).astype(F16), ("i16",), "f16"),
    "v_cvt_f16_u16": (lambda x: np.asarray(x).astype(F16), ("u16",), "f16"),
    "v_cvt_i32_f32": (lambda x: _to_int(x, -2**31, 2**31 - 1, I32), ("f32",), "i32"),
    "v_cvt_u32_f32": (lambda x: _to_int(x, 0, 2**32 - 1, U32), ("f32",), "u32"),
    "v_cvt_i32_f64": (lambda x: _to_int(x, -2**31, 2**31 - 1, I32), D1, "i32"),
    "v_cvt_u32_f64": (lambda x: _to_int(x, 0, 2**32 - 1, U32), D1, "u32"),
    "v_cvt_i16_f16": (lambda x: _to_int(x, -2**15, 2**15 - 1, I16), H1, "i16"),
    "v_cvt_u16_f16": (lambda x: _to_int(x, 0, 2**16 - 1, U16), H1, "u16"),
    "v_cvt_floor_i32_f32": (lambda x: _to_int(x, -2**31, 2**31 - 1, I32, np.floor), ("f32",), "i32"),
    "v_cvt_nearest_i32_f32": (lambda x: _to_int(np.asarray(x, F32) + F32(0.5), -2**31, 2**31 - 1, I32, np.floor),
                              ("f32",), "i32"),
    "v_cvt_off_f32_i4": (lambda x: (((np.asarray(x, U32) & U32(15)).astype(I32) ^ 8) - 8) * F32(0.0625),
                         ("u32",), "f32"),
    "v_cvt_f32_ubyte0": (lambda x: (np.asarray(x, U32) & U32(0xFF)).astype(F32), ("u32",), "f32"),
    "v_cvt_f32_ubyte1": (lambda x: ((np.asarray(x, U32) >> U32(8)) & U32(0xFF)).astype(F32), ("u32",), "f32"),
    "v_cvt_f32_ubyte2": (lambda x: ((np.asarray(x, U32) >> U32(16)) & U32(0xFF)).astype(F32), ("u32",), "f32"),
    "v_cvt_f32_ubyte3": (lambda x: (np.asarray(x, U32) >> U32(24)).astype(F32), ("u32",), "f32"),
    "v_cvt_norm_i16_f16": (lambda x: _norm(x, True), H1, "i16"),
    "v_cvt_norm_u16_f16": (lambda x: _norm(x, False), H1, "u16"),
    "v_cvt_pk_norm_i16_f16": (lambda a, b: _pk(_norm(a, True), _norm(b, True)), H2, "u32"),
    "v_cvt_pk_norm_u16_f16": (lambda a, b: _pk(_norm(a, False), _norm(b, False)), H2, "u32"),
    "v_cvt_pk_norm_i16_f32": (lambda a, b: _pk(_norm(a, True), _norm(b, True)), F2, "u32"),
    "v_cvt_pk_norm_u16_f32": (lambda a, b: _pk(_norm(a, False), _norm(b, False)), F2, "u32"),
    "v_cvt_pk_i16_f32": (lambda a, b: _pk(_to_int(a, -2**15, 2**15 - 1, I16), _to_int(b, -2**15, 2**15 - 1, I16)),
                         F2, "u32"),
    "v_cvt_pk_u16_f32": (lambda a, b: _pk(_to_int(a, 0, 2**16 - 1, U16), _to_int(b, 0, 2**16 - 1, U16)), F2, "u32"),
    "v_cvt_pk_rtz_f16_f32": (lambda a, b: _pk(f32_to_f16_rtz(a), f32_to_f16_rtz(b)), F2, "u32"),
    "v_cvt_pk_u8_f32": (lambda x, s, d: _byte_insert(d, s, _to_int(x, 0, 255, U32, np.rint)), ("f32", "u32", "u32"),
                        "u32"),
    "v_pack_b32_f16": (_pk, H2, "u32", False),
})


# ---------------------------------------------------------------- class tests

def fclass(x: np.ndarray, typ: str) -> np.ndarray:
    """Class index of each value as v_cmp_class numbers them: 0 sNaN, 1 qNaN, 2 -inf, 3 -normal,
    4 -denormal, 5 -0, 6 +0, 7 +denormal, 8 +normal, 9 +inf."""
    ut, sign, expm, _ = FBITS[typ]
    u = np.asarray(x).view(ut)
    mbits = {"f32": 23, "f64": 52, "f16": 10}[typ]
    mant = u & ut((1 << mbits) - 1)
    e = u & ut(expm)
    neg = (u & ut(sign)) != 0
    quiet = (u & ut(1 << (mbits - 1))) != 0
    k = np.where(e == ut(expm), np.where(mant == 0, 9, np.where(quiet, -1, -2)),
                 np.where(e == 0, np.where(mant == 0, 6, 7), 8))
    k = np.where(neg & (k >= 6), 11 - k, k)
    return np.where(k < 0, k + 2, k).astype(U32)


def _class(typ: str):
    def build(inst: Inst):
        a = typed_reader(inst.src[0], typ, inst, 0, ftz_ok=False)
        m = typed_reader(inst.src[1], "u16" if typ == "f16" else "u32", inst, 1)
        return compare(inst, lambda x, mask: ((np.asarray(mask, U32) >> fclass(x, typ)) & U32(1)).astype(bool), [a, m])
    return build


for _t in ("f16", "f32", "f64"):
    handler(f"v_cmp_class_{_t}", f"v_cmpx_class_{_t}")(_class(_t))


# ---------------------------------------------------------------- division helpers

def _exp_field(x, typ):
    ut, _, expm, _ = FBITS[typ]
    shift = {"f32": 23, "f64": 52, "f16": 10}[typ]
    return ((np.asarray(x).view(ut) & ut(expm)) >> ut(shift)).astype(np.int32)


def _is_denorm(x, typ):
    return (_exp_field(x, typ) == 0) & (np.asarray(x) != 0)


def div_scale(s0, s1, s2, typ: str):
    """v_div_scale_f32/f64: (D, VCC). Scales numerator or denominator by 2**64 (f32) / 2**128 (f64) so the
    iteration that follows stays away from overflow and denormals; VCC tells v_div_fmas to undo it."""
    dt = DTYPE[typ]
    s0, s1, s2 = np.broadcast_arrays(np.asarray(s0, dt), np.asarray(s1, dt), np.asarray(s2, dt))
    big, gap, tiny = (64, 96, 23) if typ == "f32" else (128, 768, 53)
    e1, e2 = _exp_field(s1, typ), _exp_field(s2, typ)
    up = np.ldexp(_f64(s0), big).astype(dt) if typ == "f32" else np.ldexp(s0, big)
    down = np.ldexp(s0, -big)
    q = (s2 / s1).astype(dt)
    rcp_denorm = _is_denorm(1.0 / _f64(s1), "f64")
    d = s0.copy()
    vcc = np.zeros(s0.shape, bool)
    c0 = (s2 == 0) | (s1 == 0)
    c1 = ~c0 & (e2 - e1 >= gap)
    c2 = ~c0 & ~c1 & _is_denorm(s1, typ)
    c3 = ~c0 & ~c1 & ~c2 & rcp_denorm & _is_denorm(q, typ)
    c4 = ~c0 & ~c1 & ~c2 & ~c3 & rcp_denorm
    c5 = ~c0 & ~c1 & ~c2 & ~c3 & ~c4 & _is_denorm(q, typ)
    c6 = ~c0 & ~c1 & ~c2 & ~c3 & ~c4 & ~c5 & (e2 <= tiny)
    vcc = c1 | c3 | c5
    d = np.where(c0, dt(np.nan), d)
    d = np.where(((c1 | c3) & (s0 == s1)) | c2 | (c5 & (s0 == s2)) | c6, up, d)
    d = np.where(c4, down, d)
    return d, vcc


@handler("v_div_scale_f32", "v_div_scale_f64")
def _div_scale(inst: Inst):
    from .ops import mask_write
    t = inst.key[-3:]
    srcs = [typed_reader(inst.src[i], t, inst, i) for i in range(3)]
    wr, wc = typed_writer(inst.dst[0], t, inst), mask_write(inst.dst[1])

    def step(w, sel):
        with np.errstate(all="ignore"):
            d, vcc = div_scale(*[s(w, sel) for s in srcs], t)
        em = w.em[sel]
        wr(w, sel, d)
        wc(w, sel, np.broadcast_to(vcc, em.shape) & em)
    return step


@handler("v_div_fmas_f32", "v_div_fmas_f64")
def _div_fmas(inst: Inst):
    """fma(S0, S1, S2), and where VCC is set, times 2**64 (2**128 for f64) when S2 is large (exponent above
    the bias) or 2**-64 (2**-128) otherwise - rounded once."""
    from .ops import mask_read
    t = inst.key[-3:]
    srcs = [typed_reader(inst.src[i], t, inst, i) for i in range(3)]
    wr = typed_writer(inst.dst[0], t, inst)
    vcc = mask_read(inst.src[3]) if len(inst.src) > 3 else mask_read(_vcc_operand(inst))
    big, bias = (64, 127) if t == "f32" else (128, 1023)

    def step(w, sel):
        with np.errstate(all="ignore"):
            a, b, c = [s(w, sel) for s in srcs]
            scale = np.where(vcc(w, sel), np.where(_exp_field(c, t) > bias, big, -big), 0)
            if t == "f32":
                r = (fma32_odd(a, b, c) * np.exp2(scale.astype(F64))).astype(F32)
            else:
                r = fma64(a, b, c, scale)
            wr(w, sel, r)
    return step


def _vcc_operand(inst: Inst):
    from ...hw.isa.decode import VCC_LO, Operand
    return Operand("s", VCC_LO, 2 if inst.mask_bits == 64 else 1, bits=inst.mask_bits)


def div_fixup(q, den, num, typ: str):
    """v_div_fixup: special cases of num/den (NaN, 0/0, inf/inf, x/0, inf/x, x/inf, 0/x, underflow) around the
    quotient q of the iteration; otherwise |q| with the quotient's sign (NaN q - an overflowed iteration -
    gives a signed infinity)."""
    dt = DTYPE[typ]
    q, den, num = np.broadcast_arrays(np.asarray(q, dt), np.asarray(den, dt), np.asarray(num, dt))
    neg = np.signbit(den) ^ np.signbit(num)
    inf = np.where(neg, dt(-np.inf), dt(np.inf))
    zero = np.where(neg, dt(-0.0), dt(0.0))
    under = {"f32": -150, "f64": -1075, "f16": -25}[typ]
    r = np.where(np.isnan(q), inf, np.where(neg, -np.abs(q), np.abs(q)))
    r = np.where(_exp_field(num, typ) - _exp_field(den, typ) < under, zero, r)
    r = np.where(np.isinf(den) | (num == 0), zero, r)
    r = np.where((den == 0) | np.isinf(num), inf, r)
    dnan = np.array({"f32": 0xFFC00000, "f64": 0xFFF8000000000000, "f16": 0xFE00}[typ],
                    FBITS[typ][0]).view(dt)                 # the default NaN of 0/0 and inf/inf
    r = np.where(((den == 0) & (num == 0)) | (np.isinf(den) & np.isinf(num)), dnan, r)
    r = np.where(np.isnan(den), _quiet(den), r)
    r = np.where(np.isnan(num), _quiet(num), r)
    return r


for _t in ("f16", "f32", "f64"):
    define(TABLE, {f"v_div_fixup_{_t}": (lambda q, d, n, _t=_t: div_fixup(q, d, n, _t), (_t,) * 3, _t)})


# ---------------------------------------------------------------- transcendental approximations

def _trans32(fn):
    """f32 transcendental: denormal inputs read as zero, computed in float64, denormal results flushed."""
    def f(x):
        x = ftz(np.asarray(x, F32), "f32")
        return ftz(fn(x.astype(F64)).astype(F32), "f32")
    return f


def _exp2_poly() -> tuple[float, ...]:
    """ln(2)^k / k! for k = 0..13 (Taylor series of 2^f = e^(f ln 2)), to double precision: on |f| <= 1/2 the
    truncation error is below 2e-16 relative."""
    import decimal
    from math import factorial
    with decimal.localcontext() as c:
        c.prec = 40
        ln2 = decimal.Decimal(2).ln()
        return tuple(float(ln2 ** k / factorial(k)) for k in range(14))


EXP2_POLY = _exp2_poly()
EXP2_LIMIT = 200.0          # inputs clipped to +-EXP2_LIMIT: 2^200 overflows f32, 2^-200 underflows it, exact in f64


def exp2_f64(x):
    """2^x in float64 for f32 values x, in fixed steps (so the shader JIT, ir.py _exp2, computes the same double):
    x clipped to +-EXP2_LIMIT, n = rint(x), f = x - n (exact), Horner's rule over EXP2_POLY in separate multiplies
    and adds (no fused steps), times 2^n (exact); a NaN is returned as it is. Within 1e-15 relative of 2^x, so an f32
    rounding of it is the correctly rounded one but for inputs within that of a rounding boundary; the same on every
    host (numpy's own exp2 differs from libm's in the last f64 bits, with its SIMD paths)."""
    x = np.asarray(x, F64)
    nan = np.isnan(x)
    xc = np.where(nan, 0.0, np.clip(x, -EXP2_LIMIT, EXP2_LIMIT))
    n = np.rint(xc)
    f = xc - n
    p = np.full(f.shape, EXP2_POLY[-1])
    for c in EXP2_POLY[-2::-1]:
        p = p * f + c
    return np.where(nan, x, np.ldexp(p, n.astype(np.int32)))


def _sincos(fn, dt):
    """v_sin/v_cos take revolutions: sin(2*pi*x), over the full input range (the whole turns are removed
    exactly first), denormal inputs accepted."""
    def f(x):
        x = np.asarray(x).astype(F64)
        r = np.where(x == 0, x, x - np.rint(x))             # sin(-0) = -0
        return fn(2 * np.pi * r).astype(dt)
    return f


def _rsq(x):
    return 1.0 / np.sqrt(x)


def _h16(fn):
    return lambda x: fn(_f64(x)).astype(F16)


_TRANS = {"rcp": lambda x: 1.0 / x, "rsq": _rsq, "sqrt": np.sqrt, "exp": np.exp2, "log": np.log2}
define(TABLE, {f"v_{n}_f32": (_trans32(exp2_f64 if n == "exp" else fn), ("f32",), "f32") for n, fn in _TRANS.items()})
define(TABLE, {"v_sin_f32": (_sincos(np.sin, F32), ("f32",), "f32"), "v_cos_f32": (_sincos(np.cos, F32), ("f32",), "f32"),
        "v_sin_f16": (_sincos(np.sin, F16), H1, "f16"), "v_cos_f16": (_sincos(np.cos, F16), H1, "f16")})
define(TABLE, {"v_rcp_iflag_f32": (_trans32(_TRANS["rcp"]), ("f32",), "f32"),
        "v_sqrt_f32": (lambda x: np.sqrt(ftz(np.asarray(x, F32), "f32")), ("f32",), "f32")})
define(TABLE, {f"v_{n}_f16": (_h16(fn), H1, "f16") for n, fn in _TRANS.items()})
define(TABLE, {"v_rcp_f64": (lambda x: 1.0 / x, D1, "f64"), "v_rsq_f64": (_rsq, D1, "f64"),
        "v_sqrt_f64": (np.sqrt, D1, "f64")})


# 2/pi to 1201 bits (Machin's formula in integers), for v_trig_preop_f64
def _two_over_pi(bits: int) -> int:
    prec = bits + 64
    one = 1 << prec

    def atan_inv(n):
        s, t, k, sign = 0, one // n, 1, 1
        while t:
            s += sign * (t // k)
            t //= n * n
            k += 2
            sign = -sign
        return s
    pi = 4 * (4 * atan_inv(5) - atan_inv(239))
    return ((2 << prec) * (1 << bits) // pi) >> 0


_TWO_OVER_PI = _two_over_pi(1201)          # floor(2/pi * 2**1201)


_PREOP: np.ndarray | None = None


def _trig_preop(x, sel):
    """53 bits of 2/pi starting at bit 53*S1[4:0] (+ exponent(S0) - 1077 for large S0), as a float64 scaled to
    its position (so the pieces for successive S1 sum to 2/pi)."""
    global _PREOP
    if _PREOP is None:
        _PREOP = np.array([float((_TWO_OVER_PI >> (1201 - 53 - sh)) & ((1 << 53) - 1)) for sh in range(1149)], F64)
    x = np.asarray(x, F64)
    shift = (np.asarray(sel, U32) & U32(31)).astype(I64) * 53 + np.maximum(_exp_field(x, "f64").astype(I64) - 1077, 0)
    chunk = _PREOP[np.minimum(shift, 1148)]
    return np.where(shift > 1148, 0.0, np.ldexp(chunk, (-53 - shift).astype(np.int32)))


define(TABLE, {"v_trig_preop_f64": (_trig_preop, ("f64", "u32"), "f64", False)})


# ---------------------------------------------------------------- cube map helpers

def _cube(kind):
    def f(x, y, z):
        ax, ay, az = np.abs(x), np.abs(y), np.abs(z)
        zmaj = (az >= ax) & (az >= ay)
        ymaj = ~zmaj & (ay >= ax)
        if kind == "id":
            return np.where(zmaj, np.where(z < 0, 5.0, 4.0), np.where(ymaj, np.where(y < 0, 3.0, 2.0),
                                                                      np.where(x < 0, 1.0, 0.0))).astype(F32)
        if kind == "ma":
            return F32(2) * np.where(zmaj, z, np.where(ymaj, y, x))
        if kind == "sc":
            return np.where(zmaj, np.where(z < 0, -x, x), np.where(ymaj, x, np.where(x < 0, z, -z)))
        return np.where(zmaj, -y, np.where(ymaj, np.where(y < 0, -z, z), -y))
    return f


define(TABLE, {f"v_cube{k}_f32": (_cube(k), F3, "f32") for k in ("id", "ma", "sc", "tc")})

__all__ = ["fmax", "fmin", "fmax_num", "fmin_num", "med3", "fclass", "div_scale", "div_fixup"]
