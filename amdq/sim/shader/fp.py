"""Floating-point results exactly as hardware rounds them, computed with numpy.

Fused multiply-add is rounded once. For f32 and f16 the product a*b is exact in f64; the sum p+c is
made exact in the round-to-odd sense (TwoSum error term folded into the last bit), and a value rounded
to odd with at least two spare bits rounds to the narrower format exactly as the infinitely precise
result would. f64 FMA splits the operands (Veltkamp/Dekker) for an exact product, adds with TwoSum and
finishes with round-to-odd; lanes near overflow or underflow fall back to exact rationals.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

F16, F32, F64 = np.float16, np.float32, np.float64
U64, I64 = np.uint64, np.int64
_SPLIT = F64(134217729.0)           # 2**27 + 1


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s = RN(a+b) and the exact error e = a + b - s (round to nearest, no overflow)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def to_odd(s: np.ndarray, err: np.ndarray) -> np.ndarray:
    """The f64 value s+err (|err| <= ulp(s)/2) rounded to odd: s itself when exact, else the neighbour of s
    with an odd significand on err's side."""
    s = np.asarray(s, F64)
    bits = s.view(I64)
    fix = (err != 0) & ((bits & 1) == 0)
    if not fix.any():
        return s
    fix &= np.isfinite(s)
    step = np.where((err > 0) == (s > 0), I64(1), I64(-1))
    return (bits + np.where(fix, step, I64(0))).view(F64)


def sum_odd(p: np.ndarray, c: np.ndarray, cand: np.ndarray | None = None) -> np.ndarray:
    """p + c rounded to odd in f64 (exactly), evaluated only where `cand` says it can matter."""
    s = p + c
    if cand is None:
        return to_odd(s, two_sum(p, c)[1])
    if not cand.any():
        return s
    if np.count_nonzero(cand) * 8 > cand.size:
        # many candidates (typically exact sums of short operands): s is exact iff s-p == c and s-c == p
        # (by the Fast2Sum lemma one of the two differences is computed exactly), so only the inexact
        # lanes need the error term
        cand = cand & ~(((s - p) == c) & ((s - c) == p))
        if not cand.any():
            return s
    idx = np.nonzero(cand)
    s = s.copy()
    pi, ci = np.broadcast_to(p, s.shape)[idx], np.broadcast_to(c, s.shape)[idx]
    si, ei = two_sum(pi, ci)
    s[idx] = to_odd(si, ei)
    return s


CHUNK = 1 << 17      # elements per block: the temporaries of a multi-pass kernel stay in cache


