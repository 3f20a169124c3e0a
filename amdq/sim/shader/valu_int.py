"""Integer and bit-manipulation VALU operations (32-, 16- and 64-bit) and the cross-lane moves.

Semantics from the AMD RDNA3 ISA guide. Shift counts use the low 5 (32-bit), 4 (16-bit) or 6 (64-bit)
bits. VOP3 CLAMP on integer add/sub saturates instead of wrapping.
"""
from __future__ import annotations

import numpy as np

from ...hw.isa.decode import Inst
from .ops import I32, I64, M32, U32, U64, Table, sread, swrite, vread
from .valu import I16, U16, define, lane_op, typed_reader, typed_writer

TABLE = Table(name="valu_int")  # this family's handler builders (composed by the front ends in isa.py)
handler = TABLE.handler

U8 = np.uint8
u32, i32 = ("u32",), ("i32",)
U2, I2, U3, I3 = ("u32",) * 2, ("i32",) * 2, ("u32",) * 3, ("i32",) * 3
H2, S2, H3, S3 = ("u16",) * 2, ("i16",) * 2, ("u16",) * 3, ("i16",) * 3


def _sh(x, bits=32):
    return np.asarray(x, U32) & U32(bits - 1)


def _u64(x):
    return np.asarray(x).astype(U64)


def _i64(x):
    return np.asarray(x).astype(I64)


def _sext24(x):
    return (np.asarray(x, U32) << U32(8)).view(I32) >> 8


def _med3(a, b, c):
    return np.maximum(np.minimum(a, b), np.minimum(np.maximum(a, b), c))


_POP8 = np.array([bin(i).count("1") for i in range(256)], U32)
_REV8 = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], U8)


def popcount(x) -> np.ndarray:
    x = np.asarray(x, U32)
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x).astype(U32)
    b = np.ascontiguousarray(x).view(U8).reshape(x.shape + (4,))
    return _POP8[b].sum(-1, dtype=U32)


def bitrev(x) -> np.ndarray:
    x = np.ascontiguousarray(np.asarray(x, U32))
    return _REV8[x.view(U8)].view(U32).byteswap().reshape(x.shape)


def msb(x) -> np.ndarray:
    """Index of the highest set bit of nonzero uint32 values (garbage for 0)."""
    return (np.frexp(np.asarray(x, U32).astype(np.float64))[1] - 1).astype(I32)


def clz(x) -> np.ndarray:
    """v_clz_i32_u32: leading zeros, -1 (0xFFFFFFFF) for 0."""
    x = np.asarray(x, U32)
    return np.where(x == 0, I32(-1), I32(31) - msb(x))


def ctz(x) -> np.ndarray:
    """v_ctz_i32_b32: trailing zeros, -1 for 0."""
    x = np.asarray(x, U32)
    return np.where(x == 0, I32(-1), msb(x & (U32(0) - x)))


def cls(x) -> np.ndarray:
    """v_cls_i32: leading bits equal to the sign bit, not counting it (-1 for 0 and -1)."""
    x = np.asarray(x, U32)
    y = x ^ (x.view(I32) >> 31).view(U32)
    return np.where(y == 0, I32(-1), I32(31) - msb(y))


def bfe_u32(a, o, n):
    o, n = _sh(o), _sh(n)
    m = np.where(n == 0, U32(0), (U32(M32) >> (U32(32) - np.maximum(n, U32(1)))))
    return (np.asarray(a, U32) >> o) & m


def bfe_i32(a, o, n):
    o, n = _sh(o).astype(I32), _sh(n).astype(I32)
    shl = np.maximum(I32(32) - o - n, I32(0))
    r = (np.asarray(a, U32) << shl.astype(U32)).view(I32) >> np.minimum(shl + o, I32(31))
    return np.where(n == 0, I32(0), r)


