"""Vector ALU: VOP1, VOP2, VOP3, VOP3SD, VOPC, VOP3P and VOPD, one numpy expression per instruction.

Semantics from the AMD RDNA3 ISA guide ("Vector ALU Operations"). Lane values are (k, lanes) arrays;
an SGPR source is (k, 1) and a constant 0-d, so numpy broadcasting reads scalars for every lane.
Inactive lanes are never written (EXEC); VOPC results are zero for inactive lanes.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .decode import Inst, Operand
from .ops import (F32, F64, I32, I64, M32, U32, U64, handler, mask_read, mask_write, unsupported, vread, vread64,
                  vwrite, vwrite64)
from .wave import WaveState

F16 = np.float16
TYPES32 = ("u32", "i32", "f32", "u16", "i16", "f16", "b32")
TYPES64 = ("u64", "i64", "f64", "b64")


# ---------------------------------------------------------------- typed operand access

def denorm_flush(w: WaveState, sel, bits64: bool = False) -> bool:
    """True when MODE flushes denormals of this width for the waves in `sel` (uniform in a step)."""
    m = w.mode[sel]
    m = int(m.flat[0]) if np.ndim(m) else int(m)
    field = (m >> 6) & 3 if bits64 else (m >> 4) & 3
    return field != 3


def _ftz32(x: np.ndarray) -> np.ndarray:
    tiny = np.abs(x) < np.float32(1.1754944e-38)
    return np.where(tiny & (x != 0), np.copysign(np.float32(0), x), x) if tiny.any() else x


def typed_reader(op: Operand, typ: str, inst: Inst | None = None, index: int = 0) -> Callable:
    """Reader returning the operand as `typ` with VOP3 input modifiers (neg/abs) applied for floats."""
    wide = typ in TYPES64
    raw = vread64(op) if wide else vread(op)
    if inst is not None and index == 0 and inst.dpp is not None:
        from .dpp import dpp_reader
        raw = dpp_reader(op, inst, wide)
    hi = bool(inst is not None and inst.opsel >> index & 1) if typ in ("f16", "u16", "i16") else False
    neg, ab = op.neg, op.abs

    if typ in ("u32", "b32"):
        return raw
    if typ == "i32":
        return lambda w, sel: np.asarray(raw(w, sel), U32).view(I32)
    if typ in ("u64", "b64"):
        return raw
    if typ == "i64":
        return lambda w, sel: np.asarray(raw(w, sel), U64).view(I64)
    if typ in ("u16", "i16", "f16"):
        sh = U32(16 if hi else 0)
        dt = {"u16": np.uint16, "i16": np.int16, "f16": F16}[typ]

        def rd16(w, sel):
            x = (np.asarray(raw(w, sel), U32) >> sh).astype(np.uint16).view(dt)
            if typ == "f16":
                if ab:
                    x = np.abs(x)
                if neg:
                    x = -x
            return x
        return rd16
    if typ == "f32":
        def rdf(w, sel):
            x = np.asarray(raw(w, sel), U32).view(F32)
            if ab:
                x = np.abs(x)
            if neg:
                x = -x
            return x
        return rdf
    if typ == "f64":
        def rdd(w, sel):
            x = np.asarray(raw(w, sel), U64).view(F64)
            if ab:
                x = np.abs(x)
            if neg:
                x = -x
            return x
        return rdd
    raise ValueError(typ)


def _post_float(inst: Inst, x: np.ndarray) -> np.ndarray:
    if inst.omod:
        x = x * x.dtype.type((2.0, 4.0, 0.5)[inst.omod - 1])
    if inst.clamp:
        x = np.clip(x, x.dtype.type(0), x.dtype.type(1))
        x = np.where(np.isnan(x), x.dtype.type(0), x)
    return x


def typed_writer(op: Operand, typ: str, inst: Inst) -> Callable:
    """EXEC-masked writer taking a value of `typ` (float results get CLAMP/OMOD)."""
    if typ in TYPES64:
        wr = vwrite64(op)
        if typ == "f64":
            return lambda w, sel, x: wr(w, sel, np.asarray(_post_float(inst, np.asarray(x, F64))).view(U64))
        return lambda w, sel, x: wr(w, sel, np.asarray(x).astype(U64) if np.asarray(x).dtype != U64 else x)
    wr = vwrite(op)
    if typ == "f32":
        return lambda w, sel, x: wr(w, sel, np.asarray(_post_float(inst, np.asarray(x, F32))).view(U32))
    if typ in ("f16", "u16", "i16"):
        hi = bool(inst.opsel >> 3 & 1)
        r = op.reg
        dt = {"u16": np.uint16, "i16": np.int16, "f16": F16}[typ]

        def wr16(w, sel, x):
            x = np.asarray(x)
            if typ == "f16":
                x = _post_float(inst, x.astype(F16))
            bits = np.asarray(x.astype(dt)).view(np.uint16).astype(U32)
            old = w.v[r][sel]
            val = (old & U32(0x0000FFFF)) | (bits << U32(16)) if hi else (old & U32(0xFFFF0000)) | bits
            w.write_v(r, sel, val)
        return wr16
    return lambda w, sel, x: wr(w, sel, np.asarray(x).astype(U32) if np.asarray(x).dtype != U32 else x)


# ---------------------------------------------------------------- generic lane operations

def lane_op(fn: Callable, ins: tuple[str, ...], out: str):
    """Builder for an operation D = fn(S0, S1, ...) with typed sources and destination."""
    def build(inst: Inst):
        srcs = [typed_reader(o, t, inst, i) for i, (o, t) in enumerate(zip(inst.src, ins))]
        wr = typed_writer(inst.dst[0], out, inst)
        if len(srcs) == 1:
            a, = srcs
            return lambda w, sel: wr(w, sel, fn(a(w, sel)))
        if len(srcs) == 2:
            a, b = srcs
            return lambda w, sel: wr(w, sel, fn(a(w, sel), b(w, sel)))
        a, b, c = srcs
        return lambda w, sel: wr(w, sel, fn(a(w, sel), b(w, sel), c(w, sel)))
    return build


def define(table: dict[str, tuple[Callable, tuple[str, ...], str]]) -> None:
    for key, (fn, ins, out) in table.items():
        handler(key)(lane_op(fn, ins, out))


def _sh(x, bits=32):
    return np.asarray(x, U32) & U32(bits - 1)


u32, i32, f32 = ("u32",), ("i32",), ("f32",)
U2, I2, F2, F3 = ("u32", "u32"), ("i32", "i32"), ("f32", "f32"), ("f32", "f32", "f32")

define({
    "v_mov_b32": (lambda a: a, u32, "u32"),
    "v_not_b32": (lambda a: ~np.asarray(a, U32), u32, "u32"),
    "v_and_b32": (lambda a, b: a & b, U2, "u32"),
    "v_or_b32": (lambda a, b: a | b, U2, "u32"),
    "v_xor_b32": (lambda a, b: a ^ b, U2, "u32"),
    "v_xnor_b32": (lambda a, b: ~(a ^ b), U2, "u32"),
    "v_add_nc_u32": (lambda a, b: a + b, U2, "u32"),
    "v_sub_nc_u32": (lambda a, b: a - b, U2, "u32"),
    "v_subrev_nc_u32": (lambda a, b: b - a, U2, "u32"),
    "v_lshlrev_b32": (lambda a, b: b << _sh(a), U2, "u32"),
    "v_lshrrev_b32": (lambda a, b: b >> _sh(a), U2, "u32"),
    "v_ashrrev_i32": (lambda a, b: b >> _sh(a).astype(I32), ("u32", "i32"), "i32"),
    "v_mul_lo_u32": (lambda a, b: a * b, U2, "u32"),
    "v_mul_hi_u32": (lambda a, b: ((np.asarray(a).astype(U64) * np.asarray(b).astype(U64)) >> U64(32)), U2, "u32"),
    "v_mul_hi_i32": (lambda a, b: ((np.asarray(a).astype(I64) * np.asarray(b).astype(I64)) >> 32), I2, "i32"),
    "v_min_u32": (np.minimum, U2, "u32"), "v_max_u32": (np.maximum, U2, "u32"),
    "v_min_i32": (np.minimum, I2, "i32"), "v_max_i32": (np.maximum, I2, "i32"),
    "v_add3_u32": (lambda a, b, c: a + b + c, ("u32",) * 3, "u32"),
    "v_lshl_add_u32": (lambda a, b, c: (a << _sh(b)) + c, ("u32",) * 3, "u32"),
    "v_add_lshl_u32": (lambda a, b, c: (a + b) << _sh(c), ("u32",) * 3, "u32"),
    "v_lshl_or_b32": (lambda a, b, c: (a << _sh(b)) | c, ("u32",) * 3, "u32"),
    "v_and_or_b32": (lambda a, b, c: (a & b) | c, ("u32",) * 3, "u32"),
    "v_or3_b32": (lambda a, b, c: a | b | c, ("u32",) * 3, "u32"),
    "v_xor3_b32": (lambda a, b, c: a ^ b ^ c, ("u32",) * 3, "u32"),
    "v_add_f32": (lambda a, b: a + b, F2, "f32"),
    "v_sub_f32": (lambda a, b: a - b, F2, "f32"),
    "v_subrev_f32": (lambda a, b: b - a, F2, "f32"),
    "v_mul_f32": (lambda a, b: a * b, F2, "f32"),
    "v_cvt_f32_u32": (lambda a: np.asarray(a).astype(F32), u32, "f32"),
    "v_cvt_f32_i32": (lambda a: np.asarray(a).astype(F32), i32, "f32"),
})


@handler("v_cndmask_b32")
def _cndmask(inst: Inst):
    a, b = typed_reader(inst.src[0], "u32", inst, 0), typed_reader(inst.src[1], "u32", inst, 1)
    m = mask_read(inst.src[2])
    wr = typed_writer(inst.dst[0], "u32", inst)
    return lambda w, sel: wr(w, sel, np.where(m(w, sel), b(w, sel), a(w, sel)))


def _carry(add: bool, rev: bool, cin: bool):
    def build(inst: Inst):
        a, b = vread(inst.src[0]), vread(inst.src[1])
        c = mask_read(inst.src[2]) if cin else None
        wd, wc = vwrite(inst.dst[0]), mask_write(inst.dst[1])

        def step(w, sel):
            x, y = np.asarray(a(w, sel)).astype(I64), np.asarray(b(w, sel)).astype(I64)
            if rev:
                x, y = y, x
            ci = c(w, sel).astype(I64) if cin else 0
            r = x + y + ci if add else x - y - ci
            wd(w, sel, (r & M32).astype(U32))
            out = (r > M32) if add else (r < 0)
            wc(w, sel, np.broadcast_to(out, w.em[sel].shape) & w.em[sel])
        return step
    return build


handler("v_add_co_u32")(_carry(True, False, False))
handler("v_sub_co_u32")(_carry(False, False, False))
handler("v_subrev_co_u32")(_carry(False, True, False))
handler("v_add_co_ci_u32")(_carry(True, False, True))
handler("v_sub_co_ci_u32")(_carry(False, False, True))
handler("v_subrev_co_ci_u32")(_carry(False, True, True))


@handler("v_mad_u64_u32", "v_mad_i64_i32")
def _mad64(inst: Inst):
    signed = inst.key == "v_mad_i64_i32"
    a, b = vread(inst.src[0]), vread(inst.src[1])
    c = vread64(inst.src[2])
    wd, wc = vwrite64(inst.dst[0]), mask_write(inst.dst[1])

    def step(w, sel):
        if signed:
            x = np.asarray(a(w, sel), U32).view(I32).astype(object)
            y = np.asarray(b(w, sel), U32).view(I32).astype(object)
            z = np.asarray(c(w, sel), U64).view(I64).astype(object)
        else:
            x, y = np.asarray(a(w, sel)).astype(object), np.asarray(b(w, sel)).astype(object)
            z = np.asarray(c(w, sel)).astype(object)
        r = x * y + z
        r = np.broadcast_to(r, w.em[sel].shape)
        lo = np.vectorize(lambda v: v & (2**64 - 1), otypes=[U64])(r)
        ovf = np.vectorize(lambda v: v >= 2**64 or v < 0 if not signed else not -2**63 <= v < 2**63, otypes=[bool])(r)
        wd(w, sel, lo)
        wc(w, sel, ovf & w.em[sel])
    return step


# ---------------------------------------------------------------- compares (VOPC, and VOPC as VOP3)

CMPF = {"f": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool), "lt": np.less, "eq": np.equal,
        "le": np.less_equal, "gt": np.greater, "lg": lambda a, b: (a < b) | (a > b), "ge": np.greater_equal,
        "o": lambda a, b: ~(np.isnan(a) | np.isnan(b)), "u": lambda a, b: np.isnan(a) | np.isnan(b),
        "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b),
        "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
        "t": lambda a, b: np.ones(np.broadcast(a, b).shape, bool)}
CMPI = {"f": CMPF["f"], "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater, "ne": np.not_equal,
        "ge": np.greater_equal, "t": CMPF["t"]}


def _vopc(fn, typ: str, cmpx: bool):
    def build(inst: Inst):
        a, b = typed_reader(inst.src[0], typ, inst, 0), typed_reader(inst.src[1], typ, inst, 1)
        wr = mask_write(inst.dst[0])

        def step(w, sel):
            r = np.broadcast_to(fn(a(w, sel), b(w, sel)), w.em[sel].shape) & w.em[sel]
            wr(w, sel, r)
        return step
    return build


for t in ("f16", "f32", "f64"):
    for op, fn in CMPF.items():
        handler(f"v_cmp_{op}_{t}")(_vopc(fn, t, False))
        handler(f"v_cmpx_{op}_{t}")(_vopc(fn, t, True))
for t in ("i16", "u16", "i32", "u32", "i64", "u64"):
    for op, fn in CMPI.items():
        handler(f"v_cmp_{op}_{t}")(_vopc(fn, t, False))
        handler(f"v_cmpx_{op}_{t}")(_vopc(fn, t, True))


# ---------------------------------------------------------------- cross-lane

@handler("v_readfirstlane_b32")
def _readfirstlane(inst: Inst):
    from .ops import swrite
    a = vread(inst.src[0])
    d = swrite(inst.dst[0])

    def step(w, sel):
        em = w.em[sel]
        first = np.where(em.any(axis=1), em.argmax(axis=1), 0)
        v = np.broadcast_to(a(w, sel), em.shape)
        d(w, sel, v[np.arange(em.shape[0]), first])
    return step


__all__ = ["lane_op", "define", "typed_reader", "typed_writer", "denorm_flush", "unsupported"]


# ---------------------------------------------------------------- 64-bit shifts and FMA

def _sh64(x):
    return np.asarray(x).astype(U64) & U64(63)


define({
    "v_lshlrev_b64": (lambda a, b: b << _sh64(a), ("u32", "u64"), "u64"),
    "v_lshrrev_b64": (lambda a, b: b >> _sh64(a), ("u32", "u64"), "u64"),
    "v_ashrrev_i64": (lambda a, b: b >> _sh64(a).astype(I64), ("u32", "i64"), "i64"),
})


def _fma_defs():
    from .fp import fma16, fma32, fma64
    define({
        "v_fma_f32": (fma32, F3, "f32"),
        "v_fma_f64": (fma64, ("f64",) * 3, "f64"),
        "v_fma_f16": (fma16, ("f16",) * 3, "f16"),
        "v_fmamk_f32": (lambda a, k, b: fma32(a, k, b), F3, "f32"),
        "v_fmaak_f32": (fma32, F3, "f32"),
    })

    @handler("v_fmac_f32", "v_fmac_f16", "v_fmac_f64")
    def _fmac(inst: Inst):
        t = inst.key[-3:]
        f = {"f32": fma32, "f16": fma16, "f64": fma64}[t]
        a, b = typed_reader(inst.src[0], t, inst, 0), typed_reader(inst.src[1], t, inst, 1)
        acc = typed_reader(inst.dst[0], t)
        wr = typed_writer(inst.dst[0], t, inst)
        return lambda w, sel: wr(w, sel, f(a(w, sel), b(w, sel), acc(w, sel)))


_fma_defs()
