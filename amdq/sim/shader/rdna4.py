"""RDNA4 (gfx12) handler overrides: what gfx12 adds or changes over the shared (RDNA3) handler table.

Semantics from the "AMD RDNA4 Instruction Set Architecture" reference guide: the split wait counters and
s_wait_alu only order work (the shader core completes every access before the next instruction, so they are
no-ops here); the workgroup barrier is s_barrier_signal -1 + s_barrier_wait; V_MAX_NUM/V_MIN_NUM are
IEEE-754-2019 maximumNumber/minimumNumber (a NaN operand, quiet or signaling, is missing data; two NaNs give
the first quieted; +0 > -0) and ignore MODE, which on gfx12 has no IEEE bit; SALU float operations (S_ADD_F32
...) honor MODE's f32 denormal control like VALU ones; S_ADD_NC_U64/S_SUB_NC_U64/S_MUL_U64 leave SCC alone; WMMA keeps its gfx11 arithmetic with the gfx12 register
layout (below).
"""
from __future__ import annotations

import numpy as np

from . import salu, smem
from ...hw.isa.decode import Inst
from .memory import load
from .ops import M32, Table, sread, sread64, swrite, unsupported
from .salu import _binary, _scc
from .valu import CMPF, flush_in, flush_out, ftz, store
from .valu_pk import _WMMA, _pk_minmax, wmma_c_values, wmma_d_bits
from .valu_float import _mm, _to_int, fmax_num, fmin_num

U32, U64, F32 = np.uint32, np.uint64, np.float32
OVERRIDES = Table(name="rdna4")   # what gfx12 adds or changes, laid over the common table by the front end
_over = OVERRIDES.handler


# ---------------------------------------------------------------- ordering: no-ops in the shader core

WAITS = ("s_wait_alu", "s_wait_loadcnt", "s_wait_storecnt", "s_wait_dscnt", "s_wait_kmcnt", "s_wait_expcnt",
         "s_wait_samplecnt", "s_wait_bvhcnt", "s_wait_loadcnt_dscnt", "s_wait_storecnt_dscnt",
         "global_inv", "global_wb", "global_wbinv")     # cache controls: the simulated memory is coherent
for _k in WAITS:
    _over(_k)(lambda inst: (lambda w, sel: None))


@_over("s_barrier_signal")
def _barrier_signal(inst: Inst):
    """Only the workgroup barrier (id -1); the arrival is counted at s_barrier_wait, which follows it."""
    s = inst.src[0]
    if not (s.kind == "c" and s.value & 0xFFFFFFFF == 0xFFFFFFFF):
        from .ops import unsupported
        raise unsupported(inst, "named barriers (barrier id other than -1) are not implemented")
    return lambda w, sel: None


OVERRIDES["s_barrier_wait"] = salu.TABLE["s_barrier"]
OVERRIDES["s_load_b96"] = smem.TABLE["s_load_b32"]          # the width comes from the destination tuple


# ---------------------------------------------------------------- sub-dword scalar loads

def _s_load_sub(inst: Inst):
    """S_LOAD_U8/I8/U16/I16: one byte or halfword at SBASE + IOFFSET + SOFFSET (byte address, not rounded to a
    dword), zero- or sign-extended into one SGPR. A misaligned halfword is refused (its behaviour is unverified)."""
    k = inst.key
    nbytes, signed = (1 if k.endswith("8") else 2), "_i" in k
    base = sread64(inst.sbase)
    soff = sread(inst.soffset) if inst.soffset is not None else None
    d = swrite(inst.dst[0])

    def step(w, sel):
        a = np.atleast_1d(base(w, sel)).astype(np.int64) + inst.offset
        if soff is not None:
            a = a + np.asarray(soff(w, sel)).astype(np.int64)
        if nbytes == 2 and (a & 1).any():
            from .ops import unsupported
            raise unsupported(inst, "a halfword scalar load from an odd address")
        x = load(w.mem, a.astype(U64), nbytes)[:, 0]
        if signed:
            x = x.astype(np.int64)
            x = np.where(x >> (8 * nbytes - 1) & 1, x - (1 << 8 * nbytes), x).astype(np.int32).view(U32)
        d(w, sel, np.broadcast_to(x, np.shape(w.scc[sel])))
    return step


for _k in ("s_load_u8", "s_load_i8", "s_load_u16", "s_load_i16"):
    _over(_k)(_s_load_sub)


# ---------------------------------------------------------------- IEEE-754-2019 maximumNumber / minimumNumber

for _t in ("f32", "f16", "f64"):
    _over(f"v_max_num_{_t}")(_mm((_t,) * 2, _t, lambda ie, a, b: fmax_num(a, b)))
    _over(f"v_min_num_{_t}")(_mm((_t,) * 2, _t, lambda ie, a, b: fmin_num(a, b)))