def perm(a, b, s):
    """v_perm_b32: each byte of the selector picks a byte of {S0, S1} (0-7), a sign fill (8-11), 0 or 0xFF."""
    data = _u64(a) << U64(32) | _u64(b)
    s = np.asarray(s, U32)
    out = np.zeros(np.broadcast(data, s).shape, U32)
    for i in range(4):
        k = (s >> U32(8 * i)) & U32(0xFF)
        byte = ((data >> (U64(8) * np.minimum(k, U32(7)).astype(U64))) & U64(0xFF)).astype(U32)
        sign = ((data >> np.array([15, 31, 47, 63], U64)[np.clip(k.astype(np.intp) - 8, 0, 3)]) & U64(1)).astype(U32)
        v = np.where(k < 8, byte, np.where(k < 12, sign * U32(0xFF), np.where(k == 12, U32(0), U32(0xFF))))
        out |= v << U32(8 * i)
    return out


def _bytes(x):
    x = np.asarray(x, U32)
    return [((x >> U32(8 * i)) & U32(0xFF)).astype(I32) for i in range(4)]


def sad_u8(a, b, c):
    return sum(np.abs(p - q) for p, q in zip(_bytes(a), _bytes(b))).astype(U32) + np.asarray(c, U32)


def msad_u8(a, b, c):
    return sum(np.where(q == 0, 0, np.abs(p - q)) for p, q in zip(_bytes(a), _bytes(b))).astype(U32) + \
        np.asarray(c, U32)


def sad_u16(a, b, c):
    a, b = np.asarray(a, U32), np.asarray(b, U32)
    lo = np.abs((a & U32(0xFFFF)).astype(I32) - (b & U32(0xFFFF)).astype(I32))
    hi = np.abs((a >> U32(16)).astype(I32) - (b >> U32(16)).astype(I32))
    return (lo + hi).astype(U32) + np.asarray(c, U32)


def lerp_u8(a, b, c):
    out = 0
    for i, (p, q, r) in enumerate(zip(_bytes(a), _bytes(b), _bytes(c))):
        out = out | (((p + q + (r & 1)) >> 1).astype(U32) << U32(8 * i))
    return out


def _sat(fn_wide, lo: int, hi: int, dt):
    """Builder-side choice: wrap normally, saturate to [lo, hi] with VOP3 CLAMP."""
    def f(inst, *xs):
        r = fn_wide(*[np.asarray(x).astype(I64) for x in xs])
        return np.clip(r, lo, hi).astype(dt) if inst.clamp else r.astype(dt)
    return f


def _def_sat(table):
    for key, (fn, ins, out, lo, hi, dt) in table.items():
        handler(key)(lane_op(_sat(fn, lo, hi, dt), ins, out, wants_inst=True))


_add, _sub, _rsub = (lambda a, b: a + b), (lambda a, b: a - b), (lambda a, b: b - a)
_def_sat({
    "v_add_nc_u32": (_add, U2, "u32", 0, M32, U32),
    "v_sub_nc_u32": (_sub, U2, "u32", 0, M32, U32),
    "v_subrev_nc_u32": (_rsub, U2, "u32", 0, M32, U32),
    "v_add_nc_i32": (_add, I2, "i32", -2**31, 2**31 - 1, I32),
    "v_sub_nc_i32": (_sub, I2, "i32", -2**31, 2**31 - 1, I32),
    "v_add_nc_u16": (_add, H2, "u16", 0, 0xFFFF, U16),
    "v_sub_nc_u16": (_sub, H2, "u16", 0, 0xFFFF, U16),
    "v_add_nc_i16": (_add, S2, "i16", -2**15, 2**15 - 1, I16),
    "v_sub_nc_i16": (_sub, S2, "i16", -2**15, 2**15 - 1, I16),
})


def _sat_u8(x):
    return np.clip(x.astype(U16).view(I16), 0, 255).astype(U16)


def _mad_u24(a, b, c=0):
    return (np.asarray(a, U32) & U32(0xFFFFFF)) * (np.asarray(b, U32) & U32(0xFFFFFF)) + np.asarray(c, U32)


