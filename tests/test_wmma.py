"""RDNA4 (gfx12) WMMA against numpy: single instructions assembled by llvm-mc-19 for gfx1201/gfx1200 with the
operands placed per the gfx12 register layout, and OpenCL matmuls through the _w32_gfx12 builtins (clang-19) on
the shader core and through the public API. Integer-valued data, so every summation order gives one result.
(The gfx11 layout: test_valu.test_wmma_wave32.)"""
from __future__ import annotations

import numpy as np
import pytest

import device_harness
import harness
from amdq.errors import UnsupportedInstruction
from amdq.sim.shader.isa import for_gfx
from amdq.sim.shader.wave import WaveState
from clang import KERNELS
from test_rdna4 import assemble

U16, U32, F16, F32 = np.uint16, np.uint32, np.float16, np.float32
WMMA_CL = str(KERNELS.parent / "kernels_rdna4" / "wmma.cl")
RDNA4 = for_gfx(12)


def bf16(x: np.ndarray) -> np.ndarray:
    """bf16 bit patterns of small integers (exact: the top half of their f32)."""
    return (np.asarray(x, F32).view(U32) >> 16).astype(U16)


def from_bf16(h: np.ndarray) -> np.ndarray:
    return (h.astype(U32) << 16).view(F32)


def pack_ab(X: np.ndarray, bits: int) -> np.ndarray:
    """(16, 16) integer-coded elements, X[i, k] (A row i / B column i), into (32 lanes, nregs) uint32: lane t,
    element e = X[t % 16, 8 * (t // 16) + e], element e at bit bits*e of the lane's VGPRs."""
    per = 32 // bits
    out = np.zeros((32, 8 * bits // 32), U32)
    for t in range(32):
        for e in range(8):
            v = int(X[t % 16, 8 * (t // 16) + e]) & ((1 << bits) - 1)
            out[t, e // per] |= U32(v << (bits * (e % per)))
    return out


def pack_cd(M: np.ndarray, bits: int) -> np.ndarray:
    """(16, 16) C/D bit patterns into (32, nregs): lane t, element e = M[8 * (t // 16) + e, t % 16]."""
    return pack_ab(M.T, bits)


KINDS = {   # mnemonic: (A/B kind, C/D kind, A/B bits, C/D bits)
    "v_wmma_f32_16x16x16_f16": ("f16", "f32", 16, 32), "v_wmma_f32_16x16x16_bf16": ("bf16", "f32", 16, 32),
    "v_wmma_f16_16x16x16_f16": ("f16", "f16", 16, 16), "v_wmma_bf16_16x16x16_bf16": ("bf16", "bf16", 16, 16),
    "v_wmma_i32_16x16x16_iu8": ("iu8", "i32", 8, 32), "v_wmma_i32_16x16x16_iu4": ("iu4", "i32", 4, 32),
}


def _data(kind: str, rng, signed: bool = True, lim: int = 8):
    """(values, bit codes) of a 16x16 operand of `kind` (floats: integers in [-lim, lim])."""
    if kind in ("iu8", "iu4"):
        b = 8 if kind == "iu8" else 4
        v = rng.integers(-(1 << b - 1), 1 << b - 1, (16, 16)) if signed else rng.integers(0, 1 << b, (16, 16))
        return v, v
    v = rng.integers(-lim, lim + 1, (16, 16))
    return v, (v.astype(F16).view(U16) if kind == "f16" else bf16(v))


def _code_c(kind: str, v: np.ndarray) -> np.ndarray:
    return {"f32": lambda: v.astype(F32).view(U32), "i32": lambda: v.astype(np.int32).view(U32),
            "f16": lambda: v.astype(F16).view(U16), "bf16": lambda: bf16(v)}[kind]()


def _decode_d(kind: str, bits: np.ndarray) -> np.ndarray:
    return {"f32": lambda: bits.astype(U32).view(F32), "i32": lambda: bits.astype(U32).view(np.int32),
            "f16": lambda: bits.astype(U16).view(F16), "bf16": lambda: from_bf16(bits.astype(U16))}[kind]()


def _unpack_cd(regs: np.ndarray, bits: int) -> np.ndarray:
    """(32, nregs) -> (16, 16) D bit patterns, inverse of pack_cd."""
    per = 32 // bits
    out = np.zeros((16, 16), np.int64)
    for t in range(32):
        for e in range(8):
            out[8 * (t // 16) + e, t % 16] = int(regs[t, e // per]) >> (bits * (e % per)) & ((1 << bits) - 1)
    return out


@pytest.mark.parametrize("mcpu", ["gfx1201", "gfx1200"])
@pytest.mark.parametrize("mnemonic, signs", [(m, (1, 1)) for m in KINDS] +
                         [("v_wmma_i32_16x16x16_iu8", (0, 1)), ("v_wmma_i32_16x16x16_iu4", (1, 0))])
def test_wmma_instruction(mnemonic, signs, mcpu):
    """One gfx12 WMMA on two waves (different data per wave), A/B in 4/2/1 VGPRs and C/D in 8 (32-bit) or 4
    (16-bit, packed) VGPRs per the gfx12 layout; integer A/B signed where NEG_LO says so."""
    ab, dc, abits, cbits = KINDS[mnemonic]
    na, nc = 8 * abits // 32, 8 * cbits // 32
    rng = np.random.default_rng(len(mnemonic) + 3 * signs[0] + signs[1])
    w = WaveState(2, 32, 48)
    w.s[126] = 0xFFFFFFFF
    w.refresh_exec(slice(None))
    w.mode[:] = 0xF0
    want = []
    for wi in range(2):
        lim = 8 if cbits == 32 else 2                    # 16-bit D: every sum within bf16's 8 exact bits
        (a, ca), (b, cb) = _data(ab, rng, bool(signs[0]), lim), _data(ab, rng, bool(signs[1]), lim)
        c = rng.integers(-1000, 1000, (16, 16)) if dc in ("f32", "i32") else rng.integers(-64, 64, (16, 16))
        pa, pb, pc = pack_ab(ca, abits), pack_ab(cb.T, abits), pack_cd(_code_c(dc, c), cbits)
        for j in range(na):
            w.v[j][wi], w.v[8 + j][wi] = pa[:, j], pb[:, j]
        for j in range(nc):
            w.v[16 + j][wi] = pc[:, j]
        want.append(a.astype(np.int64) @ b.astype(np.int64) + c)
    neg = ""
    if ab in ("iu8", "iu4"):
        neg = f" neg_lo:[{signs[0]},{signs[1]},0]"
    rng_ = lambda r, n: f"v[{r}:{r + n - 1}]" if n > 1 else f"v{r}"  # noqa: E731
    text = f"{mnemonic} {rng_(24, nc)}, {rng_(0, na)}, {rng_(8, na)}, {rng_(16, nc)}{neg}"
    RDNA4.build(RDNA4.decode(assemble(text, mcpu) + bytes(8), 0, 0, False))(w, slice(None))
    for wi in range(2):
        regs = np.stack([w.v[24 + j][wi] for j in range(nc)], -1)
        got = _decode_d(dc, _unpack_cd(regs, cbits))
        assert (got.astype(np.int64) == want[wi]).all(), (wi, np.argwhere(got != want[wi])[:4])


@pytest.mark.parametrize("mnemonic", ["v_wmma_f32_16x16x16_f16", "v_wmma_f16_16x16x16_f16",
                                      "v_wmma_bf16_16x16x16_bf16", "v_wmma_i32_16x16x16_iu8"])
def test_inline_constant_accumulator(mnemonic):
    """C as an inline constant (1.0, or 1 for integers): every element of C is that value in C's type."""
    ab, dc, abits, cbits = KINDS[mnemonic]
    na, nc = 8 * abits // 32, 8 * cbits // 32
    r = np.random.default_rng(7)
    (a, ca), (b, cb) = _data(ab, r, True, 2), _data(ab, r, True, 2)
    w = WaveState(1, 32, 48)
    w.s[126] = 0xFFFFFFFF
    w.refresh_exec(slice(None))
    w.mode[:] = 0xF0
    pa, pb = pack_ab(ca, abits), pack_ab(cb.T, abits)
    for j in range(na):
        w.v[j][0], w.v[8 + j][0] = pa[:, j], pb[:, j]
    one = "1" if dc == "i32" else "1.0"
    neg = " neg_lo:[1,1,0]" if ab == "iu8" else ""
    d = f"v[24:{24 + nc - 1}]"
    text = f"{mnemonic} {d}, v[0:{na - 1}], v[8:{8 + na - 1}], {one}{neg}"
    RDNA4.build(RDNA4.decode(assemble(text, "gfx1201") + bytes(8), 0, 0, False))(w, slice(None))
    got = _decode_d(dc, _unpack_cd(np.stack([w.v[24 + j][0] for j in range(nc)], -1), cbits))
    assert (got.astype(np.int64) == a.astype(np.int64) @ b.astype(np.int64) + 1).all()


@pytest.mark.parametrize("mcpu", ["gfx1201", "gfx1100"])
def test_bf16_result_rounds_once(mcpu):
    """D = 1 + 2^-8 + 2^-30: just above a bf16 halfway point, so it rounds up to 1 + 2^-7 (rounding through f32
    first would drop the 2^-30 and tie to even, 1.0). A[0, :2] = (2^-4, 2^-15), B[:2, 0] = (2^-4, 2^-15)."""
    a = np.zeros((16, 16), F32)
    a[0, :2] = [2.0**-4, 2.0**-15]
    c = np.zeros((16, 16), F32)
    c[0, 0] = 1.0
    w = WaveState(1, 32, 48)
    w.s[126] = 0xFFFFFFFF
    w.refresh_exec(slice(None))
    w.mode[:] = 0xF0
    if mcpu == "gfx1201":
        front, pa, pc = RDNA4, pack_ab(bf16(a), 16), pack_cd(bf16(c), 16)
        text, na, nc = "v_wmma_bf16_16x16x16_bf16 v[24:27], v[0:3], v[8:11], v[16:19]", 4, 4
    else:                                       # gfx11: A row i / B column i in lanes i and i + 16, 16 K per lane
        front, na, nc = for_gfx(11), 8, 8
        pa = np.tile(np.ascontiguousarray(bf16(a)).view(U32), (2, 1))
        lane = np.arange(32)
        pc = np.stack([bf16(c)[2 * v + lane // 16, lane % 16].astype(U32) for v in range(8)], -1)
        text = "v_wmma_bf16_16x16x16_bf16 v[24:31], v[0:7], v[8:15], v[16:23]"
    for j in range(na):
        w.v[j][0] = w.v[8 + j][0] = pa[:, j]        # B = A^T: B column i is A row i
    for j in range(nc):
        w.v[16 + j][0] = pc[:, j]
    front.build(front.decode(assemble(text, mcpu) + bytes(8), 0, 0, False))(w, slice(None))
    lo = int(w.v[24][0][0]) & 0xFFFF
    assert lo == int(bf16(np.array(1 + 2.0**-7))), hex(lo)
    assert lo != int(bf16(np.array(1.0)))


def test_wave64_is_refused_with_its_name():
    """gfx12 wave64 WMMA (LLVM 19's _w64_gfx12 builtins) has a layout the core does not model: refused, named."""
    x = np.ones((64, 4), F16)                  # a half4 per lane
    with pytest.raises(UnsupportedInstruction, match="v_wmma_f32_16x16x16_f16.*wave64"):
        harness.run_cl(WMMA_CL, "wmma_f32_f16_w64", [x, x, np.zeros((64, 4), F32)],
                       block=(64, 1, 1), arch="gfx1201", flags=("-mwavefrontsize64",))


MATMUL = {   # kernel: (A/B numpy storage, C/D storage, how A/B values are coded, how C is coded, how D is read)
    "wmma_f32_f16": (F16, F32), "wmma_f32_bf16": ("bf16", F32), "wmma_f16_f16": (F16, F16),
    "wmma_bf16_bf16": ("bf16", "bf16"), "wmma_i32_iu8": (np.int8, np.int32),
}


def _code(dt, v):
    return bf16(v).view(np.int16) if dt == "bf16" else v.astype(dt)


def _value(dt, x):
    return from_bf16(x.view(U16)) if dt == "bf16" else x


@pytest.mark.parametrize("where", ["core", "device-gfx1201", "device-gfx1200"])
@pytest.mark.parametrize("kernel", sorted(MATMUL))
def test_wmma_matmul(kernel, where):
    """D = A B + C, 32x48 by 48x32: four waves, each a 16x16 tile accumulated over three WMMAs."""
    tin, tout = MATMUL[kernel]
    m, n, k = 32, 32, 48
    r = np.random.default_rng(len(kernel))
    if tin is np.int8:                      # A signed, B unsigned bytes (the kernel's NEG_LO)
        a, b = r.integers(-128, 128, (m, k)), r.integers(0, 256, (k, n))
        ta, tb = a.astype(np.int8), b.astype(np.uint8).view(np.int8)
    else:                                   # small integers: exact in f16/bf16 and in every partial sum
        lim = 4 if tout in (F16, "bf16") else 8
        a, b = r.integers(-lim, lim + 1, (m, k)), r.integers(-lim, lim + 1, (k, n))
        ta, tb = _code(tin, a), _code(tin, b)
    c = r.integers(-100, 100, (m, n))
    tc = _code(tout, c) if tout != np.int32 else c.astype(np.int32)
    args = [ta, tb, tc, np.zeros_like(tc), m, n, k]
    grid, block = (2, 1, 1), (64, 1, 1)
    if where == "core":
        (_, _, _, d), _ = harness.run_cl(WMMA_CL, kernel, args, grid, block, arch="gfx1201")
    else:
        arch = where.split("-")[1]
        (_, _, _, d), _ = device_harness.run_cl(WMMA_CL, kernel, args, grid, block, arch=arch)
    want = a.astype(np.int64) @ b.astype(np.int64) + c
    got = _value(tout, d)
    assert (got.astype(np.int64) == want).all(), np.argwhere(got != want)[:5]
