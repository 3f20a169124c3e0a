"""Vector memory: GLOBAL, FLAT, SCRATCH and MUBUF loads, stores and atomics, through the memory model.

Source: AMD RDNA3 ISA guide, "Flat, Scratch and Global Instructions" and "Vector Memory Buffer
Instructions"; LLVM AMDGPUUsage (apertures, architected flat scratch). Inactive lanes touch nothing.

- GLOBAL: SADDR (64-bit SGPR pair) + VADDR (32-bit unsigned offset), or VADDR (64-bit); + signed OFFSET.
- FLAT: VADDR (64-bit) + OFFSET is a generic address. A lane whose high 32 bits equal the shared
  aperture goes to its workgroup's LDS (low 32 bits = LDS address), the private aperture to its
  scratch (low 32 bits = private address), anything else to global memory.
- SCRATCH: private address = SADDR (32-bit SGPR, or none) + VADDR (when SVE) + OFFSET, per lane. The
  backing store is the dispatch's scratch at `scratch_base[wave]`, swizzled by dword: byte a of lane l
  is at wave_base + ((a // 4) * lanes + l) * 4 + a % 4. A private access outside the per-lane size
  (scratch_wave_bytes / lanes) is a GPUFault naming the private address.
- MUBUF: a V# in four SGPRs (base [47:0], stride [61:48], swizzle [63:62], num_records [95:64],
  add_tid [119], oob_select [125:124]). Address = base + SOFFSET + OFFSET + voffset + stride * index.
  Range check on index / (voffset + OFFSET) by OOB_SELECT (SOFFSET is outside the check, as LLVM's buffer
  intrinsics document): 0 index >= num_records or offset+size > stride; 1 index >= num_records;
  2 num_records == 0; 3 (raw) offset+size > num_records. Dword loads/stores are checked per dword,
  atomics all-or-nothing. Out of range: loads return 0, stores and atomics do nothing (atomics return
  0). Not implemented: swizzled buffers, typed (FORMAT) access, loads into LDS.
- Atomics: applied lane by lane in lane order, waves in batch order (memory.rmw); CMPSWAP data is
  (src, cmp): the low half of the data registers is the new value, the high half the compare value
  (LLVM emits it so). INC/DEC wrap at the data value; CSUB clamps at 0. Old values return with GLC.
- D16 loads write the low (D16) or high (D16_HI) half of the VGPR and keep the other half; D16_HI
  stores take bits [31:16].
- Speed: with EXEC full, a GLOBAL/FLAT dword load or store whose lanes address consecutive elements in
  lane order (checked block by block, cheaply refuted) is one slice copy instead of a gather/scatter.
"""
from __future__ import annotations

import numpy as np

from ...errors import GPUException, GPUFault
from . import lds as LDSM
from ...hw.isa.decode import OPS, Inst
from .memory import ATOMICS, AtomicOp, atomic, load, store
from .ops import M32, U32, U64, Table, sread, sread64, unsupported, vread, vread64
from .wave import PRIVATE_APERTURE_HI, SHARED_APERTURE_HI

TABLE = Table(name="vmem")  # this family's handler builders (composed by the front ends in isa.py)
handler = TABLE.handler

WIDTH = {"b32": 4, "b64": 8, "b96": 12, "b128": 16, "u8": 1, "i8": 1, "u16": 2, "i16": 2, "b16": 2, "b8": 1}
M64 = (1 << 64) - 1


# ---------------------------------------------------------------- lanes of one step