define(TABLE, {
    "v_mov_b32": (lambda a: a, u32, "u32"),
    "v_mov_b16": (lambda a: a, ("u16",), "u16"),
    "v_not_b32": (lambda a: ~np.asarray(a, U32), u32, "u32"),
    "v_not_b16": (lambda a: ~np.asarray(a, U16), ("u16",), "u16"),
    "v_and_b32": (lambda a, b: a & b, U2, "u32"),
    "v_or_b32": (lambda a, b: a | b, U2, "u32"),
    "v_xor_b32": (lambda a, b: a ^ b, U2, "u32"),
    "v_xnor_b32": (lambda a, b: ~(np.asarray(a, U32) ^ b), U2, "u32"),
    "v_and_b16": (lambda a, b: a & b, H2, "u16"),
    "v_or_b16": (lambda a, b: a | b, H2, "u16"),
    "v_xor_b16": (lambda a, b: a ^ b, H2, "u16"),
    "v_lshlrev_b32": (lambda a, b: np.asarray(b, U32) << _sh(a), U2, "u32"),
    "v_lshrrev_b32": (lambda a, b: np.asarray(b, U32) >> _sh(a), U2, "u32"),
    "v_ashrrev_i32": (lambda a, b: b >> _sh(a).astype(I32), ("u32", "i32"), "i32"),
    "v_lshlrev_b16": (lambda a, b: np.asarray(b, U16) << (np.asarray(a, U16) & U16(15)), H2, "u16"),
    "v_lshrrev_b16": (lambda a, b: np.asarray(b, U16) >> (np.asarray(a, U16) & U16(15)), H2, "u16"),
    "v_ashrrev_i16": (lambda a, b: b >> (np.asarray(a, U16) & U16(15)).astype(I16), ("u16", "i16"), "i16"),
    "v_lshlrev_b64": (lambda a, b: np.asarray(b, U64) << (_u64(a) & U64(63)), ("u32", "u64"), "u64"),
    "v_lshrrev_b64": (lambda a, b: np.asarray(b, U64) >> (_u64(a) & U64(63)), ("u32", "u64"), "u64"),
    "v_ashrrev_i64": (lambda a, b: b >> (_u64(a) & U64(63)).astype(I64), ("u32", "i64"), "i64"),
    "v_mul_lo_u32": (lambda a, b: np.asarray(a, U32) * b, U2, "u32"),
    "v_mul_hi_u32": (lambda a, b: (_u64(a) * _u64(b)) >> U64(32), U2, "u32"),
    "v_mul_hi_i32": (lambda a, b: (_i64(a) * _i64(b)) >> 32, I2, "i32"),
    "v_mul_lo_u16": (lambda a, b: np.asarray(a, U16) * b, H2, "u16"),
    "v_mul_i32_i24": (lambda a, b: _sext24(a) * _sext24(b), U2, "i32"),
    "v_mul_hi_i32_i24": (lambda a, b: (_i64(_sext24(a)) * _sext24(b)) >> 32, U2, "i32"),
    "v_mul_u32_u24": (_mad_u24, U2, "u32"),
    "v_mul_hi_u32_u24": (lambda a, b: (_u64(np.asarray(a, U32) & U32(0xFFFFFF)) *
                                       _u64(np.asarray(b, U32) & U32(0xFFFFFF))) >> U64(32), U2, "u32"),
    "v_mad_u32_u24": (_mad_u24, U3, "u32"),
    "v_mad_i32_i24": (lambda a, b, c: _sext24(a) * _sext24(b) + c, ("u32", "u32", "i32"), "i32"),
    "v_mad_u32_u16": (lambda a, b, c: np.asarray(a).astype(U32) * np.asarray(b).astype(U32) + c,
                      ("u16", "u16", "u32"), "u32"),
    "v_mad_i32_i16": (lambda a, b, c: np.asarray(a).astype(I32) * np.asarray(b).astype(I32) + c,
                      ("i16", "i16", "i32"), "i32"),
    "v_mad_u16": (lambda a, b, c: np.asarray(a, U16) * b + c, H3, "u16"),
    "v_mad_i16": (lambda a, b, c: np.asarray(a, I16) * b + c, S3, "i16"),
    "v_min_u32": (np.minimum, U2, "u32"), "v_max_u32": (np.maximum, U2, "u32"),
    "v_min_i32": (np.minimum, I2, "i32"), "v_max_i32": (np.maximum, I2, "i32"),
    "v_min_u16": (np.minimum, H2, "u16"), "v_max_u16": (np.maximum, H2, "u16"),
    "v_min_i16": (np.minimum, S2, "i16"), "v_max_i16": (np.maximum, S2, "i16"),
    "v_min3_u32": (lambda a, b, c: np.minimum(np.minimum(a, b), c), U3, "u32"),
    "v_max3_u32": (lambda a, b, c: np.maximum(np.maximum(a, b), c), U3, "u32"),
    "v_min3_i32": (lambda a, b, c: np.minimum(np.minimum(a, b), c), I3, "i32"),
    "v_max3_i32": (lambda a, b, c: np.maximum(np.maximum(a, b), c), I3, "i32"),
    "v_min3_u16": (lambda a, b, c: np.minimum(np.minimum(a, b), c), H3, "u16"),
    "v_max3_u16": (lambda a, b, c: np.maximum(np.maximum(a, b), c), H3, "u16"),
    "v_min3_i16": (lambda a, b, c: np.minimum(np.minimum(a, b), c), S3, "i16"),
    "v_max3_i16": (lambda a, b, c: np.maximum(np.maximum(a, b), c), S3, "i16"),
    "v_med3_u32": (_med3, U3, "u32"), "v_med3_i32": (_med3, I3, "i32"),
    "v_med3_u16": (_med3, H3, "u16"), "v_med3_i16": (_med3, S3, "i16"),
    "v_maxmin_u32": (lambda a, b, c: np.minimum(np.maximum(a, b), c), U3, "u32"),
    "v_minmax_u32": (lambda a, b, c: np.maximum(np.minimum(a, b), c), U3, "u32"),
    "v_maxmin_i32": (lambda a, b, c: np.minimum(np.maximum(a, b), c), I3, "i32"),
    "v_minmax_i32": (lambda a, b, c: np.maximum(np.minimum(a, b), c), I3, "i32"),
    "v_add3_u32": (lambda a, b, c: np.asarray(a, U32) + b + c, U3, "u32"),
    "v_xad_u32": (lambda a, b, c: (np.asarray(a, U32) ^ b) + c, U3, "u32"),
    "v_lshl_add_u32": (lambda a, b, c: (np.asarray(a, U32) << _sh(b)) + c, U3, "u32"),
    "v_add_lshl_u32": (lambda a, b, c: (np.asarray(a, U32) + b) << _sh(c), U3, "u32"),
    "v_lshl_or_b32": (lambda a, b, c: (np.asarray(a, U32) << _sh(b)) | c, U3, "u32"),
    "v_and_or_b32": (lambda a, b, c: (np.asarray(a, U32) & b) | c, U3, "u32"),
    "v_or3_b32": (lambda a, b, c: np.asarray(a, U32) | b | c, U3, "u32"),
    "v_xor3_b32": (lambda a, b, c: np.asarray(a, U32) ^ b ^ c, U3, "u32"),
    "v_bfe_u32": (bfe_u32, U3, "u32"),
    "v_bfe_i32": (bfe_i32, U3, "i32"),
    "v_bfi_b32": (lambda a, b, c: (np.asarray(a, U32) & b) | (~np.asarray(a, U32) & c), U3, "u32"),
    "v_bfm_b32": (lambda a, b: ((U32(1) << _sh(a)) - U32(1)) << _sh(b), U2, "u32"),
    "v_bcnt_u32_b32": (lambda a, b: popcount(a) + b, U2, "u32"),
    "v_bfrev_b32": (bitrev, u32, "u32"),
    "v_clz_i32_u32": (clz, u32, "i32"),
    "v_ctz_i32_b32": (ctz, u32, "i32"),
    "v_cls_i32": (cls, u32, "i32"),
    "v_alignbit_b32": (lambda a, b, c: ((_u64(a) << U64(32) | _u64(b)) >> (_u64(c) & U64(31))), U3, "u32"),
    "v_alignbyte_b32": (lambda a, b, c: ((_u64(a) << U64(32) | _u64(b)) >> ((_u64(c) & U64(3)) * U64(8))), U3, "u32"),
    "v_perm_b32": (perm, U3, "u32"),
    "v_sad_u8": (sad_u8, U3, "u32"),
    "v_sad_hi_u8": (lambda a, b, c: (sad_u8(a, b, 0) << U32(16)) + np.asarray(c, U32), U3, "u32"),
    "v_sad_u16": (sad_u16, U3, "u32"),
    "v_sad_u32": (lambda a, b, c: np.where(np.asarray(a, U32) > b, a - np.asarray(b, U32), b - np.asarray(a, U32)) + c,
                  U3, "u32"),
    "v_msad_u8": (msad_u8, U3, "u32"),
    "v_lerp_u8": (lerp_u8, U3, "u32"),
    "v_cvt_pk_u16_u32": (lambda a, b: np.minimum(a, U32(0xFFFF)) | np.minimum(b, U32(0xFFFF)) << U32(16), U2, "u32"),
    "v_cvt_pk_i16_i32": (lambda a, b: (np.clip(a, -2**15, 2**15 - 1).astype(I32).view(U32) & U32(0xFFFF)) |
                         (np.clip(b, -2**15, 2**15 - 1).astype(I32).view(U32) << U32(16)), I2, "u32"),
    "v_cvt_i32_i16": (lambda a: np.asarray(a).astype(I32), ("i16",), "i32"),
    "v_cvt_u32_u16": (lambda a: np.asarray(a).astype(U32), ("u16",), "u32"),
    "v_sat_pk_u8_i16": (lambda a: _sat_u8(np.asarray(a, U32)) | _sat_u8(np.asarray(a, U32) >> U32(16)) << U16(8),
                        u32, "u16"),
})


