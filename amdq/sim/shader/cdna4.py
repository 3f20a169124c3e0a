"""gfx950 (CDNA4) handlers and the CDNA4 front end's handler table: the CDNA3 table plus what gfx950 adds.

Semantics from AMD "CDNA4 Instruction Set Architecture" (section 12 opcode descriptions) and LLVM's AMDGPU
intrinsic reference (llvm.amdgcn.bitop3, permlane16/32.swap, prng.b32); encodings as LLVM 22 emits them:
- V_BITOP3_B16/B32: D[i] = TTBL[{S0[i], S1[i], S2[i]}] (S0 the index's most significant bit); the 8-bit table
  sits in the VOP3 modifier fields, TTBL[2:0] in NEG, TTBL[5:3] in ABS and TTBL[7:6] in OMOD.
- V_PERMLANE16_SWAP_B32 vdst, src0: the odd rows (16 lanes each) of vdst and the even rows of src0 trade places;
  V_PERMLANE32_SWAP_B32: rows 2 and 3 of vdst and rows 0 and 1 of src0.
- V_PRNG_B32: D = (S0 << 1) ^ (S0[31] ? 0xC5 : 0), one step of a 32-bit LFSR.
- V_MINIMUM3_F32 / V_MAXIMUM3_F32: IEEE 754-2019 minimum/maximum of three (a NaN operand gives a quiet NaN,
  -0 < +0).
- V_CVT_PK_F16_F32 / V_CVT_PK_BF16_F32: D.lo = S0 and D.hi = S1 rounded to nearest even (BF16: a NaN keeps
  its sign and top payload bits, quieted).
- V_DOT2C_F32_BF16 (VOP2, D += S0.bf16[0]*S1.bf16[0] + S0.bf16[1]*S1.bf16[1], what LLVM 22 selects for
  llvm.amdgcn.fdot2.f32.bf16) with RDNA3's v_dot2acc_f32_bf16 handler.
- The doubled-K MFMA shapes (16x16x32 and 32x32x16 F16/BF16, 16x16x64 and 32x32x32 I8) with mfma.py's layout.
"""
from __future__ import annotations

import numpy as np

from ...errors import GPUException
from ...hw.isa.decode import Inst
from ...hw.isa.gfx950 import ALL as GFX950_ONLY, ON_GFX942
from .ops import U32, Table, unsupported, vread
from .valu import store, typed_reader, typed_writer

F32, F16, U16 = np.float32, np.float16, np.uint16
H950 = Table(name="cdna4")      # gfx950 builders, by key
h950 = H950.handler


def _no_mods(inst: Inst, what: str) -> None:
    if inst.dpp is not None or getattr(inst, "sdwa", None) is not None or inst.clamp or inst.omod or \
            any(s.neg or s.abs for s in inst.src):
        raise unsupported(inst, f"modifiers (DPP/SDWA/clamp/omod/neg/abs) on {what} are not modelled")


# ---------------------------------------------------------------- bitwise

def bitop3(a: np.ndarray, b: np.ndarray, c: np.ndarray, table: int) -> np.ndarray:
    """Bitwise three-input function given by its 8-entry truth table (index S0*4 + S1*2 + S2)."""
    a, b, c = (np.asarray(x, U32) for x in (a, b, c))
    out = np.zeros(np.broadcast(a, b, c).shape, U32)
    for i in range(8):
        if table >> i & 1:
            out |= (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)
    return out


@h950("v_bitop3_b32", "v_bitop3_b16")
def _bitop3(inst: Inst):
    f = inst.fields
    table = f["omod"] << 6 | f["abs"] << 3 | f["neg"]
    if inst.dpp is not None or inst.clamp:
        raise unsupported(inst, "DPP/clamp on v_bitop3 are not modelled")
    typ = "u16" if inst.key.endswith("b16") else "u32"
    rd = [typed_reader(s, typ, inst, i) for i, s in enumerate(inst.src)]
    wr = typed_writer(inst.dst[0], typ, inst)
    mask = U32(0xFFFF if typ == "u16" else 0xFFFFFFFF)

    def step(w, sel):
        r = bitop3(*(np.asarray(x(w, sel)).astype(U32) for x in rd), table) & mask
        wr(w, sel, r.astype(U16) if typ == "u16" else r)
    return step


@h950("v_prng_b32")
def _prng(inst: Inst):
    """D = (S0 << 1) ^ (S0[31] ? 0xC5 : 0)."""
    _no_mods(inst, "v_prng_b32")
    a, wr = vread(inst.src[0]), typed_writer(inst.dst[0], "u32", inst)

    def step(w, sel):
        x = np.asarray(a(w, sel), U32)
        wr(w, sel, (x << U32(1)) ^ np.where(x >> U32(31), U32(0xC5), U32(0)))
    return step


# ---------------------------------------------------------------- cross-lane swaps

