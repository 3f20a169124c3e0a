"""Vector ALU: VOP1, VOP2, VOP3, VOP3SD, VOPC, VOP3P and VOPD, a few numpy passes per instruction.

Semantics from the AMD RDNA3 ISA guide ("Vector ALU Operations"). Lane values are (k, lanes) arrays;
an SGPR source is (k, 1) and a constant 0-d, so numpy broadcasting reads scalars for every lane.
Inactive lanes are never written (EXEC); VOPC results are zero for inactive lanes.

Operand conventions handled here, once, for every instruction:
- input modifiers NEG/ABS (floats, as sign-bit operations), output modifiers OMOD then CLAMP;
- 16-bit operands: VOP3 OPSEL picks the high half of a source (bits 0-2) or of the destination (bit 3);
  in VOP1/VOP2/VOPC encodings bit 7 of a 16-bit VGPR operand picks the high half (v0-v127 reachable);
  a 16-bit result leaves the other half of its VGPR unchanged (gfx10+ behaviour);
- MODE.FP_DENORM (bits 5:4 f32, 7:6 f16/f64; bit 0 of the field allows denormal inputs, bit 1 denormal
  outputs): flushed operands become signed zeros;
- DPP: src0 comes through dpp.dpp_reader and the destination write is limited by dpp.write_mask.
The families live in valu_int.py (integer/bit), valu_float.py (f16/f32/f64, conversions), valu_pk.py
(VOP3P packed math, dot products, VOPD).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from . import dpp
from ...hw.isa.decode import Inst, Operand
from .ops import (F32, F64, I32, I64, M32, U32, U64, Table, mask_read, mask_write, unsupported, vread,
                  vread64)
from .wave import WaveState

TABLE = Table(name="valu")  # this family's handler builders (composed by the front ends in isa.py)
handler = TABLE.handler

F16 = np.float16
U16, I16 = np.uint16, np.int16
TYPES32 = ("u32", "i32", "f32", "b32")
TYPES16 = ("u16", "i16", "f16", "b16", "bf16")
TYPES64 = ("u64", "i64", "f64", "b64")
FLOATS = ("f16", "f32", "f64", "bf16")
# per float type: (uint view, sign bit, exponent mask, MODE denorm field shift)
FBITS = {"f32": (U32, 0x80000000, 0x7F800000, 4), "f64": (U64, 1 << 63, 0x7FF << 52, 6),
         "f16": (U16, 0x8000, 0x7C00, 6), "bf16": (U16, 0x8000, 0x7F80, 4)}
DTYPE = {"u32": U32, "b32": U32, "i32": I32, "f32": F32, "u64": U64, "b64": U64, "i64": I64, "f64": F64,
         "u16": U16, "b16": U16, "i16": I16, "f16": F16, "bf16": U16}
SHORT_ENC = ("VOP1", "VOP2", "VOPC")


# ---------------------------------------------------------------- MODE

def mode_word(w: WaveState, sel) -> int:
    """MODE of the waves in `sel` (uniform within one step: waves at one PC share their MODE)."""
    m = w.mode[sel]
    return int(m.flat[0]) if np.ndim(m) else int(m)


def denorm_flush(w: WaveState, sel, bits64: bool = False) -> bool:
    """True when MODE flushes denormals (inputs or outputs) of this width for the waves in `sel`."""
    return ((mode_word(w, sel) >> (6 if bits64 else 4)) & 3) != 3


def flush_in(w: WaveState, sel, typ: str) -> bool:
    return not (mode_word(w, sel) >> FBITS[typ][3]) & 1


def flush_out(w: WaveState, sel, typ: str) -> bool:
    return not (mode_word(w, sel) >> FBITS[typ][3]) & 2


def ieee_mode(w: WaveState, sel) -> bool:
    """MODE.IEEE (bit 9): signaling NaNs are quieted by min/max instead of treated as missing data."""
    return bool(mode_word(w, sel) >> 9 & 1)


def ftz_bits(u: np.ndarray, typ: str) -> np.ndarray:
    """Flush denormals of a float bit pattern array to signed zero."""
    ut, sign, expm, _ = FBITS[typ]
    return np.where((u & ut(expm)) == 0, u & ut(sign), u)


def ftz(x: np.ndarray, typ: str) -> np.ndarray:
    """Flush denormals of a float array (typed view) to signed zero."""
    ut = FBITS[typ][0]
    return ftz_bits(np.asarray(x).view(ut), typ).view(np.asarray(x).dtype)


# ---------------------------------------------------------------- typed operand access

def _half_select(op: Operand, typ: str, inst: Inst | None, index: int) -> tuple[Operand, bool]:
    """The register actually read for a 16-bit operand and whether it is the high half."""
    if typ not in TYPES16 or inst is None:
        return op, False
    if inst.enc in SHORT_ENC:
        if op.kind == "v" and op.reg >= 128:
            o = Operand("v", op.reg - 128, bits=16)
            o.neg, o.abs = op.neg, op.abs
            return o, True
        return op, False
    if inst.enc == "VOP3":
        return op, bool(inst.opsel >> index & 1)
    return op, False


def read64(op: Operand) -> Callable:
    """Reader of a 64-bit operand as uint64; a VGPR pair is interleaved in one pass."""
    if op.kind != "v":
        return vread64(op)
    r = op.reg

    def rd(w, sel):
        v = w.v
        if isinstance(sel, slice):
            pair = np.stack((v[r][sel], v[r + 1][sel]), axis=-1)
        else:
            pair = np.moveaxis(v[r:r + 2][:, sel], 0, -1)
            pair = np.ascontiguousarray(pair)
        return pair.view(U64)[..., 0]
    return rd


def raw_reader(op: Operand, wide: bool, inst: Inst | None = None, index: int = 0) -> Callable:
    """Bits of an operand: uint32 (or uint64 with `wide`), through DPP for src0 of a DPP instruction."""
    if inst is not None and index == 0 and inst.dpp is not None and op.kind == "v":
        return dpp.dpp_reader(op, inst, wide)
    return read64(op) if wide else vread(op)


def typed_reader(op: Operand, typ: str, inst: Inst | None = None, index: int = 0, ftz_ok: bool = True) -> Callable:
    """Reader returning the operand as `typ` with NEG/ABS applied to floats and denormal inputs flushed
    as MODE says (ftz_ok=False for operations that look at the bits, e.g. v_cmp_class)."""
    op, hi = _half_select(op, typ, inst, index)
    wide = typ in TYPES64
    raw = raw_reader(op, wide, inst, index)
    dt = DTYPE[typ]
    if typ not in FLOATS:
        if typ in ("u32", "b32", "u64", "b64"):
            return raw
        if typ in ("i32", "i64"):
            ut = U64 if wide else U32
            return lambda w, sel: np.asarray(raw(w, sel), ut).view(dt)
        sh = U32(16 if hi else 0)
        return lambda w, sel: (np.asarray(raw(w, sel), U32) >> sh).astype(U16).view(dt)
    ut, sign, _, _ = FBITS[typ]
    neg, ab = op.neg, op.abs
    absm, negm = ut(~sign & ((1 << (8 * np.dtype(ut).itemsize)) - 1)), ut(sign)
    sh = U32(16 if hi else 0)
    half = typ in TYPES16

    def rd(w, sel):
        u = raw(w, sel)
        u = (np.asarray(u, U32) >> sh).astype(U16) if half else np.asarray(u, ut)
        if ab:
            u = u & absm
        if neg:
            u = u ^ negm
        if ftz_ok and flush_in(w, sel, typ):
            u = ftz_bits(u, typ)
        return u.view(dt) if typ != "bf16" else u
    return rd


def post_float(inst: Inst, x: np.ndarray) -> np.ndarray:
    """Output modifiers: OMOD (x2, x4, /2) then CLAMP to [0, 1] (NaN -> 0)."""
    if inst.omod:
        x = x * x.dtype.type((2.0, 4.0, 0.5)[inst.omod - 1])
    if inst.clamp:
        x = np.where(x > 0, np.minimum(x, x.dtype.type(1)), x.dtype.type(0))    # NaN compares false -> 0
    return x


def store(w: WaveState, r: int, sel, val, m: np.ndarray | None = None) -> None:
    """EXEC-masked write of VGPR r, further limited by the lane mask m (DPP) when given."""
    if m is None:
        w.write_v(r, sel, val)
        return
    dst = w.v[r]
    em = w.em[sel] & m
    dst[sel] = np.where(em, val, dst[sel])


def typed_writer(op: Operand, typ: str, inst: Inst, ftz_ok: bool = True) -> Callable:
    """EXEC-masked writer wr(w, sel, x, m=None) taking a value of `typ` (floats get OMOD/CLAMP and output
    denormal flushing; f64 values given for an f32/f16 destination are rounded to nearest even)."""
    op, hi = _half_select(op, typ, inst, 3)
    r = op.reg
    dt = DTYPE[typ]
    isf = typ in FLOATS and typ != "bf16"
    post = bool(inst.omod or inst.clamp) and isf

    def prep(w, sel, x):
        x = np.asarray(x)
        if isf:
            if x.dtype != dt:
                x = x.astype(dt)
            if post:
                x = post_float(inst, x)
            if ftz_ok and flush_out(w, sel, typ):
                x = ftz(x, typ)
        return x

    if typ in TYPES64:
        def wr64(w, sel, x, m=None):
            x = prep(w, sel, x)
            u = x.view(U64) if x.dtype.itemsize == 8 and x.dtype != U64 else x.astype(U64, copy=False)
            halves = np.ascontiguousarray(np.broadcast_to(u, w.em[sel].shape)).view(U32)
            halves = halves.reshape(halves.shape[:-1] + (-1, 2))
            store(w, r, sel, halves[..., 0], m)
            store(w, r + 1, sel, halves[..., 1], m)
        return wr64
    if typ in TYPES16:
        keep, sh = (U32(0x0000FFFF), U32(16)) if hi else (U32(0xFFFF0000), U32(0))

        def wr16(w, sel, x, m=None):
            x = prep(w, sel, x)
            bits = (x.view(U16) if x.dtype.itemsize == 2 else x.astype(U16)).astype(U32)
            store(w, r, sel, (w.v[r][sel] & keep) | (bits << sh), m)
        return wr16

    def wr32(w, sel, x, m=None):
        x = prep(w, sel, x)
        if x.dtype != U32:
            x = x.view(U32) if x.dtype.itemsize == 4 else x.astype(U32)
        store(w, r, sel, x, m)
    return wr32


# ---------------------------------------------------------------- generic lane operations

def lane_op(fn: Callable, ins: tuple[str, ...], out: str, ftz_ok: bool = True, wants_inst: bool = False):
    """Builder for D = fn(S0, S1, ...) with typed sources and destination (fn(inst, ...) with wants_inst)."""
    def build(inst: Inst):
        srcs = [typed_reader(o, t, inst, i, ftz_ok) for i, (o, t) in enumerate(zip(inst.src, ins))]
        f = (lambda *a: fn(inst, *a)) if wants_inst else fn
        return _step(inst, srcs, f, typed_writer(inst.dst[0], out, inst, ftz_ok))
    return build


def _step(inst: Inst, srcs: list, f: Callable, wr: Callable):
    dm = dpp.write_mask(inst)
    if dm is None and len(srcs) == 1:
        a, = srcs
        return lambda w, sel: wr(w, sel, f(a(w, sel)))
    if dm is None and len(srcs) == 2:
        a, b = srcs
        return lambda w, sel: wr(w, sel, f(a(w, sel), b(w, sel)))
    return lambda w, sel: wr(w, sel, f(*[s(w, sel) for s in srcs]), dm(w, sel) if dm is not None else None)


def define(table: Table, ops: dict[str, tuple]) -> None:
    """Register lane operations in a family's table: key -> (fn, input types, output type[, ftz_ok])."""
    for key, spec in ops.items():
        table[key] = lane_op(*spec)