# ---------------------------------------------------------------- lane-dependent and cross-lane

@handler("v_mbcnt_lo_u32_b32", "v_mbcnt_hi_u32_b32")
def _mbcnt(inst: Inst):
    """Count of set bits of S0 below this lane (lanes 0-31: lo; 32-63: hi) plus S1."""
    a, b = vread(inst.src[0]), vread(inst.src[1])
    wr = typed_writer(inst.dst[0], "u32", inst)
    hi = inst.key.endswith("hi_u32_b32")

    def step(w, sel):
        lane = w.lane_ids
        if hi:
            n = np.where(lane >= 32, lane - 32, 0) if w.lanes == 64 else np.zeros_like(lane)
            full = lane >= 64
        else:
            n = np.minimum(lane, 32)
            full = lane >= 32
        mask = np.where(full, U32(M32), (U32(1) << np.minimum(n, 31).astype(U32)) - U32(1))
        wr(w, sel, popcount(np.asarray(a(w, sel), U32) & mask) + b(w, sel))
    return step


@handler("v_readfirstlane_b32")
def _readfirstlane(inst: Inst):
    a = vread(inst.src[0])
    d = swrite(inst.dst[0])

    def step(w, sel):
        em = w.em[sel]
        first = np.where(em.any(axis=1), em.argmax(axis=1), 0)
        v = np.broadcast_to(a(w, sel), em.shape)
        d(w, sel, v[np.arange(em.shape[0]), first])
    return step


