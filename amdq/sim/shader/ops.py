"""Operand access and the handler table type shared by the instruction families.

A handler builder takes a decoded `Inst` and returns `step(w, sel)`: the instruction executed for the
waves `sel` (a slice or an index array into the batch) of WaveState `w`. Builders run once per PC,
so everything that depends only on the instruction is resolved before the first step.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...errors import UnsupportedInstruction
from ...hw.isa.decode import Inst, Operand
from .wave import EXEC, NULL, PRIVATE_APERTURE_HI, SHARED_APERTURE_HI, WaveState, bits_to_mask, mask_to_bits

Step = Callable[[WaveState, object], None]
Builder = Callable[[Inst], Step]

U32, U64, I32, I64, F32, F64 = np.uint32, np.uint64, np.int32, np.int64, np.float32, np.float64
M32 = 0xFFFFFFFF


class Table(dict):
    """Handler builders by instruction key (lower-case mnemonic without _e32/_e64), with the keys of handlers
    that set the PC themselves. Each instruction family owns one; a front end composes them explicitly:
    `Table(a, b)` joins disjoint families (a key in two of them is an error), `.override(c)` replaces keys."""

    def __init__(self, *parts: "Table | dict", name: str = ""):
        super().__init__()
        self.name = name
        self.control: set[str] = set()
        for p in parts:
            both = self.keys() & p.keys()
            if both:
                raise ValueError(f"handler keys defined by two families ({self.name or 'table'} + "
                                 f"{getattr(p, 'name', '') or 'table'}): {sorted(both)[:5]}")
            self._take(p)

    def _take(self, part) -> None:
        self.update(part)
        self.control |= getattr(part, "control", set())

    def override(self, *parts: "Table | dict", name: str = "") -> "Table":
        """A new table: this one with the keys of `parts` replaced or added."""
        t = Table(self, name=name or self.name)
        for p in parts:
            t.control -= p.keys()
            t._take(p)
        return t

    def handler(self, *keys: str, control: bool = False):
        """Decorator: register a builder for instruction keys in this table."""
        def reg(fn):
            for k in keys:
                self[k] = fn
                if control:
                    self.control.add(k)
            return fn
        return reg


def unsupported(inst: Inst, why: str = "not implemented by the shader core") -> UnsupportedInstruction:
    return UnsupportedInstruction(f"{inst.mnemonic} ({inst.enc}) at pc {inst.pc:#x}: {why}", address=inst.pc,
                                  pc=inst.pc, mnemonic=inst.mnemonic, encoding=inst.enc)


# ---------------------------------------------------------------- scalar operands: (k,) per wave

def _special(op: Operand) -> Callable:
    code = op.reg
    if code == 253:                                        # src_scc
        return lambda w, sel: w.scc[sel]
    if code == 252:                                        # src_execz
        return lambda w, sel: (w.exec_bits(sel) == 0).astype(U32)
    if code == 251:                                        # src_vccz
        return lambda w, sel: ((w.s[106][sel] | (w.s[107][sel] if w.lanes == 64 else 0)) == 0).astype(U32)
    if code in (235, 236):                                 # src_shared_base / limit
        v = U32(SHARED_APERTURE_HI if code == 235 else SHARED_APERTURE_HI | 0xFFFF)
        return lambda w, sel: np.full(np.shape(w.scc[sel]), v, U32)
    if code in (237, 238):                                 # src_private_base / limit
        v = U32(PRIVATE_APERTURE_HI if code == 237 else PRIVATE_APERTURE_HI | 0xFFFF)
        return lambda w, sel: np.full(np.shape(w.scc[sel]), v, U32)
    raise UnsupportedInstruction(f"source operand code {code} is not supported")


def sread(op: Operand) -> Callable[[WaveState, object], np.ndarray]:
    """Reader of a 32-bit scalar operand: (k,) uint32, or a 0-d constant."""
    if op.kind == "c":
        c = np.array(op.value & M32, U32)
        return lambda w, sel: c
    if op.kind == "x":
        return _special(op)
    r = op.reg
    if r == NULL:
        z = np.array(0, U32)
        return lambda w, sel: z
    return lambda w, sel: w.s[r][sel]


def sread64(op: Operand) -> Callable[[WaveState, object], np.ndarray]:
    """Reader of a 64-bit scalar operand (SGPR pair or constant): (k,) uint64."""
    if op.kind == "c":
        c = np.array(op.value & (2**64 - 1), U64)
        return lambda w, sel: c
    if op.kind == "x":
        f = _special(op)
        if op.reg in (235, 236, 237, 238):
            # an aperture read as 64 bits is the address itself: the aperture's high half in bits 63:32 (LLVM
            # reads src_*_base with s_mov_b64 and takes the high dword; AMDGPU's SIRegisterInfo.td aperture registers)
            low = U64(0 if op.reg in (235, 237) else 0xFFFF_FFFF)
            return lambda w, sel: f(w, sel).astype(U64) << U64(32) | low
        return lambda w, sel: f(w, sel).astype(U64)
    r = op.reg
    if r == NULL:
        z = np.array(0, U64)
        return lambda w, sel: z
    return lambda w, sel: w.s[r][sel].astype(U64) | w.s[r + 1][sel].astype(U64) << U64(32)


def swrite(op: Operand) -> Callable[[WaveState, object, np.ndarray], None]:
    """Writer of a 32-bit scalar destination."""
    r = op.reg
    if r == NULL:
        return lambda w, sel, v: None
    if r in (EXEC, EXEC + 1):
        def wr(w, sel, v):
            w.s[r][sel] = v
            w.refresh_exec(sel)
        return wr

    def wr(w, sel, v):
        w.s[r][sel] = v
    return wr


def swrite64(op: Operand) -> Callable[[WaveState, object, np.ndarray], None]:
    r = op.reg
    if r == NULL:
        return lambda w, sel, v: None
    touches_exec = r in (EXEC, EXEC - 1, EXEC + 1)

    def wr(w, sel, v):
        v = np.asarray(v, U64)
        w.s[r][sel] = (v & U64(M32)).astype(U32)
        w.s[r + 1][sel] = (v >> U64(32)).astype(U32)
        if touches_exec:
            w.refresh_exec(sel)
    return wr


def swrite_n(op: Operand) -> Callable[[WaveState, object, np.ndarray], None]:
    """Writer of an n-dword scalar destination from (k, n) uint32 (s_load_b64..b512)."""
    r, n = op.reg, op.n

    def wr(w, sel, v):
        if r == NULL:
            return
        for i in range(n):
            w.s[r + i][sel] = v[:, i]
        if r <= EXEC + 1 < r + n + 1 and r + n > EXEC:
            w.refresh_exec(sel)
    return wr


# ---------------------------------------------------------------- vector operands: (k, lanes)

def vread(op: Operand) -> Callable[[WaveState, object], np.ndarray]:
    """Reader of a 32-bit lane operand: (k, lanes) for a VGPR, (k, 1) for an SGPR, 0-d for a constant."""
    if op.kind == "v":
        r = op.reg
        return lambda w, sel: w.v[r][sel]
    f = sread(op)
    if op.kind == "c":
        return f
    return lambda w, sel: f(w, sel)[:, None]


def vread64(op: Operand) -> Callable[[WaveState, object], np.ndarray]:
    """Reader of a 64-bit lane operand (VGPR pair, SGPR pair or 64-bit constant) as uint64."""
    if op.kind == "v":
        r = op.reg
        return lambda w, sel: w.v[r][sel].astype(U64) | w.v[r + 1][sel].astype(U64) << U64(32)
    f = sread64(op)
    if op.kind == "c":
        return f
    return lambda w, sel: f(w, sel)[:, None]


def vread_halves(op: Operand) -> tuple[Callable, Callable]:
    """Readers of the low and high dwords of a 64-bit lane operand, as vread gives them (no uint64 pass)."""
    if op.kind == "v":
        r = op.reg
        return (lambda w, sel: w.v[r][sel]), (lambda w, sel: w.v[r + 1][sel])
    if op.kind == "c":
        v = op.value & (2**64 - 1)
        lo, hi = np.array(v & M32, U32), np.array(v >> 32, U32)
        return (lambda w, sel: lo), (lambda w, sel: hi)
    f = sread64(op)
    if op.kind == "s" and op.reg != NULL:
        r = op.reg
        return (lambda w, sel: w.s[r][sel][:, None]), (lambda w, sel: w.s[r + 1][sel][:, None])
    return (lambda w, sel: (f(w, sel) & U64(M32)).astype(U32)[:, None]), \
        (lambda w, sel: (f(w, sel) >> U64(32)).astype(U32)[:, None])


def vwrite(op: Operand) -> Callable[[WaveState, object, np.ndarray], None]:
    """EXEC-masked writer of a 32-bit VGPR destination."""
    r = op.reg
    return lambda w, sel, v: w.write_v(r, sel, v)


def vwrite64(op: Operand) -> Callable[[WaveState, object, np.ndarray], None]:
    r = op.reg

    def wr(w, sel, v):
        v = np.asarray(v, U64)
        w.write_v(r, sel, (v & U64(M32)).astype(U32))
        w.write_v(r + 1, sel, (v >> U64(32)).astype(U32))
    return wr


def vwrite_n(op: Operand) -> Callable[[WaveState, object, np.ndarray], None]:
    """EXEC-masked writer of n consecutive VGPRs from (k, lanes, n) uint32."""
    r, n = op.reg, op.n

    def wr(w, sel, v):
        for i in range(n):
            w.write_v(r + i, sel, v[..., i])
    return wr


def mask_read(op: Operand) -> Callable[[WaveState, object], np.ndarray]:
    """A lane-mask operand (VCC or an SGPR pair/constant) as (k, lanes) bool."""
    if op.kind == "c":
        def rd(w, sel):
            k = len(w.scc[sel]) if not np.isscalar(w.scc[sel]) else 1
            bits = np.full(k, op.value & M32, U32)
            hi = np.full(k, (op.value >> 32) & M32, U32) if w.lanes == 64 else None
            return bits_to_mask(bits, hi, w.lanes)
        return rd
    r = op.reg
    return lambda w, sel: bits_to_mask(w.s[r][sel], w.s[r + 1][sel] if w.lanes == 64 else None, w.lanes)


def mask_write(op: Operand) -> Callable[[WaveState, object, np.ndarray], None]:
    """Write a (k, lanes) bool lane mask into an SGPR (pair); EXEC's unpacked copy follows."""
    r = op.reg
    if r == NULL:
        return lambda w, sel, m: None

    return lambda w, sel, m: put_mask(w, r, sel, m)


def put_mask(w: WaveState, r: int, sel, m: np.ndarray) -> None:
    """SGPR (pair) r of the waves sel = the (k, lanes) bool lane mask m; EXEC's unpacked copy follows."""
    bits = mask_to_bits(m)
    w.s[r][sel] = bits[:, 0]
    if w.lanes == 64:
        w.s[r + 1][sel] = bits[:, 1]
    if r in (EXEC, EXEC + 1):
        w.em[sel] = m
        w.full[sel] = (bits == np.uint32(M32)).all(1)