class Lanes:
    """The active lanes of the waves `sel` executing one instruction (flattened wave-major)."""

    __slots__ = ("w", "sel", "em", "shape", "_wv", "_ln")

    def __init__(self, w, sel):
        self.w, self.sel = w, sel
        em = w.em[sel]
        self.shape = em.shape
        self.em = None if w.all_on(sel) else em
        self._wv = self._ln = None

    @property
    def n(self) -> int:
        return self.shape[0] * self.shape[1] if self.em is None else int(self.em.sum())

    def pick(self, x) -> np.ndarray:
        """(k, lanes)-broadcastable values -> (n,) values of the active lanes."""
        x = np.broadcast_to(x, self.shape)
        return x.reshape(-1) if self.em is None else x[self.em]

    def reg(self, r: int) -> np.ndarray:
        return self.pick(self.w.v[r][self.sel])

    def put(self, r: int, vals: np.ndarray) -> None:
        """Write (n,) values into VGPR r of the active lanes."""
        w, sel = self.w, self.sel
        if self.em is None:
            w.v[r][sel] = vals.reshape(self.shape)
        elif isinstance(sel, slice):
            w.v[r][sel][self.em] = vals
        else:
            rows, cols = np.nonzero(self.em)
            w.v[r][np.asarray(sel)[rows], cols] = vals

    @property
    def waves(self) -> np.ndarray:
        if self._wv is None:
            self._wv = self.pick(np.arange(self.w.n)[self.sel][:, None])
        return self._wv

    @property
    def lanes(self) -> np.ndarray:
        if self._ln is None:
            self._ln = self.pick(np.arange(self.w.lanes)[None, :])
        return self._ln


def read_regs(st: Lanes, r: int, n: int) -> np.ndarray:
    return np.stack([st.reg(r + i) for i in range(n)], axis=1) if n > 1 else st.reg(r)[:, None]


def write_regs(st: Lanes, r: int, data: np.ndarray) -> None:
    for i in range(data.shape[1]):
        st.put(r + i, data[:, i])


def to64(d: np.ndarray) -> np.ndarray:
    """(n, 2) uint32 -> (n,) uint64."""
    return d[:, 0].astype(U64) | d[:, 1].astype(U64) << U64(32)


