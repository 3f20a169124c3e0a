"""Floating-point results exactly as hardware rounds them, computed with numpy.

FMA is fused: a*b of two f32 (or f16) values is exact in f64, so a*b+c rounded once to f64 and then to
f32 is right unless that f64 sum lies exactly halfway between two f32 values (double rounding); those
lanes are redone with the exact rational value. f64 FMA is computed exactly with Python integers.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

F16, F32, F64 = np.float16, np.float32, np.float64


def _exact_round(a, b, c, dtype):
    """Correctly rounded a*b+c for a few lanes, from exact rationals (slow path)."""
    out = np.empty(len(a), dtype)
    for i, (x, y, z) in enumerate(zip(a.tolist(), b.tolist(), c.tolist())):
        if not all(np.isfinite([x, y, z])):
            out[i] = dtype(np.float64(x) * np.float64(y) + np.float64(z))
            continue
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        if exact == 0:
            out[i] = dtype(np.float64(x) * np.float64(y) + np.float64(z))   # sign of zero per IEEE
            continue
        out[i] = _round_fraction(exact, dtype)
    return out


def _round_fraction(q: Fraction, dtype) -> float:
    """Round a nonzero rational to `dtype` (round to nearest even), via two float64 candidates."""
    f = float(q)                                   # nearest f64 (Python rounds correctly)
    r = dtype(f)
    if not np.isfinite(r):
        return r
    # candidates around r; pick nearest to q, ties to even mantissa
    cands = {r, np.nextafter(r, dtype(np.inf)), np.nextafter(r, dtype(-np.inf))}
    best = min(cands, key=lambda v: (abs(Fraction(float(v)) - q) if np.isfinite(v) else Fraction(10**400),
                                     int(np.array(v, dtype).view(np.uint16 if dtype == F16 else np.uint32)) & 1))
    return best


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Fused multiply-add of float32 arrays, correctly rounded (RNE)."""
    a, b, c = np.broadcast_arrays(np.asarray(a, F32), np.asarray(b, F32), np.asarray(c, F32))
    s = a.astype(F64) * b.astype(F64) + c.astype(F64)
    r = s.astype(F32)
    # double rounding can only bite when s sits exactly on an f32 rounding boundary (low 29 bits 0x10000000)
    low = s.view(np.uint64) & np.uint64((1 << 29) - 1)
    bad = (low == np.uint64(1 << 28)) & np.isfinite(s)
    if bad.any():
        idx = np.nonzero(bad)
        r = r.copy()
        r[idx] = _exact_round(a[idx], b[idx], c[idx], F32)
    return r


def fma16(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Fused multiply-add of float16 arrays, correctly rounded (RNE)."""
    a, b, c = np.broadcast_arrays(np.asarray(a, F16), np.asarray(b, F16), np.asarray(c, F16))
    s = a.astype(F64) * b.astype(F64) + c.astype(F64)
    r = s.astype(F16)
    low = s.view(np.uint64) & np.uint64((1 << 42) - 1)
    bad = ((low == np.uint64(1 << 41)) | (np.abs(s) < 2.0**-14)) & np.isfinite(s) & (s != 0)
    if bad.any():
        idx = np.nonzero(bad)
        r = r.copy()
        r[idx] = _exact_round(a[idx], b[idx], c[idx], F16)
    return r


def fma64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Fused multiply-add of float64 arrays, correctly rounded: exact rational arithmetic per lane."""
    a, b, c = np.broadcast_arrays(np.asarray(a, F64), np.asarray(b, F64), np.asarray(c, F64))
    shape = a.shape
    a, b, c = a.ravel(), b.ravel(), c.ravel()
    out = np.empty(a.shape, F64)
    for i, (x, y, z) in enumerate(zip(a.tolist(), b.tolist(), c.tolist())):
        if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
            out[i] = x * y + z
            continue
        q = Fraction(x) * Fraction(y) + Fraction(z)
        out[i] = float(q) if q != 0 else x * y + z
    return out.reshape(shape)
