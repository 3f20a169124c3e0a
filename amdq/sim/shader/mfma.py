"""CDNA3 matrix fused multiply-add (single-block V_MFMA_{F32,I32}_{16X16,32X32}xK_{F32,F16,BF16,I8}); the
same builder serves gfx950's doubled-K shapes (16x16x32/32x32x16 F16/BF16, 16x16x64/32x32x32 I8, cdna4.py).

Operand layouts (wave64; AMD "AMD Instinct MI300 ISA Reference Guide" chapter 7 "Matrix Arithmetic
Instructions", and AMD's Matrix Instruction Calculator, github.com/ROCm/amd_matrix_instruction_calculator):
with G = 64 / M lane groups and E = K / G elements per lane (packed in the source register(s)),
  A[i][k]: lane i + M * (k // E), element k % E          (i < M)
  B[k][j]: lane j + N * (k // E), element k % E          (j < N)
  C/D[i][j]: lane j + N * ((i // 4) % G), register 4 * (i // (4 * G)) + i % 4.
Floating-point products are exact in f64 and the dot product is summed in f64, then added to C and rounded
once to f32: this equals the hardware result whenever the exact sum is representable (integer-valued data);
integer forms accumulate in i32 with wrap-around. Multi-block forms (4x4, 16x16x1...), CBSZ/ABID/BLGP
broadcasts, XF32 and FP8 inputs raise UnsupportedInstruction.
"""
from __future__ import annotations

import re

import numpy as np

from ...errors import GPUException
from .cdna import h9
from ...hw.isa.decode import Inst
from .ops import U32, unsupported

ELEM = {"F32": (32, np.float32), "F16": (16, np.float16), "BF16": (16, None), "I8": (8, np.int8)}


def _layout(m: int, k: int, e: int):
    """Lane/element index arrays of A (M x K) and of C (M x N, N = M) as (lane, register)."""
    g = 64 // m
    lanes = np.arange(64)
    a_row, a_col = lanes[:, None] % m, (lanes[:, None] // m) * e + np.arange(e)[None, :]     # (64, E)
    r = np.arange(m * m // 64)
    c_row = 4 * g * (r[None, :] // 4) + 4 * (lanes[:, None] // m) + r[None, :] % 4           # (64, R)
    c_col = np.broadcast_to(lanes[:, None] % m, c_row.shape)
    return a_row, a_col, c_row, c_col


def _elements(raw: np.ndarray, typ: str) -> np.ndarray:
    """(n_regs, k, 64) uint32 -> (k, 64, E) float64 / int64 values."""
    words = np.ascontiguousarray(np.moveaxis(raw, 0, -1))           # (k, 64, n_regs)
    bits, dt = ELEM[typ]
    if typ == "BF16":
        h = words.view(np.uint16).astype(np.uint32) << np.uint32(16)
        return h.view(np.float32).astype(np.float64)
    return words.view(dt).astype(np.int64 if typ == "I8" else np.float64)


def _regs(w, op, sel) -> np.ndarray:
    return w.v[op.reg:op.reg + op.n][:, sel]


@h9(*[f"v_mfma_{o}_{d}x{d}x{k}_{t}" for o, t, ks in (("f32", "f32", (4, 2)), ("f32", "f16", (16, 8)),
                                                     ("f32", "bf16", (16, 8)), ("i32", "i8", (32, 16)))
      for d, k in zip((16, 32), ks)])
def _mfma(inst: Inst):
    m = re.fullmatch(r"v_mfma_(f32|i32)_(\d+)x(\d+)x(\d+)_(f32|f16|bf16|i8)", inst.key)
    if m is None:
        raise unsupported(inst)
    out, mm, nn, kk, typ = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5).upper()
    bits = ELEM[typ][0]
    a_op, b_op, c_op = inst.src
    e = a_op.n * 32 // bits
    if mm != nn or (64 // mm) * e != kk or inst.cbsz or inst.abid or inst.blgp or \
            any(s.neg or s.abs for s in inst.src):
        raise unsupported(inst, "multi-block MFMA forms and CBSZ/ABID/BLGP/NEG modifiers are not modelled")
    a_row, a_col, c_row, c_col = _layout(mm, kk, e)
    nreg = mm * nn // 64
    d_op = inst.dst[0]
    if d_op.n != nreg or (c_op.kind == "v" and c_op.n != nreg):
        raise unsupported(inst, "unexpected MFMA operand widths")
    integer = out == "i32"
    if integer != (typ == "I8"):
        raise unsupported(inst)

    def step(w, sel):
        if not w.all_on(sel):
            raise GPUException(f"{inst.mnemonic} at pc {inst.pc:#x}: MFMA with a partial EXEC mask is not modelled",
                               pc=inst.pc)
        a, b = _elements(_regs(w, a_op, sel), typ), _elements(_regs(w, b_op, sel), typ)
        k = a.shape[0]
        A = np.zeros((k, mm, kk), a.dtype)
        B = np.zeros((k, kk, nn), b.dtype)
        A[:, a_row, a_col] = a
        B[:, a_col, a_row] = b
        if c_op.kind == "v":
            c = np.moveaxis(_regs(w, c_op, sel), 0, -1)                 # (k, 64, R) uint32
        else:
            c = np.full((k, 64, nreg), c_op.value & 0xFFFFFFFF, U32)
        C = np.zeros((k, mm, nn), np.int64 if integer else np.float64)
        C[:, c_row, c_col] = c.view(np.int32) if integer else c.view(np.float32)
        D = A @ B + C
        if integer:
            res = (D[:, c_row, c_col] & 0xFFFFFFFF).astype(U32)
        else:
            res = D[:, c_row, c_col].astype(np.float32).view(U32)
        for r in range(nreg):
            w.v[d_op.reg + r][sel] = res[..., r]
    return step


build = _mfma      # the builder, for front ends that add MFMA shapes (cdna4.py)