@h950("v_permlane16_swap_b32", "v_permlane32_swap_b32")
def _permlane_swap(inst: Inst):
    """Rows (16 lanes) of vdst and src0 trade places: permlane16 the odd rows of vdst with the even rows of src0,
    permlane32 rows 2-3 of vdst with rows 0-1 of src0. Both registers are written."""
    _no_mods(inst, inst.key)
    if inst.opsel:
        raise unsupported(inst, "FI/BOUND_CTRL on a permlane swap are not modelled")
    d, s = inst.dst[0], inst.src[0]
    if s.kind != "v":
        raise unsupported(inst, "a permlane swap takes a VGPR source")
    span = 16 if inst.key == "v_permlane16_swap_b32" else 32
    lanes = np.arange(64)
    hi = (lanes // span) % 2 == 1                 # lanes of vdst that move (odd rows / upper half)
    vd_lanes, src_lanes = lanes[hi], lanes[hi] - span

    def step(w, sel):
        if not w.all_on(sel):
            raise GPUException(f"{inst.mnemonic} at pc {inst.pc:#x}: a permlane swap with a partial EXEC mask is "
                               f"not modelled", pc=inst.pc)
        vd, vs = w.v[d.reg][sel].copy(), w.v[s.reg][sel].copy()     # (waves, 64)
        nd, ns = vd.copy(), vs.copy()
        nd[..., vd_lanes] = vs[..., src_lanes]
        ns[..., src_lanes] = vd[..., vd_lanes]
        store(w, d.reg, sel, nd)
        store(w, s.reg, sel, ns)
    return step


# ---------------------------------------------------------------- floating point

def _ieee_min_max(x: np.ndarray, y: np.ndarray, is_max: bool) -> np.ndarray:
    """IEEE 754-2019 minimum/maximum of float32 arrays: NaN if either is NaN (quieted), -0 below +0."""
    r = np.maximum(x, y) if is_max else np.minimum(x, y)
    zero = (x == 0) & (y == 0)
    xb, yb = x.view(U32), y.view(U32)
    signed = (xb & yb) if is_max else (xb | yb)
    r = np.where(zero, signed.view(F32), r)
    nan = np.isnan(x) | np.isnan(y)
    q = np.where(np.isnan(x), xb, yb) | U32(0x00400000)
    return np.where(nan, q.view(F32), r).astype(F32)


def _minmax3(is_max: bool):
    def build(inst: Inst):
        rd = [typed_reader(s, "f32", inst, i) for i, s in enumerate(inst.src)]
        wr = typed_writer(inst.dst[0], "f32", inst)

        def step(w, sel):
            a, b, c = (np.asarray(x(w, sel), F32) for x in rd)
            wr(w, sel, _ieee_min_max(_ieee_min_max(a, b, is_max), c, is_max))
        return step
    return build


h950("v_minimum3_f32")(_minmax3(False))
h950("v_maximum3_f32")(_minmax3(True))


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint32 in the low half), round to nearest even; NaN quieted."""
    u = np.asarray(x, F32).view(U32)
    r = (u + U32(0x7FFF) + ((u >> U32(16)) & U32(1))) >> U32(16)
    return np.where(np.isnan(np.asarray(x, F32)), (u >> U32(16)) | U32(0x40), r) & U32(0xFFFF)


@h950("v_cvt_pk_f16_f32", "v_cvt_pk_bf16_f32")
def _cvt_pk(inst: Inst):
    if inst.clamp or inst.omod:
        raise unsupported(inst, "clamp/omod on a packed conversion are not modelled")
    a, b = typed_reader(inst.src[0], "f32", inst, 0), typed_reader(inst.src[1], "f32", inst, 1)
    bf = inst.key == "v_cvt_pk_bf16_f32"
    r = inst.dst[0].reg

    def half(x: np.ndarray, w, sel) -> np.ndarray:
        if bf:
            return f32_to_bf16(x)
        with np.errstate(over="ignore"):
            h = np.asarray(x, F32).astype(F16)
        return h.view(U16).astype(U32)

    def step(w, sel):
        x, y = np.asarray(a(w, sel), F32), np.asarray(b(w, sel), F32)
        store(w, r, sel, half(x, w, sel) | half(y, w, sel) << U32(16))
    return step


# ---------------------------------------------------------------- matrix

MFMA_KEYS = ("v_mfma_f32_16x16x32_f16", "v_mfma_f32_32x32x16_f16", "v_mfma_f32_16x16x32_bf16",
             "v_mfma_f32_32x32x16_bf16", "v_mfma_i32_16x16x64_i8", "v_mfma_i32_32x32x32_i8")


def table(cdna3: "Table", rdna3: dict) -> "Table":
    """The CDNA4 handler table: the CDNA3 table, plus H950, the new MFMA shapes and the RDNA3 builders of the
    operation gfx950 gains that RDNA3 already has (v_dot2c_f32_bf16 is RDNA3's v_dot2acc_f32_bf16; the
    VOP3P v_dot2_f32_bf16 LLVM does not emit is left out, untested). `cdna3` holds no gfx950-only key (isa._cdna3 leaves them out)."""
    from . import cdna, mfma
    add = {"v_dot2c_f32_bf16": rdna3["v_dot2acc_f32_bf16"],
           **{k: mfma.build for k in MFMA_KEYS}, **H950}
    from .valu import blocked
    return cdna3.override({k: blocked(cdna.wrap(b, k)) for k, b in add.items()}, name="cdna4")


def gfx950_keys() -> frozenset[str]:
    """Handler keys of the gfx950-only mnemonics (what the CDNA3 table must not hold)."""
    from ...hw.isa.decode import _key
    from ...hw.isa.decode_cdna import _canon
    return frozenset(_canon(_key(n)) for n in GFX950_ONLY) - {_canon(_key(n)) for n in ON_GFX942}