def from64(v: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(v, U64).view(U32).reshape(-1, 2)


# ---------------------------------------------------------------- data conversion

def parse_load(key: str) -> tuple[str, str]:
    """'global_load_d16_hi_u8' -> ('hi', 'u8'); 'flat_load_b64' -> ('', 'b64')."""
    rest = key.split("_load_", 1)[1].replace("addtid_", "")
    if rest.startswith("d16_hi_"):
        return "hi", rest[7:]
    if rest.startswith("d16_"):
        return "lo", rest[4:]
    return "", rest


def parse_store(key: str) -> tuple[str, str]:
    rest = key.split("_store_", 1)[1].replace("addtid_", "")
    return ("hi", rest[7:]) if rest.startswith("d16_hi_") else ("", rest)


def finish_load(d16: str, kind: str, raw: np.ndarray, cur: np.ndarray | None) -> np.ndarray:
    """Raw loaded words (n, words) -> register values: sign extension and D16 merging."""
    v = raw
    if kind == "i8":
        v = raw.astype(np.uint8).view(np.int8).astype(np.int32).view(U32)
    elif kind == "i16":
        v = raw.astype(np.uint16).view(np.int16).astype(np.int32).view(U32)
    if not d16:
        return v
    h = v[:, 0] & U32(0xFFFF)
    if d16 == "lo":
        return ((cur & U32(0xFFFF0000)) | h)[:, None]
    return ((cur & U32(0xFFFF)) | h << U32(16))[:, None]


def store_data(st: Lanes, r: int, d16: str, nbytes: int) -> np.ndarray:
    data = read_regs(st, r, max(1, nbytes // 4))
    if d16 == "hi":
        data = data >> U32(16)
    return data


def parse_atomic(key: str) -> tuple[AtomicOp, int, bool]:
    """'global_atomic_cmpswap_b64' -> (op, width bytes, has a compare value)."""
    body = key.split("_atomic_", 1)[1]
    name, typ = body.rsplit("_", 1)
    width = 8 if typ.endswith("64") else 4
    if name == "cmpswap":
        return ATOMICS["cmpswap_f" if typ[0] == "f" else "cmpswap"], width, True
    if name in ("min", "max"):
        return ATOMICS[f"{name}_{typ[0]}"], width, False
    if typ[0] == "f":
        return ATOMICS[name + "_f"], width, False
    return ATOMICS[name], width, False


def atomic_data(st: Lanes, r: int, width: int, has_cmp: bool) -> tuple[np.ndarray, np.ndarray | None]:
    nw = width // 4
    d = read_regs(st, r, nw * (2 if has_cmp else 1))
    if width == 4:
        return d[:, 0].copy(), (d[:, 1].copy() if has_cmp else None)
    return to64(d[:, :2]), (to64(d[:, 2:4]) if has_cmp else None)


def atomic_result(old: np.ndarray) -> np.ndarray:
    return old[:, None] if old.dtype == U32 else from64(old)


# ---------------------------------------------------------------- private (scratch) memory

def private_phys(st: Lanes, wv: np.ndarray, ln: np.ndarray, a: np.ndarray, nbytes: int, write: bool) -> np.ndarray:
    """Physical (scratch-backing) address of private byte address a of each lane, after a range check."""
    w = st.w
    per_lane = w.scratch_wave_bytes // w.lanes
    bad = (a < 0) | (a + nbytes > per_lane)
    if bad.any():
        i = int(np.argmax(bad))
        raise GPUFault(f"GPU fault: private {'write' if write else 'read'} of {nbytes} bytes at {int(a[i]):#x} by lane "
                       f"{int(ln[i])} of wave {int(wv[i])}, outside its {per_lane}-byte private segment",
                       address=int(a[i]), write=write, private=True, client="shader (private segment)",
                       reason="outside the private segment")
    return w.scratch_base[wv] + ((a >> 2) * w.lanes + ln).astype(U64) * U64(4) + (a & 3).astype(U64)


def private_load(st: Lanes, wv, ln, a: np.ndarray, nbytes: int) -> np.ndarray:
    words = max(1, nbytes // 4)
    if nbytes >= 4 and not (a & 3).any():
        return np.stack([load(st.w.mem, private_phys(st, wv, ln, a + 4 * j, 4, False), 4)[:, 0]
                         for j in range(words)], 1)
    if nbytes < 4 and ((a & 3) + nbytes <= 4).all():
        return load(st.w.mem, private_phys(st, wv, ln, a, nbytes, False), nbytes)
    private_phys(st, wv, ln, a, nbytes, False)
    b = np.zeros((len(a), 4 * words), np.uint8)
    for j in range(nbytes):
        b[:, j] = load(st.w.mem, private_phys(st, wv, ln, a + j, 1, False), 1)[:, 0]
    return b.view(U32).reshape(-1, words)


def private_store(st: Lanes, wv, ln, a: np.ndarray, data: np.ndarray, nbytes: int) -> None:
    if nbytes >= 4 and not (a & 3).any():
        for j in range(nbytes // 4):
            store(st.w.mem, private_phys(st, wv, ln, a + 4 * j, 4, True), data[:, j], 4)
    elif nbytes < 4 and ((a & 3) + nbytes <= 4).all():
        store(st.w.mem, private_phys(st, wv, ln, a, nbytes, True), data[:, 0], nbytes)
    else:
        private_phys(st, wv, ln, a, nbytes, True)
        b = np.ascontiguousarray(data, U32).view(np.uint8).reshape(len(a), -1)
        for j in range(nbytes):
            store(st.w.mem, private_phys(st, wv, ln, a + j, 1, True), b[:, j].astype(U32), 1)


def private_atomic(st: Lanes, wv, ln, a: np.ndarray, op: AtomicOp, src, cmp) -> np.ndarray:
    if src.dtype == U64:
        raise GPUException("64-bit atomic on private memory: its dwords are not contiguous (swizzled scratch)")
    return atomic(st.w.mem, private_phys(st, wv, ln, a, 4, True), op, src, cmp)


# ---------------------------------------------------------------- address forms

def global_addr(inst: Inst):
    """Per-lane address of a GLOBAL instruction: SADDR + VADDR(32-bit offset) or VADDR(64-bit), + OFFSET."""
    off = U64(inst.offset & M64)
    if inst.addr is None:            # ADDTID forms: SADDR + OFFSET + lane * 4
        sa = sread64(inst.saddr) if inst.saddr is not None else (lambda w, sel: np.zeros(1, U64))
        return lambda w, sel: np.asarray(sa(w, sel), U64).reshape(-1, 1) + off + \
            (w.lane_ids.astype(U64) * U64(4))[None, :]
    if inst.saddr is not None:
        sa, va = sread64(inst.saddr), vread(inst.addr)

        def addr(w, sel):
            a = np.asarray(va(w, sel)).astype(U64)
            a += (np.asarray(sa(w, sel), U64) + off)[:, None]
            return a
        return addr
    return vaddr64(inst.addr, off)


def vaddr64(op, off):
    """A 64-bit VGPR-pair address + offset, (k, lanes) uint64."""
    if op.kind != "v":
        va = vread64(op)
        return lambda w, sel: np.asarray(va(w, sel), U64) + off
    r = op.reg

    def addr(w, sel):
        lo, hi = w.v[r][sel], w.v[r + 1][sel]
        a = np.empty(lo.shape + (2,), U32)
        a[..., 0], a[..., 1] = lo, hi
        a = a.view(U64)[..., 0]
        if off:
            a += off
        return a
    return addr


def scratch_addr(inst: Inst):
    """Per-lane private address of a SCRATCH instruction: SADDR + VADDR (with SVE) + OFFSET, as int64."""
    off = np.int64(inst.offset)
    sa = sread(inst.saddr) if inst.saddr is not None else None
    va = vread(inst.addr) if inst.addr is not None else None

    def addr(w, sel):
        a = np.int64(off)
        if sa is not None:
            a = a + np.asarray(sa(w, sel)).astype(np.int64)[:, None]
        if va is not None:
            a = a + np.asarray(va(w, sel)).astype(np.int64)
        return a
    return addr


def flat_split(addr: np.ndarray) -> list:
    """FLAT: the active lanes split by aperture: [(segment 'g'|'l'|'p', lane indices or None = all, addresses)];
    LDS and private lanes carry their 32-bit segment address."""
    hi = addr >> U64(32)
    sh, pr = hi == U64(SHARED_APERTURE_HI), hi == U64(PRIVATE_APERTURE_HI)
    if not sh.any() and not pr.any():
        return [("g", None, addr)]
    out = []
    lo = (addr & U64(0xFFFFFFFF)).astype(np.int64)
    for name, m in (("g", ~(sh | pr)), ("l", sh), ("p", pr)):
        idx = np.flatnonzero(m)
        if len(idx):
            out.append((name, idx, addr[idx] if name == "g" else lo[idx]))
    return out


def _sub(arr, idx):
    return arr if idx is None else arr[idx]


def seg_load(st: Lanes, seg: str, idx, a, nbytes: int) -> np.ndarray:
    if seg == "g":
        return load(st.w.mem, a, nbytes)
    if seg == "l":
        return LDSM.lds_read(st.w, a, a + st.w.lds_base[_sub(st.waves, idx)], nbytes)
    return private_load(st, _sub(st.waves, idx), _sub(st.lanes, idx), a, nbytes)


def seg_store(st: Lanes, seg: str, idx, a, data, nbytes: int) -> None:
    if seg == "g":
        store(st.w.mem, a, data, nbytes)
    elif seg == "l":
        LDSM.lds_write(st.w, a, a + st.w.lds_base[_sub(st.waves, idx)], data, nbytes)
    else:
        private_store(st, _sub(st.waves, idx), _sub(st.lanes, idx), a, data, nbytes)


def seg_atomic(st: Lanes, seg: str, idx, a, op, src, cmp):
    if seg == "g":
        return atomic(st.w.mem, a, op, src, cmp)
    if seg == "l":
        return LDSM.lds_rmw(st.w, a, a + st.w.lds_base[_sub(st.waves, idx)], op, src, cmp)
    return private_atomic(st, _sub(st.waves, idx), _sub(st.lanes, idx), a, op, src, cmp)


def _segments(enc: str, st: Lanes, addr):
    a = st.pick(addr)
    if enc == "FLAT":
        return flat_split(a)
    return [("p" if enc == "SCRATCH" else "g", None, a)]


# ---------------------------------------------------------------- FLAT / GLOBAL / SCRATCH

def _flat_addr(inst: Inst):
    if inst.enc == "SCRATCH":
        return scratch_addr(inst)
    if inst.enc == "GLOBAL":
        return global_addr(inst)
    return vaddr64(inst.addr, U64(inst.offset & M64))


# ---------------------------------------------------------------- consecutive lanes

RUN_CHUNK = 1 << 16         # lanes per block of the consecutive-address check (stays in cache)
SHORT = 256                 # lanes up to which the checks run on Python lists


def _is_ramp(x: np.ndarray, stride: int, hi: np.ndarray | None = None) -> bool:
    """x (uint32, C order) is x[0], x[0] + stride, ... without wrapping: every step between neighbours is
    `stride`; and hi (same shape), if given, holds one value. Checked block by block, so the differences
    never leave the cache and each array is read once."""
    x = x.reshape(-1)
    n, x0 = x.size, int(x[0])
    if x0 + stride * (n - 1) > M32 or int(x[-1]) != x0 + stride * (n - 1):
        return False
    if hi is not None:
        hi = hi.reshape(-1)
        h0 = int(hi[0])
        if int(hi[-1]) != h0:
            return False
    if n <= SHORT:                  # a wave or a few: as Python lists (numpy's fixed cost per call dominates)
        return x.tolist() == list(range(x0, x0 + stride * n, stride)) and (hi is None or _same(hi, h0))
    tmp, bad = np.empty(min(n, RUN_CHUNK), U32), np.empty(min(n, RUN_CHUNK), bool)
    st = U32(stride)
    for i in range(0, n, RUN_CHUNK):
        c = x[i:i + RUN_CHUNK + 1]
        m = len(c) - 1
        if m:
            np.subtract(c[1:], c[:-1], out=tmp[:m])
            np.not_equal(tmp[:m], st, out=bad[:m])
            if bad[:m].any():
                return False
        if hi is not None and not _same(hi[i:i + RUN_CHUNK], h0):
            return False
    return True


def _same(x: np.ndarray, v: int) -> bool:
    """Every element of x (not empty) is v."""
    if 0 < x.size <= SHORT:
        return x.reshape(-1).tolist().count(v) == x.size
    return int(x.min()) == v == int(x.max())


def run_start(inst: Inst, w, sel, stride: int) -> int | None:
    """The first address when every lane of the waves `sel` (EXEC all on, sel a slice) accesses consecutive
    `stride`-byte elements in lane order (the common unit-stride load/store), else None. Cheap to refute."""
    a = inst.addr
    if a is None or a.kind != "v" or not isinstance(sel, slice) or not w.all_on(sel):
        return None
    lo = w.v[a.reg][sel]
    if not lo.size:
        return None
    off = inst.offset
    if inst.enc == "GLOBAL" and inst.saddr is not None:
        sr = inst.saddr.reg
        b0, b1 = w.s[sr][sel], w.s[sr + 1][sel]
        if not (_same(b0, int(b0[0])) and _same(b1, int(b1[0])) and _is_ramp(lo, stride)):
            return None
        return (int(b0[0]) | int(b1[0]) << 32) + int(lo.flat[0]) + off & M64
    hi = w.v[a.reg + 1][sel]
    h0 = int(hi.flat[0])
    if int(hi.flat[-1]) != h0 or (inst.enc == "FLAT" and h0 in (SHARED_APERTURE_HI, PRIVATE_APERTURE_HI)):
        return None
    if not _is_ramp(lo, stride, hi):
        return None
    return (h0 << 32 | int(lo.flat[0])) + off & M64


def span_index(inst: Inst, w, sel, nbytes: int):
    """(first address, dword index of every lane from it, span in bytes) when EXEC is full, the high address
    words (or SADDR) are alike in every lane and every address is dword aligned: then one backing run may
    serve all lanes by a take/put; else None."""
    a = inst.addr
    if nbytes != 4 or a is None or a.kind != "v" or not isinstance(sel, slice) or not w.all_on(sel):
        return None
    lo = w.v[a.reg][sel]
    if not lo.size:
        return None
    if inst.enc == "GLOBAL" and inst.saddr is not None:
        b0, b1 = w.s[inst.saddr.reg][sel], w.s[inst.saddr.reg + 1][sel]
        if not (_same(b0, int(b0[0])) and _same(b1, int(b1[0]))):
            return None
        top = int(b0[0]) | int(b1[0]) << 32
    else:
        hi = w.v[a.reg + 1][sel]
        h0 = int(hi.flat[0])
        if (inst.enc == "FLAT" and h0 in (SHARED_APERTURE_HI, PRIVATE_APERTURE_HI)) or not _same(hi, h0):
            return None
        top = h0 << 32
    l0, l1 = int(lo.min()), int(lo.max())
    start = top + l0 + inst.offset
    if start & 3 or start < 0 or int(np.bitwise_or.reduce(lo, axis=None)) & 3 or l1 - l0 > 1 << 30:
        return None
    idx = lo - U32(l0)
    idx >>= U32(2)
    return start & M64, idx, l1 - l0 + 4


def run_view(mem, start: int, nbytes: int, write: bool) -> np.ndarray | None:
    """uint32 view of [start, start + nbytes) when one mapped, dword-aligned backing run holds it; else None
    (the caller takes the per-lane path, which reports a fault lane by lane)."""
    one = getattr(mem, "translate_one", None)
    hit = one(start, nbytes, write) if one is not None else None
    if hit is not None:                                 # one run maps it all
        buf, o = hit
        return None if o & 3 else buf[o:o + nbytes].view(U32)
    try:
        chunks = mem.translate(np.array([start], U64), nbytes, write)
    except GPUFault:
        return None
    if len(chunks) != 1 or chunks[0][1] is not None:
        return None
    buf, _, off = chunks[0]
    o = int(off[0])
    if o & 3:
        return None
    return buf[o:o + nbytes].view(U32)


def _flat_load(inst: Inst):
    d16, kind = parse_load(inst.key)
    if "lds" in inst.key.split("_"):
        raise unsupported(inst, "loads into LDS are not implemented")
    nbytes = WIDTH[kind]
    addr = _flat_addr(inst)
    r, enc = inst.dst[0].reg, inst.enc
    words = nbytes // 4
    fast = enc != "SCRATCH" and not d16 and nbytes >= 4

    def step(w, sel):
        if fast:
            a0 = run_start(inst, w, sel, nbytes)
            if a0 is not None:
                shape = w.em[sel].shape
                data = run_view(w.mem, a0, nbytes * shape[0] * shape[1], False)
                if data is not None:
                    if words == 1:
                        w.v[r][sel] = data.reshape(shape)
                    else:
                        data = data.reshape(shape + (words,))
                        for i in range(words):
                            w.v[r + i][sel] = data[..., i]
                    return
            sp = span_index(inst, w, sel, nbytes)
            if sp is not None:
                data = run_view(w.mem, sp[0], sp[2], False)
                if data is not None:
                    np.take(data, sp[1], out=w.v[r][sel], mode="clip")
                    return
        st = Lanes(w, sel)
        if st.n == 0:
            return
        parts = _segments(enc, st, addr(w, sel))
        if len(parts) == 1:
            raw = seg_load(st, *parts[0][:3], nbytes)
        else:
            raw = np.zeros((st.n, max(1, nbytes // 4)), U32)
            for seg, idx, a in parts:
                raw[idx] = seg_load(st, seg, idx, a, nbytes)
        write_regs(st, r, finish_load(d16, kind, raw, st.reg(r) if d16 else None))
    return step


def _flat_store(inst: Inst):
    d16, kind = parse_store(inst.key)
    nbytes = WIDTH[kind]
    addr = _flat_addr(inst)
    r, enc = inst.data.reg, inst.enc
    words = nbytes // 4
    fast = enc != "SCRATCH" and not d16 and nbytes >= 4

    def step(w, sel):
        if fast:
            a0 = run_start(inst, w, sel, nbytes)
            if a0 is not None:
                shape = w.em[sel].shape
                out = run_view(w.mem, a0, nbytes * shape[0] * shape[1], True)
                if out is not None:
                    if words == 1:
                        out.reshape(shape)[...] = w.v[r][sel]
                    else:
                        out = out.reshape(shape + (words,))
                        for i in range(words):
                            out[..., i] = w.v[r + i][sel]
                    return
            sp = span_index(inst, w, sel, nbytes)
            if sp is not None:
                out = run_view(w.mem, sp[0], sp[2], True)
                if out is not None:
                    out[sp[1].reshape(-1)] = w.v[r][sel].reshape(-1)       # later lanes win
                    return
        st = Lanes(w, sel)
        if st.n == 0:
            return
        data = store_data(st, r, d16, nbytes)
        for seg, idx, a in _segments(enc, st, addr(w, sel)):
            seg_store(st, seg, idx, a, _sub(data, idx), nbytes)
    return step


def _flat_atomic(inst: Inst):
    op, width, has_cmp = parse_atomic(inst.key)
    addr = _flat_addr(inst)
    r, enc = inst.data.reg, inst.enc
    dst = inst.dst[0].reg if inst.dst else None

    def step(w, sel):
        st = Lanes(w, sel)
        if st.n == 0:
            return
        src, cmp = atomic_data(st, r, width, has_cmp)
        old = np.zeros(st.n, src.dtype)
        for seg, idx, a in _segments(enc, st, addr(w, sel)):
            o = seg_atomic(st, seg, idx, a, op, _sub(src, idx), None if cmp is None else _sub(cmp, idx))
            if idx is None:
                old = o
            else:
                old[idx] = o
        if dst is not None:
            write_regs(st, dst, atomic_result(old))
    return step


def _register_flat() -> None:
    for enc in ("FLAT", "GLOBAL", "SCRATCH"):
        for name, _ in OPS[enc + "Op"].values():
            key = name.lower()
            if "_load_" in key:
                handler(key)(_flat_load)
            elif "_store_" in key:
                handler(key)(_flat_store)
            elif "_atomic_" in key:
                handler(key)(_flat_atomic)


_register_flat()


# ---------------------------------------------------------------- MUBUF

def _buffer_addr(inst: Inst, nbytes: int, per_dword: bool):
    """(addresses (n,), in-range mask (n, words)) of the active lanes of a MUBUF access."""
    rs = inst.srsrc.reg
    so = sread(inst.soffset)
    va = inst.addr.reg if inst.addr is not None else None
    idxen, offen, ioff = inst.idxen, inst.offen, inst.offset
    words = max(1, nbytes // 4) if per_dword else 1

    def addr(st: Lanes):
        w, sel = st.w, st.sel
        w0, w1, w2, w3 = (w.s[rs + i][sel] for i in range(4))
        if np.any(w1 >> U32(30)):
            raise GPUException("swizzled buffer resources are not implemented by the shader core")
        base = st.pick((w0.astype(U64) | (w1 & U32(0xFFFF)).astype(U64) << U64(32))[:, None])
        stride = st.pick(((w1 >> U32(16)) & U32(0x3FFF)).astype(np.int64)[:, None])
        nrec = st.pick(w2.astype(np.int64)[:, None])
        oob = st.pick(((w3 >> U32(28)) & U32(3))[:, None])
        tid = st.pick(((w3 >> U32(23)) & U32(1))[:, None]).astype(np.int64) * st.lanes
        index = tid + (st.reg(va).astype(np.int64) if idxen else 0)
        voff = np.int64(ioff) + (st.reg(va + idxen).astype(np.int64) if offen else np.zeros(st.n, np.int64))
        soff = st.pick(np.asarray(so(w, sel), U32).reshape(-1, 1)).astype(U64)
        a = base + soff + (voff + stride * index).astype(U64)
        dw = np.arange(words) * 4
        size = np.minimum(nbytes - dw, 4) if per_dword else np.array([nbytes])
        o = (voff[:, None] + dw[None, :])
        ok = np.select([oob[:, None] == 0, oob[:, None] == 1, oob[:, None] == 2],
                       [(index < nrec)[:, None] & (o + size <= stride[:, None]), (index < nrec)[:, None],
                        (nrec != 0)[:, None]], (o + size <= nrec[:, None]))
        return a, ok
    return addr


@handler("buffer_gl0_inv", "buffer_gl1_inv")
def _buffer_inv(inst: Inst):
    return lambda w, sel: None


def _buffer_load(inst: Inst):
    d16, kind = parse_load(inst.key)
    if "format" in inst.key or inst.fields.get("lds") or "lds" in inst.key.split("_"):
        raise unsupported(inst, "typed (FORMAT) and LDS buffer loads are not implemented")
    nbytes = WIDTH[kind]
    words = max(1, nbytes // 4)
    addr = _buffer_addr(inst, nbytes, True)
    r, tfe = inst.dst[0].reg, inst.fields.get("tfe", 0)

    def step(w, sel):
        st = Lanes(w, sel)
        if st.n == 0:
            return
        a, ok = addr(st)
        raw = np.zeros((st.n, words), U32)
        if ok.all():
            raw = load(w.mem, a, nbytes)
        else:
            for j in range(words):
                m = np.flatnonzero(ok[:, j])
                if len(m):
                    raw[m, j] = load(w.mem, a[m] + U64(4 * j), min(4, nbytes))[:, 0]
        write_regs(st, r, finish_load(d16, kind, raw, st.reg(r) if d16 else None))
        if tfe:
            st.put(r + words, np.zeros(st.n, U32))
    return step


def _buffer_store(inst: Inst):
    d16, kind = parse_store(inst.key)
    if "format" in inst.key:
        raise unsupported(inst, "typed (FORMAT) buffer stores are not implemented")
    nbytes = WIDTH[kind]
    addr = _buffer_addr(inst, nbytes, True)
    r = inst.data.reg

    def step(w, sel):
        st = Lanes(w, sel)
        if st.n == 0:
            return
        a, ok = addr(st)
        data = store_data(st, r, d16, nbytes)
        if ok.all():
            store(w.mem, a, data, nbytes)
            return
        for j in range(ok.shape[1]):
            m = np.flatnonzero(ok[:, j])
            if len(m):
                store(w.mem, a[m] + U64(4 * j), data[m, j], min(4, nbytes))
    return step


def _buffer_atomic(inst: Inst):
    op, width, has_cmp = parse_atomic(inst.key)
    addr = _buffer_addr(inst, width, False)
    r = inst.data.reg
    dst = inst.dst[0].reg if inst.dst else None

    def step(w, sel):
        st = Lanes(w, sel)
        if st.n == 0:
            return
        a, ok = addr(st)
        src, cmp = atomic_data(st, r, width, has_cmp)
        old = np.zeros(st.n, src.dtype)
        m = np.flatnonzero(ok[:, 0])
        if len(m):
            old[m] = atomic(w.mem, a[m], op, src[m], None if cmp is None else cmp[m])
        if dst is not None:
            write_regs(st, dst, atomic_result(old))
    return step


def _register_mubuf() -> None:
    for name, _ in OPS["MUBUFOp"].values():
        key = name.lower()
        if "_load_" in key:
            handler(key)(_buffer_load)
        elif "_store_" in key:
            handler(key)(_buffer_store)
        elif "_atomic_" in key:
            handler(key)(_buffer_atomic)


_register_mubuf()