def lanes_shape(w: WaveState, sel) -> tuple[int, int]:
    return w.em[sel].shape


# ---------------------------------------------------------------- VCC / carry and select

@handler("v_cndmask_b32", "v_cndmask_b16")
def _cndmask(inst: Inst):
    t = "u32" if inst.key.endswith("b32") else "u16"
    ft = "f32" if t == "u32" else "f16"
    # the selected source keeps its bits; NEG/ABS act as on floats, no denormal flush
    a, b = (typed_reader(inst.src[i], ft if (inst.src[i].neg or inst.src[i].abs) else t, inst, i, False)
            for i in range(2))
    m = mask_read(inst.src[2])
    wr = typed_writer(inst.dst[0], t, inst, False)
    dm = dpp.write_mask(inst)
    dt = DTYPE[t]

    def step(w, sel):
        x, y = np.asarray(a(w, sel)).view(dt), np.asarray(b(w, sel)).view(dt)
        wr(w, sel, np.where(m(w, sel), y, x), dm(w, sel) if dm else None)
    return step


def _carry(add: bool, rev: bool, cin: bool):
    def build(inst: Inst):
        a, b = raw_reader(inst.src[0], False, inst, 0), vread(inst.src[1])
        c = mask_read(inst.src[2]) if cin else None
        wd, wc = typed_writer(inst.dst[0], "u32", inst), mask_write(inst.dst[1])
        sat = bool(inst.clamp)
        dm = dpp.write_mask(inst)

        def step(w, sel):
            x, y = np.asarray(a(w, sel), U32), np.asarray(b(w, sel), U32)
            if rev:
                x, y = y, x
            if add:
                r = x + y
                out = r < x
                if cin:
                    ci = c(w, sel)
                    r2 = r + ci.astype(U32)
                    out = out | (r2 < r)
                    r = r2
            else:
                r = x - y
                out = x < y
                if cin:
                    ci = c(w, sel)
                    out = out | ((x == y) & ci)
                    r = r - ci.astype(U32)
            em = w.em[sel]
            out = np.broadcast_to(out, em.shape)
            if sat:
                r = np.where(out, U32(M32) if add else U32(0), r)
            m = dm(w, sel) if dm else None
            wd(w, sel, r, m)
            wc(w, sel, out & em if m is None else out & em & m)
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
    """{carry, D} = S0*S1 + S2 in 65 bits: the unsigned carry, or for the signed form bit 64 of the exact
    65-bit two's-complement sum (its sign)."""
    signed = inst.key == "v_mad_i64_i32"
    a, b = vread(inst.src[0]), vread(inst.src[1])
    c = read64(inst.src[2])
    wd, wc = typed_writer(inst.dst[0], "u64", inst), mask_write(inst.dst[1])
    carry = not (inst.dst[1].kind == "s" and inst.dst[1].reg == 124)      # null: no carry to compute

    def step(w, sel):
        x, y, z = np.asarray(a(w, sel), U32), np.asarray(b(w, sel), U32), np.asarray(c(w, sel), U64)
        if signed:
            p = (x.view(I32).astype(I64) * y.view(I32).astype(I64)).view(U64)
            r = p + z
        else:
            p = x.astype(U64) * y.astype(U64)
            r = p + z
        wd(w, sel, r)
        if carry:
            if signed:
                ovf = ((p ^ r) & (z ^ r)) >> U64(63)
                hi = ((r >> U64(63)) ^ ovf).astype(bool)
            else:
                hi = r < p
            em = w.em[sel]
            wc(w, sel, np.broadcast_to(hi, em.shape) & em)
    return step


