"""Fast paths of the commonest VALU instructions in their plain form: 32-bit operands, no DPP, no input or
output modifiers, and (for floats) MODE keeping f32 denormals. Same results as the general handlers, which
still run every other form (and any step whose MODE flushes denormals).

A plain step reads VGPRs as views, an SGPR that holds one value in every selected wave as a numpy scalar
(a per-wave column would make numpy loop over 32-lane rows), and writes its result straight into the
destination register (`out=`) when EXEC is full; otherwise into a temporary merged under EXEC.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from . import fp
from ...hw.isa.decode import Inst, Operand
from .ops import F32, I32, M32, U32, U64, mask_read, put_mask, sread
from .valu import mode_word
from .valu_int import bfe_u32
from .wave import NULL, WaveState

PLAIN: dict[str, tuple[Callable, tuple[str, ...], str, bool]] = {}
DT = {"u32": U32, "b32": U32, "i32": I32, "f32": F32}
FULL_F32 = 0x30                     # MODE.FP_DENORM f32 field: denormal inputs and outputs kept


def plain(key: str, ins: tuple[str, ...], out: str, inplace: bool = True):
    """Register fn(out, *sources) for `key`; inplace: fn is one elementwise pass, so `out` may alias a source."""
    def reg(fn):
        PLAIN[key] = (fn, ins, out, inplace)
        return fn
    return reg


def column(col, dt=U32):
    """A per-wave scalar operand, (k,) or 0-d: one numpy scalar when every wave holds the same value, else (k, 1)."""
    col = np.asarray(col)
    if col.ndim == 0:
        return col.astype(dt, copy=False).view(dt)[()] if col.dtype != dt else col[()]
    if len(col) == 1 or not (col != col[0]).any():
        return col[:1].view(dt)[0]
    return col.view(dt)[:, None]


def reader(op: Operand, dt) -> Callable[[WaveState, object], object]:
    """Lane operand as (k, lanes) view of dtype dt, a scalar, or a (k, 1) column."""
    if op.kind == "v":
        r = op.reg
        if dt is U32:
            return lambda w, sel: w.v[r][sel]
        return lambda w, sel: w.v[r][sel].view(dt)
    if op.kind == "c":
        c = np.array(op.value & M32, U32).view(dt)[()]
        return lambda w, sel: c
    rd = sread(op)
    return lambda w, sel: column(rd(w, sel), dt)


def is_plain(inst: Inst, n: int) -> bool:
    """32-bit operands without DPP, modifiers or OPSEL; n sources."""
    if inst.dpp is not None or inst.clamp or inst.omod or inst.opsel or len(inst.src) != n or not inst.dst:
        return False
    d = inst.dst[0]
    if d.kind != "v" or d.n != 1:
        return False
    return all(not (s.neg or s.abs) and s.n == 1 and s.bits == 32 for s in inst.src)


def target(w: WaveState, sel, r: int, dt, alias: bool):
    """(array to compute into, whether it must be merged into VGPR r under EXEC afterwards)."""
    if not alias and isinstance(sel, slice) and w.all_on(sel):
        return w.v[r][sel].view(dt), False
    return np.empty(w.em[sel].shape, dt), True


def _plain_builder(key: str, general: Callable):
    fn, ins, out, inplace = PLAIN[key]

    def build(inst: Inst):
        if not is_plain(inst, len(ins)):
            return general(inst)
        slow = general(inst)
        rds = [reader(s, DT[t]) for s, t in zip(inst.src, ins)]
        r, dt = inst.dst[0].reg, DT[out]
        floats = "f32" in ins or out == "f32"
        alias = not inplace and any(s.kind == "v" and s.reg == r for s in inst.src)

        def step(w, sel):
            if floats and mode_word(w, sel) & FULL_F32 != FULL_F32:
                return slow(w, sel)
            xs = [rd(w, sel) for rd in rds]
            o, merge = target(w, sel, r, dt, alias)
            fxs, fo = fold(w, sel, xs, o)
            fn(fo, *fxs)
            if merge:
                w.write_v(r, sel, o.view(U32))
        return step
    return build


# ---------------------------------------------------------------- plain lane operations

def _binary(key: str, uf, t: str = "u32", out: str | None = None) -> None:
    plain(key, (t, t), out or t)(lambda o, a, b: uf(a, b, out=o))


for _k, _uf in (("v_add_nc_u32", np.add), ("v_sub_nc_u32", np.subtract), ("v_and_b32", np.bitwise_and),
                ("v_or_b32", np.bitwise_or), ("v_xor_b32", np.bitwise_xor), ("v_mul_lo_u32", np.multiply),
                ("v_min_u32", np.minimum), ("v_max_u32", np.maximum)):
    _binary(_k, _uf)
_binary("v_min_i32", np.minimum, "i32")
_binary("v_max_i32", np.maximum, "i32")
for _k, _uf in (("v_add_f32", np.add), ("v_sub_f32", np.subtract), ("v_mul_f32", np.multiply)):
    _binary(_k, _uf, "f32")
plain("v_subrev_nc_u32", ("u32", "u32"), "u32")(lambda o, a, b: np.subtract(b, a, out=o))
plain("v_subrev_f32", ("f32", "f32"), "f32")(lambda o, a, b: np.subtract(b, a, out=o))
plain("v_mov_b32", ("u32",), "u32")(lambda o, a: np.copyto(o, a))


def _shift_amount(a):
    return a & U32(31)


@plain("v_lshlrev_b32", ("u32", "u32"), "u32")
def _lshl(o, a, b):
    np.left_shift(b, _shift_amount(a), out=o)


@plain("v_lshrrev_b32", ("u32", "u32"), "u32")
def _lshr(o, a, b):
    np.right_shift(b, _shift_amount(a), out=o)


@plain("v_ashrrev_i32", ("u32", "i32"), "i32")
def _ashr(o, a, b):
    np.right_shift(b, _shift_amount(a).astype(I32) if np.ndim(a) else I32(a & U32(31)), out=o)


@plain("v_add3_u32", ("u32",) * 3, "u32", inplace=False)
def _add3(o, a, b, c):
    np.add(a, b, out=o)
    np.add(o, c, out=o)


@plain("v_lshl_add_u32", ("u32",) * 3, "u32", inplace=False)
def _lshl_add(o, a, b, c):
    np.left_shift(a, _shift_amount(b), out=o)
    np.add(o, c, out=o)


@plain("v_lshl_or_b32", ("u32",) * 3, "u32", inplace=False)
def _lshl_or(o, a, b, c):
    np.left_shift(a, _shift_amount(b), out=o)
    np.bitwise_or(o, c, out=o)


@plain("v_and_or_b32", ("u32",) * 3, "u32", inplace=False)
def _and_or(o, a, b, c):
    np.bitwise_and(a, b, out=o)
    np.bitwise_or(o, c, out=o)


@plain("v_or3_b32", ("u32",) * 3, "u32", inplace=False)
def _or3(o, a, b, c):
    np.bitwise_or(a, b, out=o)
    np.bitwise_or(o, c, out=o)


@plain("v_xor3_b32", ("u32",) * 3, "u32", inplace=False)
def _xor3(o, a, b, c):
    np.bitwise_xor(a, b, out=o)
    np.bitwise_xor(o, c, out=o)


@plain("v_bfe_u32", ("u32",) * 3, "u32")
def _bfe(o, a, b, c):
    if np.ndim(b) or np.ndim(c):
        np.copyto(o, bfe_u32(a, b, c))
        return
    off, width = int(b) & 31, int(c) & 31
    np.right_shift(a, U32(off), out=o)
    np.bitwise_and(o, U32((1 << width) - 1), out=o)


# ---------------------------------------------------------------- FMA

def _pow2(x) -> int | None:
    """k when the f32 scalar x is +-2**k (or None; 0 gives 0: a zero factor makes every product exact too)."""
    if np.ndim(x):
        return None
    f = float(x)
    if f == 0.0:
        return 0
    m, e = np.frexp(np.float64(f))
    return int(e) - 1 if abs(m) == 0.5 and np.isfinite(f) else None


def scaled_exact(s, b) -> bool:
    """s * b is exact in f32 for every lane: s a scalar +-2**k (or 0), no product overflows or falls below
    the normal range (checked on the extremes of b; a NaN among them refuses)."""
    k = _pow2(s)
    if k is None:
        return False
    if float(s) == 0.0:
        return True
    lo, hi = float(np.min(b)), float(np.max(b))
    big = 2.0 ** min(127, 127 - k)              # |b * 2**k| < 2**127 * 2 keeps clear of overflow
    if not (-big < lo and hi < big):
        return False
    if k >= 0:
        return True
    # scaling down: products must stay normal, i.e. no nonzero |b| below 2**(-126 - k)
    small = 2.0 ** (-126 - k)
    return bool(((np.abs(b) >= small) | (b == 0)).all())


def fma_into(o, a, b, c) -> None:
    """o = fma(a, b, c) for f32 operands (a, b not sharing memory with o); a product by an exact power-of-two
    scalar is one f32 multiply and one f32 add (both exact but the final rounding)."""
    if np.ndim(b) == 0 and np.ndim(a):
        a, b = b, a
    if np.ndim(a) == 0 and np.ndim(b) == 2 and b.shape == o.shape and scaled_exact(a, b):
        np.multiply(b, a, out=o)
        np.add(o, c, out=o)
        return
    fp.fma32_into(o, a, b, c)


def _fma_plain(o, a, b, c):
    fma_into(o, a, b, c)


plain("v_fma_f32", ("f32",) * 3, "f32", inplace=False)(_fma_plain)
plain("v_fmamk_f32", ("f32",) * 3, "f32", inplace=False)(_fma_plain)
plain("v_fmaak_f32", ("f32",) * 3, "f32", inplace=False)(_fma_plain)


def _fmac_builder(general: Callable):
    def build(inst: Inst):
        if inst.key != "v_fmac_f32" or not is_plain(inst, 2):
            return general(inst)
        slow = general(inst)
        ra, rb = reader(inst.src[0], F32), reader(inst.src[1], F32)
        r = inst.dst[0].reg
        alias = any(s.kind == "v" and s.reg == r for s in inst.src)

        def step(w, sel):
            if mode_word(w, sel) & FULL_F32 != FULL_F32:
                return slow(w, sel)
            a, b, c = ra(w, sel), rb(w, sel), w.v[r][sel].view(F32)
            if alias or not (isinstance(sel, slice) and w.all_on(sel)):
                o = np.empty(c.shape, F32)
                fma_into(o, a, b, c)
                w.write_v(r, sel, o.view(U32))
                return
            sc, v = (a, b) if np.ndim(a) == 0 else (b, a)
            if np.ndim(sc) == 0 and np.ndim(v) == 2 and scaled_exact(sc, v):
                np.add(np.multiply(v, sc), c, out=c)          # the product is exact: one rounding
            else:
                fp.fma32_into(c, a, b, c)                     # D is S2: accumulate in place
        return step
    return build


# ---------------------------------------------------------------- carries and 64-bit address arithmetic

def _carry_builder(general: Callable, add: bool, rev: bool, cin: bool):
    def build(inst: Inst):
        if not is_plain(inst, 3 if cin else 2) or inst.dst[1].kind != "s":
            return general(inst)
        ra, rb = reader(inst.src[0], U32), reader(inst.src[1], U32)
        cr = mask_read(inst.src[2]) if cin else None
        r, cd = inst.dst[0].reg, inst.dst[1].reg
        if inst.dead_sdst:
            cd = NULL                                   # nothing reads this carry out (see decode.mask_dead)

        def step(w, sel):
            x, y = ra(w, sel), rb(w, sel)
            if rev:
                x, y = y, x
            shape = w.em[sel].shape
            if cd == NULL:
                o, merge = target(w, sel, r, U32, False)
                (np.add if add else np.subtract)(x, y, out=o)
                if cin:
                    (np.add if add else np.subtract)(o, cr(w, sel), out=o)      # bool carry in: 0 or 1
                if merge:
                    w.write_v(r, sel, o)
                return
            # carry out of x + y (+ cin): y > ~x, or y == ~x with a carry in; the borrow of x - y (- cin) likewise
            if add:
                u, v = y, ~x
                out = np.greater(u, v)
            else:
                u, v = x, y
                out = np.less(u, v)
            if out.shape != shape:
                out = np.array(np.broadcast_to(out, shape))
            if cin:
                ci = cr(w, sel)
                eq = np.equal(u, v)
                eq &= ci
                out |= eq
            o, merge = target(w, sel, r, U32, False)       # the carries are formed before D is written
            (np.add if add else np.subtract)(x, y, out=o)
            if cin:
                (np.add if add else np.subtract)(o, ci, out=o)
            if merge:
                w.write_v(r, sel, o)
            if cd != NULL:
                put_mask(w, cd, sel, out if w.all_on(sel) else out & w.em[sel])
        return step
    return build


def fold(w: WaveState, sel, xs: list, o: np.ndarray):
    """(operands, target) regrouped G waves to a row (G = waves per workgroup) when every per-wave (k, 1) column
    among xs is constant within each group: numpy then loops over G * lanes per row instead of lanes."""
    g = w.lds_rows
    if g <= 1 or not isinstance(sel, slice) or not o.flags.c_contiguous or \
            not any(np.ndim(x) == 2 and x.shape[1] == 1 for x in xs):
        return xs, o
    k, start = o.shape[0], sel.indices(w.n)[0]
    if k % g or start % g:
        return xs, o
    rows, out = k // g, []
    for x in xs:
        if np.ndim(x) == 2 and x.shape[1] == 1:
            c = x.reshape(rows, g)
            if (c != c[:, :1]).any():
                return xs, o
            out.append(c[:, :1])
        else:
            out.append(x.reshape(rows, -1) if np.ndim(x) == 2 else x)
    return out, o.reshape(rows, -1)


def _mad_u64_builder(general: Callable):
    """v_mad_u64_u32 D = S0 * S1 + S2 with scalar S0, S1 and no carry out (the address idiom): the 64-bit sum
    in two 32-bit halves, written straight into the destination pair."""
    def build(inst: Inst):
        if inst.key != "v_mad_u64_u32" or inst.dpp is not None or inst.clamp or \
                any(s.neg or s.abs for s in inst.src) or inst.dst[0].kind != "v":
            return general(inst)
        s0, s1, s2 = inst.src
        cd = inst.dst[1]
        if s0.kind == "v" or s1.kind == "v" or s2.kind != "v" or not (cd.kind == "s" and cd.reg == NULL):
            return general(inst)
        slow = general(inst)
        ra, rb = sread(s0), sread(s1)
        c, r = s2.reg, inst.dst[0].reg

        def step(w, sel):
            if not (isinstance(sel, slice) and w.all_on(sel)):
                return slow(w, sel)
            p = np.asarray(ra(w, sel), U32).astype(U64) * np.asarray(rb(w, sel), U32).astype(U64)
            plo, phi = column((p & U64(M32)).astype(U32)), column((p >> U64(32)).astype(U32))
            dlo, dhi = w.v[r][sel], w.v[r + 1][sel]
            (clo, chi, plo, phi), dlo = fold(w, sel, [w.v[c][sel], w.v[c + 1][sel], plo, phi], dlo)
            dhi = dhi.reshape(dlo.shape)
            t = np.add(clo, plo, out=dlo if r != c + 1 else None)   # D.lo last when it is S2.hi
            carry = np.less(t, plo)
            np.add(chi, phi, out=dhi)
            np.add(dhi, carry, out=dhi)
            if t is not dlo:
                dlo[...] = t
        return step
    return build


def _shift64_builder(general: Callable):
    """v_lshlrev_b64 by a constant: the two halves shifted separately (no interleaving of the pair)."""
    def build(inst: Inst):
        if inst.key != "v_lshlrev_b64" or inst.dpp is not None or inst.clamp or inst.omod or \
                any(s.neg or s.abs for s in inst.src) or inst.src[0].kind != "c" or inst.src[1].kind != "v":
            return general(inst)
        n = inst.src[0].value & 63
        a, r = inst.src[1].reg, inst.dst[0].reg

        def step(w, sel):
            lo, hi = w.v[a][sel], w.v[a + 1][sel]
            if 0 < n < 32 and isinstance(sel, slice) and w.all_on(sel):
                t = lo >> U32(32 - n)                          # straight into the pair, in an order that
                dlo, dhi = w.v[r][sel], w.v[r + 1][sel]        # reads each source half before it is overwritten
                if r == a + 1:
                    np.left_shift(hi, U32(n), out=dhi)
                    dhi |= t
                    np.left_shift(lo, U32(n), out=dlo)
                else:
                    np.left_shift(lo, U32(n), out=dlo)
                    np.left_shift(hi, U32(n), out=dhi)
                    dhi |= t
                return
            if n == 0:
                nlo, nhi = lo.copy(), hi.copy()
            elif n < 32:
                nhi = np.left_shift(hi, U32(n))
                nhi |= lo >> U32(32 - n)
                nlo = np.left_shift(lo, U32(n))
            else:
                nhi = np.left_shift(lo, U32(n - 32))
                nlo = np.zeros_like(lo)
            w.write_v(r, sel, nlo)
            w.write_v(r + 1, sel, nhi)
        return step
    return build


CMP = {"lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}
CMPI = dict(CMP, ne=np.not_equal)
CMPF = dict(CMP, neq=lambda a, b: ~np.equal(a, b), lg=lambda a, b: np.less(a, b) | np.greater(a, b))


def _cmp_builder(general: Callable, fn: Callable, typ: str):
    """VOPC (and its VOP3 form) on 32-bit operands without modifiers: the lane mask straight to VCC/SGPR/EXEC."""
    def build(inst: Inst):
        if not is_plain_cmp(inst):
            return general(inst)
        slow = general(inst)
        dt = DT[typ]
        ra, rb = reader(inst.src[0], dt), reader(inst.src[1], dt)
        d = inst.dst[0]
        floats = typ == "f32"
        if inst.dead_sdst:
            return lambda w, sel: None                  # nothing reads the result (see decode.mask_dead)

        def step(w, sel):
            if floats and mode_word(w, sel) & FULL_F32 != FULL_F32:
                return slow(w, sel)
            m = fn(ra(w, sel), rb(w, sel))
            shape = w.em[sel].shape
            if m.shape != shape:
                m = np.array(np.broadcast_to(m, shape))
            if not w.all_on(sel):
                m &= w.em[sel]
            if d.kind == "s" and d.reg != NULL:
                put_mask(w, d.reg, sel, m)
        return step
    return build


def is_plain_cmp(inst: Inst) -> bool:
    return inst.dpp is None and not inst.clamp and not inst.omod and len(inst.src) == 2 and \
        all(not (s.neg or s.abs) and s.n == 1 and s.bits == 32 for s in inst.src) and inst.dst[0].kind == "s"


def accelerate(table: dict) -> None:
    """Wrap the general builders of a composed VALU table with the fast paths."""
    for key in PLAIN:
        if key in table:
            table[key] = _plain_builder(key, table[key])
    table["v_fmac_f32"] = _fmac_builder(table["v_fmac_f32"])
    for key, args in (("v_add_co_u32", (True, False, False)), ("v_sub_co_u32", (False, False, False)),
                      ("v_subrev_co_u32", (False, True, False)), ("v_add_co_ci_u32", (True, False, True)),
                      ("v_sub_co_ci_u32", (False, False, True)), ("v_subrev_co_ci_u32", (False, True, True))):
        table[key] = _carry_builder(table[key], *args)
    table["v_mad_u64_u32"] = _mad_u64_builder(table["v_mad_u64_u32"])
    table["v_lshlrev_b64"] = _shift64_builder(table["v_lshlrev_b64"])
    for pre in ("v_cmp", "v_cmpx"):
        for typ in ("i32", "u32"):
            for op, fn in CMPI.items():
                table[f"{pre}_{op}_{typ}"] = _cmp_builder(table[f"{pre}_{op}_{typ}"], fn, typ)
        for op, fn in CMPF.items():
            table[f"{pre}_{op}_f32"] = _cmp_builder(table[f"{pre}_{op}_f32"], fn, "f32")


__all__ = ["plain", "column", "reader", "is_plain", "accelerate", "PLAIN"]