@handler("v_readlane_b32")
def _readlane(inst: Inst):
    a, lane = vread(inst.src[0]), sread(inst.src[1])
    d = swrite(inst.dst[0])

    def step(w, sel):
        x = np.asarray(a(w, sel))
        k = x.shape[0]
        i = np.broadcast_to(np.asarray(lane(w, sel), U32) & U32(w.lanes - 1), (k,)).astype(np.intp)
        d(w, sel, np.broadcast_to(x, (k, w.lanes))[np.arange(k), i])
    return step


@handler("v_writelane_b32")
def _writelane(inst: Inst):
    """VGPR[dst][lane S1] = S0, regardless of EXEC."""
    a, lane = sread(inst.src[0]), sread(inst.src[1])
    r = inst.dst[0].reg

    def step(w, sel):
        idx = np.arange(w.n)[sel]
        k = len(idx)
        i = np.broadcast_to(np.asarray(lane(w, sel), U32) & U32(w.lanes - 1), (k,)).astype(np.intp)
        w.v[r, idx, i] = np.broadcast_to(a(w, sel), (k,))
    return step


@handler("v_permlane64_b32")
def _permlane64(inst: Inst):
    """Swap the two halves of a wave64 (a plain move for wave32)."""
    a = vread(inst.src[0])
    wr = typed_writer(inst.dst[0], "u32", inst)

    def step(w, sel):
        x = np.broadcast_to(a(w, sel), w.em[sel].shape)
        wr(w, sel, np.roll(x, 32, axis=1) if w.lanes == 64 else x)
    return step