# ---------------------------------------------------------------- compares (VOPC, and VOPC as VOP3)

def _nan_any(a, b):
    return np.isnan(a) | np.isnan(b)


CMPF = {"f": lambda a, b: np.zeros(np.broadcast(a, b).shape, bool), "lt": np.less, "eq": np.equal,
        "le": np.less_equal, "gt": np.greater, "lg": lambda a, b: (a < b) | (a > b), "ge": np.greater_equal,
        "o": lambda a, b: ~_nan_any(a, b), "u": _nan_any,
        "nge": lambda a, b: ~(a >= b), "nlg": lambda a, b: ~((a < b) | (a > b)), "ngt": lambda a, b: ~(a > b),
        "nle": lambda a, b: ~(a <= b), "neq": lambda a, b: ~(a == b), "nlt": lambda a, b: ~(a < b),
        "t": lambda a, b: np.ones(np.broadcast(a, b).shape, bool)}
CMPI = {"f": CMPF["f"], "lt": np.less, "eq": np.equal, "le": np.less_equal, "gt": np.greater, "ne": np.not_equal,
        "ge": np.greater_equal, "t": CMPF["t"]}


def compare(inst: Inst, fn: Callable, srcs: list) -> Callable:
    """Step writing fn(S0, S1) & EXEC (& the DPP write mask) as a lane mask to the VOPC destination (VCC, an
    SGPR, or EXEC for v_cmpx)."""
    a, b = srcs
    wr = mask_write(inst.dst[0])
    dm = dpp.write_mask(inst)

    def step(w, sel):
        em = w.em[sel]
        r = np.broadcast_to(fn(a(w, sel), b(w, sel)), em.shape) & em
        if dm is not None:
            m = dm(w, sel)
            if m is not None:
                r = r & m
        wr(w, sel, r)
    return step