def med3_num(a, b, c):
    """V_MED3_NUM_*: with a NaN operand the min3_num of the operands, else the middle value (by max_num)."""
    mx = fmax_num(fmax_num(a, b), c)
    r = np.where(mx == a, fmax_num(b, c), np.where(mx == b, fmax_num(a, c), fmax_num(a, b)))
    nan = np.isnan(a) | np.isnan(b) | np.isnan(c)
    return np.where(nan, fmin_num(fmin_num(a, b), c), r)


for _t in ("f32", "f16"):
    _over(f"v_max3_num_{_t}")(_mm((_t,) * 3, _t, lambda ie, a, b, c: fmax_num(fmax_num(a, b), c)))
    _over(f"v_min3_num_{_t}")(_mm((_t,) * 3, _t, lambda ie, a, b, c: fmin_num(fmin_num(a, b), c)))
    _over(f"v_maxmin_num_{_t}")(_mm((_t,) * 3, _t, lambda ie, a, b, c: fmin_num(fmax_num(a, b), c)))
    _over(f"v_minmax_num_{_t}")(_mm((_t,) * 3, _t, lambda ie, a, b, c: fmax_num(fmin_num(a, b), c)))
    _over(f"v_med3_num_{_t}")(_mm((_t,) * 3, _t, lambda ie, a, b, c: med3_num(a, b, c)))

_over("v_pk_max_num_f16")(_pk_minmax(lambda a, b, ie: fmax_num(a, b)))
_over("v_pk_min_num_f16")(_pk_minmax(lambda a, b, ie: fmin_num(a, b)))

# ---------------------------------------------------------------- SALU float (f32) and 64-bit arithmetic

def _salu_f32(fn, ins: tuple, out: str):
    """D = fn(S...) on SGPR bit patterns; 'f32' sources/results get MODE's f32 denormal flushing."""
    def build(inst: Inst):
        srcs, d = [sread(o) for o in inst.src], swrite(inst.dst[0])

        def step(w, sel):
            xs = []
            for s, t in zip(srcs, ins):
                x = np.asarray(s(w, sel), U32)
                if t == "f32":
                    x = x.view(F32)
                    x = ftz(x, "f32") if flush_in(w, sel, "f32") else x
                xs.append(x)
            with np.errstate(all="ignore"):
                r = np.asarray(fn(*xs))
            if out == "f32":
                r = r.astype(F32)
                r = ftz(r, "f32") if flush_out(w, sel, "f32") else r
                r = r.view(U32)
            d(w, sel, np.broadcast_to(r.astype(U32), np.shape(w.scc[sel])))
        return step
    return build


_F2 = ("f32", "f32")
for _k, (_fn, _ins, _out) in {
    "s_add_f32": (lambda a, b: a + b, _F2, "f32"), "s_sub_f32": (lambda a, b: a - b, _F2, "f32"),
    "s_mul_f32": (lambda a, b: a * b, _F2, "f32"),
    "s_max_num_f32": (fmax_num, _F2, "f32"), "s_min_num_f32": (fmin_num, _F2, "f32"),
    "s_cvt_f32_u32": (lambda x: x.astype(F32), ("u32",), "f32"),
    "s_cvt_f32_i32": (lambda x: x.view(np.int32).astype(F32), ("u32",), "f32"),
    "s_cvt_u32_f32": (lambda x: _to_int(x, 0, 2**32 - 1, U32), ("f32",), "u32"),
    "s_cvt_i32_f32": (lambda x: _to_int(x, -2**31, 2**31 - 1, np.int32).view(U32), ("f32",), "u32"),
}.items():
    _over(_k)(_salu_f32(_fn, _ins, _out))


def _s_cmp_float(fn, typ: str):
    """S_CMP_<op>_F32/F16: SCC = the VALU comparison of the (low-half for f16) source values."""
    def build(inst: Inst):
        a, b = (sread(o) for o in inst.src)

        def val(w, sel, r):
            x = np.asarray(r(w, sel), U32)
            x = x.view(F32) if typ == "f32" else (x & U32(0xFFFF)).astype(np.uint16).view(np.float16)
            return ftz(x, typ) if flush_in(w, sel, typ) else x

        def step(w, sel):
            _scc(w, sel, np.broadcast_to(fn(val(w, sel, a), val(w, sel, b)), np.shape(w.scc[sel])))
        return step
    return build


for _t in ("f32", "f16"):
    for _op, _fn in CMPF.items():
        if _op not in ("f", "t"):
            _over(f"s_cmp_{_op}_{_t}")(_s_cmp_float(_fn, _t))

for _k, _fn in {"s_add_nc_u64": lambda a, b: a + b, "s_sub_nc_u64": lambda a, b: a - b,
                "s_mul_u64": lambda a, b: a * b}.items():
    _over(_k)(_binary(lambda a, b, f=_fn: f(np.asarray(a, U64), np.asarray(b, U64)), None, wide=True))