@handler("v_permlane16_b32", "v_permlanex16_b32")
def _permlane16(inst: Inst):
    """Lane i of each row of 16 reads the lane named by nibble i of {S2, S1}, in its own row (permlane16) or
    the other row of its 32-lane half (permlanex16). OPSEL bit 0 = fetch inactive, bit 1 = bound control."""
    a = vread(inst.src[0])
    s1, s2 = sread(inst.src[1]), sread(inst.src[2])
    wr = typed_writer(inst.dst[0], "u32", inst)
    cross = inst.key == "v_permlanex16_b32"
    fi, bc = inst.opsel & 1, inst.opsel >> 1 & 1

    def step(w, sel):
        em = w.em[sel]
        k = em.shape[0]
        sel64 = np.broadcast_to(np.asarray(s1(w, sel), U64) | np.asarray(s2(w, sel), U64) << U64(32), (k,))
        lane = np.arange(w.lanes)
        nib = ((sel64[:, None] >> (U64(4) * (lane & 15).astype(U64))[None, :]) & U64(15)).astype(np.intp)
        row = lane & ~15
        if cross:
            row = row ^ 16
        src = row[None, :] + nib
        x = np.broadcast_to(a(w, sel), em.shape)
        v = np.take_along_axis(x, src, 1)
        ok = np.ones(em.shape, bool) if fi else np.take_along_axis(em, src, 1)
        if bc:
            wr(w, sel, np.where(ok, v, U32(0)))
        else:
            wr(w, sel, v, ok)
    return step


@handler("v_swap_b32", "v_swap_b16")
def _swap(inst: Inst):
    t = "u32" if inst.key.endswith("b32") else "u16"
    a, b = typed_reader(inst.src[0], t, inst, 0), typed_reader(inst.dst[0], t, inst, 3)
    wa, wb = typed_writer(inst.src[0], t, inst), typed_writer(inst.dst[0], t, inst)

    def step(w, sel):
        x, y = np.copy(a(w, sel)), np.copy(b(w, sel))
        wb(w, sel, x)
        wa(w, sel, y)
    return step


def _movrel(src_rel: bool, dst_rel: bool, split: bool = False, swap: bool = False):
    """VGPR moves indexed by M0 (per wave): v_movrels (source), v_movreld (destination), v_movrelsd (both);
    v_movrelsd_2 and v_swaprel take the source offset from M0[9:0] and the destination's from M0[25:16]."""
    def build(inst: Inst):
        s, d = inst.src[0], inst.dst[0]
        rd = vread(s)

        def step(w, sel):
            idx = np.arange(w.n)[sel]
            m0 = w.s[125][idx].astype(np.intp)
            so, do = (m0 & 0x3FF, (m0 >> 16) & 0x3FF) if split else (m0, m0)
            srow = s.reg + (so if src_rel else 0)
            x = w.v[srow, idx] if s.kind == "v" else np.broadcast_to(rd(w, sel), (len(idx), w.lanes))
            drow = d.reg + (do if dst_rel else 0)
            old = w.v[drow, idx]
            em = w.em[idx]
            if swap:
                x = np.array(x)
                w.v[srow, idx] = np.where(em, old, x)
            w.v[drow, idx] = np.where(em, x, old)
        return step
    return build


handler("v_movrels_b32")(_movrel(True, False))
handler("v_movreld_b32")(_movrel(False, True))
handler("v_movrelsd_b32")(_movrel(True, True))
handler("v_movrelsd_2_b32")(_movrel(True, True, split=True))
handler("v_swaprel_b32")(_movrel(True, True, split=True, swap=True))


@handler("v_nop", "v_pipeflush")
def _nop(inst: Inst):
    return lambda w, sel: None


__all__ = ["popcount", "bitrev", "clz", "ctz", "cls", "perm", "bfe_u32", "bfe_i32"]