def _vopc(fn, typ: str):
    def build(inst: Inst):
        return compare(inst, fn, [typed_reader(inst.src[i], typ, inst, i) for i in range(2)])
    return build


for _t in ("f16", "f32", "f64"):
    for _op, _fn in CMPF.items():
        handler(f"v_cmp_{_op}_{_t}", f"v_cmpx_{_op}_{_t}")(_vopc(_fn, _t))
for _t in ("i16", "u16", "i32", "u32", "i64", "u64"):
    for _op, _fn in CMPI.items():
        handler(f"v_cmp_{_op}_{_t}", f"v_cmpx_{_op}_{_t}")(_vopc(_fn, _t))


__all__ = ["lane_op", "define", "typed_reader", "typed_writer", "raw_reader", "store", "compare", "denorm_flush",
           "flush_in", "flush_out", "ieee_mode", "mode_word", "ftz", "ftz_bits", "post_float", "unsupported",
           "FLOATS", "TYPES16", "TYPES64", "DTYPE", "FBITS"]

BLOCK_LANES = 1 << 17     # lanes per block: a step's temporaries stay in cache


def blocked(builder: Callable) -> Callable:
    """Run a VALU step over blocks of waves: every lane operation is independent across waves, and numpy passes
    over cache-sized blocks are several times faster than over the whole batch."""
    def build(inst: Inst):
        step = builder(inst)

        def run(w: WaveState, sel):
            rows = max(1, BLOCK_LANES // w.lanes)
            with np.errstate(all="ignore"):          # IEEE exceptions are results here, not errors
                if isinstance(sel, slice):
                    lo, hi, st = sel.indices(w.n)
                    if st != 1 or hi - lo <= 2 * rows:
                        return step(w, sel)
                    for i in range(lo, hi, rows):
                        step(w, slice(i, min(i + rows, hi)))
                    return None
                if len(sel) <= 2 * rows:
                    return step(w, sel)
                for i in range(0, len(sel), rows):
                    step(w, sel[i:i + rows])
            return None
        run.whole = step        # the step itself, for a caller that ignores IEEE exceptions and never splits
        return run
    return build


def whole_step(fn: Callable) -> Callable | None:
    """The step a `blocked` step runs on a small batch (its `whole`), or None for any other step."""
    return getattr(fn, "whole", None)


def table() -> Table:
    """The vector ALU: this module's handlers and the integer, float and packed families, with the fast paths
    for the common plain forms and every step run over cache-sized blocks of waves."""
    from . import valu_fast, valu_float, valu_int, valu_pk
    t = Table(TABLE, valu_int.TABLE, valu_float.TABLE, valu_pk.TABLE, name="valu")
    valu_fast.accelerate(t)
    return Table({k: blocked(b) for k, b in t.items()}, name="valu")
