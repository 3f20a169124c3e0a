"""Vector memory: GLOBAL, FLAT, SCRATCH and MUBUF loads, stores and atomics, through the memory model.

Source: AMD RDNA3 ISA guide, "Flat, Scratch and Global Instructions" and "Vector Memory Buffer
Instructions". Inactive lanes touch nothing.
"""
from __future__ import annotations

import numpy as np

from .decode import Inst
from .memory import load, store
from .ops import I64, U32, U64, handler, sread, sread64, vread, vread64

WIDTH = {"b32": 4, "b64": 8, "b96": 12, "b128": 16, "u8": 1, "i8": 1, "u16": 2, "i16": 2, "b16": 2, "d16_b16": 2}


def global_addr(inst: Inst):
    """Per-lane address of a GLOBAL instruction: SADDR + VADDR(32-bit offset) or VADDR(64-bit), + OFFSET."""
    off = np.int64(inst.offset)
    if inst.saddr is not None:
        sa, va = sread64(inst.saddr), vread(inst.addr)
        return lambda w, sel: (np.asarray(sa(w, sel)).astype(I64)[:, None] + np.asarray(va(w, sel)).astype(I64) + off).astype(U64)
    va = vread64(inst.addr)
    return lambda w, sel: (np.asarray(va(w, sel)).astype(I64) + off).astype(U64)


def _active(w, sel, addr):
    em = w.em[sel]
    addr = np.broadcast_to(addr, em.shape)
    return em, addr[em]


@handler("global_load_b32", "global_load_b64", "global_load_b96", "global_load_b128", "global_load_u8",
         "global_load_i8", "global_load_u16", "global_load_i16")
def _global_load(inst: Inst):
    kind = inst.key.rsplit("_", 1)[1]
    nbytes = WIDTH[kind]
    addr = global_addr(inst)
    r, n = inst.dst[0].reg, max(1, nbytes // 4)

    def step(w, sel):
        em, a = _active(w, sel, addr(w, sel))
        if not len(a):
            return
        data = load(w.mem, a, nbytes)
        if kind == "i8":
            data = data.astype(np.uint8).view(np.int8).astype(np.int32).view(U32)
        elif kind == "i16":
            data = data.astype(np.uint16).view(np.int16).astype(np.int32).view(U32)
        for i in range(n):
            cur = w.v[r + i][sel]
            cur[em] = data[:, i]
            w.v[r + i][sel] = cur
    return step


@handler("global_store_b32", "global_store_b64", "global_store_b96", "global_store_b128", "global_store_b8",
         "global_store_b16")
def _global_store(inst: Inst):
    kind = inst.key.rsplit("_", 1)[1]
    nbytes = {"b8": 1, "b16": 2}.get(kind, WIDTH.get(kind, 4))
    addr = global_addr(inst)
    r, n = inst.data.reg, max(1, nbytes // 4)

    def step(w, sel):
        em, a = _active(w, sel, addr(w, sel))
        if not len(a):
            return
        data = np.stack([w.v[r + i][sel][em] for i in range(n)], axis=1)
        store(w.mem, a, data, nbytes)
    return step