def chunked(fn, out_dtype, *xs):
    """fn(*xs) evaluated in blocks of rows of the broadcast shape (same result, far fewer cache misses)."""
    shape = np.broadcast_shapes(*(np.shape(x) for x in xs))
    n = int(np.prod(shape)) if shape else 1
    if n <= 2 * CHUNK:
        return fn(*xs)
    rows = max(1, CHUNK // max(1, int(np.prod(shape[1:]))))
    out = np.empty(shape, out_dtype)
    nd = len(shape)
    for i in range(0, shape[0], rows):
        sl = slice(i, i + rows)
        out[sl] = fn(*[x[sl] if np.ndim(x) == nd and np.shape(x)[0] == shape[0] else x for x in xs])
    return out


def _bcast(dtype, *xs):
    return np.broadcast_arrays(*(np.asarray(x, dtype) for x in xs))


def fma32_odd(a, b, c) -> np.ndarray:
    """a*b+c of f32 inputs, in f64 rounded to odd: rounding it to f32 (or scaling by a power of two first)
    gives the correctly rounded FMA."""
    return chunked(lambda *x: _fma32(*x)[0], F64, np.asarray(a, F32), np.asarray(b, F32), np.asarray(c, F32))


def _fma32(a, b, c) -> tuple[np.ndarray, np.ndarray]:
    """(a*b+c in f64 rounded to odd, the same rounded to f32)."""
    if a.size < b.size:
        a, b = b, a
    p = a.astype(F64)
    p *= b                                     # exact: 48 significant bits at most
    s = p + c
    r = s.astype(F32)
    if s.ndim == 0:
        s, r = s.reshape(1), r.reshape(1)
    # the f64 sum can mislead only when it sits on an f32 rounding boundary (low 29 bits 0x10000000) or in
    # the f32 subnormal range, where boundaries are coarser
    cand = ((s.view(U64) & U64(0x1FFFFFFF)) == U64(0x10000000)) | ((r.view(np.uint32) & np.uint32(0x7F800000)) == 0)
    if not cand.any():
        return s, r
    s = sum_odd(p, np.broadcast_to(c.astype(F64), s.shape), cand)
    return s, s.astype(F32)


def fma32(a, b, c) -> np.ndarray:
    """Fused multiply-add of float32 arrays, correctly rounded (RNE)."""
    shape = np.broadcast_shapes(np.shape(a), np.shape(b), np.shape(c))
    r = chunked(lambda *x: _fma32(*x)[1], F32, np.asarray(a, F32), np.asarray(b, F32), np.asarray(c, F32))
    return r.reshape(shape)


FMA_ROWS_LANES = 1 << 15    # lanes per block of fma32_into: its f64 temporaries stay in L2


def _rows(x, i: int, j: int, n: int):
    return x[i:j] if np.ndim(x) == 2 and x.shape[0] == n else x


def fma32_into(out: np.ndarray, a, b, c) -> None:
    """out[...] = fma(a, b, c) correctly rounded, for a float32 (k, lanes) `out` and float32 operands that are
    (k, lanes) arrays, (k, 1) columns or scalars. a and b may not share memory with `out` (c may).

    Same method as fma32 (exact f64 product; the f64 sum rounds to f32 correctly except on an f32 tie or in the
    f32 subnormal range), with fewer passes: the sum is formed in place, rounded straight into `out`, and only
    the candidate lanes are redone with the error term (round to odd)."""
    n, lanes = out.shape
    if np.ndim(a) < np.ndim(b) or (np.ndim(a) == 2 and a.shape[1] == 1 and np.ndim(b) == 2 and b.shape[1] != 1):
        a, b = b, a                                   # a: the widest operand
    rows = max(1, FMA_ROWS_LANES // lanes)
    h0 = min(rows, n)
    p = np.empty((h0, lanes), F64)
    cc = np.empty((h0, lanes), F64)
    t64 = np.empty((h0, lanes), U64)
    t32 = np.empty((h0, lanes), np.uint32)
    m = np.empty((h0, lanes), bool)
    bw = np.ndim(b) == 2 and b.shape[1] == lanes
    bs = b if bw else np.asarray(b, F64)
    with np.errstate(all="ignore"):
        for i in range(0, n, rows):
            j = min(n, i + rows)
            hh = j - i
            P, C, T, T32, M, o = p[:hh], cc[:hh], t64[:hh], t32[:hh], m[:hh], out[i:j]
            ai, bi, ci = _rows(a, i, j, n), _rows(bs, i, j, n), _rows(c, i, j, n)
            P[...] = ai
            if bw:
                C[...] = bi
                np.multiply(P, C, out=P)                 # exact: 48 significant bits at most
            else:
                np.multiply(P, bi, out=P)
            C[...] = ci
            np.add(P, C, out=P)
            np.copyto(o, P, casting="same_kind")
            np.bitwise_and(P.view(U64), U64(0x1FFFFFFF), out=T)
            np.equal(T, U64(0x10000000), out=M)
            np.bitwise_and(o.view(np.uint32), np.uint32(0x7F800000), out=T32)
            if T32.min() == 0:                            # some result is zero or subnormal
                M |= T32 == 0
            elif not M.any():
                continue
            idx = np.flatnonzero(M)
            s = P.reshape(-1)[idx]
            c64 = C.reshape(-1)[idx]
            pa = np.broadcast_to(ai, o.shape).reshape(-1)[idx].astype(F64)
            pa *= np.broadcast_to(bi, o.shape).reshape(-1)[idx]
            bb = s - pa
            e = (pa - (s - bb)) + (c64 - bb)               # TwoSum error of pa + c64 (s is their f64 sum)
            k = np.flatnonzero(e != 0)
            if len(k):
                o.flat[idx[k]] = to_odd(s[k], e[k]).astype(F32)


def fma16(a, b, c) -> np.ndarray:
    """Fused multiply-add of float16 arrays, correctly rounded (RNE)."""
    shape = np.broadcast_shapes(np.shape(a), np.shape(b), np.shape(c))
    return chunked(_fma16, F16, np.asarray(a, F16), np.asarray(b, F16), np.asarray(c, F16)).reshape(shape)


def _fma16(a, b, c) -> np.ndarray:
    a, b, c = _bcast(F16, a, b, c)
    p = a.astype(F64) * b.astype(F64)
    c64 = c.astype(F64)
    s = p + c64
    bits = s.view(U64)
    cand = ((bits & U64((1 << 42) - 1)) == U64(1 << 41)) | ((bits & U64(0x7FF0000000000000)) < U64(0x3F20000000000000))
    return sum_odd(p, c64, cand).astype(F16)


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = _SPLIT * x
    hi = t - (t - x)
    return hi, x - hi


def _exact(x: float) -> Fraction:
    return Fraction(x)


def round_rational(q: Fraction, scale: int = 0) -> float:
    """Round the rational q * 2**scale to the nearest f64 (ties to even), with gradual underflow."""
    if scale:
        q = q * (Fraction(2) ** scale)
    try:
        return float(q)        # Python rounds int/int and Fraction -> float correctly (RNE, subnormals)
    except OverflowError:
        return float("inf") if q > 0 else float("-inf")


def fma64_exact(a: float, b: float, c: float, scale: int = 0) -> float:
    """One lane of (a*b+c) * 2**scale rounded once, with IEEE special values and signed zeros."""
    if not (np.isfinite(a) and np.isfinite(b) and np.isfinite(c)):
        return (a * b + c) * 2.0 ** scale
    q = _exact(a) * _exact(b) + _exact(c)
    if q == 0:
        return (a * b + c)     # signs of zero as IEEE adds them
    return round_rational(q, scale)


def fma64(a, b, c, scale: np.ndarray | None = None) -> np.ndarray:
    """Fused multiply-add of float64 arrays, correctly rounded; optionally times 2**scale before the single
    rounding (v_div_fmas_f64)."""
    xs = [np.asarray(a, F64), np.asarray(b, F64), np.asarray(c, F64)]
    if scale is not None:
        xs.append(np.asarray(scale))
    shape = np.broadcast_shapes(*(np.shape(x) for x in xs))
    return chunked(_fma64, F64, *xs).reshape(shape)


def _fma64(a, b, c, scale=None) -> np.ndarray:
    a, b, c = _bcast(F64, a, b, c)
    with np.errstate(all="ignore"):
        p = a * b
        ah, al = _split(a)
        bh, bl = _split(b)
        pe = ((ah * bh - p) + ah * bl + al * bh) + al * bl     # a*b = p + pe exactly in the safe range
        th, tl = two_sum(c, p)
        v = to_odd(*two_sum(tl, pe))
        r = th + v
        if scale is not None:
            r = r * np.exp2(np.asarray(scale, F64))
        aa, ab, ac, ap, ar = np.abs(a), np.abs(b), np.abs(c), np.abs(p), np.abs(r)
        safe = (aa < 2.0 ** 995) & (ab < 2.0 ** 995) & (ac < 2.0 ** 1000) & (ap < 2.0 ** 1000) & \
            (ap > 2.0 ** -900) & (ar > 2.0 ** -900) & (ar < 2.0 ** 1020)
        if not safe.all():
            # nothing to round but c (a zero factor), or IEEE special values: plain arithmetic is exact
            plain = ((a == 0) | (b == 0) | ~(np.isfinite(a) & np.isfinite(b) & np.isfinite(c))) & ~safe
            if plain.any():
                z = a * b + c
                if scale is not None:
                    z = z * np.exp2(np.asarray(scale, F64))
                r = np.where(plain, z, r)
                safe = safe | plain
    if safe.all():
        return r
    r = np.array(r, F64)
    sc = np.broadcast_to(np.asarray(0 if scale is None else scale), r.shape)
    for i in zip(*np.nonzero(~safe)):
        r[i] = fma64_exact(float(a[i]), float(b[i]), float(c[i]), int(sc[i]))
    return r


def f32_to_f16_rtz(x: np.ndarray) -> np.ndarray:
    """float32 -> float16 rounded toward zero (v_cvt_pk_rtz_f16_f32); NaN stays NaN, overflow gives max."""
    x = np.asarray(x, F32)
    h = x.astype(F16)
    bits = h.view(np.uint16).astype(np.int32)
    over = np.abs(h.astype(F64)) > np.abs(x.astype(F64))
    bits = np.where(over, bits - 1, bits)
    return bits.astype(np.uint16).view(F16)