# ---------------------------------------------------------------- WMMA: the gfx12 register layout

_AB_REGS = {"f16": 4, "bf16": 4, "iu8": 2, "iu4": 1}      # VGPRs of A/B per lane: 8 elements of K


def _lanes_to_matrix(x: np.ndarray) -> np.ndarray:
    """(k, 32 lanes, 8 elements) -> (k, 16, 16): lane t, element e is entry [t % 16, 8 * (t // 16) + e]."""
    k = x.shape[0]
    return x.reshape(k, 2, 16, 8).transpose(0, 2, 1, 3).reshape(k, 16, 16)


def _ab12(regs: np.ndarray, kind: str, signed: bool) -> np.ndarray:
    """A rows / B columns from (k, 32, nregs) uint32, element e of a lane in the low bits first."""
    if kind in ("f16", "bf16"):
        h = np.ascontiguousarray(regs).view(np.uint16)                       # (k, 32, 8), low half first
        v = h.view(np.float16).astype(np.float64) if kind == "f16" else \
            (h.astype(U32) << U32(16)).view(F32).astype(np.float64)
    else:
        bits = 8 if kind == "iu8" else 4
        x = regs.astype(np.int64)
        v = np.stack([(x >> (bits * j)) & ((1 << bits) - 1) for j in range(32 // bits)], -1)
        v = v.reshape(regs.shape[0], 32, 8)
        if signed:
            v = np.where(v >> (bits - 1), v - (1 << bits), v)
    return _lanes_to_matrix(v)


def _wmma12(inst: Inst):
    """D = A*B + C on gfx12, wave32 (RDNA4 ISA guide, WMMA; AMD GPUOpen "Using the Matrix Cores of AMD RDNA 4"):
    lane t holds row (A) / column (B) t % 16 at K = 8 * (t // 16) + e, e = 0..7, packed from the low bits of its
    first VGPR; C/D element e of lane t is entry [8 * (t // 16) + e, t % 16], in VGPR e (32-bit kinds) or half
    e % 2 of VGPR e // 2 (16-bit kinds, packed: no OPSEL). Integer A/B are signed where NEG_LO says so.
    The arithmetic is gfx11's (valu_pk): exact sums, rounded once."""
    if inst.mask_bits == 64:
        raise unsupported(inst, "the gfx12 wave64 WMMA register layout is not modelled")
    ab, dc = _WMMA[inst.key]
    if ab in ("f16", "bf16") and (any(o.neg for o in inst.src) or inst.neg_hi):
        raise unsupported(inst, "NEG_LO/NEG_HI on a floating-point WMMA are not modelled")
    na, nc = _AB_REGS[ab], 8 if dc in ("f32", "i32") else 4
    ra, rb, c_op, rd = inst.src[0].reg, inst.src[1].reg, inst.src[2], inst.dst[0].reg
    sa, sb = bool(inst.src[0].neg), bool(inst.src[1].neg)

    def regs(w, sel, r, n):
        return np.stack([w.v[r + j][sel] for j in range(n)], -1)

    def step(w, sel):
        k = w.em[sel].shape[0]
        A = _ab12(regs(w, sel, ra, na), ab, sa)                               # (k, M, K)
        B = _ab12(regs(w, sel, rb, na), ab, sb).transpose(0, 2, 1)            # (k, K, N)
        if c_op.kind == "v":
            c = regs(w, sel, c_op.reg, nc)                                    # (k, 32, nc) uint32
        else:                                                                 # an inline constant, every element
            c = np.full((k, 32, nc), c_op.value & M32, U32)
            if nc == 4:
                c = (c & U32(0xFFFF)) * U32(0x10001)
        if nc == 4:
            c = np.stack([c & U32(0xFFFF), c >> U32(16)], -1).reshape(k, 32, 8)
        C = _lanes_to_matrix(wmma_c_values(c, dc)).transpose(0, 2, 1)         # [m, n]
        D = wmma_d_bits(np.matmul(A, B) + C, dc, inst.clamp).transpose(0, 2, 1)
        d = D.reshape(k, 16, 2, 8).transpose(0, 2, 1, 3).reshape(k, 32, 8)     # back to (lanes, elements)
        if nc == 4:
            d = d[..., 0::2] | (d[..., 1::2] << U32(16))
        for j in range(nc):
            store(w, rd + j, sel, d[..., j].astype(U32))
    return step


for _k in _WMMA:
    _over(_k)(_wmma12)


# gfx11.5 (RDNA3.5) has gfx12's scalar float operations with the same semantics (AMD RDNA3.5 and RDNA4 ISA
# guides, SALU): the RDNA3 front end lays these over its table.
SALU_FLOAT = Table({k: v for k, v in OVERRIDES.items()
                    if k in ("s_add_f32", "s_sub_f32", "s_mul_f32") or k.startswith(("s_cvt_", "s_cmp_"))},
                   name="salu_float")
