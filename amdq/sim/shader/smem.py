"""Scalar memory: SMEM loads (s_load_*, s_buffer_load_*) and cache controls.

Source: AMD RDNA3 ISA guide, "Scalar Memory Operations": address = SBASE + OFFSET (signed 21-bit
immediate) + SOFFSET (SGPR), dword aligned.
"""
from __future__ import annotations

import numpy as np

from ...hw.isa.decode import Inst
from .memory import load
from .ops import U32, U64, Table, sread, sread64, swrite_n
from .wave import NULL

TABLE = Table(name="smem")  # this family's handler builders (composed by the front ends in isa.py)
handler = TABLE.handler

M64 = (1 << 64) - 1


def _addr(inst: Inst):
    base = sread64(inst.sbase)
    soff = sread(inst.soffset) if inst.soffset is not None else None
    imm = np.int64(inst.offset)

    def addr(w, sel):
        a = np.atleast_1d(base(w, sel)).astype(np.int64) + imm
        if soff is not None:
            a = a + np.asarray(soff(w, sel)).astype(np.int64)
        return (a & ~np.int64(3)).astype(U64)
    return addr


def load_one(mem, a: int, nbytes: int) -> np.ndarray:
    """nbytes (a dword multiple) at one dword-aligned address: (1, nbytes / 4) uint32."""
    one = getattr(mem, "translate_one", None)
    hit = one(a, nbytes, False) if one is not None else None
    if hit is not None:                                 # one run maps it all
        buf, o = hit
        return buf[o:o + nbytes].copy().view(U32)[None, :]
    chunks = mem.translate(np.array([a], U64), nbytes, False)
    if len(chunks) == 1:
        buf, _, off = chunks[0]
        o = int(off[0])
        return buf[o:o + nbytes].copy().view(U32)[None, :]
    return load(mem, np.array([a], U64), nbytes)


@handler("s_load_b32", "s_load_b64", "s_load_b128", "s_load_b256", "s_load_b512")
def _s_load(inst: Inst):
    addr, d = _addr(inst), swrite_n(inst.dst[0])
    nbytes = 4 * inst.dst[0].n

    sb = inst.sbase
    so = inst.soffset
    one = sb.kind == "s" and sb.reg != NULL and (so is None or (so.kind == "s" and so.reg != NULL))

    def step(w, sel):
        if one:                                         # SBASE (and SOFFSET) alike in every wave: one load
            regs = [w.s[sb.reg][sel], w.s[sb.reg + 1][sel]] + ([w.s[so.reg][sel]] if so is not None else [])
            if all(_uniform(x) for x in regs):
                x = [int(v[0]) for v in regs] + [0]
                a = ((x[0] | x[1] << 32) + inst.offset + x[2]) & ~3 & M64
                d(w, sel, np.broadcast_to(load_one(w.mem, a, nbytes), (len(regs[0]), nbytes // 4)))
                return
        a = addr(w, sel)
        if len(a) == 1 or not (a != a[0]).any():       # every wave loads the same address (kernel arguments)
            d(w, sel, np.broadcast_to(load_one(w.mem, int(a[0]), nbytes), (len(a), nbytes // 4)))
        else:
            d(w, sel, load(w.mem, a, nbytes))
    return step


def _uniform(x: np.ndarray) -> bool:
    return len(x) == 1 or int(x.min()) == int(x.max())


@handler("s_buffer_load_b32", "s_buffer_load_b64", "s_buffer_load_b128", "s_buffer_load_b256",
         "s_buffer_load_b512")
def _s_buffer_load(inst: Inst):
    r = inst.sbase.reg
    d, n = swrite_n(inst.dst[0]), inst.dst[0].n
    soff = sread(inst.soffset) if inst.soffset is not None else None

    def step(w, sel):
        base = w.s[r][sel].astype(U64) | (w.s[r + 1][sel].astype(U64) & U64(0xFFFF)) << U64(32)
        size = w.s[r + 2][sel].astype(np.int64)
        off = np.int64(inst.offset) + (np.asarray(soff(w, sel)).astype(np.int64) if soff is not None else 0)
        off = np.broadcast_to(off & ~np.int64(3), base.shape)
        out = np.zeros((base.shape[0], n), U32)
        for i in range(n):                                 # dwords past NUM_RECORDS read as zero
            ok = off + 4 * i + 4 <= size
            if ok.any():
                out[ok, i] = load(w.mem, (base[ok] + (off[ok] + 4 * i).astype(U64)), 4)[:, 0]
        d(w, sel, out)
    return step


for k in ("s_dcache_inv", "s_gl1_inv", "s_atc_probe", "s_atc_probe_buffer"):
    handler(k)(lambda inst: (lambda w, sel: None))
